-- Gate scenarios: the settings that matter for a comparison of two servers, with their units.
SELECT /* pg-regression-radar */ name, pg_catalog.current_setting(name) AS value
FROM pg_catalog.pg_settings
WHERE name = ANY($1)
ORDER BY name
