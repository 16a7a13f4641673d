"""Asset jobs the schedules and the sensor start."""

import dagster as dg

from jobs.pipeline.detection import DETECTION_ASSETS
from orchestration.assets.regressions import CANDIDATES_ASSET
from orchestration.partitions import SHARD_COUNT
from orchestration.run_config import definitions_settings

# plan_snapshots is always part of the snapshot job: its run config (capture_plans / ingest_auto_explain,
# defaults from [plans] of the config file, off unless set) decides whether it captures anything.
snapshot_job = dg.define_asset_job(
    "snapshot_job", selection=dg.AssetSelection.assets("statement_snapshots", "plan_snapshots")
)
FLEET_ASSETS = (
    "regression_alerts",
    "latency_drift",
    "execution_drift",  # and its checks; drift_sample_baselines is anchored by hand, never scheduled
)
if SHARD_COUNT > 1:
    # Sharded detection (jobs.pipeline.sharded): the schedule starts phase 1 per shard, the shard analysis
    # sensor phase 2 per shard once every shard recorded its candidates, then the fleet-wide assets.
    analysis_job = dg.define_asset_job("analysis_job", selection=dg.AssetSelection.assets(CANDIDATES_ASSET))
    shard_analysis_job = dg.define_asset_job(
        "shard_analysis_job", selection=dg.AssetSelection.assets(*DETECTION_ASSETS)
    )
    fleet_analysis_job = dg.define_asset_job(
        "fleet_analysis_job", selection=dg.AssetSelection.assets(*FLEET_ASSETS)
    )
    detection_job = None
else:
    # Per-minute detection (issue 26): the detection, its plan diffs and the regression alerts, the samples
    # appended first by the detection itself; steps in one process unless [schedules] says otherwise.
    detection_job = dg.define_asset_job(
        "detection_job",
        selection=dg.AssetSelection.assets(*DETECTION_ASSETS, "regression_alerts"),
        executor_def=dg.in_process_executor
        if definitions_settings().settings.schedules.detection_in_process
        else dg.multiprocess_executor,
    )
    analysis_job = dg.define_asset_job(
        "analysis_job",
        selection=dg.AssetSelection.assets(*(a for a in FLEET_ASSETS if a != "regression_alerts")),
    )
    shard_analysis_job = fleet_analysis_job = None  # type: ignore[assignment]
samples_job = dg.define_asset_job("samples_job", selection=dg.AssetSelection.assets("query_samples"))
deploy_job = dg.define_asset_job("deploy_job", selection=dg.AssetSelection.assets("deploy_events"))
report_job = dg.define_asset_job("report_job", selection=dg.AssetSelection.assets("weekly_regression_report"))
compaction_job = dg.define_asset_job("compaction_job", selection=dg.AssetSelection.assets("compacted_lake"))
