"""Tables the analyses write: regressions, findings, alerts, drift, gate results, runs."""

from __future__ import annotations

from jobs.schemas import dtypes as dt
from jobs.schemas.table import UTC_TS, Column, TableSchema

# Which analysis run wrote a row (issue 9): every analysis-row table carries both, filled by run_detection.
RUN_COLUMNS: tuple[Column, ...] = (
    Column("run_id", dt.String(), "the analysis run: computed_at as %Y%m%dT%H%M%S%fZ"),
    Column("computed_at", UTC_TS, "when the analysis run ran (its `now`)"),
)

# Columns that mean the same in every per-series finding table (performance_regressions: latency;
# resource_regressions: work per call), spliced into each at its own place (the column order is the lake's).
# Which finding: the analysis, the merged query series, the deploy (null for the unannounced analysis).
FINDING_COLUMNS: tuple[Column, ...] = (
    Column("analysis", dt.String(), "deploy | unannounced"),
    Column("instance", dt.String()),
    Column("queryid", dt.Int64(), "the queryid of the query that most recently received a sample"),
    Column("queryids", dt.String(), "every queryid merged into this series, comma separated, sorted"),
    Column("fingerprint", dt.String()),
    Column(
        "series",
        dt.String(),
        "the series (jobs.query.identity): '<dbid>:<fingerprint>', ':<first queryid>' appended for a "
        "query running side by side with another of the same fingerprint",
    ),
    Column("dbid", dt.Int64(), "the series' database oid"),
    Column("database", dt.String(), "its datname when the collector stored one with the texts, else null"),
    Column("query", dt.String(), "the text of ``queryid``"),
    Column("deploy_id", dt.String()),
    Column("deploy_version", dt.String()),
    Column("deployed_at", UTC_TS),
)
# The verdict and the window the change was looked for in.
VERDICT_COLUMNS: tuple[Column, ...] = (
    Column("status", dt.String(), "detected | no_regression | insufficient_data"),
    Column("reason", dt.String()),
    Column("window_start", UTC_TS),
    Column("window_end", UTC_TS),
)
# The change point that splits the series into a before and an after segment.
CHANGE_POINT_COLUMNS: tuple[Column, ...] = (
    Column("changepoint_index", dt.Int64(), "first sample of the new regime in the merged series"),
    Column("detected_change_at", UTC_TS, "start of the first interval of the new regime"),
    Column("changepoint_p_value", dt.Float64()),
    Column(
        "mixed_index",
        dt.Int64(),
        "the sample just before changepoint_index whose interval holds the step (its mean mixes both "
        "regimes): in neither level; null: none (jobs.detect.segments.settle_boundary)",
    ),
)
# The Welch test of the before segment against the after segment.
SEGMENT_TEST_COLUMNS: tuple[Column, ...] = (
    Column("before_count", dt.Int64()),
    Column("after_count", dt.Int64()),
    Column("t_statistic", dt.Float64(), "Welch (unequal variances, ddof = 1)"),
    Column("p_value", dt.Float64()),
    Column("p_adjusted", dt.Float64(), "Benjamini-Hochberg adjusted p (unannounced analysis)"),
)

PERFORMANCE_REGRESSIONS = TableSchema(
    name="performance_regressions",
    description="One row per analysed (instance, series) per analysis: detected or why not.",
    partition_by=("date",),
    primary_key=("analysis", "deploy_id", "instance", "series"),
    columns=(
        *FINDING_COLUMNS,
        *VERDICT_COLUMNS,
        Column("latency_change", dt.Float64(), "stage 0: (post mean - pre mean) / pre mean"),
        *CHANGE_POINT_COLUMNS,
        Column("before_mean_ms", dt.Float64()),
        Column("after_mean_ms", dt.Float64()),
        *SEGMENT_TEST_COLUMNS,
        Column(
            "confirmed_by",
            dt.String(),
            "unannounced: segments (the change-point search and Welch) | large_step (its newest 2 to 15 "
            "samples above every sample of the hour before and the large-step ratio; "
            "jobs.detect.large_steps)",
        ),
        Column("confidence", dt.Float64(), "1 - p (1 - adjusted p for the unannounced analysis)"),
        Column("fdr_method", dt.String(), "false discovery control applied, if any"),
        Column(
            "added_load_ms_per_s", dt.Float64(), "(after - before mean) x calls/s after: execution time added"
        ),
        Column(
            "recovered_at",
            UTC_TS,
            "deploy analysis: a later change point after which latency is back within the threshold",
        ),
        Column("latest_mean_ms", dt.Float64(), "deploy analysis: mean after the window's last change point"),
        Column(
            "work_changed",
            dt.Boolean(),
            "some per-call work measure changed at the change point by the resource thresholds (ratio and "
            "floor); null when not computed (not detected, no change point)",
        ),
        Column(
            "work_evidence",
            dt.String(),
            "per-call work before vs after the change point ('shared blocks per call ×74, rows unchanged')",
        ),
        Column(
            "kind",
            dt.String(),
            "plan_or_work | contention | both (jobs.detect.contention); null for rows never detected",
        ),
        Column(
            "instance_slowdown_ratio",
            dt.Float64(),
            "median latency ratio (after/before) of the instance's other queries then; null: no episode",
        ),
        Column(
            "slowdown_excess", dt.Float64(), "this query's latency ratio / the common ratio of the others"
        ),
        Column(
            "other_deploys",
            dt.String(),
            "deploy analysis: the other candidate causes, deploys within the tolerance at or before the "
            "change ('v1 at 2026-11-29T12:00:00Z, ...'); the row's deploy is the latest of them "
            "(jobs.detect.attribution.attribute_to_deploys)",
        ),
        Column(
            "deploys_after",
            dt.String(),
            "deploy analysis: deploys within the tolerance after the change ('v813-restore-pkey at ...'): "
            "mentioned (a restore, say), never a candidate cause",
        ),
        *RUN_COLUMNS,
    ),
)

RESOURCE_REGRESSIONS = TableSchema(
    name="resource_regressions",
    description=(
        "One row per analysed (analysis, deploy, instance, series, work metric): did the query's "
        "work per call (temp blocks, shared blocks, rows, WAL bytes, planning time) step up, or why not."
    ),
    partition_by=("date",),
    primary_key=("analysis", "deploy_id", "instance", "series", "metric"),
    columns=(
        *FINDING_COLUMNS,
        Column("metric", dt.String(), "temp_blocks | shared_blocks | rows | wal_bytes | plan_ms"),
        Column("unit", dt.String(), "blocks | rows | bytes | ms (per call)"),
        *VERDICT_COLUMNS,
        Column("naive_ratio", dt.Float64(), "stage 0: post / pre mean per call around the deploy"),
        *CHANGE_POINT_COLUMNS,
        Column("before_per_call", dt.Float64(), "mean work per call of the segment before the change point"),
        Column("after_per_call", dt.Float64(), "... and of the segment from it on"),
        Column("ratio", dt.Float64(), "after_per_call / before_per_call (inf when before is 0)"),
        *SEGMENT_TEST_COLUMNS,
        Column("fdr_method", dt.String(), "false discovery control applied, if any"),
        Column("latency_before_ms", dt.Float64(), "mean latency of the same before segment"),
        Column("latency_after_ms", dt.Float64(), "... and of the same after segment"),
        Column("latency_change", dt.Float64(), "latency_after_ms / latency_before_ms - 1"),
        Column("summary", dt.String(), "e.g. 'temp blocks per call ×4.8 at deploy v42, latency +9%'"),
        *RUN_COLUMNS,
    ),
)

INSTANCE_SLOWDOWNS = TableSchema(
    name="instance_slowdowns",
    description="One row per episode: an instance slowed at a moment (many queries, or load from others).",
    partition_by=("date",),
    primary_key=("analysis", "deploy_id", "instance", "began_at"),
    columns=(
        Column("instance", dt.String()),
        Column("analysis", dt.String(), "deploy | unannounced: which analysis' moment was tested"),
        Column("deploy_id", dt.String(), "the deploy at which the instance slowed (null: unannounced)"),
        Column("deploy_version", dt.String()),
        Column(
            "began_at", UTC_TS, "the moment tested: the deploy, or the median change time of the findings"
        ),
        Column(
            "queries",
            dt.Int64(),
            "series slowed together (ratio >= 1 + shift threshold); evidence load: those its load explains",
        ),
        Column(
            "series_compared",
            dt.Int64(),
            "series compared (>= 1 ms, enough samples on both sides); evidence load: every measured series",
        ),
        Column("queryids", dt.String(), "queryids of the slowed series, comma separated, sorted"),
        Column("fingerprints", dt.String(), "fingerprints of the slowed series, comma separated, sorted"),
        Column(
            "median_ratio", dt.Float64(), "median latency ratio (after/before) over every series compared"
        ),
        Column("max_ratio", dt.Float64()),
        Column(
            "work_unchanged",
            dt.Boolean(),
            "no finding of the episode changed its work per call (null: work not measured)",
        ),
        Column("findings_suppressed", dt.Int64(), "detected findings reported as this episode instead"),
        Column("calls_per_s_before", dt.Float64(), "calls per second of the compared series, summed"),
        Column("calls_per_s_after", dt.Float64()),
        Column(
            "evidence",
            dt.String(),
            "peers (several series slowed together) | load (other statements brought load) | peers+load",
        ),
        Column("load_before", dt.Float64(), "the instance's execution seconds per second before the moment"),
        Column("load_after", dt.Float64(), "... and after it (jobs.detect.load)"),
        Column(
            "load_explained_ratio",
            dt.Float64(),
            "the slowdown the added load explains (processor sharing over the instance's cores)",
        ),
        Column(
            "activity_before",
            dt.Float64(),
            "active backends on a CPU before the moment, from pg_stat_activity (null: not recorded)",
        ),
        Column("activity_after", dt.Float64(), "... and after it: statements still running count here"),
        Column("cores", dt.Int32(), "the instance's CPUs from the fleet file (null: unknown)"),
        Column("load_sources", dt.String(), "the statements that brought the load: '+1.9 s/s from `…`'"),
        Column("summary", dt.String()),
        *RUN_COLUMNS,
    ),
)

PLAN_DIFFS = TableSchema(
    name="plan_diffs",
    description="One row per detected regression: the plan before vs after detected_change_at.",
    partition_by=("date",),
    primary_key=("instance", "series", "detected_change_at"),
    columns=(
        Column("instance", dt.String()),
        Column("queryid", dt.Int64()),
        Column("fingerprint", dt.String()),
        Column("series", dt.String(), "the regression's series (jobs.query.identity)"),
        Column("dbid", dt.Int64()),
        Column("database", dt.String()),
        Column("detected_change_at", UTC_TS),
        Column(
            "diff_status",
            dt.String(),
            "changed | cost_changed (same shape) | unchanged | no_before | no_new_shape | no_plans"
            " | no_change_time",
        ),
        Column("before_captured_at", UTC_TS),
        Column("after_captured_at", UTC_TS),
        Column("before_source", dt.String()),
        Column("after_source", dt.String()),
        Column("before_shape_hash", dt.String()),
        Column("after_shape_hash", dt.String()),
        Column("plan_diff_summary", dt.String(), "short human summary"),
        Column("plan_diff", dt.String(), "structured diff as JSON"),
        *RUN_COLUMNS,
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Findings (issue 9: jobs/detect/findings.py): one regression, one finding, with a lifecycle

FINDING_STATES = TableSchema(
    name="finding_states",
    description=(
        "Append-only: one row each time a finding (instance, series, onset) opens or changes (status, "
        "levels, attribution, plan diff); the DuckDB view `findings` shows the latest row per finding_id."
    ),
    partition_by=("date",),
    primary_key=("finding_id", "run_id"),
    columns=(
        Column("finding_id", dt.String(), "stable hash of (instance, series, onset)"),
        *RUN_COLUMNS,
        Column("status", dt.String(), "open | recovered | superseded"),
        Column("instance", dt.String()),
        Column("series", dt.String(), "the series key after the instance (jobs.query.series.SERIES_KEY)"),
        Column("database", dt.String(), "datname when known"),
        Column("fingerprint", dt.String()),
        Column("queryid", dt.Int64(), "the queryid of the query that most recently received a sample"),
        Column("queryids", dt.String()),
        Column("query", dt.String()),
        Column("onset", UTC_TS, "the change time when the finding opened; identity, never updated"),
        Column(
            "opened_on_samples",
            dt.Int64(),
            "samples after the step when the finding opened (fewer for a large step: issue 26); "
            "never updated",
        ),
        Column(
            "opened_by",
            dt.String(),
            "the test that opened it: segments | large_step (unannounced), deploy, or work; never updated",
        ),
        Column("detected_change_at", UTC_TS, "the latest run's change time (within the onset tolerance)"),
        Column("analysis", dt.String(), "deploy | unannounced: the analysis the finding is attributed to"),
        Column("deploy_id", dt.String(), "the deploy blamed (latest at or before the change); null: none"),
        Column("deploy_version", dt.String()),
        Column("deployed_at", UTC_TS),
        Column("other_deploys", dt.String(), "other candidate deploys: within the tolerance, at or before"),
        Column("deploys_after", dt.String(), "deploys within the tolerance after the change (not causes)"),
        Column("before_mean_ms", dt.Float64(), "latest level before the step"),
        Column("after_mean_ms", dt.Float64(), "latest level after the step"),
        Column(
            "latest_mean_ms",
            dt.Float64(),
            "the level now: the deploy analysis' mean after the window's last change point, or the median "
            "interval latency since the series came back (recovery re-check)",
        ),
        Column("p_value", dt.Float64(), "Welch's p (the adjusted p for an unannounced finding)"),
        Column("added_load_ms_per_s", dt.Float64()),
        Column(
            "kind", dt.String(), "plan_or_work | both (jobs.detect.contention) | work (work per call alone)"
        ),
        Column("instance_slowdown_ratio", dt.Float64(), "kind both: the instance's common slowdown"),
        Column("slowdown_excess", dt.Float64(), "kind both: this query's ratio / the common one"),
        Column("work_evidence", dt.String()),
        Column("plan_diff_summary", dt.String()),
        Column("work_metric", dt.String(), "the work per call metric that grew most at the step (if any)"),
        Column("work_ratio", dt.Float64(), "its after / before per call (null: from 0)"),
        Column("work_summary", dt.String(), "every metric's change, e.g. 'temp blocks per call 0 → 116 …'"),
        Column("work_before_per_call", dt.Float64(), "work_metric per call before the step"),
        Column(
            "work_after_per_call", dt.Float64(), "... and after it (a work finding recovers back near before)"
        ),
        Column("recovered_at", UTC_TS, "when the series returned to its old level (status recovered)"),
        Column("superseded_by", dt.String(), "finding_id that replaced this one (status superseded)"),
        Column("opened_at", UTC_TS, "computed_at of the run that opened the finding"),
        Column("change", dt.String(), "what this row records: opened | updated | recovered | superseded"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Plan pins (issue 30: jobs/plans/pins.py, jobs/plans/pin_ledger.py)

PLAN_PINS = TableSchema(
    name="plan_pins",
    description=(
        "Append-only ledger of plan pins: one row each time a pin is proposed, found impossible or not "
        "wanted, applied or removed, with who decided, why, the evidence and the SQL; the latest row per "
        "pin_id is the pin's state (`radar pins`)."
    ),
    partition_by=("date",),
    primary_key=("pin_id", "recorded_at"),
    columns=(
        Column("pin_id", dt.String(), "stable hash of (instance, finding_id): one pin per finding"),
        Column("recorded_at", UTC_TS, "when this row was written"),
        Column(
            "event",
            dt.String(),
            "proposed | impossible (the plan cannot be reproduced: the reason says why) | not_a_plan_change"
            " | skipped ([pinning] allow/deny) | applied | verified | failed (removed) | removed",
        ),
        Column(
            "decided_by",
            dt.String(),
            "who decided: 'radar pins propose', the Dagster asset plan_pins, 'radar pins apply by <user>'",
        ),
        Column("mode", dt.String(), "[pinning] mode in force: propose | apply"),
        Column("reason", dt.String(), "why, in one line ('pin impossible: the last good plan used ...')"),
        Column("instance", dt.String()),
        Column("queryid", dt.Int64(), "the query id the hint is keyed by (hint_plan.hints.query_id)"),
        Column("finding_id", dt.String(), "the finding the pin answers (finding_states)"),
        Column(
            "database",
            dt.String(),
            "the finding's database: the catalogue is read and the pin written there (null: the DSN's)",
        ),
        Column("application_name", dt.String(), "hint_plan.hints.application_name ('' = every session)"),
        Column("hints", dt.String(), "the pg_hint_plan hint text; null when no pin"),
        Column("apply_sql", dt.String(), "the exact SQL that would apply the pin"),
        Column("remove_sql", dt.String(), "the exact SQL that would remove it (restoring the hint table)"),
        Column("sql_run", dt.String(), "SQL actually run on the server; null: nothing was written"),
        Column("p_value", dt.Float64(), "the finding's p-value"),
        Column("before_mean_ms", dt.Float64(), "the finding's latency before the step"),
        Column("after_mean_ms", dt.Float64(), "... and after it"),
        Column("detected_change_at", UTC_TS, "the finding's change time"),
        Column("good_captured_at", UTC_TS, "when the last good plan (before the change) was captured"),
        Column("good_source", dt.String(), "its plan source"),
        Column("good_shape_hash", dt.String()),
        Column("bad_shape_hash", dt.String(), "the shape of the plan the change brought"),
        Column("good_plan_json", dt.String(), "the last good plan (EXPLAIN JSON)"),
        Column("bad_plan_json", dt.String(), "the plan the change brought (EXPLAIN JSON)"),
        Column("pinned_mean_ms", dt.Float64(), "verified / failed: the query's mean latency while pinned"),
        Column("verify_p_value", dt.Float64(), "verified / failed: Welch's p of pinned vs regressed latency"),
        Column("relations", dt.String(), "relations the last good plan scanned, comma separated"),
        Column("indexes", dt.String(), "indexes it used, comma separated"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Alerts (jobs/alerts/)

ALERTS_SENT = TableSchema(
    name="alerts_sent",
    description="One row per alert a sink accepted (per sink since issue 10): what was sent, when, where; a "
    "sink is never sent an alert it accepted. At most one per (finding_id, state, sink): one first alert and "
    "one update per finding. Rows without `sink` (before issue 10) were accepted by every sink of their run.",
    partition_by=("date",),
    primary_key=("alert_id", "sink"),
    columns=(
        Column("alert_id", dt.String(), "hash of (finding_id, state)"),
        Column("sent_at", UTC_TS),
        Column("instance", dt.String()),
        Column("queryid", dt.Int64()),
        Column(
            "sinks",
            dt.String(),
            "the sink as shown, e.g. 'slack https://hooks.slack.com' (a webhook shows only its scheme and "
            "host; before issue 10: every sink of the run, comma-separated)",
        ),
        Column("finding_id", dt.String(), "the finding alerted (findings.finding_id)"),
        Column("state", dt.String(), "open (the first alert) | recovered | superseded (the one update)"),
        Column("sink", dt.String(), "file | slack | webhook: the sink that accepted it (null: every sink)"),
        Column("attempts", dt.Int64(), "attempts this run took (retries included)"),
    ),
)

ALERT_DEAD_LETTERS = TableSchema(
    name="alert_dead_letters",
    description="One row per alert a sink refused for good (a 4xx other than 429) or that ran out of "
    "attempts: the alert is not sent to that sink again (`radar alerts --retry-dead-letters` does).",
    partition_by=("date",),
    primary_key=("alert_id", "sink", "dead_lettered_at"),
    columns=(
        Column("alert_id", dt.String(), "hash of (finding_id, state)"),
        Column("dead_lettered_at", UTC_TS),
        Column("sink", dt.String(), "file | slack | webhook"),
        Column("sink_name", dt.String(), "the sink as shown (a webhook: only its scheme and host)"),
        Column("finding_id", dt.String()),
        Column("state", dt.String(), "open | recovered | superseded"),
        Column("instance", dt.String()),
        Column("queryid", dt.Int64()),
        Column("attempts", dt.Int64(), "attempts made before giving up"),
        Column("last_status", dt.Int64(), "the last HTTP status; null: no answer (network error, timeout)"),
        Column("reason", dt.String(), "why, e.g. 'permanent failure: HTTP 400 no_text' (never the URL)"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Latency distribution drift (jobs/drift/interval.py)

DRIFT_BASELINES = TableSchema(
    name="drift_baselines",
    description="Anchored baseline windows for drift: a known-good period per instance or fleet-wide.",
    partition_by=("date",),
    primary_key=("baseline_id",),
    columns=(
        Column("baseline_id", dt.String(), "stable hash of (instance, fingerprint, window, label)"),
        Column("instance", dt.String(), "null = every instance of the fleet"),
        Column("fingerprint", dt.String(), "null = every query"),
        Column("window_start", UTC_TS, "samples with interval_end > window_start..."),
        Column("window_end", UTC_TS, "...and <= window_end"),
        Column("label", dt.String()),
        Column("created_at", UTC_TS),
    ),
)

LATENCY_DRIFT = TableSchema(
    name="latency_drift",
    description="One row per (instance, query) per drift run: current window against its baseline.",
    partition_by=("date",),
    primary_key=("current_end", "instance", "series"),
    columns=(
        Column("instance", dt.String()),
        Column("fingerprint", dt.String()),
        Column("series", dt.String(), "the series (jobs.query.identity)"),
        Column("dbid", dt.Int64()),
        Column("database", dt.String()),
        Column("queryid", dt.Int64(), "the queryid that most recently received a sample"),
        Column("queryids", dt.String(), "every queryid merged into this series, comma separated, sorted"),
        Column("query", dt.String()),
        Column("baseline_source", dt.String(), "anchored | default"),
        Column("baseline_id", dt.String(), "drift_baselines.baseline_id when anchored"),
        Column("baseline_label", dt.String()),
        Column("baseline_start", UTC_TS),
        Column("baseline_end", UTC_TS),
        Column("current_start", UTC_TS),
        Column("current_end", UTC_TS, "the run's as-of time (its date is the partition)"),
        Column("baseline_count", dt.Int64(), "intervals in the baseline window"),
        Column("current_count", dt.Int64(), "intervals in the current window"),
        Column("baseline_calls", dt.Int64()),
        Column("current_calls", dt.Int64()),
        Column("baseline_mean_ms", dt.Float64(), "calls-weighted mean latency"),
        Column("current_mean_ms", dt.Float64()),
        Column("baseline_p50_ms", dt.Float64(), "calls-weighted quantiles of the interval mean latency"),
        Column("baseline_p95_ms", dt.Float64()),
        Column("current_p50_ms", dt.Float64()),
        Column("current_p95_ms", dt.Float64()),
        Column("js", dt.Float64(), "Jensen-Shannon distance, base 2 (0..1)"),
        Column("psi", dt.Float64(), "population stability index, epsilon-smoothed"),
        Column("wasserstein", dt.Float64(), "Wasserstein-1 between the log latency distributions"),
        Column("tail_p_value", dt.Float64(), "exact exceedance test: current intervals above baseline tail"),
        Column("added_load_ms_per_s", dt.Float64(), "(current - baseline mean) x current calls/s"),
        Column("status", dt.String(), "drift | watch | improved | no_drift | insufficient_data"),
        Column("reason", dt.String()),
    ),
)

DRIFT_SAMPLE_BASELINES = TableSchema(
    name="drift_sample_baselines",
    description=(
        "Anchored per-execution baselines: explicit rows per (baseline_version, instance, query_hash, "
        "metric), never a rolling window; a re-anchor writes a new version."
    ),
    partition_by=("date",),
    primary_key=("baseline_version", "instance", "query_hash", "metric"),
    columns=(
        Column("baseline_version", dt.String(), "non-empty label, e.g. 'v812' or '2026-12-01T10:00Z'"),
        Column("instance", dt.String()),
        Column("query_hash", dt.String()),
        Column("metric", dt.String(), "cost | latency | cardinality"),
        Column("fingerprint", dt.String()),
        Column("queryid", dt.Int64(), "the queryid seen most often in the window"),
        Column("window_start", UTC_TS, "execution samples with logged_at > window_start..."),
        Column("window_end", UTC_TS, "...and <= window_end"),
        Column("n_window", dt.Int64(), "samples in the window"),
        Column("shapes", dt.List(dt.String()), "the query's plan shapes (shape_hash) in the window, sorted"),
        Column("samples", dt.List(dt.Float64()), "the kept samples (at most max_baseline_samples, seeded)"),
        Column("created_at", UTC_TS, "the anchor's time (its date is the partition)"),
    ),
)

EXECUTION_DRIFT = TableSchema(
    name="execution_drift",
    description="One row per (instance, query_hash, metric) per scoring run: the scorer's DriftScore.",
    partition_by=("date",),
    primary_key=("scored_at", "instance", "query_hash", "metric"),
    columns=(
        Column("scored_at", UTC_TS, "the run's as-of time (its date is the partition)"),
        Column("instance", dt.String()),
        Column("query_hash", dt.String()),
        Column("metric", dt.String(), "cost | latency | cardinality"),
        Column("fingerprint", dt.String()),
        Column("queryid", dt.Int64()),
        Column("baseline_version", dt.String()),
        Column("window_start", UTC_TS, "candidate: samples logged in (window_start, window_end]"),
        Column("window_end", UTC_TS),
        Column("shard", dt.Int64(), "int(query_hash[-8:], 16) % shard_count"),
        Column("n_baseline", dt.Int64()),
        Column("n_candidate", dt.Int64()),
        Column("js", dt.Float64(), "Jensen-Shannon divergence, base 2, in [0, 1]: the drift score"),
        Column("psi", dt.Float64(), "population stability index (natural log; p = candidate)"),
        Column(
            "wasserstein",
            dt.Float64(),
            "W1 of the raw samples in the metric's unit (metadata); null unless [drift.score]"
            " compute_wasserstein",
        ),
        Column("flag", dt.String(), "PASS | WARN | BLOCK"),
        Column("reason", dt.String(), "insufficient_samples | js_block | psi_block | ... | within_bands"),
        Column("psi_data_quality", dt.Boolean(), "PSI > psi_data_quality: the flag fell back to JS"),
        Column("profile", dt.String(), "calibrated | design"),
        Column("js_noise", dt.Float64(), "calibrated: the pair's null quantile of JS"),
        Column("psi_noise", dt.Float64(), "calibrated: the pair's null quantile of PSI"),
        Column("bins", dt.Int64(), "bins of the grid (n_bins)"),
        Column("support_lo", dt.Float64(), "the grid's low end: the union support's minimum"),
        Column(
            "support_hi", dt.Float64(), "its high end (the winsorized candidate's maximum or the baseline's)"
        ),
        Column(
            "plan_changed",
            dt.Boolean(),
            "the candidate ran a plan shape the baseline's window never did (null: shapes unknown on a side)",
        ),
        Column("new_shapes", dt.List(dt.String()), "those shapes (shape_hash), sorted"),
    ),
)

GATE_RESULTS = TableSchema(
    name="gate_results",
    description="One row per (gate run, scenario, measurement) of `radar gate --scenarios --lake-write`: the "
    "selected cycle's comparison, asymmetry-corrected where calibrated.",
    partition_by=("date",),
    primary_key=("run_started_at", "scenario", "measurement"),
    columns=(
        Column("run_started_at", UTC_TS, "the gate run's start (its date is the partition)"),
        Column("source", dt.String(), "the scenario file or builtin suite"),
        Column("baseline", dt.String(), "baseline DSN, password redacted"),
        Column("candidate", dt.String(), "candidate DSN, password redacted"),
        Column("baseline_version", dt.Int64(), "server_version_num"),
        Column("candidate_version", dt.Int64(), "server_version_num"),
        Column("run_verdict", dt.String(), "PASS | WARN | BLOCK | INCONCLUSIVE"),
        Column("scenario", dt.String()),
        Column("scenario_verdict", dt.String(), "PASS | WARN | BLOCK | INCONCLUSIVE | NOT_RUN"),
        Column("measurement", dt.String(), "wallclock | wallclock_mean | memory | rss | temp_blocks | ..."),
        Column("unit", dt.String(), "ms | bytes | blocks"),
        Column("baseline_value", dt.Float64(), "the baseline's aggregate (per execution)"),
        Column("candidate_value", dt.Float64(), "the candidate's aggregate (per execution)"),
        Column("threshold", dt.Float64(), "relative threshold t (strong regression at 2t)"),
        Column("ratio", dt.Float64(), "candidate / baseline, corrected by the asymmetry when applied"),
        Column("ci_low", dt.Float64()),
        Column("ci_high", dt.Float64()),
        Column("raw_ratio", dt.Float64(), "the selected cycle's ratio before any correction"),
        Column("kind", dt.String(), "regression | strong_regression | improvement | unchanged"),
        Column("verdict", dt.String(), "PASS | WARN | BLOCK"),
        Column("cycles", dt.Int64()),
        Column("regressed_cycles", dt.Int64()),
        Column("measurements_baseline", dt.Int64(), "measurements of the selected cycle"),
        Column("measurements_candidate", dt.Int64()),
        Column("stopped_by_baseline", dt.String(), "the termination rule that stopped the target"),
        Column("stopped_by_candidate", dt.String()),
        Column("calibration_mode", dt.String(), "off | probe | aa"),
        Column("correction", dt.String(), "what the calibration changed, in words"),
    ),
)

GATE_RUNS = TableSchema(
    name="gate_runs",
    description="One row per gate run of `radar gate --lake-write`: its whole JSON report, raw "
    "measurements included (every execution's time per cycle and side, counters, memory readings), so "
    "`radar gate --replay RUN_ID` judges it again without a server.",
    partition_by=("date",),
    primary_key=("run_id",),
    columns=(
        Column("run_id", dt.String(), "the run's start as a sortable stem (YYYYMMDDTHHMMSSffffffZ)"),
        Column("run_started_at", UTC_TS, "the gate run's start (its date is the partition)"),
        Column("source", dt.String(), "the scenario file, workload file or builtin suite"),
        Column("run_verdict", dt.String(), "PASS | WARN | BLOCK | INCONCLUSIVE"),
        Column("verdict_rule", dt.String(), "bounded | design"),
        Column("report_json", dt.String(), "the gate_suite_report.schema.json object of the run"),
    ),
)

ANALYSIS_RUNS = TableSchema(
    name="analysis_runs",
    description="One row per (detection run, instance): the query_samples watermark the run analysed up to.",
    partition_by=("date",),
    primary_key=("run_id", "instance"),
    columns=(
        Column("run_id", dt.String(), "computed_at formatted %Y%m%dT%H%M%S%fZ"),
        Column("computed_at", UTC_TS, "the run's time (its date is the partition)"),
        Column("instance", dt.String()),
        Column("samples_watermark", UTC_TS, "latest query_samples interval_end of the instance the run saw"),
        Column("mode", dt.String(), "full | incremental"),
        Column("deploys_examined", dt.Int64(), "deploys of the instance whose window the run re-examined"),
        Column("series_examined", dt.Int64(), "series of the instance the unannounced analysis searched"),
        Column(
            "config_digest",
            dt.String(),
            "hash of the analysis settings the run used (jobs.detect.scope.analysis_config_digest); a run "
            "whose settings differ from the last run's is a full run (null in runs before issue 10)",
        ),
    ),
)

ANALYSED_DEPLOYS = TableSchema(
    name="analysed_deploys",
    description="One row per deploy marker the first time a detection run saw it (later runs know it).",
    partition_by=("date",),
    primary_key=("deploy_id",),
    columns=(
        Column("deploy_id", dt.String()),
        Column("run_id", dt.String()),
        Column("computed_at", UTC_TS, "the run's time (its date is the partition)"),
        Column(
            "shard",
            dt.String(),
            "the shard whose pass saw it (`shard-k of n`); null: a whole-fleet run (seen on every instance)",
        ),
    ),
)

FDR_CANDIDATES = TableSchema(
    name="fdr_candidates",
    description="The p-values of one shard pass's unannounced candidate steps (the first phase of a sharded "
    "detection, jobs.pipeline.sharded): each shard's verdicts adjust its own among every shard's latest.",
    partition_by=("shard",),
    primary_key=("run_id", "family", "position"),
    columns=(
        Column("run_id", dt.String(), "the pass's time formatted %Y%m%dT%H%M%S%fZ"),
        Column("computed_at", UTC_TS, "the pass's time"),
        Column("shard_count", dt.Int64(), "the shard count the fleet was split with"),
        Column("family", dt.String(), "latency | resource: each adjusted among its own family"),
        Column("position", dt.Int64(), "the candidate's position in its family (a key only)"),
        Column("p_value", dt.Float64(), "Welch p-value of the candidate step"),
    ),
)

CHANGEPOINT_MEMO = TableSchema(
    name="changepoint_memo",
    description="The change points one shard pass's phase 1 found (jobs.detect.changepoint_memo), keyed by "
    "a digest of the searched series: its phase 2 reuses them instead of searching the same series again.",
    partition_by=("shard",),
    primary_key=("run_id", "key", "series"),
    columns=(
        Column("run_id", dt.String(), "the phase 1 pass (the same as its fdr_candidates file)"),
        Column("key", dt.String(), "SHA-256 of the searched values, series lengths and settings"),
        Column("series", dt.Int64(), "the series' position in the call"),
        Column("cuts", dt.List(dt.Int64()), "first index of each new regime, sorted"),
        Column("p_values", dt.List(dt.Float64()), "each change point's p-value, in the search's order"),
    ),
)
