-- Gate scenarios: pg_stat_statements counters summed over the measured statements' queryids in the
-- current database, top level only, summed over users. Read before and after; the gate uses deltas.
SELECT /* pg-regression-radar */
       coalesce(sum(calls), 0)::bigint AS calls,
       coalesce(sum(shared_blks_hit + shared_blks_read), 0)::float8 AS shared_blocks,
       coalesce(sum(shared_blks_read), 0)::float8 AS shared_blocks_read,
       coalesce(sum(temp_blks_written), 0)::float8 AS temp_blocks_written,
       coalesce(sum(wal_bytes), 0)::float8 AS wal_bytes,
       coalesce(sum(total_plan_time), 0)::float8 AS plan_ms,
       coalesce(sum(plans), 0)::bigint AS plans,
       coalesce(sum(total_exec_time), 0)::float8 AS exec_ms
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
  AND toplevel
  AND queryid = ANY($1)
