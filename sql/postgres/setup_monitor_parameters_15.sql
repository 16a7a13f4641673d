-- /* pg-regression-radar */ setup, once per server [PG15+]: let the monitoring login switch off, for its
-- own sessions only, pg_stat_statements tracking (its statements then add no rows) and auto_explain
-- logging (its EXPLAINs are then not logged as if they were executions). Both are superuser-only
-- parameters otherwise; before PG15 the collector simply leaves them as they are (its texts carry the
-- marker comment and are filtered out).
GRANT /* pg-regression-radar */ SET ON PARAMETER pg_stat_statements.track TO {monitor_role};
GRANT /* pg-regression-radar */ SET ON PARAMETER auto_explain.log_min_duration TO {monitor_role};
