-- What a role could do if a function evaluated while planning a captured text ran with its privileges:
-- superuser or CREATEROLE, membership (direct or not, inherited or not) of the write / server-program /
-- server-file roles, and the first relation of this database it may write (owner, grants to it or to a
-- role it is in, PUBLIC grants, pg_write_all_data: has_*_privilege sees them all). The relation scan is
-- one pass over pg_class of this database, skipped for a superuser. to_regrole: the predefined roles of
-- newer versions are absent on older ones (pg_write_all_data is PG14+).
SELECT /* pg-regression-radar */
    r.rolname,
    r.rolsuper,
    r.rolcreaterole,
    pg_catalog.array_remove(ARRAY[
        CASE WHEN pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('pg_write_all_data'), 'MEMBER')
            THEN 'pg_write_all_data' END,
        CASE WHEN pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('pg_execute_server_program'), 'MEMBER')
            THEN 'pg_execute_server_program' END,
        CASE WHEN pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('pg_write_server_files'), 'MEMBER')
            THEN 'pg_write_server_files' END,
        CASE WHEN pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('pg_read_server_files'), 'MEMBER')
            THEN 'pg_read_server_files' END
    ], NULL) AS dangerous_roles,
    CASE WHEN NOT r.rolsuper THEN (
        SELECT c.oid::regclass::text
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace <> 'pg_catalog'::regnamespace
          AND c.relnamespace <> 'information_schema'::regnamespace
          AND (
              (c.relkind IN ('r', 'p', 'v', 'm', 'f')
               AND (pg_catalog.has_table_privilege(r.oid, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')
                    OR pg_catalog.has_any_column_privilege(r.oid, c.oid, 'INSERT, UPDATE')))
              OR (c.relkind = 'S' AND pg_catalog.has_sequence_privilege(r.oid, c.oid, 'USAGE, UPDATE'))
          )
        ORDER BY c.oid
        LIMIT 1
    ) END AS writable_relation
FROM pg_catalog.pg_roles r
WHERE r.rolname = %(role)s
