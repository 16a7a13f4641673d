"""Work regressions are findings: a step up of a query's work per call (jobs.detect.work) opens a finding of
kind ``work`` with the lifecycle of latency findings (jobs.detect.findings), unless a latency finding of
the same series has the same step, which then names the work change too (one finding, not two).

A ``work_mem`` cut that makes a sort spill multiplies its temp blocks per call while latency may barely
move (or even fall as the load changes); such a regression costs the server disks and memory, and before
this module it reached the resource-regression table only: no finding, alert or report line.

Pure: frames in, frames out. ``finding_rows_with_work`` turns this run's latency analysis rows and
resource-regression rows into the rows ``update_findings`` reads.
"""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl

from jobs.detect.attribution import reattributed
from jobs.detect.config import FindingsConfig
from jobs.detect.verdicts import DETECTED
from jobs.detect.work_words import resource_summary

WORK = "work"
"""The ``kind`` of a finding opened by a work-per-call step alone."""
WORK_COLUMNS: dict[str, pl.DataType] = {
    "work_metric": pl.String(),
    "work_ratio": pl.Float64(),
    "work_summary": pl.String(),
    "work_before_per_call": pl.Float64(),
    "work_after_per_call": pl.Float64(),
}
"""What a finding says of its work change: the metric that grew most, by how much (null: from 0), and
every metric's summary ("temp blocks per call 0 → 116 at deploy v42, latency +10%")."""

_STEP = ["analysis", "deploy_id", "instance", "series", "detected_change_at"]
_WORK_ONLY_SUMMARY = "_work_only_summary"


def work_steps(resources: pl.DataFrame) -> pl.DataFrame:
    """Per detected work step (analysis, deploy, instance, series, change time): the metric with the
    largest ratio, its ratio (null when its before was 0) and every metric's summary, and the step's
    row of that metric (query, deploy, latency levels, p)."""
    detected = resources.filter(pl.col("status") == DETECTED) if resources.height else resources
    if detected.height == 0:
        return detected.with_columns(
            *(pl.lit(None, dtype=dtype).alias(name) for name, dtype in WORK_COLUMNS.items())
        )
    ranked = detected.with_columns(
        pl.col("ratio").fill_nan(None).fill_null(math.inf).alias("_rank_ratio"),
    ).sort(
        [*_STEP, "_rank_ratio", "metric"], descending=[False] * len(_STEP) + [True, False], nulls_last=True
    )
    # Without the latency clause: what a latency finding carries of its work step (its own ratio is the
    # one shown; the work analysis's segments give a second, different one).
    work_only = pl.Series(
        _WORK_ONLY_SUMMARY,
        [resource_summary(row, latency=False) for row in ranked.iter_rows(named=True)],
        dtype=pl.String,
    )
    summaries = (
        ranked.with_columns(work_only)
        .group_by(_STEP)
        .agg(
            pl.col("summary").drop_nulls().sort().str.join("; ").alias("work_summary"),
            pl.col(_WORK_ONLY_SUMMARY).drop_nulls().sort().str.join("; "),
        )
    )
    first = ranked.unique(_STEP, keep="first", maintain_order=True)
    return (
        first.join(summaries, on=_STEP, how="left", nulls_equal=True)
        .with_columns(
            pl.col("metric").alias("work_metric"),
            pl.col("before_per_call").alias("work_before_per_call"),
            pl.col("after_per_call").alias("work_after_per_call"),
            pl.when(pl.col("ratio").is_finite()).then(pl.col("ratio")).otherwise(None).alias("work_ratio"),
        )
        .drop("_rank_ratio")
    )


def finding_rows_with_work(
    latency: pl.DataFrame,
    resources: pl.DataFrame,
    intervals: dict[str, timedelta],
    config: FindingsConfig = FindingsConfig(),
) -> pl.DataFrame:
    """``latency`` (this run's latency analysis rows) with the work columns: filled on a detected row whose
    series stepped in work within the onset tolerance of its change, or at the same deploy; plus one
    detected row of kind ``work`` per work step no detected latency row has (latency levels from the same
    segments)."""
    latency = latency.with_columns(
        *(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in WORK_COLUMNS.items()
            if name not in latency
        )
    )
    steps = work_steps(resources)
    if steps.height == 0:
        return latency
    tolerance_us = (
        pl.col("instance").replace_strict(
            {i: int(v / timedelta(microseconds=1)) for i, v in intervals.items()},
            default=int(config.default_sample_interval / timedelta(microseconds=1)),
            return_dtype=pl.Int64,
        )
        * config.onset_tolerance_samples
    )
    rows = latency.with_row_index("_row")
    detected = rows.filter(pl.col("status") == DETECTED).select(
        "_row", "instance", "series", "detected_change_at", "analysis", "deploy_id"
    )
    work = steps.with_row_index("_work")
    same_deploy = (
        (pl.col("analysis") == "deploy")
        & (pl.col("_work_analysis") == "deploy")
        & (pl.col("deploy_id") == pl.col("_work_deploy"))
    ).fill_null(False)
    pairs = (
        detected.join(
            work.select(
                "_work",
                "instance",
                "series",
                pl.col("detected_change_at").alias("_work_at"),
                pl.col("analysis").alias("_work_analysis"),
                pl.col("deploy_id").alias("_work_deploy"),
            ),
            on=["instance", "series"],
        )
        .with_columns((pl.col("detected_change_at") - pl.col("_work_at")).abs().alias("_distance"))
        # One step: change times within the onset tolerance, or both blamed on the same deploy (at short
        # snapshot intervals the work and the latency change points can lie farther apart than that).
        .filter((pl.col("_distance").dt.total_microseconds() <= tolerance_us) | same_deploy)
    )
    # A latency row takes the nearest work step; a work step named by any latency row is that finding's.
    nearest = pairs.sort("_row", "_distance", "_work").unique("_row", keep="first", maintain_order=True)
    named = (
        nearest.join(work.select("_work", *WORK_COLUMNS, _WORK_ONLY_SUMMARY), on="_work")
        .with_columns(pl.col(_WORK_ONLY_SUMMARY).alias("work_summary"))
        .select("_row", *WORK_COLUMNS)
    )
    merged = rows.drop(*WORK_COLUMNS).join(named, on="_row", how="left").sort("_row")
    merged = _attributed_to_work_deploys(merged, nearest, work).drop("_row")
    alone = work.join(pairs.select("_work").unique(), on="_work", how="anti").drop(
        "_work", _WORK_ONLY_SUMMARY
    )
    if alone.height == 0:
        return merged
    as_findings = alone.with_columns(
        pl.lit(WORK).alias("kind"),
        pl.col("latency_before_ms").alias("before_mean_ms"),
        pl.col("latency_after_ms").alias("after_mean_ms"),
        pl.col("work_summary").alias("work_evidence"),
    )
    keep = [c for c in merged.columns if c in as_findings.columns]
    return pl.concat([merged, as_findings.select(keep)], how="diagonal_relaxed")


_ATTRIBUTION = ("deploy_id", "deploy_version", "deployed_at")


def _attributed_to_work_deploys(
    merged: pl.DataFrame, nearest: pl.DataFrame, work: pl.DataFrame
) -> pl.DataFrame:
    """An unannounced latency step that is a deploy's work step is that deploy's finding: the work changed
    at the deploy (a ``work_mem`` cut that makes a sort spill), and the deploy's own latency test, with
    its stricter threshold, may have let the latency part pass while the unannounced analysis saw it. A
    finding of the work step alone would be attributed to the deploy; one that also saw the latency must
    not lose that (CI, issue 24: a +26% latency step with temp blocks 0 → 69 at the deploy was reported
    unannounced). Not when a detected deploy latency row already names that work step (it is the finding)."""
    by_deploy_latency = nearest.filter(pl.col("analysis") == "deploy").select("_work").unique()
    moves = (
        nearest.filter((pl.col("analysis") == "unannounced") & (pl.col("_work_analysis") == "deploy"))
        .join(by_deploy_latency, on="_work", how="anti")
        # the work step's deploy columns, renamed first: ``nearest`` has the latency row's deploy_id (null)
        .join(
            work.select("_work", *(pl.col(c).alias(f"_w_{c}") for c in _ATTRIBUTION if c in work.columns)),
            on="_work",
        )
        .select("_row", *(pl.col(f"_w_{c}").alias(c) for c in _ATTRIBUTION if c in work.columns))
    )
    return reattributed(merged, moves)
