"""performance_regressions, resource_regressions, instance_slowdowns, plan_diffs and findings: one detection
pass over the whole fleet, or with [schedules] shard_count above 1 one pass per shard in two phases
(jobs.pipeline.sharded): detection_candidates per shard, then these assets per shard, their unannounced
candidates adjusted among every shard's."""

from collections.abc import Iterator

import dagster as dg
import polars as pl
import pydantic

from jobs.collect.shards import shard_key
from jobs.detect.findings import FINDING_STATUSES
from jobs.detect.verdicts import DETECTED
from jobs.lake import io as lake_io
from jobs.pipeline.budgeted import run_detection_in_budget
from jobs.pipeline.detection import DetectionOutcome
from jobs.pipeline.sharded import record_shard_candidates, run_shard_detection
from jobs.query.series import SERIES_KEY
from orchestration.partitions import SHARD_COUNT, run_shards, shard_partitions
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
        ),
        "append_samples": (
            bool,
            pydantic.Field(
                default=True,
                description="Bring query_samples up to date (an append of what is new) before detecting, "
                "so a per-minute run sees the last snapshot; the samples schedule keeps them too. "
                "Incremental, unsharded runs (a full run, or a shard's, reads them as the samples runs "
                "left them).",
            ),
        ),
    },
)


CANDIDATES_ASSET = "detection_candidates"


def _specs(shard_count: int) -> list[dg.AssetSpec]:
    """The analysis assets' specs; sharded, each also waits for every shard's candidates."""
    candidates = (
        [dg.AssetDep(CANDIDATES_ASSET, partition_mapping=dg.AllPartitionMapping())] if shard_count > 1 else []
    )
    detection_deps = ["query_samples", "deploy_events", *candidates]
    return [
        dg.AssetSpec(
            "performance_regressions",
            deps=detection_deps,
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="Every analysed (deploy, instance, query) and unannounced series, detected or not.",
        ),
        dg.AssetSpec(
            "resource_regressions",
            deps=detection_deps,
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
            description="Episodes of one instance slowing at a moment (contention): many queries together, "
            "or under load other statements brought; reported once instead of as query regressions.",
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
            deps=detection_deps,
            group_name="analyse",
            kinds={"polars", "parquet"},
            description="One finding per regression (instance, series, onset): open, recovered or "
            "superseded; "
            "the table finding_states appends a row when a finding opens or changes.",
        ),
    ]


def _one_shard(context: dg.AssetExecutionContext, shard_count: int) -> int:
    """A sharded detection run covers exactly one shard (its pass is the unit that fails alone)."""
    shards = run_shards(context, shard_count) or []
    if len(shards) != 1:
        raise dg.Failure(f"a sharded detection run covers one shard partition, not {len(shards)}")
    return shards[0]


def build_regressions_and_plan_diffs(shard_count: int) -> dg.AssetsDefinition:
    """One detection pass over the whole fleet (one shard), or one per shard partition."""

    @dg.multi_asset(
        specs=_specs(shard_count),
        partitions_def=shard_partitions(shard_count),
        name="regressions_and_plan_diffs",
    )
    def regressions_and_plan_diffs(
        context: dg.AssetExecutionContext,
        config: DetectorRunConfig,  # type: ignore[valid-type]
        lake: LakeResource,
    ) -> Iterator[dg.MaterializeResult]:
        settings = settings_from_config("detector", config, "regressions_and_plan_diffs")
        mark = lake_io.incident_mark()
        detection = settings.detection_config(
            incremental=not config.full_run,
            # an append only: a full run reads the samples as the samples job left them
            rebuild_samples=config.append_samples and shard_count == 1 and not config.full_run,
        )
        shard_metadata: dict[str, object] = {}
        if shard_count > 1:
            shard = _one_shard(context, shard_count)
            result = run_shard_detection(lake.path, detection, shard, shard_count)
            outcome = result.outcome
            others = result.candidates
            shard_metadata = {
                "shard": shard_key(shard),
                "instances": result.instances,
                "fleet_candidates": table_metadata(others.used),
                "shards_without_candidates": ", ".join(others.missing) or "none",
                "change_point_searches_reused": result.memo.hits,
                "change_point_searches_run": result.memo.misses,
            }
            if others.missing:
                context.log.warning(
                    f"{shard_key(shard)}: no recorded candidates of {', '.join(others.missing)}: "
                    "the false discovery rate is controlled over the other shards' candidates only"
                )
        else:
            budgeted = run_detection_in_budget(lake.path, detection)
            outcome = budgeted.outcome
            shard_metadata = {
                "memory_budget_mib": detection.memory.budget_mib,
                "instance_chunks": len(budgeted.chunks),
                "peak_rss_mib": round(budgeted.peak_rss_mib),
            }
        yield from _analysis_results(outcome, {**shard_metadata, **lake_incident_metadata(mark)})

    return regressions_and_plan_diffs


def _analysis_results(outcome: DetectionOutcome, extra: dict[str, object]) -> Iterator[dg.MaterializeResult]:
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
            **extra,
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


def build_detection_candidates(shard_count: int) -> dg.AssetsDefinition:
    """Phase 1 of a shard's detection pass (jobs.pipeline.sharded): its unannounced candidates' p-values."""

    @dg.asset(
        name=CANDIDATES_ASSET,
        partitions_def=shard_partitions(shard_count),
        deps=["query_samples", "deploy_events"],
        group_name="analyse",
        kinds={"polars", "parquet"},
        description="Per shard: the p-values of its unannounced candidate steps (latency, work per call), "
        "so every shard's verdicts control the false discovery rate over the fleet's candidates (table "
        "fdr_candidates, the latest pass of each shard).",
    )
    def detection_candidates(
        context: dg.AssetExecutionContext,
        config: DetectorRunConfig,  # type: ignore[valid-type]
        lake: LakeResource,
    ) -> dg.MaterializeResult:
        settings = settings_from_config("detector", config, CANDIDATES_ASSET)
        detection = settings.detection_config(incremental=not config.full_run, rebuild_samples=False)
        shard = _one_shard(context, shard_count)
        recorded = record_shard_candidates(lake.path, detection, shard, shard_count)
        return dg.MaterializeResult(
            metadata={
                "shard": recorded.shard,
                "instances": recorded.instances,
                **{f"{family}_candidates": count for family, count in recorded.candidates.items()},
                "file": str(recorded.path),
            }
        )

    return detection_candidates


regressions_and_plan_diffs = build_regressions_and_plan_diffs(SHARD_COUNT)
detection_candidates = build_detection_candidates(SHARD_COUNT) if SHARD_COUNT > 1 else None
"""Phase 1 of the sharded detection; None with one shard (the whole-fleet pass adjusts its own)."""


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
