-- One row naming the server incarnation and the settings that decide how far its counters can be trusted.
-- clock_timestamp() is the server's clock when this statement runs, right before pg_stat_statements is
-- read: the snapshot's captured_at (no transaction is open, so now() would be the same statement start).
-- The marker comment sits after SELECT: PostgreSQL 18 drops comments before the first token from the
-- text pg_stat_statements stores.
SELECT /* pg-regression-radar */
    clock_timestamp() AS captured_at,
    (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
    pg_postmaster_start_time() AS postmaster_start,
    current_setting('server_version_num')::int AS server_version_num,
    (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements') AS extension_version,
    current_setting('compute_query_id', true) AS compute_query_id,
    current_setting('pg_stat_statements.track', true) AS track,
    (SELECT source FROM pg_settings WHERE name = 'pg_stat_statements.track') AS track_source,
    current_setting('pg_stat_statements.track_planning', true) AS track_planning,
    current_setting('track_io_timing', true) AS track_io_timing,
    current_setting('pg_stat_statements.max', true)::bigint AS pgss_max,
    current_database() AS current_database,
    current_setting('is_superuser') = 'on' AS is_superuser,
    pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS can_read_all_stats
