"""Plan capture (pg_store_plans, EXPLAIN GENERIC_PLAN, auto_explain logs) and plan snapshots in the lake."""

from jobs.plans.auto_explain import AutoExplainConfig, IngestResult, ingest_auto_explain_logs
from jobs.plans.capture import (
    PlanCaptureConfig,
    PlanCaptureResult,
    capture_plans,
    select_plan_candidates,
    write_plan_snapshots,
)
from jobs.plans.history import bound_plan_history, new_shape_rows
from jobs.plans.shape import plan_facts, plan_root, plan_shape_hash

__all__ = [
    "AutoExplainConfig",
    "IngestResult",
    "PlanCaptureConfig",
    "PlanCaptureResult",
    "bound_plan_history",
    "capture_plans",
    "ingest_auto_explain_logs",
    "new_shape_rows",
    "plan_facts",
    "plan_root",
    "plan_shape_hash",
    "select_plan_candidates",
    "write_plan_snapshots",
]
