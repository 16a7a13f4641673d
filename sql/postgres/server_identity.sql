-- One row naming the server incarnation and the settings that decide how far its counters can be trusted.
-- now() is the transaction start: the snapshot's captured_at on the server's clock.
SELECT
    now() AS captured_at,
    (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
    pg_postmaster_start_time() AS postmaster_start,
    current_setting('server_version_num')::int AS server_version_num,
    (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements') AS extension_version,
    current_setting('compute_query_id', true) AS compute_query_id,
    current_setting('pg_stat_statements.track', true) AS track,
    current_setting('pg_stat_statements.track_planning', true) AS track_planning,
    current_setting('track_io_timing', true) AS track_io_timing,
    current_setting('pg_stat_statements.max', true)::bigint AS pgss_max,
    current_database() AS current_database,
    pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS can_read_all_stats
