-- Gate: is pg_stat_statements installed in this database, and does it track top-level statements?
SELECT /* pg-regression-radar */ (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements') AS extversion,
       current_setting('pg_stat_statements.track', true) AS track,
       current_setting('compute_query_id', true) AS compute_query_id
