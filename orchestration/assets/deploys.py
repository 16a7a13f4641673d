"""deploy_events: deploy markers from `radar deploy mark` and files dropped in the inbox."""

import dagster as dg

from jobs.collect.deploys import ingest_deploy_files, load_deploy_events
from orchestration.resources import DeployInboxResource, FleetResource, LakeResource
from orchestration.run_config import section_config, section_from_config

# [deploys] of the config file (inbox limits); where the inbox is ([deploys] inbox) is DeployInboxResource's.
DeploysRunConfig = section_config("deploys", exclude=("inbox",))


@dg.asset(
    group_name="collect",
    kinds={"parquet"},
    description="Every deploy marker once; bad inbox files (malformed, too big, out-of-range times, "
    "instances the fleet does not know) are moved to rejected/ with their line.",
)
def deploy_events(
    context: dg.AssetExecutionContext,
    config: DeploysRunConfig,  # type: ignore[valid-type]
    inbox: DeployInboxResource,
    lake: LakeResource,
    fleet: FleetResource,
) -> dg.MaterializeResult:
    limits = section_from_config("deploys", config, "deploy_events")
    known = fleet.find()
    report = ingest_deploy_files(
        inbox.path, lake.path, limits, None if known is None else known.instance_names
    )
    for path, why in report.rejected.items():
        context.log.warning(f"rejected deploy file {path}: {why}")
    for path, why in report.failed.items():
        context.log.error(f"deploy file {path} not recorded: {why}")
    events = load_deploy_events(lake.path)
    return dg.MaterializeResult(
        metadata={
            "files_processed": len(report.processed),
            "files_rejected": len(report.rejected),
            "files_failed": len(report.failed),
            "events_recorded": len(report.events),
            "events_total": events.height,
        }
    )
