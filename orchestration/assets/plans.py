"""plan_snapshots: plans for the latest snapshot's top queries (on the snapshot schedule when enabled)."""

import dagster as dg

from jobs.collect.cycle import CycleConfig, capture_fleet_plans, latest_snapshot_times
from orchestration.resources import FleetResource, LakeResource, PlanCaptureResource


@dg.asset(
    deps=["statement_snapshots"],
    group_name="collect",
    kinds={"postgres", "parquet"},
    description="Plans of each instance's top queries by total time at its latest snapshot "
    "(pg_store_plans when trusted, else EXPLAIN GENERIC_PLAN), plus new auto_explain records.",
)
def plan_snapshots(
    context: dg.AssetExecutionContext, fleet: FleetResource, lake: LakeResource, plans: PlanCaptureResource
) -> dg.MaterializeResult:
    config = CycleConfig(
        capture_plans=True,
        ingest_auto_explain=plans.ingest_auto_explain,
        plans=plans.config,
    )
    result = capture_fleet_plans(fleet.load(), lake.path, latest_snapshot_times(lake.path), config)
    for error in result.plan_errors.values():
        context.log.warning(error)
    return dg.MaterializeResult(
        metadata={
            "plans_captured": sum(result.plans_captured.values()),
            "auto_explain_records": sum(result.auto_explain_records.values()),
            "instances_failed": len(result.plan_errors),
            "errors": "; ".join(result.plan_errors.values()) or "none",
        }
    )
