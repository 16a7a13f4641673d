-- /* pg-regression-radar */ setup, once per server [PG16+], only where plan pins will be applied (issue 30):
-- the role a pin is written as. NOLOGIN, a member of nothing, and granted nothing but writing pg_hint_plan's
-- hint table (next step, per database). The monitoring login may SET ROLE to it, and inherits none of its
-- privileges otherwise (INHERIT FALSE): its own sessions stay read-only.
DO /* pg-regression-radar */ $radar_setup$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {pin_literal}) THEN
        CREATE ROLE {pin_role} NOLOGIN;
    END IF;
END
$radar_setup$;
ALTER ROLE /* pg-regression-radar */ {pin_role} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
GRANT /* pg-regression-radar */ {pin_role} TO {monitor_role} WITH INHERIT FALSE, SET TRUE;
