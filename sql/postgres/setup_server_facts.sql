-- `radar setup-sql --dsn`: what the setup script depends on, read from the server itself. The version picks
-- the steps; the extension's version (NULL: not installed in this database) adds the CREATE EXTENSION step;
-- shared_preload_libraries is superuser-only in current_setting(), so it is read through pg_settings, which
-- hides the row (NULL: unknown) from a login without pg_read_all_settings instead of raising.
SELECT /* pg-regression-radar */
    pg_catalog.current_setting('server_version_num')::int AS server_version_num,
    (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_stat_statements') AS pgss_version,
    pg_catalog.current_database() AS current_database,
    (SELECT setting FROM pg_catalog.pg_settings WHERE name = 'shared_preload_libraries') AS preload_libraries
