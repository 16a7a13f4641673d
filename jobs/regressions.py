"""The regression detector: did a query get slower, when did it begin, and was it the deploy?

A series is the per-interval mean latency (Σ exec time / Σ calls of the interval) of one query in one
database of one instance (``SERIES_KEY``; the rules are ``jobs.detect.identity``'s): samples of the
successive queryids of one fingerprint (table recreated, int4/int8 parameters, search_path), of every
user (unless the identity config splits users) and nesting level are merged per interval end, so one
query is analysed once, and reported under the queryid that most recently received a sample and its text.

Deploy-aware analysis, per (deploy, instance, query) in the window around the deploy, batched over the fleet:
  stage 0  naive pre/post means; a relative change below ``latency_change_threshold`` is rejected at once
           (unless the few samples next to the deploy changed that much: an earlier episode may lift the
           naive pre-mean);
  stage 1  hierarchical E-divisive means (jobs.changepoint) finds every significant change point of the
           window and keeps the one nearest the deploy (an earlier step never hides the deploy's own);
           none, or one farther than the tolerance from the deploy, is a no_regression with that reason;
  stage 2  Welch's t-test on the segments around that change point, bounded by its neighbouring change
           points, without the sample whose interval straddles the deploy (it mixes both regimes; see
           ``segments_around``); p < ``p_value_threshold`` and a higher mean after → detected.
Unannounced analysis: hierarchical E-divisive over a longer history finds several change points per series
(plan flips, data growth), every increase is Welch-tested against its neighbouring segment, and the
p-values of all candidates of the fleet are Benjamini-Hochberg adjusted (reported in the output).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC as UTC_ZONE
from datetime import datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from polars.expr.whenthen import ChainedThen
from scipy import stats

from jobs.changepoint import (
    ChangePoint,
    ChangePointConfig,
    most_significant_change_points,
    segment_change_points,
)
from jobs.collect.deploys import deploys_for_instances
from jobs.detect.changepoint_memo import ChangePointMemo, FoundCuts, memo_key
from jobs.detect.config import RegressionConfig as RegressionConfig
from jobs.detect.fleet_fdr import FdrAdjust, within_call
from jobs.detect.identity import IdentityConfig, identify_samples
from jobs.schemas import PERFORMANCE_REGRESSIONS

if TYPE_CHECKING:  # scope imports this module's series building
    from jobs.detect.scope import AnalysisScope

DETECTED = "detected"
NO_REGRESSION = "no_regression"
INSUFFICIENT_DATA = "insufficient_data"

DEFAULT_IDENTITY = IdentityConfig()

SERIES_KEY = ("instance", "series")
"""The columns naming a series: ``series`` is ``jobs.detect.identity``'s name (database, fingerprint,
chain of successive queryids) and is unique within an instance."""


class RegressionInputError(ValueError):
    """Input frames lack columns or hold values the detector cannot use; the message names which."""


# ---------------------------------------------------------------------------------------------------------
# Series: merge queryids of one fingerprint per interval


def _require(frame: pl.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise RegressionInputError(f"{what}: missing columns {missing}")


# Marks a frame ``fingerprinted_samples`` identified (a column, so it survives filters and joins).
IDENTIFIED = "_identified"


def fingerprinted_samples(
    samples: pl.DataFrame, texts: pl.DataFrame, identity: IdentityConfig = DEFAULT_IDENTITY
) -> pl.DataFrame:
    """Samples with ``fingerprint``, ``query``, ``series`` and ``database`` (``jobs.detect.identity``);
    texts: raw query_texts or fingerprint_texts output.

    Samples that already carry ``series`` (identified by this function: lake samples never do) are
    returned as they are, so one detection pass identifies its samples once (``detect_from_frames``)
    and every step that calls this on them reuses that: on a 10k-series day each identification cost
    GiBs and a run did it seven times."""
    if IDENTIFIED in samples.columns and "series" in samples.columns:
        return samples
    _require(
        samples,
        ("instance", "queryid", "interval_start", "interval_end", "calls", "total_exec_time"),
        "samples",
    )
    bad = samples.filter(~pl.col("total_exec_time").is_finite() | (pl.col("calls") <= 0))
    if bad.height:
        row = bad.row(0, named=True)
        raise RegressionInputError(
            f"samples: instance {row['instance']} queryid {row['queryid']} at {row['interval_end']}: "
            "calls must be positive and exec time finite (build samples with jobs.samples)"
        )
    return identify_samples(samples, texts, identity).with_columns(pl.lit(True).alias(IDENTIFIED))


def merge_intervals(frame: pl.DataFrame, keys: list[str], sums: tuple[str, ...] = ()) -> pl.DataFrame:
    """One point per (keys, interval_end): calls-weighted mean latency over the merged queryids (and the
    totals of the ``sums`` columns, for per-call work)."""
    return (
        frame.group_by([*keys, "interval_end"])
        .agg(
            pl.col("interval_start").min(),
            pl.col("calls").sum(),
            pl.col("total_exec_time").sum(),
            *(pl.col(c).sum() for c in sums),
        )
        .with_columns(
            ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() / 1e6).alias(
                "interval_seconds"
            )
        )
        .with_columns((pl.col("total_exec_time") / pl.col("calls")).alias("value"))
        .sort([*keys, "interval_end"])
    )


SERIES_COLUMNS = ("fingerprint", "dbid", "database")
# What the latency analyses read of an identified sample (the lake's samples carry ~40 columns).
ANALYSED_COLUMNS = (
    *SERIES_KEY,
    "queryid",
    "query",
    *SERIES_COLUMNS,
    "interval_start",
    "interval_end",
    "calls",
    "total_exec_time",
)


def analysed_columns(points: pl.DataFrame, extra: tuple[str, ...] = ()) -> pl.DataFrame:
    """``points`` cut to what an analysis reads (plus ``extra``): the window gather and the sorts copy
    every column, and at 10k series × 1 day the unused ones cost GiBs (the benchmark's profile)."""
    wanted = set(ANALYSED_COLUMNS) | set(extra)
    return points.select([c for c in points.columns if c in wanted])


"""What a series is besides its key: one value per series (``jobs.detect.identity``)."""


def series_identity(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per series: the queryid with the latest sample (ties: lowest queryid) and that queryid's own text,
    all queryids, and the series' fingerprint, dbid and database."""
    described = [c for c in SERIES_COLUMNS if c in frame.columns and c not in keys]
    # Sorted on the columns read only: sorting the whole frame copied its every column (texts included).
    read = dict.fromkeys([*keys, "interval_end", "queryid", "query", *described])
    latest = (
        frame.select(*read)
        .sort(
            [*keys, "interval_end", "queryid"],
            descending=[*([False] * len(keys)), True, False],
            nulls_last=True,
        )
        .unique(keys, keep="first", maintain_order=True)
        .select(*keys, "queryid", "query", *described)
    )
    merged = frame.group_by(keys).agg(
        pl.col("queryid").unique().sort().cast(pl.String).str.join(",").alias("queryids")
    )
    return latest.join(merged, on=keys, how="left")


# ---------------------------------------------------------------------------------------------------------
# Statistics on many series at once


@dataclass(frozen=True)
class WelchResult:
    """Per test: segment means, counts, Welch's t and two-sided p (ddof = 1, unequal variances)."""

    before_mean: np.ndarray
    after_mean: np.ndarray
    before_count: np.ndarray
    after_count: np.ndarray
    t: np.ndarray
    p: np.ndarray


def piece_statistics(values: np.ndarray, piece: np.ndarray, pieces: int) -> tuple[np.ndarray, ...]:
    """Count, mean and sum of squared deviations per piece id, two-pass (precise for tiny variances)."""
    count = np.bincount(piece, minlength=pieces).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(piece, weights=values, minlength=pieces) / count
    deviation = values - mean[piece]
    squares = np.bincount(piece, weights=deviation * deviation, minlength=pieces)
    return count, mean, squares


def calls_per_second(series: pl.DataFrame, piece: np.ndarray, pieces: int) -> np.ndarray:
    """Calls per wall-clock second of each piece (for the added load of a slowdown)."""
    calls = np.bincount(piece, weights=series["calls"].to_numpy().astype(np.float64), minlength=pieces)
    seconds = np.bincount(piece, weights=series["interval_seconds"].to_numpy(), minlength=pieces)
    with np.errstate(invalid="ignore", divide="ignore"):
        return calls / seconds


def immaterial(
    before_ms: np.ndarray, after_ms: np.ndarray, after_rate: np.ndarray, config: RegressionConfig
) -> np.ndarray:
    """True where a slowdown adds too little load and too little latency per call to be worth an alert."""
    increase = after_ms - before_ms
    return (increase * after_rate < config.min_added_load_ms_per_s) & (
        increase < config.min_latency_increase_ms
    )


def welch_tests(
    count_a: np.ndarray,
    mean_a: np.ndarray,
    squares_a: np.ndarray,
    count_b: np.ndarray,
    mean_b: np.ndarray,
    squares_b: np.ndarray,
) -> WelchResult:
    """Welch's t-test of b against a for every pair of pieces; a zero-variance pair gets p = 0 or 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        std_a = np.sqrt(squares_a / (count_a - 1))
        std_b = np.sqrt(squares_b / (count_b - 1))
        t, p = stats.ttest_ind_from_stats(mean_b, std_b, count_b, mean_a, std_a, count_a, equal_var=False)
    t = np.asarray(t, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    degenerate = (squares_a + squares_b) == 0
    p = np.where(degenerate, np.where(mean_a == mean_b, 1.0, 0.0), p)
    t = np.where(degenerate, np.where(mean_a == mean_b, 0.0, np.sign(mean_b - mean_a) * np.inf), t)
    return WelchResult(mean_a, mean_b, count_a.astype(np.int64), count_b.astype(np.int64), t, p)


def group_offsets(group_sizes: np.ndarray) -> np.ndarray:
    offsets = np.zeros(group_sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(group_sizes, out=offsets[1:])
    return offsets


def split_values(values: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [values[offsets[i] : offsets[i + 1]] for i in range(offsets.shape[0] - 1)]


# ---------------------------------------------------------------------------------------------------------
# Deploy-aware analysis


FINDING_KEY = [*SERIES_KEY, "detected_change_at"]


def one_row_per_finding(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per (instance, query, change time): the deploy analysis and the unannounced one often find
    the same change; the deploy row is kept (it names the cause). Order is otherwise preserved."""
    return frame.sort(pl.col("analysis") != "deploy", maintain_order=True).unique(
        FINDING_KEY, keep="first", maintain_order=True
    )


def _known_columns(result: pl.DataFrame) -> list[str]:
    """The table's columns this step computed; later steps' columns (work evidence, kind) start null."""
    return [c for c in PERFORMANCE_REGRESSIONS.column_names if c in result.columns]


def _empty_result() -> pl.DataFrame:
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
    in both windows (one row per deploy, ``deploy_id`` set).
    """
    targets = deploys_for_instances(deploys, points["instance"].unique().to_list()).select(
        "deploy_id",
        pl.col("version").alias("deploy_version"),
        "instance",
        "deployed_at",
        (pl.col("deployed_at") - config.window_before).alias("window_start"),
        (pl.col("deployed_at") + config.window_after).alias("window_end"),
    )
    return points_in_windows(points, targets), targets


def points_in_windows(points: pl.DataFrame, targets: pl.DataFrame) -> pl.DataFrame:
    """``points`` rows with the columns of every target (instance, window_start, window_end, ...) whose
    window holds them (window_start < interval_end <= window_end), in target order, then point order.

    Why not a join on instance and a filter: that builds samples × deploys rows per instance before
    filtering (a 10k-series day with 300 deploys went past 14 GiB). Here each instance's samples are
    sorted once and every window's rows are found by binary search, so the work and memory are what the
    windows hold."""
    out_columns = [*points.columns, *(c for c in targets.columns if c != "instance")]
    if points.height == 0 or targets.height == 0:
        return points.join(targets, on="instance", how="inner").select(out_columns)
    order = (
        points.select(pl.col("instance"), pl.col("interval_end").dt.epoch("us").alias("_end"))
        .with_row_index("_row")
        .sort("instance", "_end", "_row")
    )
    rows = order["_row"].to_numpy()
    ends = order["_end"].to_numpy()
    blocks = (
        order.with_row_index("_pos")
        .group_by("instance")
        .agg(pl.col("_pos").min().alias("_first"), (pl.col("_pos").max() + 1).alias("_last"))
    )
    spans = (
        targets.with_row_index("_target")
        .join(blocks, on="instance", how="inner")
        .sort("_target")
        .select(
            "_target",
            "_first",
            "_last",
            pl.col("window_start").dt.epoch("us").alias("_from"),
            pl.col("window_end").dt.epoch("us").alias("_to"),
        )
    )
    if spans.height == 0:
        return points.join(targets, on="instance", how="inner").select(out_columns)
    first, last = spans["_first"].to_numpy(), spans["_last"].to_numpy()
    low = np.empty(spans.height, dtype=np.int64)
    high = np.empty(spans.height, dtype=np.int64)
    for start in np.unique(first):
        mine = first == start
        block = ends[start : last[mine][0]]
        low[mine] = start + np.searchsorted(block, spans["_from"].to_numpy()[mine], side="right")
        high[mine] = start + np.searchsorted(block, spans["_to"].to_numpy()[mine], side="right")
    lengths = high - low
    total = int(lengths.sum())
    starts = np.repeat(low - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    positions = starts + np.arange(total, dtype=np.int64)
    # Within a window, points in their input order (as the join and filter gave them).
    picked = pl.DataFrame(
        {
            "_target": np.repeat(spans["_target"].to_numpy(), lengths),
            "_row": rows[positions].astype(np.int64),
        }
    ).sort("_target", "_row")
    taken = points[picked["_row"].to_numpy()]
    info = targets.drop("instance")[picked["_target"].to_numpy()]
    return pl.concat([taken, info], how="horizontal").select(out_columns)


DEPLOY_SERIES_KEY = ("deploy_id", *SERIES_KEY)


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
) -> pl.DataFrame:
    """One row per (deploy, instance, query) with samples in the deploy's window: detected or why not.

    ``samples``: query_samples rows plus ``instance``; ``texts``: query_texts rows plus ``instance`` (or
    fingerprint_texts output); ``deploys``: deploy_events rows (fleet deploys apply to every instance).
    ``scope`` (jobs.detect.scope): only the deploys whose window received new samples (or that no run has
    seen), and in them only the series with new samples; None = every deploy and series.
    Pure and deterministic: the same inputs give the same rows in the same order.
    """
    _require(deploys, ("deploy_id", "version", "scope", "instance", "deployed_at"), "deploy_events")
    if samples.height == 0 or deploys.height == 0:
        return _empty_result()
    keys = list(DEPLOY_SERIES_KEY)
    windowed, targets = scoped_deploy_windows(samples, texts, deploys, config, scope)
    if windowed.height == 0:
        return _empty_result()
    identity = series_identity(windowed, keys)
    series = merge_intervals(windowed, keys).join(
        targets.drop("instance").unique("deploy_id"), on="deploy_id"
    )
    series = series.with_columns((pl.col("interval_end") > pl.col("deployed_at")).alias("after_deploy"))

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
            .sort_by("interval_end")
            .filter(~pl.col("after_deploy").sort_by("interval_end"))
            .tail(config.local_change_samples)
            .mean()
            .alias("pre_local_mean"),
            pl.col("value")
            .sort_by("interval_end")
            .filter(pl.col("after_deploy").sort_by("interval_end"))
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
    return PERFORMANCE_REGRESSIONS.conform(result.select(_known_columns(result))).sort(
        "deployed_at", "deploy_id", *SERIES_KEY
    )


# ---------------------------------------------------------------------------------------------------------
# Attribution: which deploy a deploy-analysis change point is blamed on (issue 9)

ATTRIBUTED_ELSEWHERE = "attributed_to_other_deploy"


def sample_intervals(samples: pl.DataFrame) -> dict[str, timedelta]:
    """Per instance: the median sample interval (interval_end - interval_start), the granularity of its
    change times."""
    if samples.height == 0:
        return {}
    medians = samples.group_by("instance").agg(
        (pl.col("interval_end") - pl.col("interval_start")).median().alias("interval")
    )
    return {row["instance"]: row["interval"] for row in medians.iter_rows(named=True)}


def _deploy_label(version: str | None, deployed_at: datetime) -> str:
    return f"{version} at {deployed_at.astimezone(UTC_ZONE).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def attribute_to_deploys(
    rows: pl.DataFrame,
    deploys: pl.DataFrame,
    intervals: dict[str, timedelta],
    config: RegressionConfig = RegressionConfig(),
) -> pl.DataFrame:
    """Deploy-analysis rows with each detected change point blamed on one deploy and the others listed.

    Each deploy's window is analysed on its own, so one step is often detected at every deploy within the
    tolerance of it (two deploys 5 minutes apart: both). The rule: a change point is attributed to the
    latest deploy at or before it within the tolerance; ``other_deploys`` lists the other candidate causes
    (the instance's other deploys within the tolerance at or before it) and ``deploys_after`` the ones
    after it (a restore, say: mentioned, never a cause). "At or before" has ``attribution_slack_samples``
    (1) sample intervals of slack (the instance's median interval): ``detected_change_at`` is the start of
    the first new-regime interval, so a deploy inside that interval explains it (deployed_at <=
    detected_change_at + slack; at the boundary too, as the change point of a step at an interval
    boundary often lands one sample early). When no deploy lies at or before the change (the change point
    landed early by more than a sample), the nearest deploy within the tolerance is blamed, as the
    per-deploy analysis did.

    A detected row whose own deploy is not the one blamed becomes ``no_regression`` with reason
    ``attributed_to_other_deploy``; when the blamed deploy's own row of that series is not a detection
    (its post window not filled yet, say), the detection moves to the blamed deploy's row (deploy columns
    replaced, the analysed window kept in window_start/window_end). Pure and deterministic.
    """
    nulls = [pl.lit(None, dtype=pl.String).alias(c) for c in ("other_deploys", "deploys_after")]
    if rows.height == 0:
        return rows.with_columns(nulls)
    keys = list(SERIES_KEY)
    tolerance = config.tolerance()
    targets = deploys_for_instances(deploys, rows["instance"].unique().to_list()) if deploys.height else None
    by_instance: dict[str, list[dict]] = {}
    if targets is not None:
        for deploy in targets.iter_rows(named=True):
            by_instance.setdefault(deploy["instance"], []).append(deploy)
    table = rows.with_columns(nulls)
    is_detected = pl.col("status") == DETECTED
    # Only detected rows become Python records (a fleet's deploy analysis has millions of rows).
    records = table.filter(is_detected).to_dicts()
    if not records:
        return table
    key_of = {(r["deploy_id"], *(r[k] for k in keys)): i for i, r in enumerate(records)}
    # Per detected row: (the deploy blamed, the other deploys within the tolerance).
    blamed: dict[int, tuple[dict, list[dict]]] = {}
    # Per detected row: the moment after which a deploy cannot have caused its change (with the slack).
    latest_cause: dict[int, datetime] = {}
    for i, record in enumerate(records):
        change = record["detected_change_at"]
        near = sorted(
            (
                d
                for d in by_instance.get(record["instance"], [])
                if abs(d["deployed_at"] - change) <= tolerance
            ),
            key=lambda d: (d["deployed_at"], d["deploy_id"]),
        )
        if not near:  # the row's own deploy always is (stage 1); a deploys frame without it: leave it
            continue
        slack = intervals.get(record["instance"], timedelta(0)) * config.attribution_slack_samples
        latest_cause[i] = change + slack
        before = [d for d in near if d["deployed_at"] <= change + slack]
        chosen = (
            before[-1]
            if before
            else min(near, key=lambda d: (abs(d["deployed_at"] - change), d["deployed_at"]))
        )
        blamed[i] = (chosen, [d for d in near if d["deploy_id"] != chosen["deploy_id"]])

    def deploys_text(deploys: list[dict]) -> str | None:
        return ", ".join(_deploy_label(d["version"], d["deployed_at"]) for d in deploys) or None

    def others_text(others: list[dict], i: int) -> dict[str, str | None]:
        """The other candidate causes (at or before the change) and the deploys after it, apart: a
        restore 8 minutes after a dropped key was listed as a candidate of the drop (issue 21)."""
        return {
            "other_deploys": deploys_text([d for d in others if d["deployed_at"] <= latest_cause[i]]),
            "deploys_after": deploys_text([d for d in others if d["deployed_at"] > latest_cause[i]]),
        }

    # Per (blamed deploy, series) without its own detection: the moved detection nearest that deploy.
    moved: dict[tuple, dict] = {}
    for i in sorted(blamed):
        record = records[i]
        chosen, others = blamed[i]
        if chosen["deploy_id"] == record["deploy_id"]:
            record.update(others_text(others, i))
            continue
        key = (chosen["deploy_id"], *(record[k] for k in keys))
        target = key_of.get(key)
        if not (target in blamed and blamed[target][0]["deploy_id"] == records[target]["deploy_id"]):
            candidate = {
                **record,
                "deploy_id": chosen["deploy_id"],
                "deploy_version": chosen["version"],
                "deployed_at": chosen["deployed_at"],
                **others_text(others, i),
            }
            distance = abs(candidate["detected_change_at"] - chosen["deployed_at"])
            current = moved.get(key)
            if current is None or distance < abs(current["detected_change_at"] - chosen["deployed_at"]):
                moved[key] = candidate
        record["status"] = NO_REGRESSION
        record["reason"] = ATTRIBUTED_ELSEWHERE
        record["other_deploys"] = deploys_text([chosen])  # the deploy it is attributed to
    # A moved detection takes the place of the blamed deploy's own row of that series (detected rows:
    # in ``records``; any other row: dropped from the rest of the table).
    for key, candidate in moved.items():
        if key in key_of:
            records[key_of[key]] = candidate
        else:
            records.append(candidate)
    rest = table.filter(~is_detected)
    if moved:
        replaced = pl.DataFrame(
            [dict(zip(["deploy_id", *keys], key, strict=True)) for key in moved if key not in key_of],
            schema={c: table.schema[c] for c in ["deploy_id", *keys]},
        )
        rest = rest.join(replaced, on=["deploy_id", *keys], how="anti", nulls_equal=True)
    out = pl.concat([rest, pl.DataFrame(records, schema=table.schema)])
    return out.sort("deployed_at", "deploy_id", *keys, maintain_order=True)


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


@dataclass(frozen=True)
class SegmentPair:
    """The samples (indices into one series) Welch compares around one change point."""

    before: np.ndarray
    after: np.ndarray
    transition: int | None
    """The sample whose interval straddles the deploy at the change point: in neither mean."""


def segments_around(
    cut: int,
    previous_cut: int,
    next_cut: int,
    starts_us: np.ndarray,
    ends_us: np.ndarray,
    deployed_us: int,
) -> SegmentPair:
    """Before = [previous_cut, cut), after = [cut, next_cut), each without the samples of a transition.

    The only change time known below sample resolution is the deploy's: when the interval of one of the
    two samples adjacent to the cut has interval_start < deployed_at < interval_end, that sample mixes
    both regimes and is excluded (whichever side E-divisive put it on). At a neighbouring change point
    (previous_cut > 0, next_cut < size) the change time inside its intervals is unknown, so the one
    sample of this segment adjacent to it (previous_cut, resp. next_cut - 1) is excluded: the mixed
    sample there is either that one or one outside the segment.
    """
    transition = None
    for j in (cut - 1, cut):
        if 0 <= j < starts_us.shape[0] and starts_us[j] < deployed_us < ends_us[j]:
            transition = j
    size = starts_us.shape[0]
    before = np.arange(previous_cut + (1 if previous_cut > 0 else 0), cut)
    after = np.arange(cut, next_cut - (1 if next_cut < size else 0))
    if transition is not None:
        before = before[before != transition]
        after = after[after != transition]
    return SegmentPair(before=before, after=after, transition=transition)


MAD_TO_SD = 1.4826  # a normal distribution's standard deviation over its median absolute deviation
MEAN_DEVIATION_TO_SD = 1.2533  # ... over its mean absolute deviation (sqrt(pi / 2))


@dataclass(frozen=True)
class Boundary:
    """Where one step's two levels meet, settled (``settle_boundary``): the samples of each level."""

    before: np.ndarray
    after: np.ndarray
    mixed: int | None
    """The sample whose interval holds the step (its mean mixes both regimes): in neither level."""
    first_new: int
    """The first sample wholly of the new regime: the onset is its interval's start."""


def _side_levels(
    x: np.ndarray, before: np.ndarray, after: np.ndarray, cut: int
) -> tuple[list[float], list[float]] | None:
    """(level, noise) of the before and after sides without the two samples at the cut: the median, and
    the larger of 1.4826 x the MAD and 1.2533 x the mean absolute deviation (the MAD alone is 0 on
    discrete values: blocks per call alternating 50, 100). None when a side has fewer than 2 left."""
    levels, noises = [], []
    for core in (before[before != cut - 1], after[after != cut]):
        if core.shape[0] < 2:
            return None
        level = float(np.median(x[core]))
        deviation = np.abs(x[core] - level)
        levels.append(level)
        noises.append(
            max(MAD_TO_SD * float(np.median(deviation)), MEAN_DEVIATION_TO_SD * float(deviation.mean()))
        )
    return levels, noises


def settle_boundary(
    values: np.ndarray, before: np.ndarray, after: np.ndarray, cut: int, config: RegressionConfig
) -> Boundary:
    """The two levels of a step at change point ``cut`` (``before``/``after``: sorted index arrays into
    ``values``), settled so that they and the onset do not depend on which run found the step.

    Why: a change point found while the new regime has fewer than ``min_segment`` samples cannot lie
    nearer the series' end than that, so it lands early with old samples in "after"; and a step inside an
    interval makes that interval's mean a mix of both regimes, which E-divisive puts on either side. One
    more interval moves both (issue 21: "0.148 ms → 37.2 ms", then "2.259 ms → 51.5 ms" two runs later).
    On log values (when all are positive: latency noise is multiplicative), with each side's level and
    noise from ``_side_levels``, a sample is *near* a level within ``mixed_noise_z`` x that side's noise
    or ``mixed_min_fraction`` of the gap between the levels, whichever is larger. First the cut moves while
    the sample at it is near the other side's level and not near its own (at least 3 samples stay on
    each side); then the sample at the cut (``cut - 1`` or ``cut``) that lies between the levels and near
    neither is the mixed one: in neither level, and the new regime begins after it. A small, noisy step
    (levels within each other's noise) moves nothing. Deterministic; ``settle_step_boundary`` off: as given.
    """
    if not config.settle_step_boundary:
        return Boundary(before, after, None, cut)
    x = values
    sides = np.concatenate([before, after])
    if np.all(values[sides] > 0):
        x = np.zeros(values.shape[0])
        x[sides] = np.log(values[sides])

    def near(value: float, side: int, levels: list[float], noises: list[float]) -> bool:
        gap = abs(levels[1] - levels[0])
        return abs(value - levels[side]) <= max(
            config.mixed_noise_z * noises[side], config.mixed_min_fraction * gap
        )

    for _ in range(sides.shape[0]):
        found = _side_levels(x, before, after, cut)
        if found is None:
            return Boundary(before, after, None, cut)
        levels, noises = found
        if levels[0] == levels[1]:
            return Boundary(before, after, None, cut)

        def belongs(j: int, side: int, levels: list[float] = levels, noises: list[float] = noises) -> bool:
            """Sample j is near ``side``'s level and not near the other's."""
            return near(float(x[j]), side, levels, noises) and not near(float(x[j]), 1 - side, levels, noises)

        if after.shape[0] > 3 and np.any(after == cut) and belongs(cut, 0):
            before, after, cut = np.append(before, cut), after[after != cut], cut + 1
        elif before.shape[0] > 3 and np.any(before == cut - 1) and belongs(cut - 1, 1):
            before, after, cut = before[before != cut - 1], np.insert(after, 0, cut - 1), cut - 1
        else:
            break
    low, high = sorted(levels)
    mixed: list[tuple[float, int]] = []
    for j, side in ((cut - 1, before), (cut, after)):
        value = float(x[j]) if 0 <= j < x.shape[0] else np.nan
        if (
            np.any(side == j)
            and low < value < high
            and not near(value, 0, levels, noises)
            and not near(value, 1, levels, noises)
        ):
            mixed.append((min(abs(value - levels[0]), abs(value - levels[1])), -j))
    if not mixed:
        return Boundary(before, after, None, cut)
    chosen = -max(mixed)[1]  # the one farther from both levels (ties: the earlier)
    return Boundary(before[before != chosen], after[after != chosen], chosen, chosen + 1)


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
        piece[lo:hi] = dump
        piece[lo + settled.before[settled.before != straddling]] = 2 * g
        piece[lo + settled.after[settled.after != straddling]] = 2 * g + 1
        first_new[g] = settled.first_new
        change_start[g] = lo + first_new[g]
        later[g] = [c for c in at if c > cut]
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


def recovery_after_step(
    values: np.ndarray,
    offsets: np.ndarray,
    later: dict[int, list[int]],
    before_mean: np.ndarray,
    latency_change_threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per series: (index of the first later change point after which the level is back within the
    latency threshold of the level before the step, or -1; the mean after the window's last change
    point, NaN when the chosen one is the last). A finding that came back down is still a finding (it
    happened at that deploy), but it is shown as recovered with both levels instead of an "after" mean
    that drifts with how much of the recovery a run's window holds."""
    recovered = np.full(offsets.shape[0] - 1, -1, dtype=np.int64)
    latest = np.full(offsets.shape[0] - 1, np.nan)
    for g, cuts in later.items():
        if not cuts:
            continue
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        bounds = [*cuts, hi - lo]
        levels = [float(values[lo + a : lo + b].mean()) for a, b in pairwise(bounds)]
        latest[g] = levels[-1]
        back = [
            c
            for c, level in zip(cuts, levels, strict=True)
            if level < before_mean[g] * (1 + latency_change_threshold)
        ]
        if back:
            recovered[g] = back[0]
    return recovered, latest


# ---------------------------------------------------------------------------------------------------------
# Unannounced analysis


@dataclass(frozen=True)
class SegmentSteps:
    """Every change point of a batch of series, each Welch-tested against the segment before it.

    Pieces are the segments between consecutive change points, numbered over the batch (series g owns
    pieces piece_base[g] .. piece_base[g + 1] - 1); one candidate per change point.
    """

    offsets: np.ndarray
    """Series g is values[offsets[g]:offsets[g + 1]]."""
    piece: np.ndarray
    """Piece id of every value."""
    piece_base: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    """Per piece."""
    group: np.ndarray
    """Per candidate: its series."""
    cut: np.ndarray
    """Per candidate: first index of the new regime in its series."""
    changepoint_p_value: np.ndarray
    after_piece: np.ndarray
    """Per candidate: the piece from the change point on (the one before it is after_piece - 1)."""
    last_piece: np.ndarray
    """Per candidate: the latest piece of its series."""
    welch: WelchResult
    first_new: np.ndarray
    """Per candidate: first index of the new regime, its boundary settled (``settle_boundary``)."""
    mixed: np.ndarray
    """Per candidate: the sample next to its cut that mixes both regimes (in no piece's statistics), -1
    when none (``settle_boundary``; only when the call was given the regression config)."""


def consecutive_segment_tests(
    values: np.ndarray,
    sizes: np.ndarray,
    changepoint: ChangePointConfig,
    *,
    max_change_points: int,
    fdr_q: float | None,
    memo: ChangePointMemo | None = None,
    mixed_rule: RegressionConfig | None = None,
) -> SegmentSteps:
    """Hierarchical E-divisive on each series (``values`` concatenated, ``sizes`` per series), then Welch of
    each segment against the one before it, all series at once. ``memo``: change points a sharded pass's
    phase 1 found on the same inputs (jobs.detect.changepoint_memo), reused; new ones are added to it.
    ``mixed_rule``: each cut's boundary is settled (``settle_boundary``: old-regime samples the cut left
    in the new piece move back, the sample that mixes both regimes is in no piece); None: as found."""
    offsets = group_offsets(sizes)
    key = memo_key(values, sizes, changepoint, max_change_points, fdr_q) if memo is not None else ""
    known = memo.get(key) if memo is not None else None
    if known is None:
        found = segment_change_points(
            split_values(values, offsets), changepoint, max_change_points=max_change_points, fdr_q=fdr_q
        )
        cuts = [sorted({p.index for p in cps if p.index is not None}) for cps in found]
        candidate_cp_p = np.array(
            [p.p_value for cps in found for p in cps if p.index is not None], dtype=np.float64
        )
        if memo is not None:
            memo.put(key, FoundCuts(cuts, candidate_cp_p))
    else:
        cuts, candidate_cp_p = known.cuts, known.p_values
    # Pieces: the segments between consecutive change points of each series, numbered over the fleet.
    piece_base = group_offsets(np.array([len(c) + 1 for c in cuts], dtype=np.int64))
    group_of = np.repeat(np.arange(sizes.shape[0]), sizes)
    position = np.arange(values.shape[0]) - offsets[group_of]
    local_piece = np.zeros(values.shape[0], dtype=np.int64)
    for g, c in enumerate(cuts):  # one searchsorted per series with change points, never per sample
        if c:
            segment = slice(offsets[g], offsets[g + 1])
            local_piece[segment] = np.searchsorted(np.array(c), position[segment], side="right")
    piece = piece_base[group_of] + local_piece
    # Each boundary settled (``settle_boundary``): samples move between the two pieces of a cut, and the
    # mixed sample goes to one extra piece, read by no test.
    mixed = np.full(sum(len(c) for c in cuts), -1, dtype=np.int64)
    first_new = np.array([i for c in cuts for i in c], dtype=np.int64)
    if mixed_rule is not None:
        candidate = 0
        for g, c in enumerate(cuts):
            lo, hi = int(offsets[g]), int(offsets[g + 1])
            local = piece[lo:hi] - piece_base[g]
            for j, cut in enumerate(c):
                before, after = np.flatnonzero(local == j), np.flatnonzero(local == j + 1)
                settled = settle_boundary(values[lo:hi], before, after, cut, mixed_rule)
                local[settled.before] = j
                local[settled.after] = j + 1
                if settled.mixed is not None:
                    mixed[candidate] = settled.mixed
                    local[settled.mixed] = piece_base[-1] - piece_base[g]
                first_new[candidate] = settled.first_new
                candidate += 1
            piece[lo:hi] = local + piece_base[g]
    count, mean, squares = piece_statistics(values, piece, int(piece_base[-1]) + 1)
    # One candidate per change point: piece j-1 (before) against piece j (after).
    candidate_group = np.array([g for g, c in enumerate(cuts) for _ in c], dtype=np.int64)
    candidate_cut = np.array([i for c in cuts for i in c], dtype=np.int64)
    after_piece = np.array(
        [piece_base[g] + j + 1 for g, c in enumerate(cuts) for j in range(len(c))], dtype=np.int64
    )
    before_piece = after_piece - 1
    welch = welch_tests(
        count[before_piece],
        mean[before_piece],
        squares[before_piece],
        count[after_piece],
        mean[after_piece],
        squares[after_piece],
    )
    last_piece = piece_base[candidate_group] + np.array(
        [len(cuts[g]) for g in candidate_group], dtype=np.int64
    )
    return SegmentSteps(
        offsets=offsets,
        piece=piece,
        piece_base=piece_base,
        count=count,
        mean=mean,
        group=candidate_group,
        cut=candidate_cut,
        changepoint_p_value=candidate_cp_p,
        after_piece=after_piece,
        last_piece=last_piece,
        welch=welch,
        first_new=first_new,
        mixed=mixed,
    )


def scoped_history_points(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: RegressionConfig,
    scope: AnalysisScope | None,
    extra: tuple[str, ...] = (),
) -> tuple[pl.DataFrame, datetime, datetime]:
    """(identified samples of the last ``config.history`` of the series the scope searches, cut to what
    the analysis reads plus ``extra``; the history's start; its end, the latest sample): the start both
    unannounced analyses (latency and work per call) share."""
    from jobs.detect.scope import series_in_scope

    points = analysed_columns(fingerprinted_samples(samples, texts, config.identity), extra)
    latest = points["interval_end"].max()
    window_start = latest - config.history  # type: ignore[operator]
    ends = points["interval_end"]
    if ends.null_count() or ends.min() <= window_start:  # type: ignore[operator]
        # Only when a sample is outside the history: a filter copies every row it keeps.
        points = points.filter(pl.col("interval_end") > window_start)
    points = series_in_scope(points, scope)
    return points, window_start, latest  # type: ignore[return-value]


def detect_unannounced_regressions(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: RegressionConfig = RegressionConfig(),
    scope: AnalysisScope | None = None,
    fdr: FdrAdjust = within_call,
    fleet_tests: int = 0,
    memo: ChangePointMemo | None = None,
) -> pl.DataFrame:
    """One row per (instance, query) over the last ``config.history``: its strongest step up, if any.

    ``scope`` (jobs.detect.scope): only its ``unannounced_series`` are searched (the series whose new
    samples moved from their level); None = every series. The history ends at the latest sample given.
    ``fdr``: how candidate p-values are adjusted (jobs.detect.fleet_fdr: within this call, or among every
    shard's candidates; ``fleet_tests`` = how many other shards' candidates, for ``fdr_method``).
    ``memo``: change points already found on the same series (jobs.detect.changepoint_memo).

    Change points come from hierarchical E-divisive with Benjamini-Hochberg across every series of the
    call at each round; each increase of at least ``latency_change_threshold`` is Welch-tested against
    the segment before it, and those p-values are Benjamini-Hochberg adjusted across all candidates of
    the fleet. Detected when the adjusted p is below ``fdr_q``; the output says so in ``fdr_method``.
    """
    if samples.height == 0:
        return _empty_result()
    points, window_start, latest = scoped_history_points(samples, texts, config, scope)
    if points.height == 0:
        return _empty_result()
    keys = list(SERIES_KEY)
    identity = series_identity(points, keys)
    series = merge_intervals(points, keys)
    groups = series.group_by(keys, maintain_order=True).agg(
        pl.len().alias("size"), pl.col("interval_end").min().alias("first_end")
    )
    steps = consecutive_segment_tests(
        series["value"].to_numpy().astype(np.float64),
        groups["size"].to_numpy().astype(np.int64),
        config.unannounced_changepoint,
        max_change_points=config.max_change_points,
        fdr_q=config.fdr_q,
        memo=memo,
        mixed_rule=config,
    )
    offsets, piece, piece_base, mean, welch = (
        steps.offsets,
        steps.piece,
        steps.piece_base,
        steps.mean,
        steps.welch,
    )
    candidate_group, candidate_cp_p = steps.group, steps.changepoint_p_value
    after_piece, last_piece = steps.after_piece, steps.last_piece
    rate = calls_per_second(series, piece, int(piece_base[-1]) + 1)[after_piece]
    added_load = (welch.after_mean - welch.before_mean) * rate
    small = immaterial(welch.before_mean, welch.after_mean, rate, config)
    first_new = steps.first_new
    with np.errstate(divide="ignore", invalid="ignore"):
        change = (welch.after_mean - welch.before_mean) / welch.before_mean
        latest_change = (mean[last_piece] - welch.before_mean) / welch.before_mean
    recovered = config.require_ongoing & ~(latest_change >= config.latency_change_threshold)
    stepped_up = (change >= config.latency_change_threshold) & np.isfinite(welch.p)
    candidate = stepped_up & ~small & ~recovered
    adjusted = np.full(candidate.shape[0], np.nan)
    if candidate.any():
        adjusted[candidate] = fdr(welch.p[candidate])
    detected = candidate & (adjusted < config.fdr_q)
    tests = int(candidate.sum()) + fleet_tests
    starts = series["interval_start"]
    candidates = pl.DataFrame(
        {
            "group": candidate_group,
            "changepoint_index": first_new,
            "mixed_index": pl.Series([int(m) if m >= 0 else None for m in steps.mixed], dtype=pl.Int64),
            "detected_change_at": pl.Series(
                [starts[int(offsets[g] + i)] for g, i in zip(candidate_group, first_new, strict=True)],
                dtype=pl.Datetime("us", "UTC"),
            ),
            "latency_change": change,
            "changepoint_p_value": candidate_cp_p,
            "before_mean_ms": welch.before_mean,
            "after_mean_ms": welch.after_mean,
            "before_count": welch.before_count,
            "after_count": welch.after_count,
            "t_statistic": welch.t,
            "p_value": welch.p,
            "p_adjusted": adjusted,
            "added_load_ms_per_s": added_load,
            "stepped_up": stepped_up,
            "immaterial": stepped_up & small,
            "recovered": stepped_up & ~small & recovered,
            "candidate": candidate,
            "detected": detected,
        },
        schema_overrides={"group": pl.Int64, "changepoint_index": pl.Int64, "mixed_index": pl.Int64},
    )
    # Per series: the detected step with the smallest adjusted p (ties: earliest), else the best candidate.
    best = candidates.sort(
        ["group", "detected", "candidate", "stepped_up", "p_adjusted", "changepoint_index"],
        descending=[False, True, True, True, False, False],
        nulls_last=True,
    ).unique("group", keep="first", maintain_order=True)
    base = groups.with_row_index("group").with_columns(pl.col("group").cast(pl.Int64))
    result = base.join(best, on="group", how="left").join(identity, on=keys, how="left")
    result = result.with_columns(
        pl.when(pl.col("detected").fill_null(False))
        .then(pl.lit(DETECTED))
        .when(pl.col("size") < 2 * config.unannounced_changepoint.min_segment)
        .then(pl.lit(INSUFFICIENT_DATA))
        .otherwise(pl.lit(NO_REGRESSION))
        .alias("status"),
        pl.when(pl.col("detected").fill_null(False))
        .then(pl.lit(DETECTED))
        .when(pl.col("size") < 2 * config.unannounced_changepoint.min_segment)
        .then(pl.lit("too_few_samples"))
        .when(pl.col("changepoint_index").is_null())
        .then(pl.lit("no_significant_change_point"))
        .when(pl.col("immaterial"))
        .then(pl.lit("below_materiality_threshold"))
        .when(pl.col("recovered"))
        .then(pl.lit("recovered"))
        .when(~pl.col("candidate"))
        .then(pl.lit("below_latency_change_threshold"))
        .otherwise(pl.lit("not_significant_after_fdr"))
        .alias("reason"),
        (1.0 - pl.col("p_adjusted")).alias("confidence"),
        *unannounced_columns(window_start, latest, config.fdr_q, tests),
    )
    return PERFORMANCE_REGRESSIONS.conform(result.select(_known_columns(result))).sort(*SERIES_KEY)
