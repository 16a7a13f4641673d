-- Gate: pg_stat_statements counters of the workload's statements (by queryid) in the current database,
-- top level only, summed over users. Read before and after the measured rounds; the gate uses deltas.
SELECT queryid,
       sum(calls)::bigint AS calls,
       sum(shared_blks_hit + shared_blks_read)::bigint AS shared_blks,
       sum(rows)::bigint AS rows,
       sum(total_exec_time)::float8 AS total_exec_time
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND toplevel
  AND queryid = ANY($1)
GROUP BY queryid
