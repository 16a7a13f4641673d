-- The EXPLAIN helper of this database, if installed: who owns it (the role EXPLAINs run as), whether it
-- is SECURITY DEFINER (otherwise it would run as the caller) and whether this login may call it (EXECUTE
-- on it and USAGE on its schema). Looked up by name in the catalog, not with to_regprocedure, which
-- raises "permission denied for schema" (a server log ERROR) for a login without USAGE.
SELECT /* pg-regression-radar */
    pg_catalog.format('%%I.%%I(text, text)', n.nspname, p.proname) AS helper,
    pg_catalog.pg_get_userbyid(p.proowner) AS owner,
    p.prosecdef AS security_definer,
    pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
        AS executable
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
  AND p.proname = %(function)s
  AND p.proargtypes = '25 25'::pg_catalog.oidvector
