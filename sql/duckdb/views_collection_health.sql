-- Collection health per instance and UTC day: the samples job's interval counts (base view
-- collection_health, summed over its files: appends add the new intervals' counts) next to the snapshot
-- attempts of snapshot_runs. "How many resets and evictions this week":
--   SELECT instance, sum(stats_resets), sum(evictions) FROM collection_health_daily
--   WHERE day >= date_trunc('week', current_date) GROUP BY instance;
-- restarts, stats_resets: snapshot intervals in which the server restarted (or was replaced) / the
--   statistics were reset (once per event, however many entries it cut);
-- evictions: entry intervals dropped because the entry had been evicted and made again (entry_recreated,
--   evicted_in_interval); other drops are per entry interval too;
-- snapshots_missed: attempts absent from snapshot_runs, estimated from gaps longer than the instance's
--   usual (median) spacing, counted on the day of the snapshot after the gap.
CREATE OR REPLACE VIEW collection_health_daily AS
WITH intervals AS (
    SELECT instance, day,
           sum(intervals) FILTER (WHERE reason = 'sampled') AS intervals_sampled,
           sum(intervals) FILTER (WHERE reason <> 'sampled') AS intervals_dropped,
           sum(snapshots) FILTER (WHERE reason IN ('server_restarted', 'server_replaced')) AS restarts,
           sum(snapshots) FILTER (WHERE reason = 'stats_reset') AS stats_resets,
           sum(intervals) FILTER (WHERE reason IN ('entry_recreated', 'evicted_in_interval')) AS evictions,
           sum(intervals) FILTER (WHERE reason = 'clock_skew') AS clock_skew,
           sum(intervals) FILTER (WHERE reason = 'counter_decreased') AS counter_decreased,
           sum(intervals) FILTER (WHERE reason = 'below_min_executions') AS below_min_executions
    FROM collection_health
    GROUP BY instance, day
),
attempts AS (
    SELECT instance, captured_at, status,
           epoch(captured_at) - epoch(lag(captured_at) OVER (PARTITION BY instance ORDER BY captured_at)) AS gap_s
    FROM snapshot_runs
),
spacing AS (
    SELECT instance, median(gap_s) AS usual_s FROM attempts WHERE gap_s > 0 GROUP BY instance
),
runs AS (
    SELECT a.instance, CAST(timezone('UTC', a.captured_at) AS DATE) AS day,
           count(*) FILTER (WHERE a.status = 'ok') AS snapshots_ok,
           count(*) FILTER (WHERE a.status <> 'ok') AS snapshots_failed,
           CAST(sum(greatest(round(a.gap_s / s.usual_s) - 1, 0)) AS BIGINT) AS snapshots_missed
    FROM attempts a LEFT JOIN spacing s ON s.instance = a.instance
    GROUP BY ALL
)
SELECT coalesce(r.instance, i.instance) AS instance,
       coalesce(r.day, i.day) AS day,
       coalesce(r.snapshots_ok, 0) AS snapshots_ok,
       coalesce(r.snapshots_failed, 0) AS snapshots_failed,
       coalesce(r.snapshots_missed, 0) AS snapshots_missed,
       CAST(coalesce(i.intervals_sampled, 0) AS BIGINT) AS intervals_sampled,
       CAST(coalesce(i.intervals_dropped, 0) AS BIGINT) AS intervals_dropped,
       CAST(coalesce(i.restarts, 0) AS BIGINT) AS restarts,
       CAST(coalesce(i.stats_resets, 0) AS BIGINT) AS stats_resets,
       CAST(coalesce(i.evictions, 0) AS BIGINT) AS evictions,
       CAST(coalesce(i.clock_skew, 0) AS BIGINT) AS clock_skew,
       CAST(coalesce(i.counter_decreased, 0) AS BIGINT) AS counter_decreased,
       CAST(coalesce(i.below_min_executions, 0) AS BIGINT) AS below_min_executions
FROM runs r
FULL OUTER JOIN intervals i ON i.instance = r.instance AND i.day = r.day;
