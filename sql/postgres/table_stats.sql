-- Statistics freshness of the user tables of the connected database (pg_stat_user_tables is per
-- database). Every column here exists from PostgreSQL 13 to 18 (n_mod_since_analyze since 9.4); PG16+ and
-- PG18 added columns (last_seq_scan, total_analyze_time, ...) that are not read. At most max_tables rows,
-- the most recently analysed first: those are the ones a plan change can follow.
SELECT /* pg-regression-radar */ current_database() AS dbname, relid::bigint AS relid,
    schemaname::text AS schemaname, relname::text AS relname, n_live_tup, n_mod_since_analyze,
    last_analyze, last_autoanalyze, analyze_count, autoanalyze_count
FROM pg_catalog.pg_stat_user_tables
ORDER BY greatest(last_analyze, last_autoanalyze) DESC NULLS LAST, schemaname, relname
LIMIT %(max_tables)s
