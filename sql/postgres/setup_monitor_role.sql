-- /* pg-regression-radar */ setup, once per server: the monitoring login the collector and the plan
-- capture connect with. It reads statistics (pg_monitor) and calls the EXPLAIN helper; it is not a
-- superuser and owns nothing, so no query text the capture plans can make it run anything privileged.
-- Give it a password (\password {monitor_name}) or a pg_hba.conf rule of your choosing.
DO /* pg-regression-radar */ $radar_setup$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {monitor_literal}) THEN
        CREATE ROLE {monitor_role} LOGIN;
    END IF;
END
$radar_setup$;
ALTER ROLE /* pg-regression-radar */ {monitor_role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
GRANT /* pg-regression-radar */ pg_monitor TO {monitor_role};
