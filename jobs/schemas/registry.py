"""Every lake table by name (add a new table to its module and to this catalogue)."""

from __future__ import annotations

from jobs.schemas.analysed import (
    ALERT_DEAD_LETTERS,
    ALERTS_SENT,
    ANALYSED_DEPLOYS,
    ANALYSIS_RUNS,
    CHANGEPOINT_MEMO,
    DRIFT_BASELINES,
    DRIFT_SAMPLE_BASELINES,
    EXECUTION_DRIFT,
    FDR_CANDIDATES,
    FINDING_STATES,
    GATE_RESULTS,
    GATE_RUNS,
    INSTANCE_SLOWDOWNS,
    LATENCY_DRIFT,
    PERFORMANCE_REGRESSIONS,
    PLAN_DIFFS,
    PLAN_PINS,
    RESOURCE_REGRESSIONS,
)
from jobs.schemas.collected import (
    ACTIVITY_QUERIES,
    ACTIVITY_SNAPSHOTS,
    COLLECTION_HEALTH,
    DEPLOY_EVENTS,
    EXECUTION_SAMPLES,
    PLAN_CAPTURE_LOG,
    PLAN_SNAPSHOTS,
    QUERY_SAMPLES,
    QUERY_TEXTS,
    SAMPLE_FRONTIER,
    SNAPSHOT_RUNS,
    STATEMENT_SNAPSHOTS,
    TABLE_STATS_SNAPSHOTS,
)
from jobs.schemas.table import TableSchema

# ---------------------------------------------------------------------------------------------------------
# Catalogue: every table of jobs/schemas by name. A new table goes in its module and in this tuple.

TABLES: dict[str, TableSchema] = {
    t.name: t
    for t in (
        STATEMENT_SNAPSHOTS,
        SNAPSHOT_RUNS,
        ACTIVITY_SNAPSHOTS,
        ACTIVITY_QUERIES,
        QUERY_TEXTS,
        QUERY_SAMPLES,
        DEPLOY_EVENTS,
        PERFORMANCE_REGRESSIONS,
        RESOURCE_REGRESSIONS,
        INSTANCE_SLOWDOWNS,
        PLAN_SNAPSHOTS,
        PLAN_CAPTURE_LOG,
        PLAN_DIFFS,
        PLAN_PINS,
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
        GATE_RUNS,
        SAMPLE_FRONTIER,
        COLLECTION_HEALTH,
        ANALYSIS_RUNS,
        ANALYSED_DEPLOYS,
        FDR_CANDIDATES,
        CHANGEPOINT_MEMO,
    )
}
