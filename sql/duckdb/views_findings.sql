-- Findings (issue 9, jobs/detect/findings.py): one row per regression (instance, series, onset), its
-- latest state. The base view finding_states holds every state change (append-only); a finding's row here
-- is its latest: status open | recovered (recovered_at) | superseded (superseded_by), the latest before
-- and after levels, the deploy blamed, the other candidate deploys (within the tolerance, at or before the
-- change) and the deploys after it (never causes), evidence, plan diff.
CREATE OR REPLACE VIEW findings AS
SELECT finding_id, status, instance, series, database, fingerprint, queryid, queryids, query, onset,
       detected_change_at, analysis, deploy_id, deploy_version, deployed_at, other_deploys, deploys_after,
       before_mean_ms, after_mean_ms, latest_mean_ms, p_value, added_load_ms_per_s, kind, instance_slowdown_ratio, slowdown_excess,
       work_evidence, plan_diff_summary,
       recovered_at, superseded_by, opened_at, computed_at AS updated_at, run_id AS updated_by_run, change
FROM finding_states
QUALIFY row_number() OVER (PARTITION BY finding_id ORDER BY computed_at DESC, run_id DESC) = 1;
