-- [PostgreSQL 15+] May the collector's role set pg_stat_statements.track at connection (superuser, or
-- GRANT SET ON PARAMETER pg_stat_statements.track)? Asked, never tried: a refused startup option is a
-- FATAL line in the server log.
SELECT /* pg-regression-radar */
    has_parameter_privilege(current_user, 'pg_stat_statements.track', 'SET') AS may_set_track
