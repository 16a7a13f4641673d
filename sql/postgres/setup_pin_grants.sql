-- /* pg-regression-radar */ setup, per database holding pg_hint_plan (issue 30): the pin role may read, insert
-- and delete rows of hint_plan.hints (and draw its ids), nothing else. Skipped with a notice where the
-- extension is not installed (CREATE EXTENSION pg_hint_plan first, in the application's database).
DO /* pg-regression-radar */ $radar_setup$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_hint_plan') THEN
        RAISE NOTICE 'pg_hint_plan is not installed in database %: no pin grants here', current_database();
        RETURN;
    END IF;
    GRANT USAGE ON SCHEMA hint_plan TO {pin_role};
    GRANT SELECT, INSERT, DELETE ON hint_plan.hints TO {pin_role};
    GRANT USAGE ON SEQUENCE hint_plan.hints_id_seq TO {pin_role};
END
$radar_setup$;
