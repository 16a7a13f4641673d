"""Schemas of every lake table, in one place.

Writers cast to these schemas, readers scan with them (so files from PostgreSQL 13 and 18 scan together,
a column a version lacks is null), DuckDB views fall back to them when a table has no file yet, and the
Dagster asset checks read their column lists from here. Partition columns (``instance``, ``date``) live in
folder names, not in the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

SCHEMA_VERSION = 1

UTC_TS = pl.Datetime("us", "UTC")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    description: str = ""


@dataclass(frozen=True)
class TableSchema:
    """A lake table: its columns, its hive partition keys, and the columns that identify a row."""

    name: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ("instance", "date")
    primary_key: tuple[str, ...] = ()
    description: str = ""
    partition_dtypes: dict[str, pl.DataType] = field(default_factory=dict)

    @property
    def polars_schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def scan_schema(self) -> pl.Schema:
        """File columns plus the hive partition columns, as a scan returns them."""
        extra = {key: self.partition_dtypes.get(key, pl.String()) for key in self.partition_by}
        return pl.Schema({**extra, **dict(self.polars_schema)})

    def columns_of(self, frame: pl.DataFrame) -> list[str]:
        """This table's columns that ``frame`` has, in table order (a step later in the pipeline may fill
        the others; ``conform`` makes them null)."""
        return [c for c in self.column_names if c in frame.columns]

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Cast to the schema: missing columns become null (never zero), unknown columns are an error."""
        unknown = [c for c in frame.columns if c not in self.polars_schema and c not in self.partition_by]
        if unknown:
            raise ValueError(f"table {self.name}: unknown columns {unknown}")
        return frame.select(
            [
                (pl.col(c.name) if c.name in frame.columns else pl.lit(None)).cast(c.dtype).alias(c.name)
                for c in self.columns
            ]
        )

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.polars_schema)


# ---------------------------------------------------------------------------------------------------------
# Collector output (issue 2)

# Cumulative counters of pg_stat_statements in canonical names (PG17+/extension 1.11+ spelling).
STATEMENT_COUNTERS: tuple[str, ...] = (
    "calls",
    "plans",
    "total_exec_time",
    "total_plan_time",
    "rows",
    "shared_blks_hit",
    "shared_blks_read",
    "shared_blks_dirtied",
    "shared_blks_written",
    "local_blks_hit",
    "local_blks_read",
    "local_blks_dirtied",
    "local_blks_written",
    "temp_blks_read",
    "temp_blks_written",
    "shared_blk_read_time",
    "shared_blk_write_time",
    "local_blk_read_time",
    "local_blk_write_time",
    "temp_blk_read_time",
    "temp_blk_write_time",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
    "wal_buffers_full",
    "jit_functions",
    "jit_generation_time",
    "jit_inlining_count",
    "jit_inlining_time",
    "jit_optimization_count",
    "jit_optimization_time",
    "jit_emission_count",
    "jit_emission_time",
    "jit_deform_count",
    "jit_deform_time",
    "parallel_workers_to_launch",
    "parallel_workers_launched",
)

_FLOAT_COUNTERS = {c for c in STATEMENT_COUNTERS if c.endswith("_time")}

STATEMENT_SNAPSHOTS = TableSchema(
    name="statement_snapshots",
    description="One row per pg_stat_statements entry per snapshot: cumulative counters, never differenced.",
    primary_key=("instance", "captured_at", "userid", "dbid", "queryid", "toplevel"),
    columns=(
        Column(
            "captured_at", UTC_TS, "server clock (clock_timestamp()) right before pg_stat_statements was read"
        ),
        Column(
            "collector_clock",
            UTC_TS,
            "the collector's clock at the midpoint of the server-clock read (skew check)",
        ),
        Column("system_identifier", pl.Int64(), "pg_control_system().system_identifier"),
        Column("postmaster_start", UTC_TS, "pg_postmaster_start_time(): a restart starts a new incarnation"),
        Column("stats_reset", UTC_TS, "pg_stat_statements_info.stats_reset [14+]"),
        Column("userid", pl.Int64()),
        Column("dbid", pl.Int64()),
        Column("toplevel", pl.Boolean(), "false for nested statements under track = all [14+]"),
        Column("queryid", pl.Int64(), "signed int64; null for rows hidden by missing privilege"),
        *(Column(c, pl.Float64() if c in _FLOAT_COUNTERS else pl.Int64()) for c in STATEMENT_COUNTERS),
        Column("min_exec_time", pl.Float64(), "over the entry's life (or since minmax_stats_since)"),
        Column("max_exec_time", pl.Float64()),
        Column("mean_exec_time", pl.Float64(), "over the entry's life, not the interval"),
        Column("stddev_exec_time", pl.Float64()),
        Column(
            "stats_since", UTC_TS, "entry creation [17+]: a change means the entry was evicted and re-made"
        ),
        Column("minmax_stats_since", UTC_TS, "[17+]"),
    ),
)

SNAPSHOT_RUNS = TableSchema(
    name="snapshot_runs",
    description="One row per instance per snapshot attempt, including failures: identity, info and counts.",
    primary_key=("instance", "captured_at"),
    columns=(
        Column("captured_at", UTC_TS, "server clock, or the collector's clock when the instance failed"),
        Column("collector_clock", UTC_TS, "the collector's clock at the midpoint of the server-clock read"),
        Column("status", pl.String(), "ok | failed"),
        Column("error", pl.String(), "why the snapshot failed (no secrets)"),
        Column("failed_phase", pl.String(), "connect | identity | statements | texts | write (failed rows)"),
        Column("health", pl.String(), "ok | degraded (read, but the server records less than it should)"),
        Column("warnings", pl.String(), "why the instance is degraded, '; '-separated"),
        Column("system_identifier", pl.Int64()),
        Column("postmaster_start", UTC_TS),
        Column("server_version_num", pl.Int64()),
        Column("extension_version", pl.String(), "pg_stat_statements extversion"),
        Column("compute_query_id", pl.String()),
        Column("track", pl.String(), "pg_stat_statements.track"),
        Column("track_planning", pl.String()),
        Column("track_io_timing", pl.String()),
        Column("pgss_max", pl.Int64(), "pg_stat_statements.max"),
        Column("dealloc", pl.Int64(), "pg_stat_statements_info.dealloc [14+]"),
        Column("stats_reset", UTC_TS, "pg_stat_statements_info.stats_reset [14+]"),
        Column("statement_rows", pl.Int64(), "rows written to statement_snapshots"),
        Column("explain_rows_dropped", pl.Int64(), "rows whose text starts with EXPLAIN"),
        Column("own_rows_dropped", pl.Int64(), "rows of the collector's own statements (marker in the text)"),
        Column("insufficient_privilege_rows", pl.Int64(), "rows hidden from this role (NULL queryid)"),
        Column("new_texts", pl.Int64(), "texts fetched this time (only for unseen queryids)"),
        Column("server_ms", pl.Float64(), "time spent in the server's snapshot queries"),
    ),
)

QUERY_TEXTS = TableSchema(
    name="query_texts",
    description="Normalized query text, written once per (instance, queryid) when first seen.",
    primary_key=("instance", "queryid"),
    columns=(
        Column("captured_at", UTC_TS),
        Column("queryid", pl.Int64()),
        Column("dbid", pl.Int64()),
        Column("userid", pl.Int64()),
        Column("datname", pl.String(), "name of the database dbid (pg_database) when the text was read"),
        Column("query", pl.String()),
        Column("is_explain", pl.Boolean(), "text starts with EXPLAIN: its statement rows are dropped"),
        Column("is_radar", pl.Boolean(), "the radar's own statement (marker in the text): rows dropped"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Interval samples, deploy events, regressions (issue 3: jobs/samples.py, deploys.py, regressions.py)

# The counters differenced into samples: every cumulative counter up to WAL (not JIT or parallel workers).
SAMPLE_DELTAS: tuple[str, ...] = STATEMENT_COUNTERS[: STATEMENT_COUNTERS.index("wal_bytes") + 1]

QUERY_SAMPLES = TableSchema(
    name="query_samples",
    description="One row per statement entry per valid interval between two snapshots: counter deltas.",
    primary_key=("instance", "interval_end", "userid", "dbid", "queryid", "toplevel"),
    columns=(
        Column("interval_start", UTC_TS, "captured_at of the earlier snapshot"),
        Column("interval_end", UTC_TS, "captured_at of the later snapshot (its date is the partition)"),
        Column("interval_seconds", pl.Float64()),
        Column("userid", pl.Int64()),
        Column("dbid", pl.Int64()),
        Column("toplevel", pl.Boolean()),
        Column("queryid", pl.Int64()),
        *(Column(c, pl.Float64() if c in _FLOAT_COUNTERS else pl.Int64(), "delta") for c in SAMPLE_DELTAS),
        Column("mean_exec_time", pl.Float64(), "interval mean latency (ms) = Δtotal_exec_time / Δcalls"),
        Column("mean_plan_time", pl.Float64(), "Δtotal_plan_time / Δplans; null when planning not tracked"),
        Column("evictions", pl.Int64(), "growth of pg_stat_statements_info.dealloc during the interval"),
    ),
)

DEPLOY_EVENTS = TableSchema(
    name="deploy_events",
    description="Deploy markers: one row per deploy, for one instance or the whole fleet (instance null).",
    partition_by=("date",),
    primary_key=("deploy_id",),
    columns=(
        Column("deploy_id", pl.String(), "stable hash of (scope, instance, version, deployed_at)"),
        Column("version", pl.String()),
        Column("scope", pl.String(), "instance | fleet"),
        Column("instance", pl.String(), "null when scope = fleet"),
        Column("deployed_at", UTC_TS),
        Column("source", pl.String(), "cli, or the inbox file name it came from"),
    ),
)

# Which analysis run wrote a row (issue 9): every analysis-row table carries both, filled by run_detection.
RUN_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pl.String(), "the analysis run: computed_at as %Y%m%dT%H%M%S%fZ"),
    Column("computed_at", UTC_TS, "when the analysis run ran (its `now`)"),
)

# Columns that mean the same in every per-series finding table (performance_regressions: latency;
# resource_regressions: work per call), spliced into each at its own place (the column order is the lake's).
# Which finding: the analysis, the merged query series, the deploy (null for the unannounced analysis).
FINDING_COLUMNS: tuple[Column, ...] = (
    Column("analysis", pl.String(), "deploy | unannounced"),
    Column("instance", pl.String()),
    Column("queryid", pl.Int64(), "the queryid of the query that most recently received a sample"),
    Column("queryids", pl.String(), "every queryid merged into this series, comma separated, sorted"),
    Column("fingerprint", pl.String()),
    Column(
        "series",
        pl.String(),
        "the series (jobs.detect.identity): '<dbid>:<fingerprint>', ':<first queryid>' appended for a "
        "query running side by side with another of the same fingerprint",
    ),
    Column("dbid", pl.Int64(), "the series' database oid"),
    Column("database", pl.String(), "its datname when the collector stored one with the texts, else null"),
    Column("query", pl.String(), "the text of ``queryid``"),
    Column("deploy_id", pl.String()),
    Column("deploy_version", pl.String()),
    Column("deployed_at", UTC_TS),
)
# The verdict and the window the change was looked for in.
VERDICT_COLUMNS: tuple[Column, ...] = (
    Column("status", pl.String(), "detected | no_regression | insufficient_data"),
    Column("reason", pl.String()),
    Column("window_start", UTC_TS),
    Column("window_end", UTC_TS),
)
# The change point that splits the series into a before and an after segment.
CHANGE_POINT_COLUMNS: tuple[Column, ...] = (
    Column("changepoint_index", pl.Int64(), "first sample of the new regime in the merged series"),
    Column("detected_change_at", UTC_TS, "start of the first interval of the new regime"),
    Column("changepoint_p_value", pl.Float64()),
    Column(
        "mixed_index",
        pl.Int64(),
        "the sample just before changepoint_index whose interval holds the step (its mean mixes both "
        "regimes): in neither level; null: none (jobs.regressions.settle_boundary)",
    ),
)
# The Welch test of the before segment against the after segment.
SEGMENT_TEST_COLUMNS: tuple[Column, ...] = (
    Column("before_count", pl.Int64()),
    Column("after_count", pl.Int64()),
    Column("t_statistic", pl.Float64(), "Welch (unequal variances, ddof = 1)"),
    Column("p_value", pl.Float64()),
    Column("p_adjusted", pl.Float64(), "Benjamini-Hochberg adjusted p (unannounced analysis)"),
)

PERFORMANCE_REGRESSIONS = TableSchema(
    name="performance_regressions",
    description="One row per analysed (instance, series) per analysis: detected or why not.",
    partition_by=("date",),
    primary_key=("analysis", "deploy_id", "instance", "series"),
    columns=(
        *FINDING_COLUMNS,
        *VERDICT_COLUMNS,
        Column("latency_change", pl.Float64(), "stage 0: (post mean - pre mean) / pre mean"),
        *CHANGE_POINT_COLUMNS,
        Column("before_mean_ms", pl.Float64()),
        Column("after_mean_ms", pl.Float64()),
        *SEGMENT_TEST_COLUMNS,
        Column("confidence", pl.Float64(), "1 - p (1 - adjusted p for the unannounced analysis)"),
        Column("fdr_method", pl.String(), "false discovery control applied, if any"),
        Column(
            "added_load_ms_per_s", pl.Float64(), "(after - before mean) x calls/s after: execution time added"
        ),
        Column(
            "recovered_at",
            UTC_TS,
            "deploy analysis: a later change point after which latency is back within the threshold",
        ),
        Column("latest_mean_ms", pl.Float64(), "deploy analysis: mean after the window's last change point"),
        Column(
            "work_changed",
            pl.Boolean(),
            "some per-call work measure changed at the change point by the resource thresholds (ratio and "
            "floor); null when not computed (not detected, no change point)",
        ),
        Column(
            "work_evidence",
            pl.String(),
            "per-call work before vs after the change point ('shared blocks per call ×74, rows unchanged')",
        ),
        Column(
            "kind",
            pl.String(),
            "plan_or_work | contention | both (jobs.detect.contention); null for rows never detected",
        ),
        Column(
            "instance_slowdown_ratio",
            pl.Float64(),
            "median latency ratio (after/before) of the instance's other queries then; null: no episode",
        ),
        Column(
            "slowdown_excess", pl.Float64(), "this query's latency ratio / the common ratio of the others"
        ),
        Column(
            "other_deploys",
            pl.String(),
            "deploy analysis: the other candidate causes, deploys within the tolerance at or before the "
            "change ('v1 at 2026-11-29T12:00:00Z, ...'); the row's deploy is the latest of them "
            "(jobs.regressions.attribute_to_deploys)",
        ),
        Column(
            "deploys_after",
            pl.String(),
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
        Column("metric", pl.String(), "temp_blocks | shared_blocks | rows | wal_bytes | plan_ms"),
        Column("unit", pl.String(), "blocks | rows | bytes | ms (per call)"),
        *VERDICT_COLUMNS,
        Column("naive_ratio", pl.Float64(), "stage 0: post / pre mean per call around the deploy"),
        *CHANGE_POINT_COLUMNS,
        Column("before_per_call", pl.Float64(), "mean work per call of the segment before the change point"),
        Column("after_per_call", pl.Float64(), "... and of the segment from it on"),
        Column("ratio", pl.Float64(), "after_per_call / before_per_call (inf when before is 0)"),
        *SEGMENT_TEST_COLUMNS,
        Column("fdr_method", pl.String(), "false discovery control applied, if any"),
        Column("latency_before_ms", pl.Float64(), "mean latency of the same before segment"),
        Column("latency_after_ms", pl.Float64(), "... and of the same after segment"),
        Column("latency_change", pl.Float64(), "latency_after_ms / latency_before_ms - 1"),
        Column("summary", pl.String(), "e.g. 'temp blocks per call ×4.8 at deploy v42, latency +9%'"),
        *RUN_COLUMNS,
    ),
)

INSTANCE_SLOWDOWNS = TableSchema(
    name="instance_slowdowns",
    description="One row per episode: many queries of one instance slowed together at one moment.",
    partition_by=("date",),
    primary_key=("analysis", "deploy_id", "instance", "began_at"),
    columns=(
        Column("instance", pl.String()),
        Column("analysis", pl.String(), "deploy | unannounced: which analysis' moment was tested"),
        Column("deploy_id", pl.String(), "the deploy at which the instance slowed (null: unannounced)"),
        Column("deploy_version", pl.String()),
        Column(
            "began_at", UTC_TS, "the moment tested: the deploy, or the median change time of the findings"
        ),
        Column("queries", pl.Int64(), "how many series slowed together (ratio >= 1 + shift threshold)"),
        Column("series_compared", pl.Int64(), "series of the instance with enough samples on both sides"),
        Column("queryids", pl.String(), "queryids of the slowed series, comma separated, sorted"),
        Column("fingerprints", pl.String(), "fingerprints of the slowed series, comma separated, sorted"),
        Column(
            "median_ratio", pl.Float64(), "median latency ratio (after/before) over every series compared"
        ),
        Column("max_ratio", pl.Float64()),
        Column(
            "work_unchanged",
            pl.Boolean(),
            "no finding of the episode changed its work per call (null: work not measured)",
        ),
        Column("findings_suppressed", pl.Int64(), "detected findings reported as this episode instead"),
        Column("calls_per_s_before", pl.Float64(), "calls per second of the compared series, summed"),
        Column("calls_per_s_after", pl.Float64()),
        Column("summary", pl.String()),
        *RUN_COLUMNS,
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Plan capture, plan snapshots and plan diffs (issue 4: jobs/plans/, jobs/plandiff.py)

PLAN_SNAPSHOTS = TableSchema(
    name="plan_snapshots",
    description=(
        "One row each time a query's plan shape (per source) differs from the last stored one, or its "
        "estimated cost moved by [plans] cost_change_ratio on the same shape; the latest rows holding the "
        "last 5 distinct shapes per (instance, queryid, source) are kept (jobs.plans.history)."
    ),
    primary_key=("instance", "queryid", "source", "captured_at", "shape_hash"),
    columns=(
        Column("captured_at", UTC_TS, "capture cycle time, or the log timestamp for auto_explain"),
        Column("queryid", pl.Int64(), "pg_stat_statements queryid (auto_explain: Query Identifier)"),
        Column("dbid", pl.Int64(), "null for auto_explain (the log names the database)"),
        Column("dbname", pl.String()),
        Column("userid", pl.Int64()),
        Column("source", pl.String(), "pg_store_plans | generic_explain | auto_explain"),
        Column("is_generic", pl.Boolean(), "true for EXPLAIN GENERIC_PLAN: an estimate, not what ran"),
        Column("shape_hash", pl.String(), "node types, relations, indexes, join order; no costs/constants"),
        Column("root_node", pl.String()),
        Column("total_cost", pl.Float64(), "root Total Cost (planner estimate)"),
        Column("plan_rows", pl.Float64(), "root Plan Rows (estimate)"),
        Column("actual_rows", pl.Float64(), "root Actual Rows (auto_explain with log_analyze)"),
        Column("actual_total_time_ms", pl.Float64(), "root Actual Total Time (needs log_timing)"),
        Column("duration_ms", pl.Float64(), "auto_explain duration of the statement"),
        Column("node_types", pl.List(pl.String()), "distinct node types, sorted"),
        Column("relations", pl.List(pl.String()), "distinct relation names, sorted"),
        Column("indexes", pl.List(pl.String()), "distinct index names, sorted"),
        Column("planid", pl.Int64(), "pg_store_plans planid"),
        Column("query_parameters", pl.String(), "auto_explain Query Parameters, when logged"),
        Column("log_file", pl.String(), "auto_explain: the jsonlog file the record came from"),
        Column("plan_json", pl.String(), "the plan node tree as JSON (root node object)"),
    ),
)

PLAN_CAPTURE_LOG = TableSchema(
    name="plan_capture_log",
    description="One row per candidate query per plan source tried per capture cycle: what it said and why.",
    primary_key=("instance", "captured_at", "dbid", "queryid", "source"),
    columns=(
        Column("captured_at", UTC_TS),
        Column("queryid", pl.Int64()),
        Column("dbid", pl.Int64()),
        Column("source", pl.String(), "pg_store_plans | generic_explain"),
        Column("status", pl.String(), "captured | failed | refused | unsupported | untrusted | no_plan"),
        Column("reason", pl.String(), "why not captured (the check that failed, or the server's error)"),
        Column("shape_hash", pl.String()),
        Column("elapsed_ms", pl.Float64()),
    ),
)

PLAN_DIFFS = TableSchema(
    name="plan_diffs",
    description="One row per detected regression: the plan before vs after detected_change_at.",
    partition_by=("date",),
    primary_key=("instance", "series", "detected_change_at"),
    columns=(
        Column("instance", pl.String()),
        Column("queryid", pl.Int64()),
        Column("fingerprint", pl.String()),
        Column("series", pl.String(), "the regression's series (jobs.detect.identity)"),
        Column("dbid", pl.Int64()),
        Column("database", pl.String()),
        Column("detected_change_at", UTC_TS),
        Column(
            "diff_status",
            pl.String(),
            "changed | cost_changed (same shape) | unchanged | no_before | no_new_shape | no_plans"
            " | no_change_time",
        ),
        Column("before_captured_at", UTC_TS),
        Column("after_captured_at", UTC_TS),
        Column("before_source", pl.String()),
        Column("after_source", pl.String()),
        Column("before_shape_hash", pl.String()),
        Column("after_shape_hash", pl.String()),
        Column("plan_diff_summary", pl.String(), "short human summary"),
        Column("plan_diff", pl.String(), "structured diff as JSON"),
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
        Column("finding_id", pl.String(), "stable hash of (instance, series, onset)"),
        *RUN_COLUMNS,
        Column("status", pl.String(), "open | recovered | superseded"),
        Column("instance", pl.String()),
        Column("series", pl.String(), "the series key after the instance (jobs.regressions.SERIES_KEY)"),
        Column("database", pl.String(), "datname when known"),
        Column("fingerprint", pl.String()),
        Column("queryid", pl.Int64(), "the queryid of the query that most recently received a sample"),
        Column("queryids", pl.String()),
        Column("query", pl.String()),
        Column("onset", UTC_TS, "the change time when the finding opened; identity, never updated"),
        Column("detected_change_at", UTC_TS, "the latest run's change time (within the onset tolerance)"),
        Column("analysis", pl.String(), "deploy | unannounced: the analysis the finding is attributed to"),
        Column("deploy_id", pl.String(), "the deploy blamed (latest at or before the change); null: none"),
        Column("deploy_version", pl.String()),
        Column("deployed_at", UTC_TS),
        Column("other_deploys", pl.String(), "other candidate deploys: within the tolerance, at or before"),
        Column("deploys_after", pl.String(), "deploys within the tolerance after the change (not causes)"),
        Column("before_mean_ms", pl.Float64(), "latest level before the step"),
        Column("after_mean_ms", pl.Float64(), "latest level after the step"),
        Column(
            "latest_mean_ms",
            pl.Float64(),
            "the level now: the deploy analysis' mean after the window's last change point, or the median "
            "interval latency since the series came back (recovery re-check)",
        ),
        Column("p_value", pl.Float64(), "Welch's p (the adjusted p for an unannounced finding)"),
        Column("added_load_ms_per_s", pl.Float64()),
        Column("kind", pl.String(), "plan_or_work | both (jobs.detect.contention)"),
        Column("instance_slowdown_ratio", pl.Float64(), "kind both: the instance's common slowdown"),
        Column("slowdown_excess", pl.Float64(), "kind both: this query's ratio / the common one"),
        Column("work_evidence", pl.String()),
        Column("plan_diff_summary", pl.String()),
        Column("recovered_at", UTC_TS, "when the series returned to its old level (status recovered)"),
        Column("superseded_by", pl.String(), "finding_id that replaced this one (status superseded)"),
        Column("opened_at", UTC_TS, "computed_at of the run that opened the finding"),
        Column("change", pl.String(), "what this row records: opened | updated | recovered | superseded"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Alerts (jobs/alerts.py)

ALERTS_SENT = TableSchema(
    name="alerts_sent",
    description="One row per alert a sink accepted (per sink since issue 10): what was sent, when, where; a "
    "sink is never sent an alert it accepted. At most one per (finding_id, state, sink): one first alert and "
    "one update per finding. Rows without `sink` (before issue 10) were accepted by every sink of their run.",
    partition_by=("date",),
    primary_key=("alert_id", "sink"),
    columns=(
        Column("alert_id", pl.String(), "hash of (finding_id, state)"),
        Column("sent_at", UTC_TS),
        Column("instance", pl.String()),
        Column("queryid", pl.Int64()),
        Column(
            "sinks",
            pl.String(),
            "the sink as shown, e.g. 'slack https://hooks.slack.com' (a webhook shows only its scheme and "
            "host; before issue 10: every sink of the run, comma-separated)",
        ),
        Column("finding_id", pl.String(), "the finding alerted (findings.finding_id)"),
        Column("state", pl.String(), "open (the first alert) | recovered | superseded (the one update)"),
        Column("sink", pl.String(), "file | slack | webhook: the sink that accepted it (null: every sink)"),
        Column("attempts", pl.Int64(), "attempts this run took (retries included)"),
    ),
)

ALERT_DEAD_LETTERS = TableSchema(
    name="alert_dead_letters",
    description="One row per alert a sink refused for good (a 4xx other than 429) or that ran out of "
    "attempts: the alert is not sent to that sink again (`radar alerts --retry-dead-letters` does).",
    partition_by=("date",),
    primary_key=("alert_id", "sink", "dead_lettered_at"),
    columns=(
        Column("alert_id", pl.String(), "hash of (finding_id, state)"),
        Column("dead_lettered_at", UTC_TS),
        Column("sink", pl.String(), "file | slack | webhook"),
        Column("sink_name", pl.String(), "the sink as shown (a webhook: only its scheme and host)"),
        Column("finding_id", pl.String()),
        Column("state", pl.String(), "open | recovered | superseded"),
        Column("instance", pl.String()),
        Column("queryid", pl.Int64()),
        Column("attempts", pl.Int64(), "attempts made before giving up"),
        Column("last_status", pl.Int64(), "the last HTTP status; null: no answer (network error, timeout)"),
        Column("reason", pl.String(), "why, e.g. 'permanent failure: HTTP 400 no_text' (never the URL)"),
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
        Column("baseline_id", pl.String(), "stable hash of (instance, fingerprint, window, label)"),
        Column("instance", pl.String(), "null = every instance of the fleet"),
        Column("fingerprint", pl.String(), "null = every query"),
        Column("window_start", UTC_TS, "samples with interval_end > window_start..."),
        Column("window_end", UTC_TS, "...and <= window_end"),
        Column("label", pl.String()),
        Column("created_at", UTC_TS),
    ),
)

LATENCY_DRIFT = TableSchema(
    name="latency_drift",
    description="One row per (instance, query) per drift run: current window against its baseline.",
    partition_by=("date",),
    primary_key=("current_end", "instance", "series"),
    columns=(
        Column("instance", pl.String()),
        Column("fingerprint", pl.String()),
        Column("series", pl.String(), "the series (jobs.detect.identity)"),
        Column("dbid", pl.Int64()),
        Column("database", pl.String()),
        Column("queryid", pl.Int64(), "the queryid that most recently received a sample"),
        Column("queryids", pl.String(), "every queryid merged into this series, comma separated, sorted"),
        Column("query", pl.String()),
        Column("baseline_source", pl.String(), "anchored | default"),
        Column("baseline_id", pl.String(), "drift_baselines.baseline_id when anchored"),
        Column("baseline_label", pl.String()),
        Column("baseline_start", UTC_TS),
        Column("baseline_end", UTC_TS),
        Column("current_start", UTC_TS),
        Column("current_end", UTC_TS, "the run's as-of time (its date is the partition)"),
        Column("baseline_count", pl.Int64(), "intervals in the baseline window"),
        Column("current_count", pl.Int64(), "intervals in the current window"),
        Column("baseline_calls", pl.Int64()),
        Column("current_calls", pl.Int64()),
        Column("baseline_mean_ms", pl.Float64(), "calls-weighted mean latency"),
        Column("current_mean_ms", pl.Float64()),
        Column("baseline_p50_ms", pl.Float64(), "calls-weighted quantiles of the interval mean latency"),
        Column("baseline_p95_ms", pl.Float64()),
        Column("current_p50_ms", pl.Float64()),
        Column("current_p95_ms", pl.Float64()),
        Column("js", pl.Float64(), "Jensen-Shannon distance, base 2 (0..1)"),
        Column("psi", pl.Float64(), "population stability index, epsilon-smoothed"),
        Column("wasserstein", pl.Float64(), "Wasserstein-1 between the log latency distributions"),
        Column("tail_p_value", pl.Float64(), "exact exceedance test: current intervals above baseline tail"),
        Column("added_load_ms_per_s", pl.Float64(), "(current - baseline mean) x current calls/s"),
        Column("status", pl.String(), "drift | watch | improved | no_drift | insufficient_data"),
        Column("reason", pl.String()),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Per-execution drift (issue 11): auto_explain sampler samples, table statistics, anchored sample baselines

EXECUTION_SAMPLES = TableSchema(
    name="execution_samples",
    description=(
        "One row per statement execution logged by the auto_explain sampler (sample_rate, "
        "log_min_duration = 0, log_analyze with log_timing off, JSON): latency, cost and cardinality."
    ),
    primary_key=("instance", "session_id", "line_num"),
    columns=(
        Column("logged_at", UTC_TS, "the jsonlog record's timestamp (its date is the partition)"),
        Column("session_id", pl.String(), "jsonlog session_id: with line_num, the record's identity"),
        Column("line_num", pl.Int64(), "jsonlog line_num within the session"),
        Column("dbname", pl.String()),
        Column("queryid", pl.Int64(), "Query Identifier (log_verbose) or the record's query_id"),
        Column("fingerprint", pl.String(), "query fingerprint (jobs.detect.identity) of the normalized text"),
        Column("query_hash", pl.String(), "SHA-256 hex of the fingerprint (jobs.drift.scorer.query_hash)"),
        Column("shape_hash", pl.String(), "plan shape (jobs.plans.shape.plan_shape_hash)"),
        Column("latency_ms", pl.Float64(), "auto_explain duration of the execution (metric latency)"),
        Column("total_cost", pl.Float64(), "root Total Cost, the planner's estimate (metric cost)"),
        Column("cardinality", pl.Float64(), "worst q-error of the plan's nodes (metric cardinality)"),
        Column("cardinality_node", pl.String(), "node type and relation of that worst node"),
        Column("relations", pl.List(pl.String()), "distinct relation names of the plan, sorted"),
        Column("log_file", pl.String(), "the jsonlog file the record came from"),
    ),
)

TABLE_STATS_SNAPSHOTS = TableSchema(
    name="table_stats_snapshots",
    description="pg_stat_user_tables with each snapshot: when each table was last analysed, and churn since.",
    primary_key=("instance", "captured_at", "dbname", "relid"),
    columns=(
        Column("captured_at", UTC_TS, "the snapshot's time (its date is the partition)"),
        Column("dbname", pl.String()),
        Column("relid", pl.Int64()),
        Column("schemaname", pl.String()),
        Column("relname", pl.String()),
        Column("n_live_tup", pl.Int64()),
        Column("n_mod_since_analyze", pl.Int64()),
        Column("last_analyze", UTC_TS),
        Column("last_autoanalyze", UTC_TS),
        Column("analyze_count", pl.Int64()),
        Column("autoanalyze_count", pl.Int64()),
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
        Column("baseline_version", pl.String(), "non-empty label, e.g. 'v812' or '2026-12-01T10:00Z'"),
        Column("instance", pl.String()),
        Column("query_hash", pl.String()),
        Column("metric", pl.String(), "cost | latency | cardinality"),
        Column("fingerprint", pl.String()),
        Column("queryid", pl.Int64(), "the queryid seen most often in the window"),
        Column("window_start", UTC_TS, "execution samples with logged_at > window_start..."),
        Column("window_end", UTC_TS, "...and <= window_end"),
        Column("n_window", pl.Int64(), "samples in the window"),
        Column("samples", pl.List(pl.Float64()), "the kept samples (at most max_baseline_samples, seeded)"),
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
        Column("instance", pl.String()),
        Column("query_hash", pl.String()),
        Column("metric", pl.String(), "cost | latency | cardinality"),
        Column("fingerprint", pl.String()),
        Column("queryid", pl.Int64()),
        Column("baseline_version", pl.String()),
        Column("window_start", UTC_TS, "candidate: samples logged in (window_start, window_end]"),
        Column("window_end", UTC_TS),
        Column("shard", pl.Int64(), "int(query_hash[-8:], 16) % shard_count"),
        Column("n_baseline", pl.Int64()),
        Column("n_candidate", pl.Int64()),
        Column("js", pl.Float64(), "Jensen-Shannon divergence, base 2, in [0, 1]: the drift score"),
        Column("psi", pl.Float64(), "population stability index (natural log; p = candidate)"),
        Column("wasserstein", pl.Float64(), "W1 of the raw samples in the metric's unit (metadata)"),
        Column("flag", pl.String(), "PASS | WARN | BLOCK"),
        Column("reason", pl.String(), "insufficient_samples | js_block | psi_block | ... | within_bands"),
        Column("psi_data_quality", pl.Boolean(), "PSI > psi_data_quality: the flag fell back to JS"),
        Column("profile", pl.String(), "calibrated | design"),
        Column("js_noise", pl.Float64(), "calibrated: the pair's null quantile of JS"),
        Column("psi_noise", pl.Float64(), "calibrated: the pair's null quantile of PSI"),
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
        Column("source", pl.String(), "the scenario file or builtin suite"),
        Column("baseline", pl.String(), "baseline DSN, password redacted"),
        Column("candidate", pl.String(), "candidate DSN, password redacted"),
        Column("baseline_version", pl.Int64(), "server_version_num"),
        Column("candidate_version", pl.Int64(), "server_version_num"),
        Column("run_verdict", pl.String(), "PASS | WARN | BLOCK | INCONCLUSIVE"),
        Column("scenario", pl.String()),
        Column("scenario_verdict", pl.String(), "PASS | WARN | BLOCK | INCONCLUSIVE | NOT_RUN"),
        Column("measurement", pl.String(), "wallclock | wallclock_mean | memory | rss | temp_blocks | ..."),
        Column("unit", pl.String(), "ms | bytes | blocks"),
        Column("baseline_value", pl.Float64(), "the baseline's aggregate (per execution)"),
        Column("candidate_value", pl.Float64(), "the candidate's aggregate (per execution)"),
        Column("threshold", pl.Float64(), "relative threshold t (strong regression at 2t)"),
        Column("ratio", pl.Float64(), "candidate / baseline, corrected by the asymmetry when applied"),
        Column("ci_low", pl.Float64()),
        Column("ci_high", pl.Float64()),
        Column("raw_ratio", pl.Float64(), "the selected cycle's ratio before any correction"),
        Column("kind", pl.String(), "regression | strong_regression | improvement | unchanged"),
        Column("verdict", pl.String(), "PASS | WARN | BLOCK"),
        Column("cycles", pl.Int64()),
        Column("regressed_cycles", pl.Int64()),
        Column("measurements_baseline", pl.Int64(), "measurements of the selected cycle"),
        Column("measurements_candidate", pl.Int64()),
        Column("stopped_by_baseline", pl.String(), "the termination rule that stopped the target"),
        Column("stopped_by_candidate", pl.String()),
        Column("calibration_mode", pl.String(), "off | probe | aa"),
        Column("correction", pl.String(), "what the calibration changed, in words"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Incremental runs: state kept in the lake (jobs/samples.py append mode, jobs/detect/scope.py)

SAMPLE_FRONTIER = TableSchema(
    name="sample_frontier",
    description=(
        "Per instance: the latest snapshot row of every entry already differenced (the predecessor of its "
        "next sample) and the samples watermark; one file per instance, replaced by each append run."
    ),
    partition_by=("instance",),
    primary_key=("instance", "userid", "dbid", "queryid", "toplevel"),
    columns=(
        Column("userid", pl.Int64()),
        Column("dbid", pl.Int64()),
        Column("toplevel", pl.Boolean()),
        Column("queryid", pl.Int64()),
        Column("captured_at", UTC_TS, "the entry's latest differenced snapshot (server clock)"),
        Column("collector_clock", UTC_TS),
        Column("system_identifier", pl.Int64()),
        Column("postmaster_start", UTC_TS),
        Column("stats_reset", UTC_TS),
        Column("stats_since", UTC_TS),
        *(
            Column(c, pl.Float64() if c in _FLOAT_COUNTERS else pl.Int64(), "cumulative")
            for c in SAMPLE_DELTAS
        ),
        Column("dealloc", pl.Int64(), "snapshot_runs.dealloc of that snapshot"),
        Column(
            "watermark_taken",
            UTC_TS,
            "the instance's latest differenced snapshot (collector clock, else server clock), on every row",
        ),
        Column(
            "watermark_captured_at", UTC_TS, "server clock of that snapshot; snapshot files after it are new"
        ),
        Column(
            "config_digest",
            pl.String(),
            "hash of the sample settings the instance's samples were built with (jobs.samples."
            "sample_config_digest); an append under other settings rebuilds the instance (null before "
            "issue 10)",
        ),
    ),
)

COLLECTION_HEALTH = TableSchema(
    name="collection_health",
    description=(
        "Written by the samples job beside query_samples: per instance, day (of the interval end) and "
        "reason, how many entry intervals became samples (reason 'sampled') or were dropped "
        "(jobs.samples.DROP_REASONS). Rebuilds replace a day's files, appends add files of the new "
        "intervals only: sum over files (the DuckDB view collection_health_daily does)."
    ),
    primary_key=("instance", "day", "reason"),
    columns=(
        Column("day", pl.Date(), "UTC date of the intervals' end (the partition date)"),
        Column("reason", pl.String(), "sampled | server_replaced | server_restarted | stats_reset | ..."),
        Column("intervals", pl.Int64(), "entry intervals (one per statement entry between two snapshots)"),
        Column("snapshots", pl.Int64(), "snapshot intervals with at least one such entry interval"),
        Column("first_interval_end", UTC_TS),
        Column("last_interval_end", UTC_TS),
    ),
)

ANALYSIS_RUNS = TableSchema(
    name="analysis_runs",
    description="One row per (detection run, instance): the query_samples watermark the run analysed up to.",
    partition_by=("date",),
    primary_key=("run_id", "instance"),
    columns=(
        Column("run_id", pl.String(), "computed_at formatted %Y%m%dT%H%M%S%fZ"),
        Column("computed_at", UTC_TS, "the run's time (its date is the partition)"),
        Column("instance", pl.String()),
        Column("samples_watermark", UTC_TS, "latest query_samples interval_end of the instance the run saw"),
        Column("mode", pl.String(), "full | incremental"),
        Column("deploys_examined", pl.Int64(), "deploys of the instance whose window the run re-examined"),
        Column("series_examined", pl.Int64(), "series of the instance the unannounced analysis searched"),
        Column(
            "config_digest",
            pl.String(),
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
        Column("deploy_id", pl.String()),
        Column("run_id", pl.String()),
        Column("computed_at", UTC_TS, "the run's time (its date is the partition)"),
        Column(
            "shard",
            pl.String(),
            "the shard whose pass saw it (`shard-k of n`); null: a whole-fleet run (seen on every instance)",
        ),
    ),
)

FDR_CANDIDATES = TableSchema(
    name="fdr_candidates",
    description="The p-values of one shard pass's unannounced candidate steps (the first phase of a sharded "
    "detection, jobs.detect.sharded): each shard's verdicts adjust its own among every shard's latest.",
    partition_by=("shard",),
    primary_key=("run_id", "family", "position"),
    columns=(
        Column("run_id", pl.String(), "the pass's time formatted %Y%m%dT%H%M%S%fZ"),
        Column("computed_at", UTC_TS, "the pass's time"),
        Column("shard_count", pl.Int64(), "the shard count the fleet was split with"),
        Column("family", pl.String(), "latency | resource: each adjusted among its own family"),
        Column("position", pl.Int64(), "the candidate's position in its family (a key only)"),
        Column("p_value", pl.Float64(), "Welch p-value of the candidate step"),
    ),
)

CHANGEPOINT_MEMO = TableSchema(
    name="changepoint_memo",
    description="The change points one shard pass's phase 1 found (jobs.detect.changepoint_memo), keyed by "
    "a digest of the searched series: its phase 2 reuses them instead of searching the same series again.",
    partition_by=("shard",),
    primary_key=("run_id", "key", "series"),
    columns=(
        Column("run_id", pl.String(), "the phase 1 pass (the same as its fdr_candidates file)"),
        Column("key", pl.String(), "SHA-256 of the searched values, series lengths and settings"),
        Column("series", pl.Int64(), "the series' position in the call"),
        Column("cuts", pl.List(pl.Int64()), "first index of each new regime, sorted"),
        Column("p_values", pl.List(pl.Float64()), "each change point's p-value, in the search's order"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Catalogue: every table above, by name. Add new tables above this line and to this tuple.

TABLES: dict[str, TableSchema] = {
    t.name: t
    for t in (
        STATEMENT_SNAPSHOTS,
        SNAPSHOT_RUNS,
        QUERY_TEXTS,
        QUERY_SAMPLES,
        DEPLOY_EVENTS,
        PERFORMANCE_REGRESSIONS,
        RESOURCE_REGRESSIONS,
        INSTANCE_SLOWDOWNS,
        PLAN_SNAPSHOTS,
        PLAN_CAPTURE_LOG,
        PLAN_DIFFS,
        FINDING_STATES,
        ALERTS_SENT,
        ALERT_DEAD_LETTERS,
        DRIFT_BASELINES,
        LATENCY_DRIFT,
        EXECUTION_SAMPLES,
        TABLE_STATS_SNAPSHOTS,
        DRIFT_SAMPLE_BASELINES,
        EXECUTION_DRIFT,
        GATE_RESULTS,
        SAMPLE_FRONTIER,
        COLLECTION_HEALTH,
        ANALYSIS_RUNS,
        ANALYSED_DEPLOYS,
        FDR_CANDIDATES,
        CHANGEPOINT_MEMO,
    )
}
