-- [PostgreSQL 13-14] No GRANT SET ON PARAMETER yet: only a superuser may set pg_stat_statements.track.
SELECT /* pg-regression-radar */
    current_setting('is_superuser') = 'on' AS may_set_track
