-- /* pg-regression-radar */ setup, once per server: the role generic EXPLAINs run as. NOLOGIN and a
-- member of nothing but a read-only grant: whatever function the planner evaluates while planning a
-- captured query text runs with these privileges (and inside a READ ONLY transaction that is always
-- rolled back). Never grant it write privileges, pg_write_all_data, pg_execute_server_program,
-- pg_write_server_files or pg_read_server_files: the capture refuses to EXPLAIN as such a role.
DO /* pg-regression-radar */ $radar_setup$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {explain_literal}) THEN
        CREATE ROLE {explain_role} NOLOGIN;
    END IF;
END
$radar_setup$;
ALTER ROLE /* pg-regression-radar */ {explain_role} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
