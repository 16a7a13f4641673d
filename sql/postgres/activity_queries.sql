-- Statements running now that could be part of a pile-up (pg_stat_activity, PostgreSQL 14+): active client
-- backends running for a second or more, or waiting on a heavyweight lock; the longest-running 200. The
-- collector groups them by statement (jobs/collect/collector.py: the text's fingerprint, since a statement
-- queued on a lock taken during parse analysis has no query_id yet) and stores the groups with their
-- normalized text only (the raw text here carries literal values: it never reaches the lake).
-- pg_blocking_pids is called only for backends waiting on a lock (it takes the lock manager's locks); the
-- first blocking pid is named, with its state, query id, (last) statement and transaction age: an
-- idle-in-transaction session holding a lock. The radar's own session is left out. Needs
-- pg_read_all_stats (pg_monitor) to see other roles' statements.
WITH candidates AS (
    SELECT /* pg-regression-radar */
        datid,
        usesysid,
        query_id,
        query,
        wait_event_type,
        wait_event,
        extract(epoch FROM clock_timestamp() - query_start)::float8 AS running_s,
        CASE WHEN wait_event_type = 'Lock' THEN (pg_blocking_pids(pid))[1] END AS blocker
    FROM pg_stat_activity
    WHERE backend_type = 'client backend'
        AND state = 'active'
        AND pid <> pg_backend_pid()
        AND query_start IS NOT NULL
        AND (wait_event_type = 'Lock' OR clock_timestamp() - query_start >= interval '1 second')
    ORDER BY query_start
    LIMIT 200
)
SELECT
    c.datid::int8 AS dbid,
    c.usesysid::int8 AS userid,
    c.query_id AS queryid,
    c.query,
    c.wait_event_type,
    c.wait_event,
    c.running_s,
    c.blocker::int8 AS blocker_pid,
    b.state AS blocker_state,
    b.query_id AS blocker_queryid,
    b.query AS blocker_query,
    extract(epoch FROM clock_timestamp() - b.xact_start)::float8 AS blocker_xact_s
FROM candidates AS c
LEFT JOIN pg_stat_activity AS b ON b.pid = c.blocker
