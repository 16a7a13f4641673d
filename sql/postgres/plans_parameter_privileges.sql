-- [PG15+] Which superuser-only settings the capture login may set for its own sessions (GRANT SET ON
-- PARAMETER): asked once, so that no connection ever fails for a startup option the role may not set.
SELECT /* pg-regression-radar */ name, pg_catalog.has_parameter_privilege(name, 'SET') AS may_set
FROM pg_catalog.unnest(%(names)s::text[]) AS name
