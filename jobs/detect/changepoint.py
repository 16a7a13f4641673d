"""Change point statistics: batched E-divisive means (energy statistic, alpha = 1) with a significance test.

Why batched: the fleet has thousands of candidate series; looping over them in Python would dominate the
run time, so every step below is a numpy operation over a stack of equal-length series.

The energy statistic of a split at tau (Matteson & James 2014, alpha = 1), with m = tau and k = n - tau:

    Q(tau) = m k / n * ( 2/(m k) * cross - 2/(m (m-1)) * within_left - 2/(k (k-1)) * within_right )

where cross is the sum of |x_i - x_j| over pairs on opposite sides and the within terms are sums over the
pairs inside each side. For 1-D data all within sums of every prefix follow from the "dominance" sums
D[t] = sum_{i<t} |x_t - x_i|, which a wavelet-tree pass over the value ranks gives in O(n log n) element
work per series with O(n) numpy calls for the whole batch (see ``_less_sums_by_rank``).

Significance (``ChangePointConfig.test``): "rank" (default) is a Mann-Whitney test at the located split,
Bonferroni-corrected for the candidate splits and widened for serial correlation, about one location pass;
"permutation" is the classic E-divisive permutation test, about ``permutations + 1`` passes. The choice and
the default level come from tests/benchmarks/bench_changepoint.py. Results are deterministic: the same
series gives byte-identical output whatever else is in the batch."""

from __future__ import annotations

import functools
import itertools
import math
import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
from scipy import special, stats

from jobs.detect.config import ChangePointConfig
from jobs.detect.energy import EnergyPass, energy_pass, running_sum

_T = TypeVar("_T")


@dataclass(frozen=True)
class ChangePoint:
    """The most significant split of one series (or segment); indices are into the series given."""

    index: int | None  # first index of the new regime; None when the series is too short / constant
    statistic: float  # the scaled energy statistic Q at the split
    p_value: float  # of the chosen test, corrected for the number of candidate splits
    significant: bool  # p_value <= config.max_p_value (or q_value <= fdr_q when FDR control is on)
    q_value: float | None = None  # Benjamini-Hochberg adjusted p across the batch, when FDR control is on


_NO_CHANGE = ChangePoint(index=None, statistic=0.0, p_value=1.0, significant=False)


# ----------------------------------------------------------------------------------------------------------
# Significance
# ----------------------------------------------------------------------------------------------------------


def _tie_term(values: np.ndarray) -> np.ndarray:
    """sum over tie groups of (t^3 - t) per row, for the Mann-Whitney variance."""
    ordered = np.sort(values, axis=1)
    batch, n = ordered.shape
    start_flag = np.ones((batch, n), dtype=bool)
    start_flag[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    position = np.broadcast_to(np.arange(n), (batch, n))
    group_start = np.maximum.accumulate(np.where(start_flag, position, 0), axis=1)
    end_flag = np.ones((batch, n), dtype=bool)
    end_flag[:, :-1] = start_flag[:, 1:]
    reversed_end = np.where(end_flag, position, n)[:, ::-1]
    group_end = np.minimum.accumulate(reversed_end, axis=1)[:, ::-1]
    size = (group_end - group_start + 1).astype(np.float64)
    return (size * size - 1.0).sum(axis=1)


def _lag_one_correlation(residual: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of each column of a time-major (n, B) residual array (0 when flat)."""
    spread = (residual * residual).sum(axis=0)
    lagged = (residual[1:] * residual[:-1]).sum(axis=0)
    return np.divide(lagged, spread, out=np.zeros(residual.shape[1]), where=spread > 0)


def _clean_steps(stack: np.ndarray, split: np.ndarray) -> np.ndarray:
    """Per row of a (B, n) stack: is its split a clean step? Its two sides, each without the sample next
    to the split, do not overlap, the gap between them is wider than either side's own range (on log
    values when the row is positive: latency noise is multiplicative), and those two samples lie between
    the sides' outer extremes (the sample whose interval holds the step mixes both levels).

    Why: the serial correction reads any structure of a side (a new regime that wanders between 10 and 45
    ms) as correlation and widens the variance, and ranks cannot see that the step beside it is x700. A
    trend or a random walk moves by a few increments across the split and by many within each side, so it
    seldom has such a gap; a step that jumps past everything either side does is not explained by
    correlation.
    """
    batch, n = stack.shape
    positive = (stack > 0).all(axis=1, keepdims=True)
    x = np.where(positive, np.log(np.where(positive, stack, 1.0)), stack)
    rows = np.arange(batch)
    cut = split.astype(np.int64)
    left_end = cut - 2  # the left side's last sample, the one next to the split left out
    right_start = n - 1 - (cut + 1)  # the right side's first, counted from the end
    left_max = np.maximum.accumulate(x, axis=1)[rows, left_end]
    left_min = np.minimum.accumulate(x, axis=1)[rows, left_end]
    reverse = x[:, ::-1]
    right_max = np.maximum.accumulate(reverse, axis=1)[rows, right_start]
    right_min = np.minimum.accumulate(reverse, axis=1)[rows, right_start]
    gap = np.maximum(right_min - left_max, left_min - right_max)
    low = np.minimum(left_min, right_min)
    high = np.maximum(left_max, right_max)
    boundary = x[rows[:, None], np.stack([cut - 1, cut], axis=1)]
    inside = ((boundary >= low[:, None]) & (boundary <= high[:, None])).all(axis=1)
    return inside & (gap > np.maximum(left_max - left_min, right_max - right_min))


def _local_mean(values: np.ndarray, config: ChangePointConfig) -> np.ndarray:
    """Centred moving mean of 2 min_segment + 1 points (shorter at the ends) of a time-major (n, B) array."""
    n, batch = values.shape
    half = config.min_segment
    prefix = running_sum(values, np.empty((n + 1, batch)), exclusive=True)
    upper = np.minimum(np.arange(n) + half + 1, n)
    lower = np.maximum(np.arange(n) - half, 0)
    return (prefix[upper] - prefix[lower]) / (upper - lower)[:, None]


@functools.lru_cache(maxsize=4096)
def _mann_whitney_lower_tail(m: int, k: int) -> np.ndarray:
    """P(U <= u) for u = 0..m k of the exact Mann-Whitney null (no ties), from its generating function.

    The counts of U are the Gaussian binomial [m + k choose m]_q = prod_{i=1..m} (1 - q^(k+i)) / (1 - q^i);
    each factor is one shifted subtraction and one strided running sum over int64 coefficients (exact up
    to m + k = 64).
    """
    counts = np.zeros(m * k + 1, dtype=np.int64)
    counts[0] = 1
    for i in range(1, m + 1):
        shift = k + i
        if shift <= m * k:
            counts[shift:] -= counts[:-shift].copy()
        rows = -(-(m * k + 1) // i)
        padded = np.zeros(rows * i, dtype=np.int64)
        padded[: m * k + 1] = counts
        counts = np.cumsum(padded.reshape(rows, i), axis=0).reshape(-1)[: m * k + 1]
    total = float(special.comb(m + k, m, exact=True))
    return np.cumsum(counts).astype(np.float64) / total


def _exact_two_sided(m: np.ndarray, k: np.ndarray, deviation: np.ndarray) -> np.ndarray:
    """2 P(U <= m k / 2 - deviation) under the exact null, per row (a Python loop over distinct m only)."""
    out = np.ones(m.shape[0])
    for left in np.unique(m).tolist():
        rows = np.flatnonzero(m == left)
        right = int(k[rows[0]])
        tail = _mann_whitney_lower_tail(int(left), right)
        at = np.floor(left * right / 2.0 - deviation[rows] + 1e-9).astype(np.int64)
        out[rows] = np.where(at >= 0, 2.0 * tail[np.clip(at, 0, None)], 0.0)
    return np.minimum(out, 1.0)


def _rank_p_values(
    stack: np.ndarray, energy: EnergyPass, split: np.ndarray, config: ChangePointConfig
) -> np.ndarray:
    """Two-sided Mann-Whitney p at each row's split, Bonferroni-corrected for the candidate splits.

    Why this test: ranks shrug off the latency spikes that inflate a t-test's variance, and the Bonferroni
    factor (n - 2 min_segment + 1) keeps the choice of the best split honest (conservative, since the
    candidates are correlated), which is what a precision-first detector wants. It costs about one pass.
    With ``serial_correction`` the variance is inflated by (1 + rho) / (1 - rho), rho the smaller lag-1
    autocorrelation of the ranks around (a) their two segment means and (b) a centred moving mean of
    2 min_segment + 1 points: a random walk or a smooth curve stays correlated around both (rho near 1) and
    is not a step, while independent noise around one step (a) or several steps (b) keeps rho near 0.
    On a series of at most ``serial_white_max_n`` points a rho below ``serial_white_z / sqrt(n)`` is
    within white noise's sampling spread (sd 1 / sqrt(n)) and widens nothing: at 10 points a side that
    spread (about 0.2) alone pushed one clean step in eight above the level. Longer series keep the
    plain estimate (their spread is small; applied at n = 60 it cost the labelled benchmark's
    precision). Tie-free series of at most ``exact_rank_max_n`` points take the exact Mann-Whitney tail
    (at the deviation shrunk by the serial factor): the normal tail is 17x too heavy at 10 + 10.
    """
    batch, n = stack.shape
    m = split.astype(np.float64)
    k = n - m
    sorted_values = energy.sorted_values
    has_ties = bool(np.any(sorted_values[1:] == sorted_values[:-1])) if n > 1 else False
    if has_ties:
        ranks = np.ascontiguousarray(stats.rankdata(stack, axis=1).T)
        tie_term = _tie_term(stack)
    else:
        ranks = energy.rank_of_time + np.float64(1.0)
        tie_term = np.zeros(batch)
    before_split = np.arange(n)[:, None] < split[None, :]
    left_rank_sum = (ranks * before_split).sum(axis=0)
    u = left_rank_sum - m * (m + 1) / 2.0
    variance = m * k / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    inflation = np.ones(batch)
    if config.serial_correction:
        left_mean = left_rank_sum / m
        right_mean = (n * (n + 1) / 2.0 - left_rank_sum) / k
        residual = ranks - right_mean
        residual -= before_split * (left_mean - right_mean)
        rho = np.minimum(
            _lag_one_correlation(residual), _lag_one_correlation(ranks - _local_mean(ranks, config))
        )
        white = (rho < config.serial_white_z / np.sqrt(n)) & (n <= config.serial_white_max_n)
        if config.serial_exempt_clean_steps:
            # A clean step's sides are separated but for the two samples at the split, so at most n of
            # its m k pairs are out of order: only those rows are looked at (noise has about m k / 2).
            near = np.flatnonzero(np.minimum(u, m * k - u) <= n)
            if near.size:
                white[near] |= _clean_steps(stack[near], split[near])
        rho = np.where(white, 0.0, np.clip(rho, 0.0, 0.999))
        inflation = (1.0 + rho) / (1.0 - rho)
    variance = variance * inflation
    deviation = np.maximum(np.abs(u - m * k / 2.0) - 0.5, 0.0)
    positive = variance > 0
    z = np.where(positive, deviation / np.sqrt(np.where(positive, variance, 1.0)), 0.0)
    two_sided = 2.0 * special.ndtr(-z)
    exact = (tie_term == 0) if n <= config.exact_rank_max_n else np.zeros(batch, dtype=bool)
    if exact.any():
        shrunk = np.abs(u - m * k / 2.0)[exact] / np.sqrt(inflation[exact])
        two_sided[exact] = _exact_two_sided(split[exact].astype(np.int64), n - split[exact], shrunk)
    candidates = n - 2 * config.min_segment + 1
    return np.minimum(1.0, two_sided * candidates)


def _series_seed(values: np.ndarray, seed: int) -> np.random.Generator:
    """A generator that depends only on the series and the seed, not on its neighbours in the batch."""
    digest = zlib.crc32(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return np.random.default_rng(np.random.SeedSequence([seed, digest]))


def _permutation_p_values(stack: np.ndarray, observed: np.ndarray, config: ChangePointConfig) -> np.ndarray:
    """(1 + #permuted maxima >= observed) / (1 + permutations): the max over splits corrects itself.

    Costs ``permutations`` extra location passes per series (all permutations of a series in one batch).
    """
    batch, n = stack.shape
    exceed = np.zeros(batch, dtype=np.int64)
    for row in range(batch):
        generator = _series_seed(stack[row], config.seed)
        shuffled = generator.permuted(np.broadcast_to(stack[row], (config.permutations, n)), axis=1)
        maxima = energy_pass(shuffled, config.min_segment).statistic.max(axis=0)
        # A relative tolerance so that permutations tying the observed maximum count as exceeding it.
        exceed[row] = int(np.count_nonzero(maxima >= observed[row] - 1e-12 * abs(observed[row])))
    return (1.0 + exceed) / (1.0 + config.permutations)


@dataclass(frozen=True)
class ChangePointArrays:
    """The most significant split of every row of an equal-length stack, as arrays (index -1: none)."""

    index: np.ndarray  # int64 (B,), first index of the new regime, -1 when too short / constant
    statistic: np.ndarray  # float64 (B,)
    p_value: np.ndarray  # float64 (B,)
    significant: np.ndarray  # bool (B,)


def change_point_arrays(
    stack: np.ndarray, config: ChangePointConfig = ChangePointConfig()
) -> ChangePointArrays:
    """Array form of ``most_significant_change_points`` for a (B, n) stack of equal-length series.

    The fast path for fleet-wide scans: no per-series Python objects; chunks of ``config.batch_elements``.
    """
    values = np.asarray(stack, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError("stack must be 2-D: (series, time)")
    if not np.all(np.isfinite(values)):
        raise ValueError("series must be finite (drop or fill missing values first)")
    batch, n = values.shape
    index = np.full(batch, -1, dtype=np.int64)
    statistic = np.zeros(batch)
    p_value = np.ones(batch)
    if n >= 2 * config.min_segment and batch:
        chunk = max(1, config.batch_elements // n)
        slices = [slice(start, min(batch, start + chunk)) for start in range(0, batch, chunk)]
        found = _in_threads(lambda rows: _locate_chunk(values[rows], config), slices, config.threads)
        for rows, (where, energy, p) in zip(slices, found, strict=True):
            index[rows], statistic[rows], p_value[rows] = where, energy, p
    significant = (index >= 0) & (p_value <= config.max_p_value)
    return ChangePointArrays(index=index, statistic=statistic, p_value=p_value, significant=significant)


def _in_threads(work: Callable[[slice], _T], parts: list[slice], threads: int = 0) -> list[_T]:
    """``work`` of each part, in order, on up to ``threads`` threads (0: ``search_threads()``): the chunks
    are independent and numpy releases the GIL inside its array operations, so they overlap on a
    multi-core host (1,000 series x 1 day: the latency search 5.2 -> 3.9 s on 2 busy cores)."""
    threads = min(threads or search_threads(), len(parts))
    if threads <= 1:
        return [work(part) for part in parts]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(work, parts))


def search_threads() -> int:
    """The CPUs this process may use (at most 4: the scatters are memory-bound beyond that)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _locate_chunk(
    stack: np.ndarray, config: ChangePointConfig, at: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index, statistic, p) of an equal-length (B, n) chunk with n >= 2 * min_segment.

    The split of each row is its energy maximum, or ``at`` (indices in [min_segment, n - min_segment])
    when given: the test of a known split, whose p keeps the Bonferroni factor of the whole segment.
    """
    batch = stack.shape[0]
    stack = np.ascontiguousarray(stack)
    energy = energy_pass(stack, config.min_segment)
    best_row = np.argmax(energy.statistic, axis=0) if at is None else at - config.min_segment
    columns = np.arange(batch)
    best = energy.statistic[best_row, columns]
    split = best_row + config.min_segment
    if config.test == "rank":
        p_values = _rank_p_values(stack, energy, split, config)
    else:
        p_values = _permutation_p_values(stack, best, config)
    constant = energy.sorted_values[-1] == energy.sorted_values[0]
    index = np.where(constant, -1, split).astype(np.int64)
    return index, np.where(constant, 0.0, best), np.where(constant, 1.0, p_values)


def most_significant_change_points(
    series: Sequence[np.ndarray],
    config: ChangePointConfig = ChangePointConfig(),
    fdr_q: float | None = None,
) -> list[ChangePoint]:
    """The single most significant change point of each series, batched over all series at once.

    Series are grouped by length, stacked and processed in chunks of ``config.batch_elements`` values.
    With ``fdr_q`` set, ``significant`` is decided by Benjamini-Hochberg at level fdr_q across every
    series of the call (the p of each is still the split-corrected one), and ``q_value`` is filled in.
    """
    results: list[ChangePoint] = [_NO_CHANGE] * len(series)
    by_length: dict[int, list[int]] = {}
    for position, values in enumerate(series):
        by_length.setdefault(len(values), []).append(position)
    for length, positions in sorted(by_length.items()):
        if length < 2 * config.min_segment:
            continue
        stack = np.stack([np.asarray(series[p], dtype=np.float64).reshape(-1) for p in positions])
        arrays = change_point_arrays(stack, config)
        index = arrays.index.tolist()
        statistic = arrays.statistic.tolist()
        p_value = arrays.p_value.tolist()
        significant = arrays.significant.tolist()
        for row, position in enumerate(positions):
            if index[row] >= 0:
                results[position] = ChangePoint(index[row], statistic[row], p_value[row], significant[row])
    if fdr_q is not None:
        results = _apply_fdr(results, fdr_q)
    return results


def _apply_fdr(points: list[ChangePoint], fdr_q: float) -> list[ChangePoint]:
    """Replace per-test significance by Benjamini-Hochberg across the located points."""
    located = [i for i, point in enumerate(points) if point.index is not None]
    if not located:
        return points
    p_values = np.array([points[i].p_value for i in located])
    adjusted = stats.false_discovery_control(p_values, method="bh")
    out = list(points)
    for i, q_value in zip(located, adjusted, strict=True):
        out[i] = replace(points[i], q_value=float(q_value), significant=bool(q_value <= fdr_q))
    return out


def benjamini_hochberg(p_values: np.ndarray, q: float) -> np.ndarray:
    """Boolean mask of discoveries with the false discovery rate controlled at q (Benjamini-Hochberg)."""
    values = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return np.zeros(0, dtype=bool)
    return stats.false_discovery_control(values, method="bh") <= q


def segment_change_points(
    series: Sequence[np.ndarray],
    config: ChangePointConfig = ChangePointConfig(),
    max_change_points: int = 10,
    fdr_q: float | None = None,
) -> list[list[ChangePoint]]:
    """Every significant change point of each series, by ``config.segmentation``.

    "seeded" (default): seeded binary segmentation (see ``_seeded_segmentation``), which finds every
    step of fast-slow-fast-slow; "binary": plain hierarchical E-divisive, whose first split of such a
    series is mixed and often insignificant, so nothing is split at all. Points come back sorted by
    index, with indices into the whole series, at most ``max_change_points`` per series (the most
    significant). With ``fdr_q`` set, significance is Benjamini-Hochberg at fdr_q across the whole batch
    (each binary round; each seeded confirmation round) instead of p <= max_p_value, reported in
    ``q_value``; without it, the result of a series does not depend on the rest of the batch.
    """
    arrays = [np.asarray(values, dtype=np.float64).reshape(-1) for values in series]
    if config.segmentation == "binary":
        return _binary_segmentation(arrays, config, max_change_points, fdr_q)
    return _seeded_segmentation(arrays, config, max_change_points, fdr_q)


def _binary_segmentation(
    arrays: list[np.ndarray], config: ChangePointConfig, max_change_points: int, fdr_q: float | None
) -> list[list[ChangePoint]]:
    """Hierarchical E-divisive: each round tests the current segments of all series in one batched call
    and splits the significant ones; a segment shorter than 2 * min_segment cannot split."""
    found: list[list[ChangePoint]] = [[] for _ in arrays]
    open_segments: list[tuple[int, int, int]] = [(s, 0, a.shape[0]) for s, a in enumerate(arrays)]
    while open_segments:
        testable = [seg for seg in open_segments if seg[2] - seg[1] >= 2 * config.min_segment]
        testable = [seg for seg in testable if len(found[seg[0]]) < max_change_points]
        if not testable:
            break
        pieces = [arrays[s][start:end] for s, start, end in testable]
        points = most_significant_change_points(pieces, config, fdr_q=fdr_q)
        open_segments = []
        # Most significant first, so that a series at its cap keeps its strongest points.
        ranked = sorted(zip(testable, points, strict=True), key=lambda pair: pair[1].p_value)
        for (s, start, end), point in ranked:
            if point.index is None or not point.significant or len(found[s]) >= max_change_points:
                continue
            split = start + point.index
            found[s].append(replace(point, index=split))
            open_segments.extend([(s, start, split), (s, split, end)])
    return [sorted(points, key=lambda p: p.index or 0) for points in found]


def seeded_intervals(n: int, min_length: int, decay: float) -> list[tuple[int, int]]:
    """The seeded intervals [start, end) of a series of n points (Kovacs, Li, Buhlmann & Munk 2020).

    Scale k = 0, 1, ... has intervals of one length round(n decay^k) (at least ``min_length``), 2
    ceil(decay^-k) - 1 of them evenly spread from 0 to n: consecutive ones overlap by about half, so every
    step lies well inside an interval of every scale, and a scale short enough to hold no other step
    isolates it. Deterministic, O(n / min_length / (1 - decay)) intervals in all.
    """
    return [
        (start, start + length) for length, starts in _seeded_scales(n, min_length, decay) for start in starts
    ]


def _seeded_scales(n: int, min_length: int, decay: float) -> list[tuple[int, list[int]]]:
    """(interval length, starts) of each scale of ``seeded_intervals``, largest first."""
    scales: list[tuple[int, list[int]]] = []
    if n < min_length:
        return scales
    scale = 0
    while True:
        length = max(min_length, round(n * decay**scale))
        count = 2 * math.ceil(decay**-scale - 1e-9) - 1
        shift = (n - length) / (count - 1) if count > 1 else 0.0
        scales.append((length, sorted({round(i * shift) for i in range(count)})))
        if length <= min_length:
            return scales
        scale += 1


def _seeded_members(
    lengths: np.ndarray, min_length: int, decay: float, level: float
) -> list[tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per interval length, ascending: (series, start, screen) arrays of every seeded interval of that
    length over the batch, ordered by series, then scale, then start; the screen is ``level`` over the
    number of intervals of the interval's scale. Scales are computed once per distinct series length."""
    blocks: dict[int, list[tuple[np.ndarray, ...]]] = {}
    for n in np.unique(lengths).tolist():
        owners = np.flatnonzero(lengths == n)
        for scale, (length, starts) in enumerate(_seeded_scales(n, min_length, decay)):
            count = len(starts)
            blocks.setdefault(length, []).append(
                (
                    np.repeat(owners, count),
                    np.full(owners.shape[0] * count, scale, dtype=np.int64),
                    np.tile(np.array(starts, dtype=np.int64), owners.shape[0]),
                    np.full(owners.shape[0] * count, level / count),
                )
            )
    members = []
    for length, parts in sorted(blocks.items()):
        series, scale, start, screen = (np.concatenate(column) for column in zip(*parts, strict=True))
        order = np.lexsort((start, scale, series))  # the order of a loop over series, scales, starts
        members.append((length, (series[order], start[order], screen[order])))
    return members


_SCREEN_MARGIN = 1.01
"""Slack for floating-point rounding when an interval is skipped because its p cannot pass the screen."""


def smallest_rank_p_value(n: int, config: ChangePointConfig) -> float:
    """A lower bound on the rank test's p (``_rank_p_values``) at any split of any series of ``n`` points.

    Why: most intervals of the shortest seeded scales cannot pass their scale's screen whatever their
    values (10 points: p >= 0.0027 against a screen of 0.05 / 341), yet they were located and tested.
    The bound: the normal path's |z| is at most sqrt(n - 1) (Cauchy-Schwarz: the tie-corrected
    variance is the rank sum's permutation variance, and the serial correction only widens it), the
    exact path's tail at least 1 / C(n, m) >= 1 / C(n, n // 2); either times the split correction.
    """
    return _smallest_rank_p(n, config.min_segment, config.exact_rank_max_n)


def _screened(stack: np.ndarray, screen: np.ndarray, config: ChangePointConfig) -> np.ndarray:
    """``_may_pass_screen`` of a whole stack in chunks of ``config.batch_elements`` values on the search's
    threads, as the location pass runs: rows are independent, numpy's sorts and running sums release the
    GIL, and a chunk's temporaries stay in cache (one call per length held the stack's full-size ranks)."""
    batch, n = stack.shape
    chunk = max(1, config.batch_elements // max(n, 1))
    parts = [slice(start, min(batch, start + chunk)) for start in range(0, batch, chunk)]
    if len(parts) <= 1:
        return _may_pass_screen(stack, screen, config)
    found = _in_threads(
        lambda rows: _may_pass_screen(stack[rows], screen[rows], config), parts, config.threads
    )
    return np.concatenate(found)


def _may_pass_screen(stack: np.ndarray, screen: np.ndarray, config: ChangePointConfig) -> np.ndarray:
    """Per row of a (B, n) stack: False only when the rank test (``_rank_p_values``) gives a p above
    ``screen`` at every split, so the row's located split cannot pass it whatever the energy picks.

    Why: the location pass costs ~300 ns a value, the ranks and their running sums a fraction of that, and
    on noise the split correction puts nearly every seeded interval far above its scale's screen. The
    bound per split is the test without its serial widening (the widening only lowers |z|, and the exact
    tail is taken at the unshrunk deviation); a row with ties is always kept (its midranks are not
    computed here).
    """
    batch, n = stack.shape
    low = config.min_segment
    if n < 2 * low or batch == 0:
        return np.zeros(batch, dtype=bool)
    order = np.argsort(stack, axis=1)
    ordered = np.take_along_axis(stack, order, axis=1)
    ties = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    ranks = np.empty((batch, n))
    np.put_along_axis(ranks, order, np.arange(1.0, n + 1.0)[None, :], axis=1)
    splits = np.arange(low, n - low + 1)
    m = splits.astype(np.float64)
    k = n - m
    # |u - m k / 2| at each split: u - m k / 2 = (left rank sum) - m (n + 1) / 2, exact in doubles (sums
    # of integers, halves). In place: the prescreen's temporaries were half its time.
    spread = np.cumsum(ranks, axis=1, out=ranks)[:, low - 1 : n - low]
    spread -= m * (n + 1) / 2.0
    np.abs(spread, out=spread)
    candidates = n - 2 * low + 1
    if n <= config.exact_rank_max_n:
        # A row passes when at some split the exact test's p times the candidates is within its screen.
        # That p never falls as the lattice point floor(m k / 2 - deviation) rises, so per split and
        # screen value it is one comparison with the largest lattice point that passes
        # (``_exact_passing_points``), not a tail looked up per row and split (1.3 s of 6.8 at 10k series).
        values, which = np.unique(screen, return_inverse=True)
        passing = _exact_passing_points(n, low, candidates, tuple(values.tolist()))
        # The lattice point as _exact_two_sided computes it: floor(x) <= A exactly when x < A + 1.
        lattice = (m * k / 2.0)[None, :] - spread
        lattice += 1e-9
        return ties | (lattice < passing[which.reshape(-1)] + 1.0).any(axis=1)
    variance = m * k / 12.0 * (n + 1)
    spread -= 0.5
    np.maximum(spread, 0.0, out=spread)
    spread /= np.sqrt(variance)
    z = spread.max(axis=1)
    two_sided = 2.0 * special.ndtr(-z)
    smallest = np.minimum(1.0, two_sided * candidates)
    return ties | (smallest <= screen)


@functools.lru_cache(maxsize=256)
def _exact_passing_points(n: int, low: int, candidates: int, screens: tuple[float, ...]) -> np.ndarray:
    """Per screen value and split m = low..n - low: the largest lattice point a (the exact path's
    floor(m k / 2 - deviation)) whose p, min(1, min(1, 2 P(U <= a)) x candidates) as
    ``_may_pass_screen`` computed it, is within the screen; -1 when only a negative point passes (p 0)."""
    out = np.empty((len(screens), n - 2 * low + 1))
    limits = np.asarray(screens, dtype=np.float64)
    for column, split in enumerate(range(low, n - low + 1)):
        two_sided = np.minimum(2.0 * _mann_whitney_lower_tail(split, n - split), 1.0)
        p_value = np.minimum(1.0, two_sided * candidates)
        out[:, column] = np.searchsorted(p_value, limits, side="right") - 1
    return out


@functools.lru_cache(maxsize=1024)
def _smallest_rank_p(n: int, min_segment: int, exact_max_n: int) -> float:
    candidates = n - 2 * min_segment + 1
    if n < 2 or candidates < 1:
        return 0.0
    two_sided = 2.0 * float(special.ndtr(-math.sqrt(n - 1)))
    if n <= exact_max_n:
        two_sided = min(two_sided, 2.0 / math.comb(n, n // 2))
    return min(1.0, two_sided * candidates)


def _tests_at(
    pieces: list[np.ndarray], at: list[int], config: ChangePointConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(statistic, p) of the change point test at a given split of each piece, batched by piece length."""
    statistic = np.zeros(len(pieces))
    p_value = np.ones(len(pieces))
    by_length: dict[int, list[int]] = {}
    for position, piece in enumerate(pieces):
        by_length.setdefault(piece.shape[0], []).append(position)
    for length, positions in sorted(by_length.items()):
        stack = np.stack([pieces[p] for p in positions])
        splits = np.array([at[p] for p in positions], dtype=np.int64)
        chunk = max(1, config.batch_elements // length)
        for begin in range(0, len(positions), chunk):
            rows = slice(begin, begin + chunk)
            _, q, p = _locate_chunk(stack[rows], config, at=splits[rows])
            statistic[positions[rows]] = q
            p_value[positions[rows]] = p
    return statistic, p_value


def _seeded_segmentation(
    arrays: list[np.ndarray], config: ChangePointConfig, max_change_points: int, fdr_q: float | None
) -> list[list[ChangePoint]]:
    """Seeded binary segmentation with greedy selection and a confirmation of every accepted point.

    1. Candidates: the most significant split of every seeded interval (``seeded_intervals``); all
       intervals of one length, over every series, form one stack and one ``change_point_arrays`` call.
    2. Greedy selection per series: the most significant candidate first (ties: the narrower interval,
       then the earlier), skipping any whose interval contains an accepted point (it would straddle two
       regimes). A candidate of a scale with c intervals needs p <= max_p_value / c (fdr_q / c with FDR
       control): Bonferroni over the scale, so that noise scanned by many short intervals seldom yields
       candidates, and the whole series (c = 1) is screened as in binary segmentation.
    3. Confirmation: each accepted point is tested again at its split on the segment bounded by its
       accepted neighbours (so its p carries that segment's Bonferroni factor); while a series has a
       point that fails, the least significant failing one is dropped and the rest are tested again.
       A series with one point thus keeps it only if the whole series' test at that split passes, which
       is what keeps the false-positive rate of plain segmentation with the many seeded intervals.
    4. Refinement: every segment between confirmed points is tested as binary segmentation would, and
       its significant splits are confirmed with the rest, until nothing new is found: seeded finds what
       binary finds, and the steps binary cannot reach.
    """
    min_length = 2 * config.min_segment
    level = config.max_p_value if fdr_q is None else fdr_q
    lengths = np.array([values.shape[0] for values in arrays], dtype=np.int64)
    flat = np.concatenate(arrays) if arrays else np.zeros(0)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    candidates: list[list[tuple[float, int, int, int, int]]] = [[] for _ in arrays]
    whole = np.zeros(len(arrays))  # the whole-series test: scale 0
    has_whole = np.zeros(len(arrays), dtype=bool)
    for length, (series, start, screen) in _seeded_members(lengths, min_length, config.seeded_decay, level):
        if config.test == "rank":
            # An interval whose p cannot reach its scale's screen yields nothing (unless it is its series'
            # whole-series test, kept for the FDR population): not searched at all.
            reachable = (screen * _SCREEN_MARGIN >= smallest_rank_p_value(length, config)) | (
                lengths[series] == length
            )
            if not reachable.all():
                series, start, screen = series[reachable], start[reachable], screen[reachable]
            if series.size == 0:
                continue
        # One row per (series, interval), gathered from one flat copy: per-member tuples and views cost
        # ~0.2 GiB of Python objects on 20k work series of 120 points.
        stack = np.lib.stride_tricks.sliding_window_view(flat, length)[offsets[series] + start]
        if config.test == "rank":
            # The same for an interval whose own ranks cannot give a p within its screen at any split.
            wanted = (lengths[series] == length) | _screened(stack, screen * _SCREEN_MARGIN, config)
            if not wanted.all():
                series, start, screen, stack = series[wanted], start[wanted], screen[wanted], stack[wanted]
            if series.size == 0:
                continue
        found = change_point_arrays(stack, config)
        del stack
        whole_series = (lengths[series] == length) & (found.index >= 0)
        whole[series[whole_series]] = found.p_value[whole_series]
        has_whole[series[whole_series]] = True
        keep = np.flatnonzero((found.index >= 0) & (found.p_value <= screen))
        for s, p_value, begin, index in zip(
            series[keep].tolist(),
            found.p_value[keep].tolist(),
            start[keep].tolist(),
            found.index[keep].tolist(),
            strict=True,
        ):
            candidates[s].append((p_value, length, begin, begin + index, begin + length))
    whole_p: list[float | None] = [
        p if h else None for p, h in zip(whole.tolist(), has_whole.tolist(), strict=True)
    ]
    accepted: list[list[int]] = []
    for options in candidates:
        chosen: list[int] = []
        for _p, _length, start, split, end in sorted(options):
            if all(not start < c < end for c in chosen):
                chosen.append(split)
        accepted.append(sorted(chosen))
    confirmed = _confirm(arrays, accepted, whole_p, config, max_change_points, fdr_q)
    # 4. Refinement: what binary segmentation would still split. A weak step next to a strong one may
    #    have no interval of its own that passes the scale's screen, yet its segment between confirmed
    #    points does; each segment is tested once (by its bounds), new points are confirmed with the rest.
    tested: set[tuple[int, int, int]] = set()
    while True:
        open_segments = []
        for s, points in enumerate(confirmed):
            if len(points) >= max_change_points:
                continue
            bounds = [0, *(int(p.index or 0) for p in points), arrays[s].shape[0]]
            for start, end in itertools.pairwise(bounds):
                if end - start >= min_length and (s, start, end) not in tested:
                    open_segments.append((s, start, end))
        if not open_segments:
            return confirmed
        tested.update(open_segments)
        found = most_significant_change_points([arrays[s][a:b] for s, a, b in open_segments], config, fdr_q)
        added = [[int(p.index or 0) for p in points] for points in confirmed]
        grew = False
        for (s, start, _end), point in zip(open_segments, found, strict=True):
            if point.index is not None and point.significant:
                added[s].append(start + point.index)
                grew = True
        if not grew:
            return confirmed
        confirmed = _confirm(arrays, [sorted(a) for a in added], whole_p, config, max_change_points, fdr_q)


def _confirm(
    arrays: list[np.ndarray],
    accepted: list[list[int]],
    whole_p: list[float | None],
    config: ChangePointConfig,
    max_change_points: int,
    fdr_q: float | None,
) -> list[list[ChangePoint]]:
    """Test every point on the segment between its neighbours; drop the weakest failing one per series
    and test again until every point passes, then cap each series at its most significant points.

    With ``fdr_q``, each round's Benjamini-Hochberg runs over the points under test plus, for every other
    series, its whole-series test (a non-discovery): the population binary segmentation's first round
    has, not only the series that happened to yield candidates.
    """
    points = [list(cuts) for cuts in accepted]
    while True:
        owners = [(s, j) for s, cuts in enumerate(points) for j in range(len(cuts))]
        if not owners:
            return [[] for _ in arrays]
        pieces, at = [], []
        for s, j in owners:
            bounds = [0, *points[s], arrays[s].shape[0]]
            pieces.append(arrays[s][bounds[j] : bounds[j + 2]])
            at.append(bounds[j + 1] - bounds[j])
        statistic, p_value = _tests_at(pieces, at, config)
        if fdr_q is None:
            q_value = None
            passed = p_value <= config.max_p_value
        else:
            holding = {s for s, _ in owners}
            others = [p for s, p in enumerate(whole_p) if p is not None and s not in holding]
            population = np.concatenate([p_value, np.array(others, dtype=np.float64)])
            q_value = stats.false_discovery_control(population, method="bh")[: p_value.shape[0]]
            passed = q_value <= fdr_q
        # Drop each failing point that is weaker than its failing neighbours (ties: the later one goes):
        # far-apart drops do not change each other's segments, so a long series does not need one round
        # per drop. Over the cap, every point counts as failing: the weakest go first.
        rows_of = [[] for _ in arrays]  # type: list[list[int]]
        for row, (s, _j) in enumerate(owners):
            rows_of[s].append(row)
        dropped = False
        for s, rows in enumerate(rows_of):
            if not rows:
                continue
            over_cap = len(rows) > max_change_points
            failing = [over_cap or not bool(passed[row]) for row in rows]
            drop = []
            for j, row in enumerate(rows):
                if not failing[j]:
                    continue
                key = (float(p_value[row]), j)
                weaker_neighbour = any(
                    0 <= k < len(rows) and failing[k] and (float(p_value[rows[k]]), k) > key
                    for k in (j - 1, j + 1)
                )
                if not weaker_neighbour:
                    drop.append(j)
            if over_cap:  # only the single weakest, so that the cap keeps the strongest points
                drop = [max(range(len(rows)), key=lambda j: (float(p_value[rows[j]]), j))]
            for j in sorted(drop, reverse=True):
                del points[s][j]
            dropped = dropped or bool(drop)
        if not dropped:
            break
    out: list[list[ChangePoint]] = [[] for _ in arrays]
    for row, (s, j) in enumerate(owners):
        out[s].append(
            ChangePoint(
                index=points[s][j],
                statistic=float(statistic[row]),
                p_value=float(p_value[row]),
                significant=True,
                q_value=None if q_value is None else float(q_value[row]),
            )
        )
    return out
