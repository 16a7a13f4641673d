"""Regressions of work: a query that now does more per call (temp blocks, shared blocks, rows, WAL, planning).

A work series is, per series (``SERIES_KEY``: instance, database, query) and merged interval, Σ metric /
Σ calls over the series' queryids (``work_per_call``). Work series go through the latency detector's machinery
unchanged, all (deploy, instance, query, metric) series in one batch:

Deploy analysis (``detect_resource_regressions``), per (deploy, instance, query, metric) in its window:
  stage 0  naive pre/post means per call: after/before below ``ResourceConfig.ratio_threshold`` →
           below_ratio_threshold; after - before below the metric's absolute floor → below_absolute_floor;
  stage 1  the change point nearest the deploy (``jobs.detect.deploy_analysis._changepoint_and_welch``, the
  latency
           detector's own function, called with the per-call work as the series value): none →
           no_significant_change_point, too far from the deploy → change_point_outside_tolerance;
  stage 2  Welch on the segments around it; the ratio and floor gates again on those segment means (the
           reported figures), p < ``RegressionConfig.p_value_threshold`` → detected.
Unannounced analysis: hierarchical E-divisive over the history (``consecutive_segment_tests``), each step up
past both gates Welch-tested against its neighbouring segment, Benjamini-Hochberg over the fleet's candidates.

Decreases of work are never resource regressions. Planning time is analysed only where it is tracked
(pg_stat_statements.track_planning on: ``plans`` positive before and after the split).

``attach_work_evidence`` gives every detected latency finding its work before vs after its change point,
over the same segments its Welch test compared: ``work_changed`` and ``work_evidence``
("shared blocks per call ×74, rows unchanged").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from jobs.detect.changepoint_memo import ChangePointMemo
from jobs.detect.config import RegressionConfig
from jobs.detect.deploy_analysis import (
    DEPLOY_SERIES_KEY,
    DeploySeries,
    _changepoint_and_welch,
    scoped_deploy_windows,
    stage_one_reasons,
    unannounced_columns,
    with_deploy_times,
)
from jobs.detect.fleet_fdr import FdrAdjust, within_call
from jobs.detect.scope import AnalysisScope
from jobs.detect.segments import consecutive_segment_tests, group_extremes, searched_flags
from jobs.detect.unannounced import scoped_history_points
from jobs.detect.verdicts import DETECTED, INSUFFICIENT_DATA, NO_REGRESSION
from jobs.detect.work_config import (
    WORK_COLUMNS,
    WORK_METRIC_BY_NAME,
    WORK_METRICS,
    ResourceConfig,
    WorkMetric,
)
from jobs.detect.work_words import _number, _times, resource_summary
from jobs.query.series import (
    SERIES_KEY,
    RegressionInputError,
    analysed_columns,
    fingerprinted_samples,
    group_runs,
    merge_intervals,
    series_identity,
)
from jobs.schemas.analysed import RESOURCE_REGRESSIONS

__all__ = [
    "WORK_METRICS",
    "ResourceConfig",
    "WorkMetric",
    "attach_work_evidence",
    "detect_resource_regressions",
    "work_per_call",
]

DEFAULT_CONFIG = RegressionConfig()
NO_STEP_ABOVE_GATES = "no_step_above_gates"
"""Unannounced reason: the series' work per call never spans the ratio threshold and the floor, so no step
can pass them and the change-point search was not run (``steps_possible``)."""


# ---------------------------------------------------------------------------------------------------------
# Work series


def _with_work_columns(points: pl.DataFrame) -> pl.DataFrame:
    """A work column the input lacks (an old server, inline test series) is null: untracked, never zero."""
    missing = [c for c in WORK_COLUMNS if c not in points.columns]
    return points.with_columns(pl.lit(None, dtype=pl.Float64).alias(c) for c in missing)


def _work_sums(points: pl.DataFrame) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Per sample and metric: its numerator (0 where a column is null) and its tracking counter."""
    exprs: list[pl.Expr] = []
    for metric in WORK_METRICS:
        known = pl.all_horizontal(pl.col(c).is_not_null() for c in metric.columns)
        numerator = pl.sum_horizontal(pl.col(c).cast(pl.Float64) for c in metric.columns)
        tracking = (
            pl.col(metric.tracked_by).cast(pl.Float64).fill_null(0.0) if metric.tracked_by else pl.lit(1.0)
        )
        exprs += [
            pl.when(known).then(numerator).otherwise(0.0).alias(f"work:{metric.name}"),
            pl.when(known).then(tracking).otherwise(0.0).alias(f"tracking:{metric.name}"),
        ]
    frame = _with_work_columns(points)
    _check_work_values(frame)
    frame = frame.with_columns(exprs)
    return frame, tuple(e.meta.output_name() for e in exprs)


def _check_work_values(frame: pl.DataFrame) -> None:
    """Work deltas are finite and >= 0 (jobs.detect.samples drops intervals where a counter went
    backwards)."""

    def bad(column: str) -> pl.Expr:
        value = pl.col(column)
        if frame.schema[column].is_integer():  # always finite: only a sign to check
            return value < 0
        value = value.cast(pl.Float64)
        return value.is_not_null() & ~(value.is_finite() & (value >= 0))

    # One pass that only answers "any?", integers compared as integers: a filter per column, each casting
    # to floats, took 1.4 s of a 10k-series run (the casts alone 0.45 s a call, the comparisons 0.03).
    found = frame.select(bad(c).any() for c in WORK_COLUMNS).row(0)
    for column, any_bad in zip(WORK_COLUMNS, found, strict=True):
        if any_bad:
            row = frame.filter(bad(column)).row(0, named=True)
            raise RegressionInputError(
                f"samples: instance {row['instance']} queryid {row['queryid']} at {row['interval_end']}: "
                f"{column} = {row[column]}; work deltas must be finite and >= 0 (build samples with "
                "jobs.detect.samples)"
            )


def work_per_call(series_samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per (keys, metric, interval_end): ``value`` = Σ metric / Σ calls of the merged interval.

    ``series_samples``: fingerprinted samples (``jobs.query.series.fingerprinted_samples``), already cut to
    the analysed window, with ``keys`` naming a series. Also per row: ``latency_ms`` (Σ exec / Σ calls),
    ``tracking`` (Σ of the metric's tracking counter, 0 where its columns are null: not tracked) and
    ``position`` (0-based index of the interval in its series, the detector's ``changepoint_index`` scale).
    Intervals are merged once, by ``merge_intervals`` (the latency series' own merge); rows come sorted by
    (metric in WORK_METRICS order, keys, interval_end), so each series is contiguous. The unannounced
    search reads only the tracked series, without stacking the rest (``TrackedWork``).
    """
    return stacked_metrics(merged_work(series_samples, keys), keys)


def _per_call(metric: WorkMetric) -> pl.Expr:
    """A metric's work per call of a merged interval (merged_work's columns)."""
    return pl.col(f"work:{metric.name}") / pl.col("calls")


def merged_work(series_samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The merged intervals of each series, wide: ``work:<metric>`` and ``tracking:<metric>`` sums per
    interval, ``latency_ms`` and ``position`` (work_per_call before its metrics are stacked)."""
    return _merged_work_and_runs(series_samples, keys)[0]


def _merged_work_and_runs(
    series_samples: pl.DataFrame, keys: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """``merged_work`` and its ``group_runs`` (which its positions are read from)."""
    frame, sums = _work_sums(series_samples)
    merged = merge_intervals(frame, keys, sums)
    runs = group_runs(merged, keys)
    return merged.with_columns(pl.col("value").alias("latency_ms"), _positions(merged, keys, runs)), runs


def _positions(merged: pl.DataFrame, keys: list[str], runs: pl.DataFrame | None) -> pl.Series | pl.Expr:
    """Each merged interval's 0-based index in its series. merge_intervals returns each series as one run
    of rows (``runs``), so the index is the row's distance from its run's start: ``int_range().over(keys)``
    hashed the string keys of every row instead (1.36 of 2.6 s of the deploy windows' merge at 10,000
    series x 1 day; the runs 0.18 s). Not runs (never, from merge_intervals): the window, as before."""
    if runs is None:
        return pl.int_range(pl.len(), dtype=pl.Int64).over(keys).alias("position")
    sizes = runs["size"].to_numpy().astype(np.int64)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return pl.Series("position", np.arange(merged.height, dtype=np.int64) - starts)


def deploy_series(windowed: pl.DataFrame) -> DeploySeries:
    """The identity and merged work intervals of the deploy windows' series, for both deploy analyses."""
    keys = list(DEPLOY_SERIES_KEY)
    merged, runs = _merged_work_and_runs(windowed, keys)
    return DeploySeries(identity=series_identity(windowed, keys), merged=merged, runs=runs)


def stacked_metrics(
    merged: pl.DataFrame,
    keys: list[str],
    *,
    tracked_only: bool = False,
    rows_of: dict[str, np.ndarray] | None = None,
    extra: tuple[str, ...] = (),
) -> pl.DataFrame:
    """work_per_call's rows from merged_work's: one per (keys, metric, interval). ``rows_of``: per metric,
    which of ``merged``'s rows to keep (a metric absent keeps none), applied before stacking; ``extra``:
    more columns of ``merged`` carried along."""
    per_metric = []
    group = _contiguous_groups(merged, keys) if tracked_only and rows_of is None else None
    for m in WORK_METRICS:
        source = merged
        if rows_of is not None:
            source = merged.filter(pl.Series(rows_of[m.name])) if m.name in rows_of else merged.clear()
        rows = _metric_rows(source, keys, m, extra)
        if tracked_only and group is not None:
            # Tracking counts are >= 0 (_check_work_values), so a series' sum is > 0 exactly when one of
            # its intervals is tracked: one pass over numbers per metric, not a window over string keys.
            tracked = np.bincount(group, weights=rows["tracking"].to_numpy() > 0) > 0
            rows = rows.filter(pl.Series(tracked[group]))
        elif tracked_only:
            rows = rows.filter(pl.col("tracking").sum().over(keys) > 0)
        per_metric.append(rows)
    return pl.concat(per_metric, how="vertical")


def _metric_rows(
    source: pl.DataFrame, keys: list[str], m: WorkMetric, extra: tuple[str, ...] = ()
) -> pl.DataFrame:
    """One metric's block of stacked rows from merged_work's (wide) rows."""
    return source.select(
        *keys,
        pl.lit(m.name).alias("metric"),
        "interval_start",
        "interval_end",
        "interval_seconds",
        "calls",
        "latency_ms",
        "position",
        *extra,
        _per_call(m).alias("value"),
        pl.col(f"tracking:{m.name}").alias("tracking"),
    )


@dataclass(frozen=True)
class TrackedWork:
    """``stacked_metrics(merged, keys, tracked_only=True)`` described without stacking it: its groups
    ((keys, metric, size), in its order) and each group's lowest and highest value; the rows of the
    groups a search keeps are stacked afterwards (``searched``). Why: the unannounced search keeps few
    groups (``steps_possible``), and stacking every metric of every series first was 6 blocks of the
    history's 14.5 M intervals at 10,000 series x 1 day, then its groups found again by comparing
    string keys (2 s)."""

    merged: pl.DataFrame
    keys: list[str]
    group_of_row: np.ndarray  # each merged row's series (a run of merged rows)
    tracked: list[np.ndarray]  # per metric of WORK_METRICS: which series are tracked
    groups: pl.DataFrame
    low: np.ndarray  # per group: its values' minimum and maximum (what ``steps_possible`` reads)
    high: np.ndarray

    @classmethod
    def of(cls, merged: pl.DataFrame, keys: list[str], runs: pl.DataFrame | None = None) -> TrackedWork:
        """From ``merged_work``'s rows, which hold each series as one run (merge_intervals sorts them);
        ``runs``: their ``group_runs`` where the caller has them (None: found here)."""
        runs = runs if runs is not None else group_runs(merged, keys)
        if runs is None:
            raise ValueError("TrackedWork: a series of the merged intervals is not one run of rows")
        sizes = runs["size"].to_numpy()
        group_of_row = np.repeat(np.arange(runs.height), sizes)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        tracked, groups, low, high = [], [], [], []
        for m in WORK_METRICS:
            # Tracking counts are >= 0 (_check_work_values): a series is tracked when one interval is.
            # Or-reduced over each run's bytes (a weighted bincount read 8-byte weights and group numbers
            # of every row: 0.14 against 0.001 s a metric at 14.5 M rows).
            counted = merged[f"tracking:{m.name}"].to_numpy() > 0
            mine = np.logical_or.reduceat(counted, starts) if runs.height else np.zeros(0, dtype=bool)
            tracked.append(mine)
            groups.append(
                runs.filter(pl.Series(mine)).select(
                    *keys, pl.lit(m.name).alias("metric"), pl.col("size").cast(pl.get_index_type())
                )
            )
            if runs.height:
                values = np.asarray(merged.select(_per_call(m)).to_series().to_numpy(), dtype=np.float64)
                low.append(np.minimum.reduceat(values, starts)[mine])
                high.append(np.maximum.reduceat(values, starts)[mine])
        return cls(
            merged,
            keys,
            group_of_row,
            tracked,
            pl.concat(groups, how="vertical"),
            np.concatenate(low) if low else np.zeros(0),
            np.concatenate(high) if high else np.zeros(0),
        )

    def searched(
        self, sizes: np.ndarray, searched: np.ndarray
    ) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, pl.DataFrame]:
        """``jobs.detect.segments.only_searched`` of the stacked rows, stacking only the searched groups."""
        kept = np.zeros(sizes.shape[0], dtype=bool)
        kept[searched] = True
        blocks, start = [], 0  # each metric's groups: its tracked series, in order
        for m, mine in zip(WORK_METRICS, self.tracked, strict=True):
            series_of_group = np.flatnonzero(mine)
            chosen = np.zeros(mine.shape[0], dtype=bool)
            chosen[series_of_group[kept[start : start + series_of_group.shape[0]]]] = True
            start += series_of_group.shape[0]
            if chosen.any():
                blocks.append(
                    _metric_rows(self.merged.filter(pl.Series(chosen[self.group_of_row])), self.keys, m)
                )
        series = (
            pl.concat(blocks, how="vertical")
            if blocks
            else _metric_rows(self.merged.clear(), self.keys, WORK_METRICS[0])
        )
        return series, series["value"].to_numpy().astype(np.float64), sizes[kept], searched_flags(searched)


def _contiguous_groups(frame: pl.DataFrame, keys: list[str]) -> np.ndarray | None:
    """Each row's group number when every ``keys`` group is one run of rows (merge_intervals sorts them
    so), else None. Why: the tracked-only filter's window over the (instance, series) strings cost 0.3 of
    the 0.35 s of stacking the work series of 1,000 series x 1 day."""
    runs = group_runs(frame, keys)
    return None if runs is None else np.repeat(np.arange(runs.height), runs["size"].to_numpy())


def split_means(series: pl.DataFrame, splits: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per (keys, metric): mean per-call work, latency and tracking on each side of a change point.

    ``splits`` (one row per keys; keys may include ``metric``) holds ``changepoint_index``,
    ``before_count``, ``after_count`` and ``deployed_at`` (null for unannounced findings). The sides are
    the segments the detector's Welch test compared: the ``before_count`` samples right before the cut and
    the ``after_count`` samples from it on, without the sample adjacent to the cut whose interval
    straddles the deploy (``segments_around``) or whose mean mixes both regimes (``mixed_index``).
    """
    cut = pl.col("changepoint_index")
    # The columns read only: the join copies every column of the rows it keeps (all work samples of the
    # fleet's series with a change point).
    read = [*keys, "metric", "position", "interval_start", "interval_end", "value", "latency_ms", "tracking"]
    if "mixed_index" not in splits.columns:  # a finding computed without the mixed-sample rule
        splits = splits.with_columns(pl.lit(None, dtype=pl.Int64).alias("mixed_index"))
    joined = series.select(*dict.fromkeys(read)).join(
        splits.select(
            *keys, "changepoint_index", "mixed_index", "before_count", "after_count", "deployed_at"
        ),
        on=keys,
        how="inner",
    )
    straddles = (
        pl.col("deployed_at").is_not_null()
        & ((pl.col("position") == cut - 1) | (pl.col("position") == cut))
        & (pl.col("interval_start") < pl.col("deployed_at"))
        & (pl.col("deployed_at") < pl.col("interval_end"))
    ) | (pl.col("position") == pl.col("mixed_index")).fill_null(False)
    per_metric = list(dict.fromkeys([*keys, "metric"]))
    sides = [*per_metric, "after"]
    kept = (
        joined.filter(~straddles)
        .with_columns((pl.col("position") >= cut).alias("after"))
        .with_columns(
            pl.when(pl.col("after"))
            .then(pl.col("position").rank("ordinal").over(sides))
            .otherwise(pl.col("position").rank("ordinal", descending=True).over(sides))
            .alias("rank")
        )
        .filter(
            pl.when(pl.col("after"))
            .then(pl.col("rank") <= pl.col("after_count"))
            .otherwise(pl.col("rank") <= pl.col("before_count"))
        )
    )
    before, after = ~pl.col("after"), pl.col("after")
    return kept.group_by(per_metric, maintain_order=True).agg(
        pl.col("value").filter(before).mean().alias("before_per_call"),
        pl.col("value").filter(after).mean().alias("after_per_call"),
        pl.col("latency_ms").filter(before).mean().alias("latency_before_ms"),
        pl.col("latency_ms").filter(after).mean().alias("latency_after_ms"),
        before.sum().alias("count_before"),
        after.sum().alias("count_after"),
        pl.col("tracking").filter(before).sum().alias("tracking_before"),
        pl.col("tracking").filter(after).sum().alias("tracking_after"),
    )


def _thresholds(resource: ResourceConfig) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "metric": [m.name for m in WORK_METRICS],
            "unit": [m.unit for m in WORK_METRICS],
            "floor": [resource.floor(m.name) for m in WORK_METRICS],
        }
    )


def _ratio(after: pl.Expr, before: pl.Expr) -> pl.Expr:
    """after / before; inf when only before is 0, null when both are (no work either side)."""
    return (
        pl.when((before == 0) & (after == 0))
        .then(pl.lit(None, dtype=pl.Float64))
        .when(before == 0)
        .then(pl.lit(math.inf))
        .otherwise(after / before)
    )


def _untracked(count_a: pl.Expr, tracking_a: pl.Expr, count_b: pl.Expr, tracking_b: pl.Expr) -> pl.Expr:
    """Samples on a side, but none where the metric is tracked (see WorkMetric.tracked_by): not analysed."""
    return ((count_a > 0) & (tracking_a <= 0)) | ((count_b > 0) & (tracking_b <= 0))


# ---------------------------------------------------------------------------------------------------------
# Resource regressions


def detect_resource_regressions(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    deploys: pl.DataFrame,
    config: RegressionConfig = DEFAULT_CONFIG,
    *,
    unannounced: bool = True,
    scope: AnalysisScope | None = None,
    fdr: FdrAdjust = within_call,
    fleet_tests: int = 0,
    memo: ChangePointMemo | None = None,
    deploy_rows: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """resource_regressions rows: the deploy analysis, then (``unannounced``) the unannounced one.

    Same inputs as ``jobs.detect.deploy_analysis.detect_regressions``, and the same ``scope`` (None =
    everything):
    the deploys and series it re-examines, and its unannounced series. ``deploy_rows``: the deploy
    analysis' rows when already computed (the detection pass runs it beside the latency deploy analysis,
    on the windows both read). Pure and deterministic.
    """
    if deploy_rows is None:
        deploy_rows = deploy_resource_regressions(samples, texts, deploys, config, scope)
    frames = [deploy_rows]
    if unannounced:
        frames.append(unannounced_resource_regressions(samples, texts, config, scope, fdr, fleet_tests, memo))
    return pl.concat(frames, how="vertical")


def _empty() -> pl.DataFrame:
    return RESOURCE_REGRESSIONS.empty()


def deploy_resource_regressions(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    deploys: pl.DataFrame,
    config: RegressionConfig = DEFAULT_CONFIG,
    scope: AnalysisScope | None = None,
    windows: tuple[pl.DataFrame, pl.DataFrame] | None = None,
    shared: DeploySeries | None = None,
) -> pl.DataFrame:
    """One row per (deploy, instance, query, tracked work metric) with samples in the deploy's window.
    ``windows``: ``scoped_deploy_windows`` of the same inputs with ``WORK_COLUMNS`` (shared with the
    latency analysis: computing them twice cost 7 s and 1.7 GiB at 10,000 series x 1 day); ``shared``:
    ``deploy_series`` of those windows (also the latency analysis')."""
    if samples.height == 0 or deploys.height == 0:
        return _empty()
    resource = config.resource
    keys = list(DEPLOY_SERIES_KEY)
    windowed, targets = windows or scoped_deploy_windows(samples, texts, deploys, config, scope, WORK_COLUMNS)
    if windowed.height == 0:
        return _empty()
    metric_keys = [*keys, "metric"]
    identity = shared.identity if shared is not None else series_identity(windowed, keys)
    deploy_info = targets.drop("instance").unique("deploy_id")
    # Stage 0 on the wide merged intervals, each metric's series stacked only if it survives: stacking
    # every metric of every deploy window first was the detection run's memory peak (+8 GiB at 10,000
    # series x 1 day, issue 25).
    if shared is not None:
        merged, runs = shared.merged, shared.runs
    else:
        merged, runs = _merged_work_and_runs(windowed, keys)
    merged = with_deploy_times(merged, deploy_info, runs)
    del windowed
    pre, post = ~pl.col("after_deploy"), pl.col("after_deploy")
    # One pass over the merged intervals for every metric (a group_by per metric hashed the same keys
    # eight times: 0.43 -> 0.16 s CPU at 1,000 series), then one block of rows per metric as before.
    sides = merged.group_by(keys, maintain_order=True).agg(
        pl.len().alias("_size"),
        pre.sum().alias("pre_count"),
        post.sum().alias("post_count"),
        *(
            expression
            for m in WORK_METRICS
            for expression in (
                # when/then, not filter: the group_by's own mean and sum (the same values; filter took
                # the slow path per group, 1.05 -> 0.74 s at 10,000 series x 1 day in isolation).
                pl.when(pre).then(_per_call(m)).mean().alias(f"pre_mean:{m.name}"),
                pl.when(post).then(_per_call(m)).mean().alias(f"post_mean:{m.name}"),
                pl.when(pre).then(pl.col(f"tracking:{m.name}")).sum().alias(f"pre_tracking:{m.name}"),
                pl.when(post).then(pl.col(f"tracking:{m.name}")).sum().alias(f"post_tracking:{m.name}"),
            )
        ),
    )
    summary = pl.concat(
        [
            sides.select(
                *keys,
                pl.lit(m.name).alias("metric"),
                pl.col(f"pre_mean:{m.name}").alias("pre_mean"),
                pl.col(f"post_mean:{m.name}").alias("post_mean"),
                "pre_count",
                "post_count",
                pl.col(f"pre_tracking:{m.name}").alias("pre_tracking"),
                pl.col(f"post_tracking:{m.name}").alias("post_tracking"),
                pl.int_range(pl.len(), dtype=pl.Int64).alias("_group"),
            )
            for m in WORK_METRICS
        ],
        how="vertical",
    ).join(_thresholds(resource), on="metric", how="left")
    # Not tracked (planning time without track_planning, a column the server lacks): not analysed at all.
    summary = summary.filter(
        ~_untracked(
            pl.col("pre_count"), pl.col("pre_tracking"), pl.col("post_count"), pl.col("post_tracking")
        )
    )
    summary = summary.with_columns(_ratio(pl.col("post_mean"), pl.col("pre_mean")).alias("naive_ratio"))
    enough = (pl.col("pre_count") >= config.min_samples_per_side) & (
        pl.col("post_count") >= config.min_samples_per_side
    )
    summary = summary.with_columns(
        pl.when(~enough)
        .then(pl.lit("too_few_samples"))
        .when(pl.col("naive_ratio").is_null() | (pl.col("naive_ratio") < resource.ratio_threshold))
        .then(pl.lit("below_ratio_threshold"))
        .when(pl.col("post_mean") - pl.col("pre_mean") < pl.col("floor"))
        .then(pl.lit("below_absolute_floor"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("reason")
    )

    # Stages 1 and 2 on the survivors, every metric of every series in one call of the latency machinery.
    # The merged intervals hold each series as one run (merge_intervals sorts them), in the order of
    # ``sides``' groups: a survivor's rows are found by its group's number, not by a semi-join per metric
    # on the string keys (3 s at 10,000 series x 1 day).
    survivors = summary.filter(pl.col("reason").is_null()).select("metric", "_group")
    group_of_row = np.repeat(np.arange(sides.height), sides["_size"].to_numpy())
    rows_of: dict[str, np.ndarray] = {}
    for (name,), frame in survivors.partition_by("metric", as_dict=True).items():
        chosen = np.zeros(sides.height, dtype=bool)
        chosen[frame["_group"].to_numpy()] = True
        rows_of[str(name)] = chosen[group_of_row]
    summary = summary.drop("_group")
    series = stacked_metrics(merged, keys, rows_of=rows_of, extra=("deployed_at", "after_deploy"))
    del merged
    staged = _changepoint_and_welch(series, metric_keys, config).rename(
        {"before_mean_ms": "before_per_call", "after_mean_ms": "after_per_call"}
    )
    located = staged.filter(pl.col("changepoint_index").is_not_null()).join(
        deploy_info.select("deploy_id", "deployed_at"), on="deploy_id"
    )
    latency = split_means(series, located, metric_keys).select(
        *metric_keys, "latency_before_ms", "latency_after_ms"
    )
    result = (
        summary.join(staged, on=metric_keys, how="left", maintain_order="left")
        .join(latency, on=metric_keys, how="left", maintain_order="left")
        .join(deploy_info, on="deploy_id", how="left")
        .join(identity, on=keys, how="left")
        .with_columns(_ratio(pl.col("after_per_call"), pl.col("before_per_call")).alias("ratio"))
    )
    reason = (
        stage_one_reasons(config)
        .when(~(pl.col("after_per_call") > pl.col("before_per_call")))
        .then(pl.lit("work_not_increased"))
        .when(pl.col("ratio") < resource.ratio_threshold)
        .then(pl.lit("below_ratio_threshold"))
        .when(pl.col("after_per_call") - pl.col("before_per_call") < pl.col("floor"))
        .then(pl.lit("below_absolute_floor"))
        .when(~(pl.col("p_value") < config.p_value_threshold))
        .then(pl.lit("welch_not_significant"))
        .otherwise(pl.lit(DETECTED))
    )
    result = result.with_columns(reason.alias("reason")).with_columns(
        _status(),
        pl.lit("deploy").alias("analysis"),
        pl.lit(None, dtype=pl.Float64).alias("p_adjusted"),
        pl.lit(None, dtype=pl.String).alias("fdr_method"),
    )
    return _finish(result).sort("deployed_at", "deploy_id", *SERIES_KEY, "metric")


def _status() -> pl.Expr:
    return (
        pl.when(pl.col("reason") == DETECTED)
        .then(pl.lit(DETECTED))
        .when(pl.col("reason") == "too_few_samples")
        .then(pl.lit(INSUFFICIENT_DATA))
        .otherwise(pl.lit(NO_REGRESSION))
        .alias("status")
    )


def _finish(result: pl.DataFrame) -> pl.DataFrame:
    """Latency change, summary line, the table's columns."""
    result = result.with_columns(
        (pl.col("latency_after_ms") / pl.col("latency_before_ms") - 1.0).alias("latency_change")
    )
    # One line per detected finding, never per sample: only those rows are read in Python (every row's,
    # 320,000 at 10,000 series x 1 day, took 0.25 s for a handful of lines).
    detected = np.flatnonzero((result["status"] == DETECTED).fill_null(False).to_numpy())
    summaries: list[str | None] = [None] * result.height
    for at, row in zip(
        detected,
        result[detected]
        .select(
            "status",
            "metric",
            "ratio",
            "before_per_call",
            "after_per_call",
            "latency_change",
            "analysis",
            "deploy_version",
            "detected_change_at",
        )
        .iter_rows(named=True),
        strict=True,
    ):
        summaries[int(at)] = resource_summary(row)
    result = result.with_columns(pl.Series("summary", summaries, dtype=pl.String))
    return RESOURCE_REGRESSIONS.conform(
        result.select(c for c in RESOURCE_REGRESSIONS.column_names if c in result.columns)
    )


def unannounced_resource_regressions(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: RegressionConfig = DEFAULT_CONFIG,
    scope: AnalysisScope | None = None,
    fdr: FdrAdjust = within_call,
    fleet_tests: int = 0,
    memo: ChangePointMemo | None = None,
) -> pl.DataFrame:
    """One row per (instance, query, tracked work metric) over the last ``config.history``: its strongest
    step up of work per call, if any (Benjamini-Hochberg over every candidate step of the fleet).
    ``scope``: only its unannounced series (None = every series). ``fdr``: jobs.detect.fleet_fdr."""
    if samples.height == 0:
        return _empty()
    resource = config.resource
    points, window_start, latest = scoped_history_points(samples, texts, config, scope, WORK_COLUMNS)
    if points.height == 0:
        return _empty()
    keys = list(SERIES_KEY)
    metric_keys = [*keys, "metric"]
    identity = series_identity(points, keys)
    merged, runs = _merged_work_and_runs(points, keys)
    tracked = TrackedWork.of(merged, keys, runs)
    groups = tracked.groups.join(_thresholds(resource), on="metric", how="left", maintain_order="left")
    sizes = groups["size"].to_numpy().astype(np.int64)
    floors = groups["floor"].to_numpy()
    possible = possible_steps(tracked.low, tracked.high, sizes, floors, resource.ratio_threshold)
    searched = np.arange(sizes.shape[0]) if config.search_every_series else np.flatnonzero(possible)
    series, values, sizes, searched_groups = tracked.searched(sizes, searched)
    del tracked
    steps = consecutive_segment_tests(
        values,
        sizes,
        config.unannounced_changepoint,
        max_change_points=config.max_change_points,
        fdr_q=config.fdr_q,
        memo=memo,
        mixed_rule=config,
    )
    welch = steps.welch
    pieces = int(steps.piece_base[-1]) + 1  # the last piece: the mixed samples, in no test
    tracking = np.bincount(steps.piece, weights=series["tracking"].to_numpy(), minlength=pieces)
    floor = groups["floor"].to_numpy()[searched[steps.group]]
    before, after = welch.before_mean, welch.after_mean
    latest_mean = steps.mean[steps.last_piece]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(before == 0, np.where(after == 0, np.nan, np.inf), after / before)
        latest_ratio = np.where(before == 0, np.where(latest_mean == 0, np.nan, np.inf), latest_mean / before)
    ratio_ok = ratio >= resource.ratio_threshold
    floor_ok = after - before >= floor
    both_tracked = (tracking[steps.after_piece - 1] > 0) & (tracking[steps.after_piece] > 0)
    stepped_up = ratio_ok & floor_ok & both_tracked & np.isfinite(welch.p)
    still_up = (latest_ratio >= resource.ratio_threshold) & (latest_mean - before >= floor)
    recovered = config.require_ongoing & ~still_up
    candidate = stepped_up & ~recovered
    adjusted = np.full(candidate.shape[0], np.nan)
    if candidate.any():
        adjusted[candidate] = fdr(welch.p[candidate])
    detected = candidate & (adjusted < config.fdr_q)
    starts = series["interval_start"]
    candidates = pl.DataFrame(
        {
            "group": searched[steps.group],
            "changepoint_index": steps.first_new,
            "mixed_index": pl.Series([int(m) if m >= 0 else None for m in steps.mixed], dtype=pl.Int64),
            "detected_change_at": pl.Series(
                [
                    starts[int(steps.offsets[g] + i)]
                    for g, i in zip(steps.group, steps.first_new, strict=True)
                ],
                dtype=pl.Datetime("us", "UTC"),
            ),
            "changepoint_p_value": steps.changepoint_p_value,
            "before_per_call": before,
            "after_per_call": after,
            "ratio": ratio,
            "before_count": welch.before_count,
            "after_count": welch.after_count,
            "t_statistic": welch.t,
            "p_value": welch.p,
            "p_adjusted": adjusted,
            "ratio_ok": ratio_ok,
            "floor_ok": floor_ok,
            "stepped_up": stepped_up,
            "recovered": stepped_up & recovered,
            "candidate": candidate,
            "detected": detected,
        },
        schema_overrides={"group": pl.Int64, "changepoint_index": pl.Int64, "mixed_index": pl.Int64},
    ).with_columns(pl.col("p_adjusted", "ratio").fill_nan(None))
    best = candidates.sort(
        ["group", "detected", "candidate", "stepped_up", "ratio_ok", "p_adjusted", "changepoint_index"],
        descending=[False, True, True, True, True, False, False],
        nulls_last=True,
    ).unique("group", keep="first", maintain_order=True)
    base = groups.with_row_index("group").with_columns(pl.col("group").cast(pl.Int64))
    result = (
        base.join(best, on="group", how="left")
        .join(identity, on=keys, how="left")
        .join(searched_groups, on="group", how="left")
    )
    located = result.filter(pl.col("changepoint_index").is_not_null()).with_columns(
        pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("deployed_at")
    )
    latency = split_means(series, located, metric_keys).select(
        *metric_keys, "latency_before_ms", "latency_after_ms"
    )
    result = result.join(latency, on=metric_keys, how="left", maintain_order="left")
    tests = int(candidate.sum()) + fleet_tests
    too_short = pl.col("size") < 2 * config.unannounced_changepoint.min_segment
    is_detected = pl.col("detected").fill_null(False)
    result = result.with_columns(
        pl.when(is_detected)
        .then(pl.lit(DETECTED))
        .when(too_short)
        .then(pl.lit("too_few_samples"))
        .when(pl.col("_searched").is_null())
        .then(pl.lit(NO_STEP_ABOVE_GATES))
        .when(pl.col("changepoint_index").is_null())
        .then(pl.lit("no_significant_change_point"))
        .when(~pl.col("after_per_call").gt(pl.col("before_per_call")))
        .then(pl.lit("work_not_increased"))
        .when(~pl.col("ratio_ok"))
        .then(pl.lit("below_ratio_threshold"))
        .when(~pl.col("floor_ok"))
        .then(pl.lit("below_absolute_floor"))
        .when(~pl.col("stepped_up"))
        .then(pl.lit("not_tracked"))
        .when(pl.col("recovered"))
        .then(pl.lit("recovered"))
        .otherwise(pl.lit("not_significant_after_fdr"))
        .alias("reason"),
        *unannounced_columns(window_start, latest, config.fdr_q, tests),
    )
    result = result.drop("_searched").with_columns(_status())
    return _finish(result).sort(*SERIES_KEY, "metric")


def steps_possible(
    values: np.ndarray, sizes: np.ndarray, floors: np.ndarray, ratio_threshold: float
) -> np.ndarray:
    """Per group (``sizes`` consecutive ``values``): whether any step up could pass both gates. A segment's
    mean lies within the group's range, so a group whose max - min is below its floor, or whose max / min
    (min > 0) is below the ratio threshold, holds no step that passes them, whatever the change-point
    search finds: it is not searched (most work series of a fleet: the search was the detection run's
    largest step, issue 25)."""
    low, high = group_extremes(values, sizes)
    return possible_steps(low, high, sizes, floors, ratio_threshold)


def possible_steps(
    low: np.ndarray, high: np.ndarray, sizes: np.ndarray, floors: np.ndarray, ratio_threshold: float
) -> np.ndarray:
    """``steps_possible`` from each group's minimum and maximum."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_ok = np.where(low > 0, high / np.where(low > 0, low, 1.0) >= ratio_threshold, high > 0)
    return ratio_ok & (high - low >= floors) & (sizes > 0)


# ---------------------------------------------------------------------------------------------------------
# Work evidence on latency findings


def attach_work_evidence(
    findings: pl.DataFrame,
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: RegressionConfig = DEFAULT_CONFIG,
) -> pl.DataFrame:
    """performance_regressions rows with ``work_changed`` and ``work_evidence`` set on detected findings.

    For each detected finding: per-call work of the same series before vs after its change point, over the
    segments its Welch test compared (see ``split_means``). ``work_changed``: some tracked measure moved
    by the resource thresholds (ratio and floor, up or down). Other rows get nulls. Order is preserved.
    """
    columns = [c for c in findings.columns if c not in ("work_changed", "work_evidence")]
    columns = [*columns, "work_changed", "work_evidence"]
    if "work_changed" in findings.columns:
        columns = findings.columns
    nulls = findings.with_columns(
        pl.lit(None, dtype=pl.Boolean).alias("work_changed"),
        pl.lit(None, dtype=pl.String).alias("work_evidence"),
    ).select(columns)
    wanted = (pl.col("status") == DETECTED) & pl.col("changepoint_index").is_not_null()
    targets = findings.with_row_index("finding").filter(wanted)
    if targets.height == 0 or samples.height == 0:
        return nulls
    resource = config.resource
    points = analysed_columns(fingerprinted_samples(samples, texts, config.identity), WORK_COLUMNS)
    splits = targets.select(
        pl.col("finding").cast(pl.Int64),
        *SERIES_KEY,
        "window_start",
        "window_end",
        "changepoint_index",
        *(["mixed_index"] if "mixed_index" in targets.columns else []),
        "before_count",
        "after_count",
        "deployed_at",
    )
    windowed = points.join(
        splits.select("finding", *SERIES_KEY, "window_start", "window_end"), on=list(SERIES_KEY)
    )
    windowed = windowed.filter(
        (pl.col("interval_end") > pl.col("window_start")) & (pl.col("interval_end") <= pl.col("window_end"))
    )
    series = work_per_call(windowed, ["finding"])
    sides = split_means(series, splits, ["finding"]).join(_thresholds(resource), on="metric", how="left")
    sides = sides.filter(
        ~_untracked(
            pl.col("count_before"), pl.col("tracking_before"), pl.col("count_after"), pl.col("tracking_after")
        )
    )
    evidence: dict[int, tuple[bool, str]] = {}
    for finding, rows in sides.sort("finding").group_by("finding", maintain_order=True):
        evidence[int(finding[0])] = work_evidence(rows.to_dicts(), resource)  # type: ignore[arg-type]
    index = targets["finding"].to_list()
    changed = pl.Series([evidence.get(i, (None, None))[0] for i in index], dtype=pl.Boolean)
    text = pl.Series([evidence.get(i, (None, None))[1] for i in index], dtype=pl.String)
    attached = pl.DataFrame({"finding": targets["finding"], "work_changed": changed, "work_evidence": text})
    return (
        nulls.drop("work_changed", "work_evidence")
        .with_row_index("finding")
        .join(attached, on="finding", how="left", maintain_order="left")
        .drop("finding")
        .select(columns)
    )


def work_evidence(sides: list[dict], resource: ResourceConfig) -> tuple[bool, str]:
    """(work_changed, text) from one finding's per-metric before/after per call.

    Changed measures first, largest change first ("shared blocks per call ×74", "temp blocks per call
    fell ×0.2"), then the tracked ones that did not change ("rows unchanged"); a measure that is zero on
    both sides (WAL of a SELECT) is not mentioned. Nothing changed: "work per call unchanged (largest:
    shared blocks ×1.3)".
    """
    changed: list[tuple[float, str]] = []
    unchanged: list[tuple[float, str, float]] = []
    order = {m.name: i for i, m in enumerate(WORK_METRICS)}
    for row in sorted(sides, key=lambda r: order[r["metric"]]):
        metric = WORK_METRIC_BY_NAME[row["metric"]]
        before, after = row["before_per_call"], row["after_per_call"]
        if before is None or after is None or (before == 0 and after == 0):
            continue
        floor = row["floor"]
        ratio = math.inf if before == 0 else after / before
        strength = abs(math.log(ratio)) if 0 < ratio < math.inf else math.inf
        if ratio >= resource.ratio_threshold and after - before >= floor:
            shown = _times(ratio) if math.isfinite(ratio) else f"0 → {_number(after)}"
            changed.append((strength, f"{metric.display} per call {shown}"))
        elif ratio <= 1.0 / resource.ratio_threshold and before - after >= floor:
            changed.append((strength, f"{metric.display} per call fell ×{ratio:.2g}"))
        else:
            unchanged.append((strength, metric.display, ratio))
    if not changed:
        if not unchanged:
            return False, "no work per call recorded"
        _, name, ratio = max(unchanged)
        return False, f"work per call unchanged (largest: {name} ×{ratio:.2f})"
    parts = [text for _, text in sorted(changed, key=lambda c: -c[0])]
    parts += [f"{name} unchanged" for _, name, _ in unchanged]
    return True, ", ".join(parts)
