-- Views over the samples, deploys and regressions tables (issue 3). Base views query_samples,
-- deploy_events and performance_regressions come from the schema catalogue; `findings` from
-- views_findings.sql (loaded before this file: the files load in name order).

-- Per-interval mean latency of each statement entry with its text (merging queryids by fingerprint is
-- the detector's job): one row per sample, for charts and spot checks.
CREATE OR REPLACE VIEW query_latency AS
SELECT s.instance, s.queryid, s.dbid, s.userid, s.toplevel, s.interval_start, s.interval_end,
       s.calls, s.mean_exec_time AS mean_exec_ms, s.rows, s.shared_blks_read, s.temp_blks_written,
       s.evictions, t.query
FROM query_samples s
LEFT JOIN (SELECT DISTINCT ON (instance, queryid) instance, queryid, query
           FROM query_texts ORDER BY instance, queryid, captured_at) t
  ON t.instance = s.instance AND t.queryid = s.queryid;

-- Every recorded deploy once, newest first (fleet deploys have instance null).
CREATE OR REPLACE VIEW deploys_recent AS
SELECT d.deploy_id, d.version, d.scope, d.instance, d.deployed_at, d.source
FROM deploy_events d
QUALIFY row_number() OVER (PARTITION BY d.deploy_id ORDER BY d.source) = 1
ORDER BY d.deployed_at DESC;

-- Regressions open now: one row per finding (views_findings.sql) whose series has not returned to its old
-- level and that no later finding replaced; a query that recovered leaves this view (see `findings`).
CREATE OR REPLACE VIEW regressions_detected AS
SELECT finding_id, status, analysis, instance, series, queryid, queryids, fingerprint, query, deploy_id,
       deploy_version, deployed_at, other_deploys, deploys_after, onset, detected_change_at, before_mean_ms, after_mean_ms,
       p_value, added_load_ms_per_s, kind, plan_diff_summary, opened_at, updated_at
FROM findings
WHERE status = 'open'
ORDER BY onset, finding_id;

-- Detected resource regressions (work per call stepped up), one row per (analysis, deploy, instance, query,
-- metric) even when several analysis runs wrote the same finding.
CREATE OR REPLACE VIEW resource_regressions_detected AS
SELECT DISTINCT ON (analysis, coalesce(deploy_id, ''), instance, series, metric)
       analysis, instance, series, database, queryid, queryids, fingerprint, query, deploy_id, deploy_version,
       deployed_at, metric, unit, detected_change_at, before_per_call, after_per_call, ratio, latency_change, p_value,
       p_adjusted, summary
FROM resource_regressions
WHERE status = 'detected'
ORDER BY analysis, coalesce(deploy_id, ''), instance, series, metric, detected_change_at DESC, date DESC,
         after_count DESC;
