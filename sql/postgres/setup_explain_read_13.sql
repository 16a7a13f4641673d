-- /* pg-regression-radar */ setup, per database [PG13]: there is no pg_read_all_data before PG14, so
-- grant SELECT schema by schema, now and (through each schema owner's default privileges) for tables
-- created later. Run it again after creating a schema.
DO /* pg-regression-radar */ $radar_setup$
DECLARE
    s record;
BEGIN
    FOR s IN
        SELECT n.nspname, pg_catalog.pg_get_userbyid(n.nspowner) AS owner
        FROM pg_catalog.pg_namespace n
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', {helper_schema_literal})
          AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %I', s.nspname, {explain_literal});
        EXECUTE pg_catalog.format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %I', s.nspname, {explain_literal});
        EXECUTE pg_catalog.format(
            'ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA %I GRANT SELECT ON TABLES TO %I',
            s.owner, s.nspname, {explain_literal});
    END LOOP;
END
$radar_setup$;
