-- Gate scenarios: one session setting of a scenario (or plan_cache_mode), set for the session
-- (is_local false) with bound parameters, never composed into the text. A NULL value resets the setting
-- to its session default (what RESET does), which is how end_scenario undoes it.
SELECT /* pg-regression-radar */ pg_catalog.set_config($1, $2, false)
