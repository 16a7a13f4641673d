"""deploy_events: deploy markers from `radar deploy mark` and files dropped in the inbox."""

import dagster as dg

from jobs.deploys import ingest_deploy_files, load_deploy_events
from orchestration.resources import DeployInboxResource, LakeResource


@dg.asset(
    group_name="collect",
    kinds={"parquet"},
    description="Every deploy marker once; malformed inbox files are moved to rejected/ with their line.",
)
def deploy_events(
    context: dg.AssetExecutionContext, inbox: DeployInboxResource, lake: LakeResource
) -> dg.MaterializeResult:
    report = ingest_deploy_files(inbox.path, lake.path)
    for path, why in report.rejected.items():
        context.log.warning(f"rejected deploy file {path}: {why}")
    events = load_deploy_events(lake.path)
    return dg.MaterializeResult(
        metadata={
            "files_processed": len(report.processed),
            "files_rejected": len(report.rejected),
            "events_recorded": len(report.events),
            "events_total": events.height,
        }
    )
