"""Unannounced analysis: change points over a longer history with no deploy, every increase
Welch-tested against its neighbouring segment, Benjamini-Hochberg adjusted across the fleet."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from jobs.detect.changepoint_memo import ChangePointMemo
from jobs.detect.config import RegressionConfig
from jobs.detect.fleet_fdr import FdrAdjust, within_call
from jobs.detect.large_steps import large_steps_at_end
from jobs.schemas.analysed import PERFORMANCE_REGRESSIONS

if TYPE_CHECKING:  # scope imports this module's series building
    from jobs.detect.scope import AnalysisScope
from jobs.detect.deploy_analysis import empty_result, known_columns, unannounced_columns
from jobs.detect.segments import (
    calls_per_second,
    consecutive_segment_tests,
    group_extremes,
    immaterial,
    only_searched,
    pre_step_welch,
)
from jobs.detect.verdicts import DETECTED, INSUFFICIENT_DATA, NO_REGRESSION
from jobs.query.series import (
    SERIES_KEY,
    analysed_columns,
    fingerprinted_samples,
    merge_intervals,
    series_identity,
)

NO_REPORTABLE_STEP = "no_reportable_step"
"""Unannounced reason: the series' latency range cannot hold a step past ``latency_change_threshold`` that
is also material (``latency_steps_possible``), so the change-point search was not run."""


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
    """One row per (instance, query) over the last ``config.history``: its detected step up that adds the
    most load (``config.unannounced_pick``), if any.

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
        return empty_result()
    points, window_start, latest = scoped_history_points(samples, texts, config, scope)
    if points.height == 0:
        return empty_result()
    keys = list(SERIES_KEY)
    identity = series_identity(points, keys)
    series = merge_intervals(points, keys)
    groups = series.group_by(keys, maintain_order=True).agg(
        pl.len().alias("size"), pl.col("interval_end").min().alias("first_end")
    )
    values = series["value"].to_numpy().astype(np.float64)
    sizes = groups["size"].to_numpy().astype(np.int64)
    possible = latency_steps_possible(values, sizes, _rates(series), config)
    searched = np.arange(sizes.shape[0]) if config.search_every_series else np.flatnonzero(possible)
    series, values, sizes, searched_groups = only_searched(series, values, sizes, searched)
    steps = consecutive_segment_tests(
        values,
        sizes,
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
    if config.pre_step_levels:  # the steps up: their level before, found on the samples before them
        welch = pre_step_welch(
            values,
            steps,
            welch.after_mean > welch.before_mean,
            config.unannounced_changepoint,
            config.max_change_points,
        )
    candidate_group, candidate_cp_p = steps.group, steps.changepoint_p_value
    after_piece, last_piece = steps.after_piece, steps.last_piece
    piece_rate = calls_per_second(series, piece, int(piece_base[-1]) + 1)
    rate = piece_rate[after_piece]
    added_load = (welch.after_mean - welch.before_mean) * rate
    small = immaterial(welch.before_mean, welch.after_mean, rate, config)
    first_new = steps.first_new
    with np.errstate(divide="ignore", invalid="ignore"):
        change = (welch.after_mean - welch.before_mean) / welch.before_mean
        latest_change = (mean[last_piece] - welch.before_mean) / welch.before_mean
    back = ~(latest_change >= config.latency_change_threshold)
    if config.recovered_when_remainder_immaterial:  # what is left would not be reported as a step
        back |= immaterial(welch.before_mean, mean[last_piece], piece_rate[last_piece], config)
    recovered = config.require_ongoing & back
    stepped_up = (change >= config.latency_change_threshold) & np.isfinite(welch.p)
    candidate = stepped_up & ~small & ~recovered
    # Large steps too new for the segment tests (fewer than min_segment samples after them).
    large = large_steps_at_end(values, sizes, config)
    large_rate = _tail_rates(series, offsets, sizes, large.group, large.new_samples)
    large_small = immaterial(large.before_mean, large.after_mean, large_rate, config)
    large_candidate = ~large_small
    p_values = np.concatenate([welch.p[candidate], large.p_value[large_candidate]])
    adjusted_all = fdr(p_values) if p_values.size else p_values
    adjusted = np.full(candidate.shape[0], np.nan)
    adjusted[candidate] = adjusted_all[: int(candidate.sum())]
    large_adjusted = np.full(large.group.shape[0], np.nan)
    large_adjusted[large_candidate] = adjusted_all[int(candidate.sum()) :]
    detected = candidate & (adjusted < config.fdr_q)
    tests = int(candidate.sum()) + int(large_candidate.sum()) + fleet_tests
    starts = series["interval_start"]
    with np.errstate(divide="ignore", invalid="ignore"):
        large_change = (large.after_mean - large.before_mean) / large.before_mean
    candidates = pl.concat(
        [
            pl.DataFrame(
                {
                    "group": searched[candidate_group],
                    "changepoint_index": first_new,
                    "mixed_index": pl.Series(
                        [int(m) if m >= 0 else None for m in steps.mixed], dtype=pl.Int64
                    ),
                    "detected_change_at": pl.Series(
                        [
                            starts[int(offsets[g] + i)]
                            for g, i in zip(candidate_group, first_new, strict=True)
                        ],
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
                    "confirmed_by": pl.Series(["segments"] * candidate.shape[0], dtype=pl.String),
                },
                schema_overrides=_CANDIDATE_TYPES,
            ),
            pl.DataFrame(
                {
                    "group": searched[large.group],
                    "changepoint_index": large.cut,
                    "mixed_index": pl.Series(
                        [int(x) if x >= 0 else None for x in large.mixed], dtype=pl.Int64
                    ),
                    "detected_change_at": pl.Series(
                        [starts[int(offsets[g] + c)] for g, c in zip(large.group, large.cut, strict=True)],
                        dtype=pl.Datetime("us", "UTC"),
                    ),
                    "latency_change": large_change,
                    "changepoint_p_value": large.p_value,
                    "before_mean_ms": large.before_mean,
                    "after_mean_ms": large.after_mean,
                    "before_count": large.before_samples,
                    "after_count": large.new_samples,
                    "t_statistic": np.full(large.group.shape[0], np.nan),
                    "p_value": large.p_value,
                    "p_adjusted": large_adjusted,
                    "added_load_ms_per_s": (large.after_mean - large.before_mean) * large_rate,
                    "stepped_up": np.ones(large.group.shape[0], dtype=bool),
                    "immaterial": large_small,
                    "recovered": np.zeros(large.group.shape[0], dtype=bool),
                    "candidate": large_candidate,
                    "detected": large_candidate & (large_adjusted < config.fdr_q),
                    "confirmed_by": pl.Series(["large_step"] * large.group.shape[0], dtype=pl.String),
                },
                schema_overrides=_CANDIDATE_TYPES,
            ),
        ],
        how="vertical_relaxed",
    )
    # Per series: the detected step that adds the most load (``unannounced_pick``; or the smallest adjusted
    # p; ties: earliest), else the candidate with the smallest adjusted p.
    by_load = config.unannounced_pick == "largest_load"
    order = (
        pl.when(pl.col("detected") & by_load)
        .then(-pl.col("added_load_ms_per_s"))
        .otherwise(pl.col("p_adjusted"))
    )
    best = (
        candidates.with_columns(order.alias("_order"))
        .sort(
            ["group", "detected", "candidate", "stepped_up", "_order", "changepoint_index"],
            descending=[False, True, True, True, False, False],
            nulls_last=True,
        )
        .unique("group", keep="first", maintain_order=True)
        .drop("_order")
    )
    base = groups.with_row_index("group").with_columns(pl.col("group").cast(pl.Int64))
    result = (
        base.join(best, on="group", how="left")
        .join(identity, on=keys, how="left")
        .join(searched_groups, on="group", how="left")
    )
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
        .when(pl.col("_searched").is_null())
        .then(pl.lit(NO_REPORTABLE_STEP))
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
    result = result.drop("_searched")
    return PERFORMANCE_REGRESSIONS.conform(result.select(known_columns(result))).sort(*SERIES_KEY)


_CANDIDATE_TYPES = {
    "group": pl.Int64,
    "changepoint_index": pl.Int64,
    "mixed_index": pl.Int64,
    "before_count": pl.Int64,
    "after_count": pl.Int64,
}


def _tail_rates(
    series: pl.DataFrame, offsets: np.ndarray, sizes: np.ndarray, groups: np.ndarray, newest: np.ndarray
) -> np.ndarray:
    """Calls per second over the ``newest[i]`` last intervals of series ``groups[i]`` (a large step's)."""
    if groups.size == 0:
        return np.zeros(0)
    calls = series["calls"].to_numpy().astype(np.float64)
    seconds = series["interval_seconds"].to_numpy().astype(np.float64)
    out = np.zeros(groups.size)
    for i, (g, k) in enumerate(zip(groups, newest, strict=True)):
        stop = int(offsets[g]) + int(sizes[g])
        spent = seconds[stop - int(k) : stop].sum()
        out[i] = calls[stop - int(k) : stop].sum() / spent if spent > 0 else 0.0
    return out


def _rates(series: pl.DataFrame) -> np.ndarray:
    """Calls per second of each merged interval (0 where it has no seconds)."""
    seconds = np.asarray(series["interval_seconds"].to_numpy(), dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.asarray(series["calls"].to_numpy(), dtype=np.float64) / seconds
    # In place, not np.where over copies: three fewer float arrays of every merged interval (14.5 M at
    # 10,000 series x 1 day).
    rates[~(seconds > 0)] = 0.0
    return rates


def latency_steps_possible(
    values: np.ndarray, sizes: np.ndarray, rates: np.ndarray, config: RegressionConfig
) -> np.ndarray:
    """Per group (``sizes`` consecutive intervals): whether any step up could be reported. A segment's mean
    latency lies within the group's range and its calls per second at most the group's highest interval
    rate, so a group whose max / min is below 1 + ``latency_change_threshold``, or whose range is below
    ``min_latency_increase_ms`` while range x highest rate is below ``min_added_load_ms_per_s`` (immaterial
    whatever the step), holds no step the analysis could report: it is not searched."""
    low, high = group_extremes(values, sizes)
    fastest = group_extremes(rates, sizes)[1]
    spread = high - low
    with np.errstate(invalid="ignore", divide="ignore"):
        changes = (
            np.where(low > 0, spread / np.where(low > 0, low, 1.0), np.inf) >= config.latency_change_threshold
        )
    material = (spread >= config.min_latency_increase_ms) | (
        spread * fastest >= config.min_added_load_ms_per_s
    )
    return changes & material & (spread > 0)
