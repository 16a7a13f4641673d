"""The Dagster code location: `make dev` (dagster dev -m orchestration.definitions) loads `defs`.

Loading it reads the config file once (RADAR_CONFIG, else data/radar.toml, else the defaults): its values
are every asset's run config defaults (orchestration.run_config) and the resources' locations.
"""

import dagster as dg

from orchestration.assets.alerts import regression_alerts
from orchestration.assets.deploys import deploy_events
from orchestration.assets.drift import (
    degenerate_samples,
    drift_sample_baselines,
    execution_drift,
    latency_drift,
    stale_baseline,
)
from orchestration.assets.maintenance import compacted_lake
from orchestration.assets.pins import plan_pins
from orchestration.assets.plans import plan_snapshots
from orchestration.assets.regressions import (
    detected_regressions_are_consistent,
    detection_candidates,
    regressions_and_plan_diffs,
)
from orchestration.assets.report import weekly_regression_report
from orchestration.assets.samples import query_samples
from orchestration.assets.snapshots import statement_snapshots
from orchestration.jobs import (
    analysis_job,
    compaction_job,
    deploy_job,
    detection_job,
    fleet_analysis_job,
    report_job,
    samples_job,
    shard_analysis_job,
    snapshot_job,
)
from orchestration.resources import (
    AlertResource,
    DeployInboxResource,
    FleetResource,
    LakeResource,
    ReportResource,
)
from orchestration.run_config import definitions_settings
from orchestration.schedules import (
    analysis_schedule,
    compaction_schedule,
    detection_schedule,
    samples_schedule,
    snapshot_schedule,
    weekly_report_schedule,
)
from orchestration.sensors import deploy_inbox_sensor, shard_analysis_sensor

settings = definitions_settings().settings

defs = dg.Definitions(
    assets=[
        statement_snapshots,
        plan_snapshots,
        query_samples,
        deploy_events,
        regressions_and_plan_diffs,
        plan_pins,
        weekly_regression_report,
        regression_alerts,
        compacted_lake,
        latency_drift,
        drift_sample_baselines,
        execution_drift,
        *([detection_candidates] if detection_candidates is not None else []),
    ],
    asset_checks=[detected_regressions_are_consistent, stale_baseline, degenerate_samples],
    jobs=[
        snapshot_job,
        samples_job,
        deploy_job,
        analysis_job,
        report_job,
        compaction_job,
        *[job for job in (shard_analysis_job, fleet_analysis_job, detection_job) if job is not None],
    ],
    schedules=[
        snapshot_schedule,
        samples_schedule,
        analysis_schedule,
        weekly_report_schedule,
        compaction_schedule,
        *([detection_schedule] if detection_schedule is not None else []),
    ],
    sensors=[deploy_inbox_sensor, *([shard_analysis_sensor] if shard_analysis_sensor is not None else [])],
    # Steps of one run in separate processes (`make dev` and the tests): a step that dies (out of memory, a
    # native crash) fails its step, not the run's other steps. Shards are separate runs (partitions), which
    # the deployment's run launcher places; each run's steps go through this executor.
    executor=dg.multiprocess_executor,
    resources={
        "fleet": FleetResource(),
        "lake": LakeResource(root=settings.lake.root),
        "inbox": DeployInboxResource(inbox=settings.deploys.inbox),
        "reports": ReportResource(root=settings.report.out),
        "alerting": AlertResource(
            file=settings.alerts.file, dead_letter_file=settings.alerts.dead_letter_file
        ),
    },
)
