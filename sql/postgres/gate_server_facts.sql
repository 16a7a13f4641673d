-- Gate scenarios: what says which server this is and how it is set up. inet_server_addr() is NULL over
-- a Unix socket (the caller then names the socket folder). The settings are the session's current values:
-- read right after connecting, before any scenario setting.
SELECT /* pg-regression-radar */
    pg_catalog.version() AS version,
    pg_catalog.current_setting('server_version_num')::int AS version_num,
    pg_catalog.host(pg_catalog.inet_server_addr()) AS server_addr,
    pg_catalog.current_setting('port') AS port,
    pg_catalog.current_setting('pg_stat_statements.track_planning', true) AS track_planning,
    pg_catalog.pg_backend_pid() AS backend_pid
