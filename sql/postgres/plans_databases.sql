-- Database names by oid: EXPLAIN must run in the statement's own database (pg_stat_statements.dbid).
SELECT /* pg-regression-radar */ oid::bigint AS dbid, datname FROM pg_catalog.pg_database WHERE datallowconn
