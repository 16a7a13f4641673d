-- pg_stat_statements 1.9 (PostgreSQL 14): adds toplevel.
SELECT /* pg-regression-radar */
    userid::bigint AS userid,
    dbid::bigint AS dbid,
    toplevel,
    queryid,
    calls, plans, total_exec_time, total_plan_time, rows,
    shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
    local_blks_hit, local_blks_read, local_blks_dirtied, local_blks_written,
    temp_blks_read, temp_blks_written,
    blk_read_time AS shared_blk_read_time,
    blk_write_time AS shared_blk_write_time,
    wal_records, wal_fpi, wal_bytes::bigint AS wal_bytes,
    min_exec_time, max_exec_time, mean_exec_time, stddev_exec_time
FROM pg_stat_statements(showtext := false)
