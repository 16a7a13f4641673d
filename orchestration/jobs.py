"""Asset jobs the schedules and the sensor start."""

import dagster as dg

# plan_snapshots is always part of the snapshot job: its run config (capture_plans / ingest_auto_explain,
# defaults from [plans] of the config file, off unless set) decides whether it captures anything.
snapshot_job = dg.define_asset_job(
    "snapshot_job", selection=dg.AssetSelection.assets("statement_snapshots", "plan_snapshots")
)
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
        "execution_drift",  # and its checks; drift_sample_baselines is anchored by hand, never scheduled
    ),
)
samples_job = dg.define_asset_job("samples_job", selection=dg.AssetSelection.assets("query_samples"))
deploy_job = dg.define_asset_job("deploy_job", selection=dg.AssetSelection.assets("deploy_events"))
report_job = dg.define_asset_job("report_job", selection=dg.AssetSelection.assets("weekly_regression_report"))
compaction_job = dg.define_asset_job("compaction_job", selection=dg.AssetSelection.assets("compacted_lake"))
