-- pg_stat_statements_info [extension 1.9+, PG14+]: evictions and the last full reset.
SELECT /* pg-regression-radar */ dealloc, stats_reset FROM pg_stat_statements_info
