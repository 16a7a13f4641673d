-- Ad-hoc views over the collector's tables.

-- The latest snapshot attempt per instance: is every instance reporting, and is it healthy?
CREATE OR REPLACE VIEW instance_health AS
SELECT instance, captured_at, status, error, failed_phase, health, warnings, server_version_num,
       extension_version, statement_rows, explain_rows_dropped, own_rows_dropped,
       own_explain_rows_dropped, insufficient_privilege_rows, dealloc, server_ms
FROM (
    SELECT *, row_number() OVER (PARTITION BY instance ORDER BY captured_at DESC) AS rn
    FROM snapshot_runs
)
WHERE rn = 1;

-- Per instance: how much the lake holds.
CREATE OR REPLACE VIEW lake_summary AS
SELECT r.instance,
       count(*) FILTER (WHERE r.status = 'ok') AS snapshots,
       count(*) FILTER (WHERE r.status <> 'ok') AS failed_snapshots,
       min(r.captured_at) AS first_snapshot,
       max(r.captured_at) AS last_snapshot,
       (SELECT count(DISTINCT s.queryid) FROM statement_snapshots s WHERE s.instance = r.instance) AS statements
FROM snapshot_runs r
GROUP BY r.instance;

-- Statement texts next to their latest cumulative counters.
CREATE OR REPLACE VIEW statements_latest AS
SELECT s.instance, s.queryid, s.dbid, s.userid, s.toplevel, s.calls, s.total_exec_time,
       s.total_exec_time / nullif(s.calls, 0) AS mean_exec_time_ms, t.query
FROM (
    SELECT *, row_number() OVER (PARTITION BY instance, dbid, userid, queryid, toplevel
                                 ORDER BY captured_at DESC) AS rn
    FROM statement_snapshots
) s
LEFT JOIN (SELECT DISTINCT ON (instance, queryid) instance, queryid, query FROM query_texts) t
  ON t.instance = s.instance AND t.queryid = s.queryid
WHERE s.rn = 1;
