-- Views over the plan tables (issue 4). Base views plan_snapshots, plan_capture_log and plan_diffs come
-- from the schema catalogue; these add the questions people ask of them.

-- The plan in effect now per (instance, queryid, source), next to the query text.
CREATE OR REPLACE VIEW plans_latest AS
SELECT p.instance, p.queryid, p.source, p.captured_at, p.is_generic, p.root_node, p.total_cost,
       p.actual_rows, p.duration_ms, p.node_types, p.relations, p.indexes, p.shape_hash, t.query
FROM (
    SELECT *, row_number() OVER (PARTITION BY instance, queryid, source ORDER BY captured_at DESC) AS rn
    FROM plan_snapshots
) p
LEFT JOIN (SELECT DISTINCT ON (instance, queryid) instance, queryid, query FROM query_texts) t
  ON t.instance = p.instance AND t.queryid = p.queryid
WHERE p.rn = 1;

-- Every recorded plan change: a row is stored when the shape differs from the previous one, or when its
-- estimated cost moved by [plans] cost_change_ratio on the same shape (shape_before = shape_after).
CREATE OR REPLACE VIEW plan_shape_changes AS
SELECT instance, queryid, source, captured_at AS changed_at,
       lag(root_node) OVER w AS root_before, root_node AS root_after,
       lag(total_cost) OVER w AS cost_before, total_cost AS cost_after,
       lag(indexes) OVER w AS indexes_before, indexes AS indexes_after,
       lag(shape_hash) OVER w AS shape_before, shape_hash AS shape_after
FROM plan_snapshots
WINDOW w AS (PARTITION BY instance, queryid, source ORDER BY captured_at);

-- What each plan source said in each instance's latest capture cycle.
CREATE OR REPLACE VIEW plan_capture_status AS
SELECT l.instance, l.captured_at, l.source, l.status, count(*) AS queries,
       any_value(l.reason) AS example_reason, round(sum(l.elapsed_ms), 1) AS elapsed_ms
FROM plan_capture_log l
JOIN (SELECT instance, max(captured_at) AS captured_at FROM plan_capture_log GROUP BY instance) m
  ON m.instance = l.instance AND m.captured_at = l.captured_at
GROUP BY ALL;

-- Detected regressions with the plan diff attached (null when no diff was computed).
CREATE OR REPLACE VIEW regressions_with_plan_diff AS
-- One row per finding (analysis, deploy, instance, query, change time): the scheduled analysis writes the
-- same finding on every run, and only the latest run's row is shown.
SELECT r.*, d.diff_status, d.plan_diff_summary, d.plan_diff,
       d.before_source AS plan_before_source, d.after_source AS plan_after_source
FROM (
    SELECT DISTINCT ON (analysis, coalesce(deploy_id, ''), instance, fingerprint, series, detected_change_at) *
    FROM performance_regressions
    WHERE status = 'detected'
    ORDER BY analysis, coalesce(deploy_id, ''), instance, fingerprint, series, detected_change_at, date DESC,
             after_count DESC
) r
LEFT JOIN (
    SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (PARTITION BY instance, fingerprint, series, detected_change_at
                                     ORDER BY date DESC) AS rn
        FROM plan_diffs
    ) WHERE rn = 1
) d
  ON d.instance = r.instance AND d.fingerprint = r.fingerprint
 -- the series (database, query) when both rows have one; rows written before series existed have none
 AND d.series IS NOT DISTINCT FROM r.series
 AND d.detected_change_at = r.detected_change_at;
