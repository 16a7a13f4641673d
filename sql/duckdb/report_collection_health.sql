-- The weekly report's collection health: the days [{start}, {end}) of the view collection_health_daily
-- (sql/duckdb/views_collection_health.sql), so the report says what `radar sql` says. {start} and {end}
-- are ISO dates the report computes from the week (never user text).
SELECT * FROM collection_health_daily
WHERE day >= DATE '{start}' AND day < DATE '{end}'
ORDER BY instance, day
