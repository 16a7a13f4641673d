-- Views over the samples, deploys and regressions tables (issue 3). Base views query_samples,
-- deploy_events and performance_regressions come from the schema catalogue.

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

-- Detected regressions, one row per (analysis, deploy, instance, query) even when several analysis runs
-- wrote the same finding.
CREATE OR REPLACE VIEW regressions_detected AS
SELECT DISTINCT ON (analysis, coalesce(deploy_id, ''), instance, fingerprint)
       analysis, instance, queryid, queryids, fingerprint, query, deploy_id, deploy_version, deployed_at,
       detected_change_at, latency_change, before_mean_ms, after_mean_ms, before_count, after_count,
       t_statistic, p_value, p_adjusted, confidence, fdr_method
FROM performance_regressions
WHERE status = 'detected'
ORDER BY analysis, coalesce(deploy_id, ''), instance, fingerprint, detected_change_at DESC, date DESC,
         after_count DESC;

-- Detected resource regressions (work per call stepped up), one row per (analysis, deploy, instance, query,
-- metric) even when several analysis runs wrote the same finding.
CREATE OR REPLACE VIEW resource_regressions_detected AS
SELECT DISTINCT ON (analysis, coalesce(deploy_id, ''), instance, fingerprint, metric)
       analysis, instance, queryid, queryids, fingerprint, query, deploy_id, deploy_version, deployed_at,
       metric, unit, detected_change_at, before_per_call, after_per_call, ratio, latency_change, p_value,
       p_adjusted, summary
FROM resource_regressions
WHERE status = 'detected'
ORDER BY analysis, coalesce(deploy_id, ''), instance, fingerprint, metric, detected_change_at DESC, date DESC,
         after_count DESC;
