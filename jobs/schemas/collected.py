"""Tables the collector and the samples job write: snapshots, texts, samples, plans, table stats, deploys."""

from __future__ import annotations

from jobs.schemas import dtypes as dt
from jobs.schemas.table import UTC_TS, Column, TableSchema

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
        Column(
            "collector_boot",
            dt.Int64(),
            "the collector host's boot (Linux boot_id, first 64 bits): uptimes of one boot compare",
        ),
        Column(
            "collector_uptime_s",
            dt.Float64(),
            "the collector host's CLOCK_BOOTTIME (never stepped) at that midpoint (clock-step check)",
        ),
        Column("system_identifier", dt.Int64(), "pg_control_system().system_identifier"),
        Column("postmaster_start", UTC_TS, "pg_postmaster_start_time(): a restart starts a new incarnation"),
        Column("stats_reset", UTC_TS, "pg_stat_statements_info.stats_reset [14+]"),
        Column("userid", dt.Int64()),
        Column("dbid", dt.Int64()),
        Column("toplevel", dt.Boolean(), "false for nested statements under track = all [14+]"),
        Column("queryid", dt.Int64(), "signed int64; null for rows hidden by missing privilege"),
        *(Column(c, dt.Float64() if c in _FLOAT_COUNTERS else dt.Int64()) for c in STATEMENT_COUNTERS),
        Column("min_exec_time", dt.Float64(), "over the entry's life (or since minmax_stats_since)"),
        Column("max_exec_time", dt.Float64()),
        Column("mean_exec_time", dt.Float64(), "over the entry's life, not the interval"),
        Column("stddev_exec_time", dt.Float64()),
        Column(
            "stats_since", UTC_TS, "entry creation [17+]: a change means the entry was evicted and re-made"
        ),
        Column("minmax_stats_since", UTC_TS, "[17+]"),
    ),
)

ACTIVITY_SNAPSHOTS = TableSchema(
    name="activity_snapshots",
    description="One row per instance per snapshot: its sessions (pg_stat_activity), the instance's load.",
    primary_key=("instance", "captured_at"),
    columns=(
        Column(
            "captured_at", UTC_TS, "the snapshot's captured_at (joins statement_snapshots, snapshot_runs)"
        ),
        Column("backends", dt.Int64(), "client backends, the radar's own session left out"),
        Column("active", dt.Int64(), "of them, running a statement (state 'active')"),
        Column("active_on_cpu", dt.Int64(), "active with no wait event: on a CPU or waiting for one"),
        Column("waiting_lock", dt.Int64(), "active, waiting on a heavyweight lock (wait_event_type Lock)"),
        Column("waiting_lwlock", dt.Int64(), "active, waiting on an LWLock"),
        Column("waiting_io", dt.Int64(), "active, waiting on IO"),
        Column("waiting_other", dt.Int64(), "active, waiting on any other wait event type"),
        Column("parallel_workers", dt.Int64(), "parallel workers running for some statement"),
        Column("oldest_active_s", dt.Float64(), "age of the oldest running client statement (s; null: none)"),
        Column("cores", dt.Int32(), "the instance's CPUs from the fleet file (null: not given)"),
        Column("host", dt.String(), "the fleet file's host: instances of one host share its CPUs"),
    ),
)

ACTIVITY_QUERIES = TableSchema(
    name="activity_queries",
    description=(
        "Per snapshot, statements running at that moment grouped by statement (pg_stat_activity, PostgreSQL "
        "14+): groups of two or more backends or one running a second or more, at most 50; what the live "
        "pile-up check reads"
    ),
    primary_key=("instance", "captured_at", "dbid", "userid", "fingerprint"),
    columns=(
        Column("captured_at", UTC_TS, "the snapshot's captured_at"),
        Column("dbid", dt.Int64()),
        Column("userid", dt.Int64()),
        Column(
            "fingerprint",
            dt.String(),
            "the statement's text fingerprint (jobs.query.identity): the group's key, since a statement "
            "queued on a lock taken during parse analysis has no query_id yet",
        ),
        Column("queryid", dt.Int64(), "pg_stat_activity.query_id of its backends (null: none had one)"),
        Column("query", dt.String(), "the statement's normalized text (no literal value)"),
        Column("backends", dt.Int64(), "client backends running it (state active)"),
        Column("waiting_lock", dt.Int64(), "of them, waiting on a heavyweight lock"),
        Column("longest_s", dt.Float64(), "how long the longest of them has been running (s)"),
        Column("median_s", dt.Float64(), "the median time they have been running (s)"),
        Column("wait_event", dt.String(), "their most common wait event (type:event; CPU: none)"),
        Column("blocker_pid", dt.Int64(), "the pid blocking most waiters (null: none waits on a lock)"),
        Column("blocker_state", dt.String(), "that backend's state (e.g. 'idle in transaction')"),
        Column("blocker_queryid", dt.Int64(), "its query id (its last statement's when idle)"),
        Column("blocker_query", dt.String(), "its (last) statement's normalized text"),
        Column("blocker_xact_s", dt.Float64(), "how long its transaction has been open (s)"),
    ),
)

SNAPSHOT_RUNS = TableSchema(
    name="snapshot_runs",
    description="One row per instance per snapshot attempt, including failures: identity, info and counts.",
    primary_key=("instance", "captured_at"),
    columns=(
        Column("captured_at", UTC_TS, "server clock, or the collector's clock when the instance failed"),
        Column("collector_clock", UTC_TS, "the collector's clock at the midpoint of the server-clock read"),
        Column("status", dt.String(), "ok | failed"),
        Column("error", dt.String(), "why the snapshot failed (no secrets)"),
        Column("failed_phase", dt.String(), "connect | identity | statements | texts | write (failed rows)"),
        Column("health", dt.String(), "ok | degraded (read, but the server records less than it should)"),
        Column("warnings", dt.String(), "why the instance is degraded, '; '-separated"),
        Column("system_identifier", dt.Int64()),
        Column("postmaster_start", UTC_TS),
        Column("server_version_num", dt.Int64()),
        Column("extension_version", dt.String(), "pg_stat_statements extversion"),
        Column("compute_query_id", dt.String()),
        Column("track", dt.String(), "pg_stat_statements.track"),
        Column("track_planning", dt.String()),
        Column("track_io_timing", dt.String()),
        Column("pgss_max", dt.Int64(), "pg_stat_statements.max"),
        Column("dealloc", dt.Int64(), "pg_stat_statements_info.dealloc [14+]"),
        Column("stats_reset", UTC_TS, "pg_stat_statements_info.stats_reset [14+]"),
        Column("statement_rows", dt.Int64(), "rows written to statement_snapshots"),
        Column("explain_rows_dropped", dt.Int64(), "rows whose text starts with EXPLAIN"),
        Column("own_rows_dropped", dt.Int64(), "rows of the collector's own statements (marker in the text)"),
        Column(
            "own_explain_rows_dropped",
            dt.Int64(),
            "of those, the plan capture's own EXPLAINs (marker and EXPLAIN; null before issue 29)",
        ),
        Column("insufficient_privilege_rows", dt.Int64(), "rows hidden from this role (NULL queryid)"),
        Column("new_texts", dt.Int64(), "texts fetched this time (only for unseen queryids)"),
        Column("server_ms", dt.Float64(), "time spent in the server's snapshot queries"),
    ),
)

QUERY_TEXTS = TableSchema(
    name="query_texts",
    description="Normalized query text, written once per (instance, queryid) when first seen.",
    primary_key=("instance", "queryid"),
    columns=(
        Column("captured_at", UTC_TS),
        Column("queryid", dt.Int64()),
        Column("dbid", dt.Int64()),
        Column("userid", dt.Int64()),
        Column("datname", dt.String(), "name of the database dbid (pg_database) when the text was read"),
        Column("query", dt.String()),
        Column("is_explain", dt.Boolean(), "text starts with EXPLAIN: its statement rows are dropped"),
        Column("is_radar", dt.Boolean(), "the radar's own statement (marker in the text): rows dropped"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Interval samples and deploy events (issue 3: jobs/detect/samples.py, jobs/collect/deploys.py)

# The counters differenced into samples: every cumulative counter up to WAL (not JIT or parallel workers).
SAMPLE_DELTAS: tuple[str, ...] = STATEMENT_COUNTERS[: STATEMENT_COUNTERS.index("wal_bytes") + 1]

QUERY_SAMPLES = TableSchema(
    name="query_samples",
    description="One row per statement entry per valid interval between two snapshots: counter deltas.",
    primary_key=("instance", "interval_end", "userid", "dbid", "queryid", "toplevel"),
    columns=(
        Column("interval_start", UTC_TS, "captured_at of the earlier snapshot"),
        Column("interval_end", UTC_TS, "captured_at of the later snapshot (its date is the partition)"),
        Column("interval_seconds", dt.Float64()),
        Column("userid", dt.Int64()),
        Column("dbid", dt.Int64()),
        Column("toplevel", dt.Boolean()),
        Column("queryid", dt.Int64()),
        *(Column(c, dt.Float64() if c in _FLOAT_COUNTERS else dt.Int64(), "delta") for c in SAMPLE_DELTAS),
        Column("mean_exec_time", dt.Float64(), "interval mean latency (ms) = Δtotal_exec_time / Δcalls"),
        Column("mean_plan_time", dt.Float64(), "Δtotal_plan_time / Δplans; null when planning not tracked"),
        Column("evictions", dt.Int64(), "growth of pg_stat_statements_info.dealloc during the interval"),
    ),
)

DEPLOY_EVENTS = TableSchema(
    name="deploy_events",
    description="Deploy markers: one row per deploy, for one instance or the whole fleet (instance null).",
    partition_by=("date",),
    primary_key=("deploy_id",),
    columns=(
        Column("deploy_id", dt.String(), "stable hash of (scope, instance, version, deployed_at)"),
        Column("version", dt.String()),
        Column("scope", dt.String(), "instance | fleet"),
        Column("instance", dt.String(), "null when scope = fleet"),
        Column("deployed_at", UTC_TS),
        Column("source", dt.String(), "cli, or the inbox file name it came from"),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Plan capture, plan snapshots and plan diffs (issue 4: jobs/plans/, jobs/plans/diff.py)

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
        Column("queryid", dt.Int64(), "pg_stat_statements queryid (auto_explain: Query Identifier)"),
        Column("dbid", dt.Int64(), "null for auto_explain (the log names the database)"),
        Column("dbname", dt.String()),
        Column("userid", dt.Int64()),
        Column("source", dt.String(), "pg_store_plans | generic_explain | auto_explain"),
        Column("is_generic", dt.Boolean(), "true for EXPLAIN GENERIC_PLAN: an estimate, not what ran"),
        Column("shape_hash", dt.String(), "node types, relations, indexes, join order; no costs/constants"),
        Column("root_node", dt.String()),
        Column("total_cost", dt.Float64(), "root Total Cost (planner estimate)"),
        Column("plan_rows", dt.Float64(), "root Plan Rows (estimate)"),
        Column("actual_rows", dt.Float64(), "root Actual Rows (auto_explain with log_analyze)"),
        Column("actual_total_time_ms", dt.Float64(), "root Actual Total Time (needs log_timing)"),
        Column("duration_ms", dt.Float64(), "auto_explain duration of the statement"),
        Column("node_types", dt.List(dt.String()), "distinct node types, sorted"),
        Column("relations", dt.List(dt.String()), "distinct relation names, sorted"),
        Column("indexes", dt.List(dt.String()), "distinct index names, sorted"),
        Column("planid", dt.Int64(), "pg_store_plans planid"),
        Column("query_parameters", dt.String(), "auto_explain Query Parameters, when logged"),
        Column("log_file", dt.String(), "auto_explain: the jsonlog file the record came from"),
        Column("plan_json", dt.String(), "the plan node tree as JSON (root node object)"),
    ),
)

PLAN_CAPTURE_LOG = TableSchema(
    name="plan_capture_log",
    description="One row per candidate query per plan source tried per capture cycle: what it said and why.",
    primary_key=("instance", "captured_at", "dbid", "queryid", "source"),
    columns=(
        Column("captured_at", UTC_TS),
        Column("queryid", dt.Int64()),
        Column("dbid", dt.Int64()),
        Column("source", dt.String(), "pg_store_plans | generic_explain"),
        Column("status", dt.String(), "captured | failed | refused | unsupported | untrusted | no_plan"),
        Column("reason", dt.String(), "why not captured (the check that failed, or the server's error)"),
        Column("shape_hash", dt.String()),
        Column("elapsed_ms", dt.Float64()),
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
        Column("session_id", dt.String(), "jsonlog session_id: with line_num, the record's identity"),
        Column("line_num", dt.Int64(), "jsonlog line_num within the session"),
        Column("dbname", dt.String()),
        Column("queryid", dt.Int64(), "Query Identifier (log_verbose) or the record's query_id"),
        Column("fingerprint", dt.String(), "query fingerprint (jobs.query.identity) of the normalized text"),
        Column("query_hash", dt.String(), "SHA-256 hex of the fingerprint (jobs.drift.scorer.query_hash)"),
        Column("shape_hash", dt.String(), "plan shape (jobs.plans.shape.plan_shape_hash)"),
        Column("latency_ms", dt.Float64(), "auto_explain duration of the execution (metric latency)"),
        Column("total_cost", dt.Float64(), "root Total Cost, the planner's estimate (metric cost)"),
        Column("cardinality", dt.Float64(), "worst q-error of the plan's nodes (metric cardinality)"),
        Column("cardinality_node", dt.String(), "node type and relation of that worst node"),
        Column("relations", dt.List(dt.String()), "distinct relation names of the plan, sorted"),
        Column("log_file", dt.String(), "the jsonlog file the record came from"),
    ),
)

TABLE_STATS_SNAPSHOTS = TableSchema(
    name="table_stats_snapshots",
    description="pg_stat_user_tables with each snapshot: when each table was last analysed, and churn since.",
    primary_key=("instance", "captured_at", "dbname", "relid"),
    columns=(
        Column("captured_at", UTC_TS, "the snapshot's time (its date is the partition)"),
        Column("dbname", dt.String()),
        Column("relid", dt.Int64()),
        Column("schemaname", dt.String()),
        Column("relname", dt.String()),
        Column("n_live_tup", dt.Int64()),
        Column("n_mod_since_analyze", dt.Int64()),
        Column("last_analyze", UTC_TS),
        Column("last_autoanalyze", UTC_TS),
        Column("analyze_count", dt.Int64()),
        Column("autoanalyze_count", dt.Int64()),
    ),
)

# ---------------------------------------------------------------------------------------------------------
# Incremental runs: state kept in the lake (jobs/detect/samples.py append mode, jobs/detect/scope.py)

SAMPLE_FRONTIER = TableSchema(
    name="sample_frontier",
    description=(
        "Per instance: the latest snapshot row of every entry already differenced (the predecessor of its "
        "next sample) and the samples watermark; one file per instance, replaced by each append run."
    ),
    partition_by=("instance",),
    primary_key=("instance", "userid", "dbid", "queryid", "toplevel"),
    columns=(
        Column("userid", dt.Int64()),
        Column("dbid", dt.Int64()),
        Column("toplevel", dt.Boolean()),
        Column("queryid", dt.Int64()),
        Column("captured_at", UTC_TS, "the entry's latest differenced snapshot (server clock)"),
        Column("collector_clock", UTC_TS),
        Column("collector_boot", dt.Int64()),
        Column("collector_uptime_s", dt.Float64()),
        Column("system_identifier", dt.Int64()),
        Column("postmaster_start", UTC_TS),
        Column("stats_reset", UTC_TS),
        Column("stats_since", UTC_TS),
        *(
            Column(c, dt.Float64() if c in _FLOAT_COUNTERS else dt.Int64(), "cumulative")
            for c in SAMPLE_DELTAS
        ),
        Column("dealloc", dt.Int64(), "snapshot_runs.dealloc of that snapshot"),
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
            dt.String(),
            "hash of the sample settings the instance's samples were built with (jobs.detect.samples."
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
        "(jobs.detect.samples.DROP_REASONS). Rebuilds replace a day's files, appends add files of the new "
        "intervals only: sum over files (the DuckDB view collection_health_daily does)."
    ),
    primary_key=("instance", "day", "reason"),
    columns=(
        Column("day", dt.Date(), "UTC date of the intervals' end (the partition date)"),
        Column("reason", dt.String(), "sampled | server_replaced | server_restarted | stats_reset | ..."),
        Column("intervals", dt.Int64(), "entry intervals (one per statement entry between two snapshots)"),
        Column("snapshots", dt.Int64(), "snapshot intervals with at least one such entry interval"),
        Column("first_interval_end", UTC_TS),
        Column("last_interval_end", UTC_TS),
    ),
)
