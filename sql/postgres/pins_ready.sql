-- /* pg-regression-radar */ may a pin be applied here (issue 30)? pg_hint_plan loaded in this session (its
-- setting is a real boolean, not a placeholder: the library was preloaded), the hint table enabled, the hint
-- table present, and the session's role (after SET ROLE) allowed to insert into it and delete from it
-- (each checked alone: has_table_privilege with a list is true when any one of them is held).
SELECT /* pg-regression-radar */
    (SELECT vartype FROM pg_catalog.pg_settings WHERE name = 'pg_hint_plan.enable_hint_table') AS hint_table_vartype,
    pg_catalog.current_setting('pg_hint_plan.enable_hint_table', true) AS enable_hint_table,
    pg_catalog.to_regclass('hint_plan.hints') IS NOT NULL AS hint_table_exists,
    pg_catalog.to_regclass('hint_plan.hints') IS NOT NULL
        AND pg_catalog.has_table_privilege('hint_plan.hints', 'INSERT')
        AND pg_catalog.has_table_privilege('hint_plan.hints', 'DELETE') AS may_write,
    current_user AS role_name
