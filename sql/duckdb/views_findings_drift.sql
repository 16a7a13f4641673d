-- Each finding (views_findings.sql) with the latest per-execution drift flag of its query per metric
-- (execution_drift_latest, views_execution_drift.sql), joined by instance and query_hash = SHA-256 hex of the
-- fingerprint (jobs.drift.scorer.query_hash). A query never scored has null flags.
CREATE OR REPLACE VIEW findings_with_drift AS
WITH flags AS (
    SELECT instance, query_hash,
           max(flag) FILTER (WHERE metric = 'cost') AS drift_cost,
           max(flag) FILTER (WHERE metric = 'latency') AS drift_latency,
           max(flag) FILTER (WHERE metric = 'cardinality') AS drift_cardinality
    FROM execution_drift_latest
    GROUP BY instance, query_hash
)
SELECT f.*, flags.drift_cost, flags.drift_latency, flags.drift_cardinality
FROM findings f
LEFT JOIN flags ON flags.instance = f.instance AND flags.query_hash = sha256(f.fingerprint);
