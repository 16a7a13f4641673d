"""Plan capture (pg_store_plans, EXPLAIN GENERIC_PLAN, auto_explain logs) and plan snapshots in the lake.

The names below load on first use (PEP 562), so importing ``jobs.plans.config`` (the thresholds, read by the
config file loader and the CLI) does not import psycopg and polars.
"""

from __future__ import annotations

from jobs.lazy import lazy_exports

_EXPORTS = {
    "AutoExplainConfig": "jobs.plans.config",
    "IngestResult": "jobs.plans.auto_explain",
    "ingest_auto_explain_logs": "jobs.plans.auto_explain",
    "PlanCaptureConfig": "jobs.plans.config",
    "PlanCaptureResult": "jobs.plans.capture",
    "capture_plans": "jobs.plans.capture",
    "select_plan_candidates": "jobs.plans.capture",
    "write_plan_snapshots": "jobs.plans.capture",
    "bound_plan_history": "jobs.plans.history",
    "new_shape_rows": "jobs.plans.history",
    "plan_facts": "jobs.plans.shape",
    "plan_root": "jobs.plans.shape",
    "plan_shape_hash": "jobs.plans.shape",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
