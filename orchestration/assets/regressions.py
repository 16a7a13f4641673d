"""performance_regressions, resource_regressions, instance_slowdowns, plan_diffs and findings: one detection
pass over the whole fleet."""

import dagster as dg
import polars as pl
import pydantic

from jobs import lake as lake_io
from jobs.analysis import run_detection
from jobs.detect.findings import FINDING_STATUSES
from jobs.regressions import DETECTED, SERIES_KEY
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, settings_from_config
from orchestration.tables import lake_incident_metadata, table_metadata

# [detector] of the config file, nested tables included; full_run is this run's only.
DetectorRunConfig = section_config(
    "detector",
    extra={
        "full_run": (
            bool,
            pydantic.Field(
                default=False,
                description="Re-examine every deploy and series, not only what received samples since the "
                "last run (a run whose settings differ from the last run's, e.g. after changing a "
                "threshold, does so by itself).",
            ),
        )
    },
)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "performance_regressions",
            deps=["query_samples", "deploy_events"],
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="Every analysed (deploy, instance, query) and unannounced series, detected or not.",
        ),
        dg.AssetSpec(
            "resource_regressions",
            deps=["query_samples", "deploy_events"],
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="Work per call (temp blocks, shared blocks, rows, WAL, planning) of every analysed "
            "series: stepped up (a resource regression) or why not.",
        ),
        dg.AssetSpec(
            "instance_slowdowns",
            deps=["query_samples", "deploy_events"],
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="Episodes of many queries of one instance slowing together (contention), reported "
            "once instead of as query regressions.",
        ),
        dg.AssetSpec(
            "plan_diffs",
            deps=["plan_snapshots"],
            group_name="analyse",
            kinds={"parquet"},
            description="For each detected regression: the plan before vs after the change.",
        ),
        dg.AssetSpec(
            "findings",
            deps=["query_samples", "deploy_events"],
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="One finding per regression (instance, series, onset): open, recovered or "
            "superseded; "
            "the table finding_states appends a row when a finding opens or changes.",
        ),
    ]
)
def regressions_and_plan_diffs(config: DetectorRunConfig, lake: LakeResource):  # type: ignore[valid-type]
    settings = settings_from_config("detector", config, "regressions_and_plan_diffs")
    mark = lake_io.incident_mark()
    detection = settings.detection_config(incremental=not config.full_run, rebuild_samples=False)
    outcome = run_detection(lake.path, detection)
    detected = pl.concat([outcome.regressions, outcome.unannounced], how="diagonal_relaxed").filter(
        pl.col("status") == DETECTED
    )
    shown = detected.select(
        "analysis",
        "instance",
        "query",
        "before_mean_ms",
        "after_mean_ms",
        (pl.col("after_mean_ms") / pl.col("before_mean_ms")).alias("slowdown_ratio"),
        "detected_change_at",
        "p_value",
        "plan_diff_summary",
    )
    yield dg.MaterializeResult(
        asset_key="performance_regressions",
        metadata={
            "analysed": outcome.regressions.height + outcome.unannounced.height,
            "detected": detected.height,
            **lake_incident_metadata(mark),
            "regressions": table_metadata(shown),
        },
    )
    resources = outcome.resource_detected
    yield dg.MaterializeResult(
        asset_key="resource_regressions",
        metadata={
            "analysed": outcome.resource_regressions.height,
            "detected": resources.height,
            "regressions": table_metadata(resources.select("analysis", "instance", "query", "summary")),
        },
    )
    slowdowns = outcome.instance_slowdowns
    yield dg.MaterializeResult(
        asset_key="instance_slowdowns",
        metadata={
            "episodes": slowdowns.height,
            "findings_suppressed": int(slowdowns["findings_suppressed"].sum()) if slowdowns.height else 0,
            "episodes_table": table_metadata(slowdowns.select("analysis", "instance", "began_at", "summary")),
        },
    )
    yield dg.MaterializeResult(asset_key="plan_diffs", metadata={"diffs": outcome.plan_diffs.height})
    findings = outcome.findings
    yield dg.MaterializeResult(
        asset_key="findings",
        metadata={
            "changed": outcome.finding_changes.height,
            **{status: int((findings["status"] == status).sum()) for status in FINDING_STATUSES},
            "shown": table_metadata(
                outcome.shown_findings.select(
                    "status", "analysis", "instance", "query", "deploy_version", "detected_change_at"
                )
            ),
        },
    )


@dg.asset_check(
    asset="performance_regressions", description="Detected rows are complete and unique per query."
)
def detected_regressions_are_consistent(lake: LakeResource) -> dg.AssetCheckResult:
    files = lake_io.usable_files(lake.path, "performance_regressions")
    latest = (
        lake_io.read_file(lake.path, "performance_regressions", max(files, key=lambda p: p.name))
        if files
        else None
    )
    if latest is None:
        return dg.AssetCheckResult(passed=True, metadata={"rows": 0})
    detected = latest.filter(pl.col("status") == DETECTED)
    incomplete = detected.filter(
        pl.any_horizontal(
            pl.col(c).is_null() for c in ("detected_change_at", "p_value", "before_mean_ms", "after_mean_ms")
        )
    ).height
    not_slower = detected.filter(pl.col("after_mean_ms") <= pl.col("before_mean_ms")).height
    duplicates = detected.height - detected.unique(["analysis", "deploy_id", *SERIES_KEY]).height
    return dg.AssetCheckResult(
        passed=incomplete == 0 and not_slower == 0 and duplicates == 0,
        metadata={
            "file": str(max(files, key=lambda p: p.name)),
            "detected": detected.height,
            "incomplete": incomplete,
            "not_slower": not_slower,
            "duplicates": duplicates,
        },
    )
