"""Asset jobs the schedule and the sensor start."""

import dagster as dg

from orchestration.resources import PlanCaptureResource

# plan_snapshots rides on the snapshot schedule only when capture_plans is on (RADAR_CAPTURE_PLANS=1).
_SNAPSHOT_ASSETS = [
    "statement_snapshots",
    *(["plan_snapshots"] if PlanCaptureResource().capture_plans else []),
]
snapshot_job = dg.define_asset_job("snapshot_job", selection=dg.AssetSelection.assets(*_SNAPSHOT_ASSETS))
analysis_job = dg.define_asset_job(
    "analysis_job",
    selection=dg.AssetSelection.assets(
        "performance_regressions",
        "resource_regressions",
        "instance_slowdowns",
        "plan_diffs",
        "findings",
        "regression_alerts",
        "latency_drift",
    ),
)
samples_job = dg.define_asset_job("samples_job", selection=dg.AssetSelection.assets("query_samples"))
deploy_job = dg.define_asset_job("deploy_job", selection=dg.AssetSelection.assets("deploy_events"))
report_job = dg.define_asset_job("report_job", selection=dg.AssetSelection.assets("weekly_regression_report"))
compaction_job = dg.define_asset_job("compaction_job", selection=dg.AssetSelection.assets("compacted_lake"))
