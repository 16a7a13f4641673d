-- The server's own pg_stat_statements.track when the collector's session overrides it (track = none as a
-- startup option): the configuration files' applied value, else the built-in default. pg_file_settings is
-- readable by superusers only, so this runs only for them. ALTER DATABASE/ROLE SET values are not seen.
SELECT /* pg-regression-radar */
    COALESCE(
        (SELECT setting FROM pg_file_settings
         WHERE name = 'pg_stat_statements.track' AND applied ORDER BY seqno DESC LIMIT 1),
        (SELECT boot_val FROM pg_settings WHERE name = 'pg_stat_statements.track')
    ) AS track_configured
