-- Views over the drift tables (jobs/drift.py). Base views latency_drift and drift_baselines come from the
-- schema catalogue.

-- The latest drift verdict per (instance, query): one row each, from the newest run that analysed it.
CREATE OR REPLACE VIEW drift_latest AS
SELECT DISTINCT ON (instance, fingerprint, series)
       instance, fingerprint, series, dbid, database, queryid, query, status, reason, baseline_source, baseline_label,
       baseline_start, baseline_end, current_start, current_end, baseline_count, current_count,
       baseline_p50_ms, current_p50_ms, baseline_p95_ms, current_p95_ms, js, psi, wasserstein,
       tail_p_value, added_load_ms_per_s
FROM latency_drift
ORDER BY instance, fingerprint, series, current_end DESC;

-- Queries whose latest verdict is a slower shape worth a look, drift before watch, biggest PSI first.
CREATE OR REPLACE VIEW drift_detected AS
SELECT *
FROM drift_latest
WHERE status IN ('drift', 'watch')
ORDER BY CASE status WHEN 'drift' THEN 0 ELSE 1 END, psi DESC, instance, fingerprint, series;
