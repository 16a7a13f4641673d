-- /* pg-regression-radar */ setup, per database [PG16+]: the generic-plan helper. SECURITY DEFINER owned
-- by the read-only explain role, so the planner evaluates functions of a captured text with that role's
-- privileges whoever calls it, and a function cannot SET ROLE / RESET ROLE out of it (PostgreSQL forbids
-- that inside a security-definer frame). It:
--   * refuses to run outside a READ ONLY transaction (the caller begins one and always rolls it back);
--   * refuses more than one statement: a cursor cannot be opened on a multi-statement text, and the
--     server says so before planning anything;
--   * resolves its own code through pg_catalog only (every call and operator qualified, search_path
--     pinned), and resolves the EXPLAINed text with the search_path the caller passes (the statement
--     owner's "$user", public by default), so nobody's objects shadow the helper's;
--   * returns the EXPLAIN JSON, or {"radar_explain_error": {sqlstate, message}} for an EXPLAIN that
--     fails (a lock_timeout, a syntax error, a permission denied): a caught error is not a server log
--     line. Cancellation (statement_timeout) is not caught and ends the call.
-- On a managed service whose admin is not a superuser: GRANT {explain_role} TO <admin> and
-- GRANT CREATE ON SCHEMA {helper_schema} TO {explain_role} before the ALTER FUNCTION ... OWNER, revoke both after.
CREATE SCHEMA IF NOT EXISTS /* pg-regression-radar */ {helper_schema};
REVOKE /* pg-regression-radar */ ALL ON SCHEMA {helper_schema} FROM PUBLIC;
GRANT /* pg-regression-radar */ USAGE ON SCHEMA {helper_schema} TO {monitor_role};
CREATE OR REPLACE FUNCTION /* pg-regression-radar */ {helper_schema}.{helper_function}(query text, search_path text DEFAULT NULL)
RETURNS json
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $radar_explain$
DECLARE
    plan json;
BEGIN
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.<>) 'on' THEN
        RAISE EXCEPTION 'pg-regression-radar explain helper: refusing to run outside a READ ONLY transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF query IS NULL THEN
        RETURN NULL;
    END IF;
    BEGIN
        IF search_path IS NOT NULL THEN
            PERFORM pg_catalog.set_config('search_path', search_path, true);
        END IF;
        FOR plan IN EXECUTE
            'EXPLAIN (FORMAT JSON, GENERIC_PLAN) /* pg-regression-radar */ ' OPERATOR(pg_catalog.||) query
        LOOP
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        RETURN pg_catalog.json_build_object(
            'radar_explain_error',
            pg_catalog.json_build_object('sqlstate', SQLSTATE, 'message', SQLERRM)
        );
    END;
    RETURN plan;
END
$radar_explain$;
ALTER FUNCTION /* pg-regression-radar */ {helper_schema}.{helper_function}(text, text) OWNER TO {explain_role};
REVOKE /* pg-regression-radar */ ALL ON FUNCTION {helper_schema}.{helper_function}(text, text) FROM PUBLIC;
GRANT /* pg-regression-radar */ EXECUTE ON FUNCTION {helper_schema}.{helper_function}(text, text) TO {monitor_role};
