"""latency_drift (the per-interval proxy) and the per-execution drift stage: drift_sample_baselines (anchor /
re-anchor by run config), execution_drift (scores) and its asset checks stale_baseline and
degenerate_samples (jobs.drift.checks)."""

from datetime import UTC, datetime

import dagster as dg
import polars as pl
import pydantic

from jobs.collect.deploys import DeployError, parse_timestamp
from jobs.drift.baselines import BaselineError, anchor_sample_baselines
from jobs.drift.checks import DEGENERATE_SAMPLES, NO_BASELINE, STALE_BASELINE, DriftCheck
from jobs.drift.execution import (
    check_lake,
    counts_by_metric,
    degenerate_count,
    flag_counts,
    run_execution_drift,
)
from jobs.drift.interval import run_drift
from jobs.drift.scorer import INSUFFICIENT_SAMPLES
from jobs.lake.io import incident_mark
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, section_from_config
from orchestration.tables import lake_incident_metadata, table_metadata

DriftRunConfig = section_config("drift")  # [drift] of the config file


@dg.asset(
    deps=["query_samples"],
    group_name="analyse",
    kinds={"numpy", "parquet"},
    description="Jensen-Shannon, PSI and Wasserstein of each query's latency distribution, current window "
    "vs anchored baseline; precision-first verdicts (drift / watch / improved / no_drift).",
)
def latency_drift(config: DriftRunConfig, lake: LakeResource) -> dg.MaterializeResult:  # type: ignore[valid-type]
    drift = run_drift(lake.path, section_from_config("drift", config, "latency_drift"))
    flagged = drift.filter(pl.col("status").is_in(["drift", "watch"]))
    return dg.MaterializeResult(
        metadata={
            "series": drift.height,
            "drift": drift.filter(pl.col("status") == "drift").height,
            "watch": drift.filter(pl.col("status") == "watch").height,
            "flagged": table_metadata(flagged.select("instance", "status", "reason", "query", "js", "psi")),
        }
    )


# ---------------------------------------------------------------------------------------------------------
# Per-execution drift: anchored sample baselines, the current window's scores and the stage's checks

SampleBaselineRunConfig = section_config(
    "drift",
    extra={
        "baseline_version": (
            str,
            pydantic.Field(default="", description="The new baseline version (required; never reused)."),
        ),
        "window_start": (
            str,
            pydantic.Field(default="", description="Anchor the samples logged after this time (ISO-8601)."),
        ),
        "window_end": (
            str,
            pydantic.Field(default="", description="...and at or before this time (ISO-8601)."),
        ),
        "instance": (
            str,
            pydantic.Field(default="", description="Only this instance (empty: every instance)."),
        ),
    },
)
ExecutionDriftRunConfig = section_config(
    "drift",
    extra={
        "baseline_version": (
            str,
            pydantic.Field(default="", description="Score against this version (empty: each pair's newest)."),
        ),
        "now": (
            str,
            pydantic.Field(
                default="", description="As-of time (ISO-8601; empty: now): a replay of the past."
            ),
        ),
    },
)


def _failure(exc: Exception) -> dg.Failure:
    return dg.Failure(description=str(exc), allow_retries=False)


def _timestamp(text: str, key: str) -> datetime:
    try:
        return parse_timestamp(text, f"run config {key}")
    except DeployError as exc:
        raise _failure(exc) from None


@dg.asset(
    deps=["plan_snapshots"],
    group_name="analyse",
    kinds={"parquet"},
    description="Anchored per-execution baselines (drift_sample_baselines): the auto_explain samples of a "
    "window, at most [drift.samples] max_baseline_samples per (instance, query, metric), under a new "
    "version named in run config. Materialize by hand to anchor or re-anchor; never rolls by itself.",
)
def drift_sample_baselines(config: SampleBaselineRunConfig, lake: LakeResource) -> dg.MaterializeResult:  # type: ignore[valid-type]
    drift = section_from_config("drift", config, "drift_sample_baselines")
    if not (config.baseline_version.strip() and config.window_start and config.window_end):  # type: ignore[attr-defined]
        raise _failure(
            ValueError(
                "drift_sample_baselines needs run config baseline_version, window_start and window_end "
                "(anchoring is explicit: a new version over a known-good window)"
            )
        )
    mark = incident_mark()
    try:
        rows = anchor_sample_baselines(
            lake.path,
            version=config.baseline_version,  # type: ignore[attr-defined]
            start=_timestamp(config.window_start, "window_start"),  # type: ignore[attr-defined]
            end=_timestamp(config.window_end, "window_end"),  # type: ignore[attr-defined]
            instance=config.instance or None,  # type: ignore[attr-defined]
            config=drift.samples,
        )
    except BaselineError as exc:
        raise _failure(exc) from None
    summary = rows.group_by("instance", "metric").agg(
        pl.len().alias("queries"), pl.col("n_window").sum().alias("samples_in_window")
    )
    return dg.MaterializeResult(
        metadata={
            "baseline_version": rows["baseline_version"][0],
            "pairs": rows.height,
            "instances": rows["instance"].n_unique(),
            "by_instance_and_metric": table_metadata(summary.sort("instance", "metric")),
            **lake_incident_metadata(mark),
        }
    )


@dg.asset(
    deps=["drift_sample_baselines", "plan_snapshots", "statement_snapshots"],
    group_name="analyse",
    kinds={"numpy", "parquet"},
    description="The current window's auto_explain samples (latency, cost, cardinality) of every query "
    "scored against its anchored baseline by the design's scorer: JS, PSI, Wasserstein and a "
    "PASS / WARN / BLOCK flag per (instance, query, metric); thin and unanchored pairs are WARN rows.",
)
def execution_drift(
    context: dg.AssetExecutionContext,
    config: ExecutionDriftRunConfig,  # type: ignore[valid-type]
    lake: LakeResource,
) -> dg.MaterializeResult:
    drift_config = section_from_config("drift", config, "execution_drift")
    now = _timestamp(config.now, "now") if config.now else datetime.now(UTC)  # type: ignore[attr-defined]
    mark = incident_mark()
    try:
        drift = run_execution_drift(lake.path, drift_config, now, config.baseline_version or None)  # type: ignore[attr-defined]
    except BaselineError as exc:
        raise _failure(exc) from None
    counts = flag_counts(drift)
    for flag, n in counts.items():
        context.log.info(f"execution drift {flag}: {n}")
    flagged = drift.filter(pl.col("flag") != "PASS").sort("flag", "instance", "metric")
    return dg.MaterializeResult(
        metadata={
            "pairs": drift.height,
            **counts,
            "insufficient_samples": drift.filter(pl.col("reason") == INSUFFICIENT_SAMPLES).height,
            "no_baseline": drift.filter(pl.col("reason") == NO_BASELINE).height,
            "degenerate": degenerate_count(drift, drift_config),
            "psi_data_quality": drift.filter(pl.col("psi_data_quality")).height if drift.height else 0,
            "by_metric": table_metadata(counts_by_metric(drift)),
            "flagged": table_metadata(
                flagged.select("instance", "metric", "flag", "reason", "js", "psi", "fingerprint")
            ),
            **lake_incident_metadata(mark, context.log),
        }
    )


def _check_result(check: DriftCheck) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=check.passed,
        severity=dg.AssetCheckSeverity.WARN,
        description=check.description,
        metadata={"description": check.description, **_plain(check.metadata)},
    )


def _plain(metadata: dict[str, object]) -> dict[str, object]:
    return {k: ", ".join(map(str, v)) if isinstance(v, list) else v for k, v in metadata.items()}


def _lake_checks(config: dg.Config, lake: LakeResource, name: str) -> list[DriftCheck]:
    return check_lake(lake.path, section_from_config("drift", config, name))


@dg.asset_check(
    asset="execution_drift",
    description="BLOCK share of the pairs scored over [drift.samples] stale_window above stale_block_share: "
    "the baseline is likely stale (names the tables analysed within analyze_lookback, suggests a re-anchor).",
)
def stale_baseline(config: DriftRunConfig, lake: LakeResource) -> dg.AssetCheckResult:  # type: ignore[valid-type]
    (check,) = [c for c in _lake_checks(config, lake, "stale_baseline") if c.name == STALE_BASELINE]
    return _check_result(check)


@dg.asset_check(
    asset="execution_drift",
    description="insufficient_samples share of the pairs scored over [drift.samples] stale_window above "
    "degenerate_share: widen the capture window (current_window) or raise auto_explain.sample_rate.",
)
def degenerate_samples(config: DriftRunConfig, lake: LakeResource) -> dg.AssetCheckResult:  # type: ignore[valid-type]
    (check,) = [c for c in _lake_checks(config, lake, "degenerate_samples") if c.name == DEGENERATE_SAMPLES]
    return _check_result(check)
