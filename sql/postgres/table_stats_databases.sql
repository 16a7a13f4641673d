-- The databases whose pg_stat_user_tables the collector reads with a snapshot: those the snapshot's
-- pg_stat_statements rows ran in (dbids), plus the one connected to. datallowconn = false is returned so
-- the collector can say why it skipped a database instead of failing a connection to it.
SELECT /* pg-regression-radar */ oid::bigint AS dbid, datname, datallowconn,
    datname = current_database() AS is_current
FROM pg_catalog.pg_database
WHERE NOT datistemplate AND (oid = ANY(%(dbids)s::bigint[]) OR datname = current_database())
ORDER BY datname = current_database() DESC, datname
