"""plan_snapshots: plans for the latest snapshot's top queries, and new auto_explain records (part of the
snapshot job; its run config's capture_plans / ingest_auto_explain, off by default, decide)."""

import dagster as dg

from jobs.collect.shards import fleet_of_shards
from jobs.pipeline.collection import capture_fleet_plans, latest_snapshot_times
from orchestration.freshness import COLLECTION_OWNERS, SNAPSHOT_FRESHNESS
from orchestration.partitions import SHARD_COUNT, run_shards, shard_label, shard_partitions
from orchestration.resources import FleetResource, LakeResource
from orchestration.run_config import section_config, settings_from_config

# [plans] of the config file; [plans.diff] belongs to the analysis, not to capture.
PlansRunConfig = section_config("plans", exclude=("diff",))


def build_plan_snapshots(shard_count: int) -> dg.AssetsDefinition:
    """The asset for ``shard_count`` shards (partitioned by shard when above 1)."""

    @dg.asset(
        name="plan_snapshots",
        partitions_def=shard_partitions(shard_count),
        deps=["statement_snapshots"],
        group_name="collect",
        kinds={"postgres", "parquet"},
        owners=COLLECTION_OWNERS,
        freshness_policy=SNAPSHOT_FRESHNESS,
        description="Plans of each instance's top queries by total time at its latest snapshot "
        "(pg_store_plans when trusted, else EXPLAIN GENERIC_PLAN), plus new auto_explain records; "
        "run config capture_plans / ingest_auto_explain switch each (both off by default: nothing is run). "
        "Partitioned by shard as statement_snapshots is (a run reads its shard's instances only).",
    )
    def plan_snapshots(
        context: dg.AssetExecutionContext,
        config: PlansRunConfig,  # type: ignore[valid-type]
        fleet: FleetResource,
        lake: LakeResource,
    ) -> dg.MaterializeResult:
        cycle = settings_from_config("plans", config, "plan_snapshots").cycle_config()
        switches = (("plans", cycle.capture_plans), ("auto_explain", cycle.ingest_auto_explain))
        switched_on = [name for name, on in switches if on]
        if not switched_on:
            context.log.info("plan capture off: capture_plans and ingest_auto_explain are both false")
            nothing = {"capture": "off", "plans_captured": 0, "auto_explain_records": 0}
            return dg.MaterializeResult(metadata=nothing)
        shards = run_shards(context, shard_count)
        run_fleet = fleet_of_shards(fleet.load(), shards, shard_count)
        result = capture_fleet_plans(run_fleet, lake.path, latest_snapshot_times(lake.path), cycle)
        for error in result.plan_errors.values():
            context.log.warning(error)
        return dg.MaterializeResult(
            metadata={
                "shard": shard_label(shards),
                "capture": " + ".join(switched_on),
                "plans_captured": sum(result.plans_captured.values()),
                "auto_explain_records": sum(result.auto_explain_records.values()),
                "instances_failed": len(result.plan_errors),
                "errors": "; ".join(result.plan_errors.values()) or "none",
            }
        )

    return plan_snapshots


plan_snapshots = build_plan_snapshots(SHARD_COUNT)
