-- What the plan capture needs to choose a source: the server version (GENERIC_PLAN is 16+), whether
-- pg_store_plans is installed and which version (its queryid is the core one only from 1.6 on PG14+),
-- compute_query_id (off silently disables pg_store_plans and leaves queryid 0) and the plan format the
-- session reads pg_store_plans in (the session asks for json; anything else is reported, not parsed).
SELECT /* pg-regression-radar */
    pg_catalog.current_setting('server_version_num')::int AS server_version_num,
    pg_catalog.current_setting('compute_query_id', true) AS compute_query_id,
    (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_store_plans') AS store_plans_version,
    pg_catalog.current_setting('pg_store_plans.plan_format', true) AS store_plans_format
