-- Views over the per-execution drift stage (issue 11). Base views execution_drift, drift_sample_baselines,
-- execution_samples and table_stats_snapshots come from the schema catalogue (jobs/schemas/analysed.py).

-- The latest scoring of each (instance, query_hash, metric): its flag PASS | WARN | BLOCK and reason. Rows
-- with reason insufficient_samples (fewer than [drift.score] min_samples on a side) are kept: a WARN, shown.
CREATE OR REPLACE VIEW execution_drift_latest AS
SELECT scored_at, instance, query_hash, metric, fingerprint, queryid, baseline_version, window_start, window_end,
       shard, n_baseline, n_candidate, js, psi, wasserstein, flag, reason, psi_data_quality, profile, js_noise,
       psi_noise
FROM execution_drift
QUALIFY row_number() OVER (PARTITION BY instance, query_hash, metric ORDER BY scored_at DESC) = 1;

-- Latest flags counted by metric and flag; insufficient_samples: how many of them had too few samples.
CREATE OR REPLACE VIEW execution_drift_counts AS
SELECT metric, flag, count(*) AS pairs,
       count(*) FILTER (WHERE reason = 'insufficient_samples') AS insufficient_samples
FROM execution_drift_latest
GROUP BY metric, flag
ORDER BY metric, CASE flag WHEN 'BLOCK' THEN 0 WHEN 'WARN' THEN 1 ELSE 2 END;

-- Every ANALYZE the snapshots saw: one row per distinct last_analyze (kind manual) or last_autoanalyze
-- (kind auto) value of a table, with the first snapshot that showed it (a value that moved between two
-- snapshots is an ANALYZE in between; the first snapshot's value is the one before collection began).
CREATE OR REPLACE VIEW table_analyses AS
WITH seen AS (
    SELECT instance, dbname, relid, schemaname, relname, 'manual' AS kind, last_analyze AS analysed_at,
           captured_at
    FROM table_stats_snapshots WHERE last_analyze IS NOT NULL
    UNION ALL
    SELECT instance, dbname, relid, schemaname, relname, 'auto' AS kind, last_autoanalyze AS analysed_at,
           captured_at
    FROM table_stats_snapshots WHERE last_autoanalyze IS NOT NULL
)
SELECT instance, dbname, relid, arg_max(schemaname, captured_at) AS schemaname,
       arg_max(relname, captured_at) AS relname, kind, analysed_at, min(captured_at) AS first_seen_at
FROM seen
GROUP BY instance, dbname, relid, kind, analysed_at
ORDER BY instance, dbname, relid, analysed_at;

-- When each table was last analysed (manual or auto, whichever is later).
CREATE OR REPLACE VIEW table_last_analysed AS
SELECT instance, dbname, relid, arg_max(schemaname, analysed_at) AS schemaname,
       arg_max(relname, analysed_at) AS relname, max(analysed_at) AS last_analysed_at,
       arg_max(kind, analysed_at) AS kind, count(*) AS analyses_seen
FROM table_analyses
GROUP BY instance, dbname, relid
ORDER BY instance, dbname, relid;
