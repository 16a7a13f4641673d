-- What the plan capture needs to choose a source: the server version (GENERIC_PLAN is 16+), whether
-- pg_store_plans is installed and which version (its queryid is the core one only from 1.6 on PG14+),
-- and compute_query_id (off silently disables pg_store_plans and leaves queryid 0).
SELECT
    current_setting('server_version_num')::int AS server_version_num,
    current_setting('compute_query_id', true) AS compute_query_id,
    (SELECT extversion FROM pg_extension WHERE extname = 'pg_store_plans') AS store_plans_version,
    current_setting('is_superuser') = 'on' AS is_superuser
