"""The regression detector at deploys: did a query get slower, when did it begin, and was it the deploy?

A series is the per-interval mean latency (Σ exec time / Σ calls of the interval) of one query in one
database of one instance (``jobs.query.series.SERIES_KEY``; the rules are ``jobs.query.identity``'s):
samples of the successive queryids of one fingerprint (table recreated, int4/int8 parameters,
search_path), of every user (unless the identity config splits users) and nesting level are merged per
interval end, so one query is analysed once, and reported under the queryid that most recently received a
sample and its text.

Deploy-aware analysis, per (deploy, instance, query) in the window around the deploy, batched over the fleet:
  stage 0  naive pre/post means; a relative change below ``latency_change_threshold`` is rejected at once
           (unless the few samples next to the deploy changed that much: an earlier episode may lift the
           naive pre-mean);
  stage 1  hierarchical E-divisive means (jobs.detect.changepoint) finds every significant change point of
           the window and keeps the one nearest the deploy (an earlier step never hides the deploy's own);
           none, or one farther than the tolerance from the deploy, is a no_regression with that reason;
  stage 2  Welch's t-test on the segments around that change point, bounded by its neighbouring change
           points, without the sample whose interval straddles the deploy (it mixes both regimes; see
           ``jobs.detect.segments.segments_around``); p < ``p_value_threshold`` and a higher mean after
           → detected.
Unannounced analysis (``jobs.detect.unannounced``): hierarchical E-divisive over a longer history finds
several change points per series (plan flips, data growth), every increase is Welch-tested against its
neighbouring segment, and the p-values of all candidates of the fleet are Benjamini-Hochberg adjusted
(reported in the output).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from polars.expr.whenthen import ChainedThen

from jobs.collect.deploys import deploys_for_instances
from jobs.detect.changepoint import ChangePoint, most_significant_change_points, segment_change_points
from jobs.detect.config import RegressionConfig
from jobs.schemas.analysed import PERFORMANCE_REGRESSIONS

if TYPE_CHECKING:  # scope imports this module's series building
    from jobs.detect.scope import AnalysisScope
from jobs.detect.segments import (
    calls_per_second,
    group_offsets,
    immaterial,
    piece_statistics,
    pre_step_sides,
    recovery_after_step,
    segments_around,
    settle_boundary,
    split_values,
    welch_tests,
)
from jobs.detect.verdicts import DETECTED, FINDING_KEY, INSUFFICIENT_DATA, NO_REGRESSION
from jobs.query.series import (
    SERIES_ID,
    SERIES_KEY,
    analysed_columns,
    fingerprinted_samples,
    group_runs,
    merge_intervals,
    require_columns,
    series_identity,
)

"""What a series is besides its key: one value per series (``jobs.query.identity``)."""


def one_row_per_finding(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per (instance, query, change time): the deploy analysis and the unannounced one often find
    the same change; the deploy row is kept (it names the cause). Order is otherwise preserved."""
    return frame.sort(pl.col("analysis") != "deploy", maintain_order=True).unique(
        FINDING_KEY, keep="first", maintain_order=True
    )


def known_columns(result: pl.DataFrame) -> list[str]:
    """The table's columns this step computed; later steps' columns (work evidence, kind) start null."""
    return [c for c in PERFORMANCE_REGRESSIONS.column_names if c in result.columns]


def empty_result() -> pl.DataFrame:
    return PERFORMANCE_REGRESSIONS.empty()


def unannounced_columns(
    window_start: datetime, window_end: datetime, fdr_q: float, tests: int
) -> list[pl.Expr]:
    """What every unannounced-analysis row says of itself (latency and resource findings alike): no deploy,
    the history window it searched, and how the false discovery rate was controlled over its ``tests``."""
    return [
        pl.lit("unannounced").alias("analysis"),
        pl.lit(None, dtype=pl.String).alias("deploy_id"),
        pl.lit(None, dtype=pl.String).alias("deploy_version"),
        pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("deployed_at"),
        pl.lit(window_start).alias("window_start"),
        pl.lit(window_end).alias("window_end"),
        pl.lit(f"benjamini-hochberg q={fdr_q} over {tests} candidate steps").alias("fdr_method"),
    ]


def deploy_window_points(
    points: pl.DataFrame, deploys: pl.DataFrame, config: RegressionConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the samples in each deploy's window, one row per (deploy, instance) with its window bounds).

    A sample is in a window when window_start < interval_end <= window_end; a sample near two deploys is
    in both windows (one row per deploy, ``deploy_id`` set: the samples carry no other column of their
    deploy, which the analyses join per deploy series; four more were 270 MiB at 10,000 series x 1 day).
    """
    targets = (
        deploys_for_instances(deploys, points["instance"].unique().to_list())
        .select(
            "deploy_id",
            pl.col("version").alias("deploy_version"),
            "instance",
            "deployed_at",
            (pl.col("deployed_at") - config.window_before).alias("window_start"),
            (pl.col("deployed_at") + config.window_after).alias("window_end"),
        )
        .sort("deploy_id", "instance", maintain_order=True)
    )
    # Targets by (deploy, instance) and each window's points by series number and time: the windows come
    # out in DEPLOY_SERIES_KEY order, so merging their intervals sorts nothing (the stable sort of 9 M
    # windowed rows on a string key was 1-2 s at 10,000 series x 1 day).
    numbered = SERIES_ID if SERIES_ID in points.columns else None
    return points_in_windows(points, targets, numbered, carry=("deploy_id",)), targets


def points_in_windows(
    points: pl.DataFrame,
    targets: pl.DataFrame,
    numbered: str | None = None,
    carry: tuple[str, ...] | None = None,
) -> pl.DataFrame:
    """``points`` rows with the columns of every target (instance, window_start, window_end, ...; with
    ``carry``, only those) whose window holds them (window_start < interval_end <= window_end), in target
    order, then point order (with ``numbered``, a column of integers: then by it, interval_end and point
    order).

    Why not a join on instance and a filter: that builds samples × deploys rows per instance before
    filtering (a 10k-series day with 300 deploys went past 14 GiB). Here each instance's interval ends are
    sorted once, a window's rows are found by binary search and put back in point order by sorting only
    them: the work is what the windows hold, with no sort of the whole fleet's rows (two such sorts and
    their repeats were 3-4 s of 5.6 at 10,000 series x 1 day)."""
    carried = list(carry) if carry is not None else [c for c in targets.columns if c != "instance"]
    out_columns = [*points.columns, *carried]
    if points.height == 0 or targets.height == 0:
        return points.join(targets, on="instance", how="inner").select(out_columns)
    ends = points["interval_end"].dt.epoch("us")
    known = ~ends.is_null().to_numpy()  # a null end is in no window
    ends_us = ends.fill_null(0).to_numpy()
    numbers = points[numbered].to_numpy() if numbered is not None else None
    rows_of = _rows_per_instance(points)
    index: dict[str, _WindowIndex] = {}
    picked: list[np.ndarray] = []
    owners: list[int] = []
    spans = targets.select(
        "instance",
        pl.col("window_start").dt.epoch("us"),
        pl.col("window_end").dt.epoch("us"),
    )
    for target, (instance, start, end) in enumerate(spans.iter_rows()):
        if instance not in rows_of or start is None or end is None:
            continue
        if instance not in index:
            rows = rows_of[instance]
            index[instance] = _WindowIndex.of(rows[known[rows]], ends_us, numbers)
        inside = index[instance].rows_within(start, end)
        if inside.shape[0]:
            picked.append(inside)
            owners.append(target)
    if not picked:
        return points.join(targets, on="instance", how="inner").select(out_columns).clear()
    row_of = np.concatenate(picked)
    target_of = np.repeat(np.asarray(owners, dtype=np.int64), [part.shape[0] for part in picked])
    taken = points[row_of]
    info = targets.select(carried)[target_of]
    return pl.concat([taken, info], how="horizontal").select(out_columns)


def _rows_per_instance(points: pl.DataFrame) -> dict[str, np.ndarray]:
    """Each instance's row numbers, ascending: ranges where the instances come in one run each (samples
    read instance by instance), else from one group_by (its lists keep row order)."""
    runs = points["instance"].rle().struct.unnest()
    names = runs["value"].to_list()
    if len(set(names)) == len(names):
        bounds = np.concatenate(([0], np.cumsum(runs["len"].to_numpy())))
        return {
            str(name): np.arange(bounds[i], bounds[i + 1], dtype=np.int64)
            for i, name in enumerate(names)
            if name is not None
        }
    grouped = points.select("instance").with_row_index("_row").group_by("instance").agg(pl.col("_row"))
    flat = grouped["_row"].explode().to_numpy().astype(np.int64)
    parts = np.split(flat, np.cumsum(grouped["_row"].list.len().to_numpy())[:-1])
    return {
        str(name): part
        for name, part in zip(grouped["instance"].to_list(), parts, strict=True)
        if name is not None
    }


@dataclass(frozen=True)
class _WindowIndex:
    """One instance's rows sorted for windows: by interval end (``numbers`` None: a window's rows are then
    sorted back into point order), or by (number, end, row) with each number's rows contiguous, so a
    window is one binary search per number and its rows come out already in that order."""

    rows: np.ndarray
    keys: np.ndarray
    numbers: np.ndarray | None  # the instance's distinct numbers (numbered index), ascending
    low: int  # the earliest end (numbered index): keys are number x span + (end - low)
    span: int

    @classmethod
    def of(cls, rows: np.ndarray, ends: np.ndarray, numbers: np.ndarray | None) -> _WindowIndex:
        # rows ascend: a run of consecutive rows (the usual case) is read as a slice, not gathered.
        whole = rows.shape[0] > 0 and int(rows[-1]) - int(rows[0]) + 1 == rows.shape[0]
        at: slice | np.ndarray = slice(int(rows[0]), int(rows[-1]) + 1) if whole else rows
        mine = ends[at]
        if numbers is not None and rows.shape[0]:
            owned = numbers[at].astype(np.int64)
            low = int(mine.min())
            span = int(mine.max()) - low + 1
            if int(owned.max()) < (1 << 62) // span - 1 and int(owned.min()) >= 0:
                owned *= span
                owned += mine - low
                order = np.argsort(owned, kind="stable")  # runs of entries ascend: timsort's easy case
                keys = owned[order]
                distinct = keys // span
                distinct = distinct[np.r_[True, distinct[1:] != distinct[:-1]]]
                return cls(order + rows[0] if whole else rows[order], keys, distinct, low, span)
        order = np.argsort(mine, kind="stable")
        return cls(rows[order], mine[order], None, 0, 0)

    def rows_within(self, start: int, end: int) -> np.ndarray:
        """The rows with start < interval end <= end, in this index's order."""
        if self.numbers is None:
            low, high = np.searchsorted(self.keys, [start, end], side="right")
            return np.sort(self.rows[low:high])
        # Offsets clipped to [-1, span - 1] so that a bound never reaches into a neighbouring number's keys.
        base = self.numbers * self.span
        first = np.searchsorted(self.keys, base + min(max(start - self.low, -1), self.span - 1), side="right")
        last = np.searchsorted(self.keys, base + min(max(end - self.low, -1), self.span - 1), side="right")
        sizes = last - first
        total = int(sizes.sum())
        if total == 0:
            return self.rows[:0]
        steps = np.repeat(first - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        return self.rows[steps + np.arange(total, dtype=np.int64)]


def with_deploy_times(
    merged: pl.DataFrame, deploy_info: pl.DataFrame, runs: pl.DataFrame | None
) -> pl.DataFrame:
    """``merged`` with each row's ``deployed_at`` (from ``deploy_info``: one row per deploy_id) and
    ``after_deploy`` (interval_end > deployed_at), as ``merged.join(deploy_info, on="deploy_id",
    maintain_order="left")`` gives them. With ``runs`` (``group_runs`` of merged, keyed by deploy_id and
    more) one small join per run instead of hashing every row's deploy id (9 M windowed rows at 10,000
    series x 1 day; with the survivors found by their runs too, the latency analysis went 2.2-2.8 -> 0.9 s
    there and the work analysis 2.5 -> 1.4-1.5 s, profiled alone)."""
    info = deploy_info.select("deploy_id", "deployed_at")
    if runs is None or not runs["deploy_id"].is_in(info["deploy_id"].implode()).all():
        joined = merged.join(info, on="deploy_id", maintain_order="left")  # an unknown deploy: no rows
    else:
        at = runs.select("deploy_id").join(info, on="deploy_id", how="left", maintain_order="left")
        row_run = np.repeat(np.arange(runs.height), runs["size"].to_numpy())
        joined = merged.with_columns(at["deployed_at"].gather(row_run))
    return joined.with_columns((pl.col("interval_end") > pl.col("deployed_at")).alias("after_deploy"))


DEPLOY_SERIES_KEY = ("deploy_id", *SERIES_KEY)
MERGED_COLUMNS = (
    *DEPLOY_SERIES_KEY,
    "interval_end",
    "interval_start",
    "calls",
    "total_exec_time",
    "interval_seconds",
    "value",
)
"""``merge_intervals(windowed, DEPLOY_SERIES_KEY)``'s columns, in its order."""


@dataclass(frozen=True)
class DeploySeries:
    """What the latency and the work deploy analyses both build from the same windows, built once: each
    (deploy, series)'s identity (``series_identity``) and its merged intervals with the work sums
    (``jobs.detect.work.merged_work``, whose latency columns are ``merge_intervals``' own: the same groups
    in the same order). Each cost about 0.4 s a call per 4 instances of 500 statements."""

    identity: pl.DataFrame
    merged: pl.DataFrame
    runs: pl.DataFrame | None
    """``group_runs(merged, DEPLOY_SERIES_KEY)``, found once for the merge's positions and both analyses."""


def scoped_deploy_windows(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    deploys: pl.DataFrame,
    config: RegressionConfig,
    scope: AnalysisScope | None,
    extra: tuple[str, ...] = (),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(identified samples in the windows of the deploys and series the scope re-examines, cut to what
    the analysis reads plus ``extra``; the deploy targets): the start both deploy analyses (latency and
    work per call) share."""
    from jobs.detect.scope import deploys_in_scope, windowed_in_scope

    require_columns(deploys, ("deploy_id", "version", "scope", "instance", "deployed_at"), "deploy_events")
    points = analysed_columns(fingerprinted_samples(samples, texts, config.identity), extra)
    deploys = deploys_in_scope(deploys, points["instance"].unique().to_list(), scope, config)
    windowed, targets = deploy_window_points(points, deploys, config)
    return windowed_in_scope(windowed, list(DEPLOY_SERIES_KEY), scope), targets


def detect_regressions(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    deploys: pl.DataFrame,
    config: RegressionConfig = RegressionConfig(),
    scope: AnalysisScope | None = None,
    windows: tuple[pl.DataFrame, pl.DataFrame] | None = None,
    shared: DeploySeries | None = None,
) -> pl.DataFrame:
    """One row per (deploy, instance, query) with samples in the deploy's window: detected or why not.

    ``samples``: query_samples rows plus ``instance``; ``texts``: query_texts rows plus ``instance`` (or
    fingerprint_texts output); ``deploys``: deploy_events rows (fleet deploys apply to every instance).
    ``scope`` (jobs.detect.scope): only the deploys whose window received new samples (or that no run has
    seen), and in them only the series with new samples; None = every deploy and series. ``windows``:
    ``scoped_deploy_windows`` of the same inputs, computed once for this and the work analysis;
    ``shared``: their series' identity and merged intervals (``DeploySeries``), also computed once.
    Pure and deterministic: the same inputs give the same rows in the same order.
    """
    require_columns(deploys, ("deploy_id", "version", "scope", "instance", "deployed_at"), "deploy_events")
    if samples.height == 0 or deploys.height == 0:
        return empty_result()
    keys = list(DEPLOY_SERIES_KEY)
    windowed, targets = windows or scoped_deploy_windows(samples, texts, deploys, config, scope)
    if windowed.height == 0:
        return empty_result()
    identity = shared.identity if shared is not None else series_identity(windowed, keys)
    merged = shared.merged.select(MERGED_COLUMNS) if shared is not None else merge_intervals(windowed, keys)
    # In the merge's order (each series' intervals by time), so the local means need no sort per group.
    runs = shared.runs if shared is not None else group_runs(merged, keys)
    series = with_deploy_times(merged, targets.drop("instance").unique("deploy_id"), runs)

    # Stage 0: naive pre/post means per series.
    summary = (
        series.group_by(keys, maintain_order=True)
        .agg(
            pl.len().alias("points"),
            pl.col("value").filter(~pl.col("after_deploy")).mean().alias("pre_mean"),
            pl.col("value").filter(pl.col("after_deploy")).mean().alias("post_mean"),
            pl.col("after_deploy").not_().sum().alias("pre_count"),
            pl.col("after_deploy").sum().alias("post_count"),
            # The deploy's own step shows in the samples next to it even when an earlier, slower
            # episode in the window lifts the naive pre-mean above the new level (issue 8, re-drop).
            pl.col("value")
            .filter(~pl.col("after_deploy"))
            .tail(config.local_change_samples)
            .mean()
            .alias("pre_local_mean"),
            pl.col("value")
            .filter(pl.col("after_deploy"))
            .head(config.local_change_samples)
            .mean()
            .alias("post_local_mean"),
        )
        .with_columns(
            ((pl.col("post_mean") - pl.col("pre_mean")) / pl.col("pre_mean")).alias("latency_change"),
            ((pl.col("post_local_mean") - pl.col("pre_local_mean")) / pl.col("pre_local_mean")).alias(
                "local_change"
            ),
        )
    )
    enough = (pl.col("pre_count") >= config.min_samples_per_side) & (
        pl.col("post_count") >= config.min_samples_per_side
    )
    summary = summary.with_columns(
        pl.when(~enough)
        .then(pl.lit("too_few_samples"))
        .when(
            pl.col("latency_change").fill_nan(None).is_null()
            | (
                (pl.col("latency_change") < config.latency_change_threshold)
                & ~(
                    (pl.col("local_change").fill_nan(None) >= config.latency_change_threshold).fill_null(
                        False
                    )
                    & (config.local_change_samples > 0)
                )
            )
        )
        .then(pl.lit("below_latency_change_threshold"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("reason")
    )

    # Stages 1 and 2 on the survivors, all at once.
    if runs is not None:  # the groups are the runs, in order: the survivors' rows by their runs
        tested = series.filter(pl.Series(np.repeat(summary["reason"].is_null().to_numpy(), runs["size"])))
    else:
        survivors = summary.filter(pl.col("reason").is_null()).select(keys)
        tested = series.join(survivors, on=keys, how="semi", maintain_order="left")
    staged = _changepoint_and_welch(tested, keys, config)
    result = summary.join(staged, on=keys, how="left", maintain_order="left")
    result = result.join(targets.drop("instance").unique("deploy_id"), on="deploy_id", how="left")
    result = result.join(identity, on=keys, how="left")
    reason = (
        stage_one_reasons(config)
        .when(pl.col("after_mean_ms") <= pl.col("before_mean_ms"))
        .then(pl.lit("latency_not_increased"))
        .when(pl.col("immaterial").fill_null(False))
        .then(pl.lit("below_materiality_threshold"))
        .when(~(pl.col("p_value") < config.p_value_threshold))
        .then(pl.lit("welch_not_significant"))
        .otherwise(pl.lit(DETECTED))
    )
    result = result.with_columns(reason.alias("reason")).with_columns(
        pl.when(pl.col("reason") == DETECTED)
        .then(pl.lit(DETECTED))
        .when(pl.col("reason") == "too_few_samples")
        .then(pl.lit(INSUFFICIENT_DATA))
        .otherwise(pl.lit(NO_REGRESSION))
        .alias("status"),
        pl.lit("deploy").alias("analysis"),
        (1.0 - pl.col("p_value")).alias("confidence"),
        pl.lit(None, dtype=pl.Float64).alias("p_adjusted"),
        pl.lit(None, dtype=pl.String).alias("fdr_method"),
    )
    return PERFORMANCE_REGRESSIONS.conform(result.select(known_columns(result))).sort(
        "deployed_at", "deploy_id", *SERIES_KEY
    )


def stage_one_reasons(config: RegressionConfig) -> ChainedThen:
    """The start of a deploy finding's reason, shared by latency and work: a stage 0 reason stands; then
    no significant change point, or one outside the tolerance. Callers continue the chain."""
    return (
        pl.when(pl.col("reason").is_not_null())
        .then(pl.col("reason"))
        .when(~pl.col("changepoint_significant").fill_null(False))
        .then(pl.lit("no_significant_change_point"))
        .when((pl.col("detected_change_at") - pl.col("deployed_at")).abs() > config.tolerance())
        .then(pl.lit("change_point_outside_tolerance"))
    )


def _nearest_change_point(cuts: list[ChangePoint], starts_us: np.ndarray, deployed_us: int) -> ChangePoint:
    """The change point whose first new-regime sample starts nearest the deploy (ties: lower p, earlier)."""
    return min(
        cuts,
        key=lambda c: (abs(int(starts_us[c.index or 0]) - deployed_us), c.p_value, c.index or 0),
    )


def _changepoint_and_welch(series: pl.DataFrame, keys: list[str], config: RegressionConfig) -> pl.DataFrame:
    """Change point nearest the deploy of each series, then Welch on the segments around it.

    Every significant change point of the window comes from ``segment_change_points`` (seeded binary
    segmentation by default, ``config.changepoint.segmentation``), run on every window: not only on
    those whose single most significant split is significant, since the global split of
    fast-slow-fast-slow is mixed and often insignificant although each step is plain. Of several, the
    one nearest the deploy is kept, so an earlier step (an index dropped, restored, dropped again at
    this deploy) never hides the deploy's own; changepoint_p_value is that point's (tested on the
    segment between its neighbours). Welch compares the segments it bounds with its neighbouring change
    points (see ``segments_around``). A window without any significant change point reports its most
    significant split, which stage 1 then rejects.
    """
    columns = {
        "changepoint_index": pl.Int64,
        "mixed_index": pl.Int64,
        "detected_change_at": pl.Datetime("us", "UTC"),
        "changepoint_p_value": pl.Float64,
        "changepoint_significant": pl.Boolean,
        "before_mean_ms": pl.Float64,
        "after_mean_ms": pl.Float64,
        "before_count": pl.Int64,
        "after_count": pl.Int64,
        "t_statistic": pl.Float64,
        "p_value": pl.Float64,
        "added_load_ms_per_s": pl.Float64,
        "immaterial": pl.Boolean,
    }
    groups = series.group_by(keys, maintain_order=True).agg(
        pl.len().alias("size"), pl.col("deployed_at").first().dt.epoch("us").alias("deployed_us")
    )
    if groups.height == 0:
        return pl.DataFrame(schema={**{k: pl.String for k in keys}, **columns})
    values = series["value"].to_numpy().astype(np.float64)
    starts_us = series["interval_start"].dt.epoch("us").to_numpy()
    ends_us = series["interval_end"].dt.epoch("us").to_numpy()
    sizes = groups["size"].to_numpy().astype(np.int64)
    deployed_us = groups["deployed_us"].to_numpy()
    offsets = group_offsets(sizes)
    pieces_of = split_values(values, offsets)
    single = most_significant_change_points(pieces_of, config.changepoint)
    segmented = segment_change_points(
        pieces_of, config.changepoint, max_change_points=config.deploy_max_change_points
    )
    chosen = list(single)
    # Piece 2g = before the change point, 2g + 1 = from it on, 2G = in neither mean; without a change
    # point the whole series is piece 2g (stage 1 rejects it; its mean is reported as before_mean).
    dump = 2 * sizes.shape[0]
    piece = np.full(values.shape[0], dump, dtype=np.int64)
    change_start = np.full(sizes.shape[0], -1, dtype=np.int64)
    first_new = np.full(sizes.shape[0], -1, dtype=np.int64)  # per series: first new-regime sample
    mixed_at = np.full(sizes.shape[0], -1, dtype=np.int64)  # per series: the mixed sample, -1: none
    later: dict[int, list[int]] = {}  # per series: the change points after the chosen one
    straddle_at = np.full(sizes.shape[0], -1, dtype=np.int64)  # per series: the sample holding the deploy
    for g in range(sizes.shape[0]):
        piece[offsets[g] : offsets[g + 1]] = 2 * g
    for g, cuts in enumerate(segmented):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        if not cuts:
            # No significant change point anywhere: the window's most significant split is reported
            # (stage 1 rejects it unless significant; then it is the one split, Welch on both sides).
            point = single[g]
            if point.index is not None:
                piece[lo + point.index : hi] = 2 * g + 1
                change_start[g] = lo + point.index
            continue
        point = _nearest_change_point(cuts, starts_us[lo:hi], int(deployed_us[g]))
        chosen[g] = point
        cut = int(point.index or 0)
        at = [int(c.index or 0) for c in cuts]
        position = at.index(cut)
        previous_cut = at[position - 1] if position > 0 else 0
        next_cut = at[position + 1] if position + 1 < len(at) else hi - lo
        pair = segments_around(
            cut, previous_cut, next_cut, starts_us[lo:hi], ends_us[lo:hi], int(deployed_us[g])
        )
        # The data settle the onset (a deploy marked late may straddle a wholly new sample); the sample
        # straddling the deploy stays in neither level whatever they say.
        before, after = pair.before, pair.after
        if pair.transition is not None:
            if pair.transition < cut:
                before = np.append(before, pair.transition)
            else:
                after = np.insert(after, 0, pair.transition)
        settled = settle_boundary(values[lo:hi], before, after, cut, config)
        if settled.mixed is not None:
            mixed_at[g] = settled.mixed
        straddling = -1 if pair.transition is None else pair.transition
        straddle_at[g] = straddling
        piece[lo:hi] = dump
        piece[lo + settled.before[settled.before != straddling]] = 2 * g
        piece[lo + settled.after[settled.after != straddling]] = 2 * g + 1
        first_new[g] = settled.first_new
        change_start[g] = lo + first_new[g]
        later[g] = [c for c in at if c > cut]
    if config.pre_step_levels:
        _before_from_pre_step(values, offsets, piece, first_new, (mixed_at, straddle_at), config)
    index = np.array([-1 if p.index is None else p.index for p in chosen], dtype=np.int64)
    located = index >= 0
    index = np.where(first_new >= 0, first_new, index)
    count, mean, squares = piece_statistics(values, piece, dump + 1)
    welch = welch_tests(
        count[0:dump:2], mean[0:dump:2], squares[0:dump:2], count[1:dump:2], mean[1:dump:2], squares[1:dump:2]
    )
    rate = calls_per_second(series, piece, dump + 1)[1:dump:2]
    added_load = (welch.after_mean - welch.before_mean) * rate
    small = immaterial(welch.before_mean, welch.after_mean, rate, config)
    starts = series["interval_start"]
    change_at = [starts[int(change_start[g])] if located[g] else None for g in range(sizes.shape[0])]
    recovered_at, latest_mean = recovery_after_step(
        values, offsets, later, welch.before_mean, config.latency_change_threshold
    )
    return (
        groups.drop("size", "deployed_us")
        .with_columns(
            pl.Series("changepoint_index", [int(i) if i >= 0 else None for i in index], dtype=pl.Int64),
            pl.Series("mixed_index", [int(i) if i >= 0 else None for i in mixed_at], dtype=pl.Int64),
            pl.Series("detected_change_at", change_at, dtype=pl.Datetime("us", "UTC")),
            pl.Series("changepoint_p_value", [p.p_value for p in chosen], dtype=pl.Float64),
            pl.Series("changepoint_significant", [p.significant for p in chosen], dtype=pl.Boolean),
            pl.Series("before_mean_ms", welch.before_mean),
            pl.Series("after_mean_ms", np.where(located, welch.after_mean, np.nan)),
            pl.Series("before_count", welch.before_count),
            pl.Series("after_count", welch.after_count),
            pl.Series("t_statistic", np.where(located, welch.t, np.nan)),
            pl.Series("p_value", np.where(located, welch.p, np.nan)),
            pl.Series("added_load_ms_per_s", np.where(located, added_load, np.nan)),
            pl.Series("immaterial", located & small, dtype=pl.Boolean),
            pl.Series(
                "recovered_at",
                [None if i < 0 else starts[int(offsets[g]) + int(i)] for g, i in enumerate(recovered_at)],
                dtype=pl.Datetime("us", "UTC"),
            ),
            pl.Series("latest_mean_ms", latest_mean),
        )
        .with_columns(
            pl.col(
                "before_mean_ms",
                "after_mean_ms",
                "t_statistic",
                "p_value",
                "added_load_ms_per_s",
                "latest_mean_ms",
            ).fill_nan(None)
        )
    )


def _before_from_pre_step(
    values: np.ndarray,
    offsets: np.ndarray,
    piece: np.ndarray,
    first_new: np.ndarray,
    excluded: tuple[np.ndarray, ...],
    config: RegressionConfig,
) -> None:
    """Piece 2g (series g's before side) becomes its samples since the last change point found on the
    samples before the step alone (jobs.detect.segments.pre_step_sides), in place; series without a
    settled step (``first_new`` -1) keep theirs."""
    stepped = np.flatnonzero(first_new >= 0)
    if stepped.size == 0:
        return
    sides = pre_step_sides(
        values,
        offsets,
        stepped,
        first_new[stepped],
        tuple(sample[stepped] for sample in excluded),
        config.changepoint,
        config.deploy_max_change_points,
    )
    dump = 2 * (offsets.shape[0] - 1)
    for g, start, end in zip(stepped, sides.start, sides.end, strict=True):
        lo = int(offsets[g])
        window = piece[lo : lo + int(end)]
        window[window == 2 * g] = dump
        window[int(start) :] = 2 * g
