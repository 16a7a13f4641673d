"""Change point statistics: batched E-divisive means (energy statistic, alpha = 1) with a significance test.

Why batched: the fleet has thousands of candidate series; looping over them in Python would dominate the
run time, so every step below is a numpy operation over a stack of equal-length series.

The energy statistic of a split at tau (Matteson & James 2014, alpha = 1), with m = tau and k = n - tau:

    Q(tau) = m k / n * ( 2/(m k) * cross - 2/(m (m-1)) * within_left - 2/(k (k-1)) * within_right )

where cross is the sum of |x_i - x_j| over pairs on opposite sides and the within terms are sums over the
pairs inside each side. For 1-D data all within sums of every prefix follow from the "dominance" sums
D[t] = sum_{i<t} |x_t - x_i|, which a wavelet-style pass over the value ranks gives in O(n log n) with
O(log n) numpy calls over the whole batch (see ``_prefix_distance_sums``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import special, stats

__all__ = [
    "ChangePoint",
    "ChangePointConfig",
    "benjamini_hochberg",
    "energy_statistic_reference",
    "energy_statistics",
    "most_significant_change_points",
    "segment_change_points",
]


@dataclass(frozen=True)
class ChangePointConfig:
    """Thresholds of the detector; defaults chosen on bench_changepoint (precision first)."""

    min_segment: int = 5  # fewest points on either side of a split (>= 2: a within term needs a pair)
    max_p_value: float = 0.01  # significance level of the change point test, after the split correction
    test: Literal["rank", "permutation"] = "rank"  # rank: ~1 location pass; permutation: ~permutations+1
    permutations: int = 199  # permutation test only
    seed: int = 0  # permutation test only; mixed with a hash of each series so results ignore batch makeup
    batch_elements: int = 1 << 21  # series are processed in chunks of about this many values (memory bound)

    def __post_init__(self) -> None:
        if self.min_segment < 2:
            raise ValueError("min_segment must be >= 2: a within-segment term needs at least one pair")
        if not 0.0 < self.max_p_value <= 1.0:
            raise ValueError("max_p_value must be in (0, 1]")
        if self.test not in ("rank", "permutation"):
            raise ValueError(f"unknown test {self.test!r}")
        if self.permutations < 1:
            raise ValueError("permutations must be >= 1")


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
# Energy statistic: plain reference and batched O(n log n) form
# ----------------------------------------------------------------------------------------------------------


def energy_statistic_reference(x: np.ndarray, min_segment: int) -> np.ndarray:
    """Q(tau) for every tau in [0, n] by the plain O(n^2) pair sums; NaN outside the allowed splits.

    Kept deliberately naive: it is the oracle the batched form is tested against.
    """
    values = np.asarray(x, dtype=np.float64)
    n = values.shape[0]
    out = np.full(n + 1, np.nan)
    distances = np.abs(values[:, None] - values[None, :])
    for tau in range(min_segment, n - min_segment + 1):
        m, k = tau, n - tau
        cross = distances[:tau, tau:].sum()
        within_left = np.triu(distances[:tau, :tau], 1).sum()
        within_right = np.triu(distances[tau:, tau:], 1).sum()
        energy = (
            2.0 * cross / (m * k) - 2.0 * within_left / (m * (m - 1)) - 2.0 * within_right / (k * (k - 1))
        )
        out[tau] = m * k / n * energy
    return out


def _prefix_distance_sums(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """D[b, t] = sum_{i<t} |x[b, t] - x[b, i]| for a (B, n) stack, in O(n log n) per series.

    ``order`` is the stable argsort of each row. Every pair (i < t) is counted once, at the highest bit
    where the (distinct) ranks of x_i and x_t differ: a wavelet-tree construction keeps each row ordered by
    (rank >> (level + 1), time), so within each group of 2^(level+1) ranks the pairs to count are "a zero
    bit earlier in time than a one bit" — a cumulative sum — and a stable partition by the bit moves to the
    next level. That is O(log n) numpy calls over the whole batch instead of O(n log n) Python steps.
    """
    batch, n = values.shape
    levels = max(1, int(np.ceil(np.log2(max(n, 2)))))
    padded = 1 << levels
    rank_dtype = np.int16 if padded <= np.iinfo(np.int16).max else np.int32
    ranks = np.empty((batch, padded), dtype=rank_dtype)
    rows = np.arange(batch)[:, None]
    ranks[rows, order] = np.arange(n, dtype=rank_dtype)
    # Padding sits after the series in time with the largest ranks: never earlier than a real point.
    ranks[:, n:] = np.arange(n, padded, dtype=rank_dtype)
    current_x = np.zeros((batch, padded))
    current_x[:, :n] = values
    count_less = np.zeros((batch, padded), dtype=np.int32)
    sum_less = np.zeros((batch, padded))
    row_base = (np.arange(batch, dtype=np.int64) * padded)[:, None, None]
    for level in range(levels - 1, -1, -1):
        size = 1 << (level + 1)
        half = size >> 1
        groups = padded // size
        shape = (batch, groups, size)
        bit = ((ranks >> level) & 1).astype(bool).reshape(shape)
        zero = ~bit
        zeros_through = np.cumsum(zero, axis=2, dtype=np.int32)
        x3 = current_x.reshape(shape)
        zero_sum_through = np.cumsum(np.where(zero, x3, 0.0), axis=2)
        count_less += np.where(bit, zeros_through, 0).reshape(batch, padded)
        sum_less += np.where(bit, zero_sum_through, 0.0).reshape(batch, padded)
        position = np.arange(size, dtype=np.int32)
        target = np.where(bit, half + position - zeros_through, zeros_through - 1)
        flat = (row_base + (np.arange(groups, dtype=np.int64) * size)[None, :, None] + target).ravel()
        for array in (ranks, current_x, count_less, sum_less):
            moved = np.empty_like(array)
            moved.reshape(-1)[flat] = array.reshape(-1)
            array[...] = moved
    # After level 0 each row is in rank order: position p holds the point whose rank is p.
    count_by_time = np.empty((batch, n), dtype=np.int32)
    sum_by_time = np.empty((batch, n))
    count_by_time[rows, order] = count_less[:, :n]
    sum_by_time[rows, order] = sum_less[:, :n]
    prefix_sum = np.zeros((batch, n))
    np.cumsum(values[:, :-1], axis=1, out=prefix_sum[:, 1:])
    time = np.arange(n)
    return values * (2 * count_by_time - time) - 2.0 * sum_by_time + prefix_sum


def _all_distance_sums(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """A[b, t] = sum_j |x[b, t] - x[b, j]| from the sorted rows (prefix sums of sorted values)."""
    batch, n = values.shape
    rows = np.arange(batch)[:, None]
    ordered = values[rows, order]
    below = np.zeros((batch, n))
    np.cumsum(ordered[:, :-1], axis=1, out=below[:, 1:])
    total = below[:, -1:] + ordered[:, -1:]
    position = np.arange(n)
    by_rank = ordered * (2 * position - n + 1) - below + (total - below - ordered)
    out = np.empty((batch, n))
    out[rows, order] = by_rank
    return out


def energy_statistics(values: np.ndarray, min_segment: int) -> np.ndarray:
    """Q(tau) of a (B, n) stack for every tau in [0, n]; -inf outside [min_segment, n - min_segment]."""
    stack = np.ascontiguousarray(values, dtype=np.float64)
    batch, n = stack.shape
    out = np.full((batch, n + 1), -np.inf)
    if n < 2 * min_segment:
        return out
    order = np.argsort(stack, axis=1, kind="stable")
    before = _prefix_distance_sums(stack, order)
    after = _all_distance_sums(stack, order) - before
    within_prefix = np.zeros((batch, n + 1))
    np.cumsum(before, axis=1, out=within_prefix[:, 1:])
    within_suffix = np.zeros((batch, n + 1))
    np.cumsum(after[:, ::-1], axis=1, out=within_suffix[:, 1:])
    within_suffix = within_suffix[:, ::-1]
    total = within_prefix[:, -1:]
    taus = np.arange(min_segment, n - min_segment + 1)
    m = taus.astype(np.float64)
    k = n - m
    left = within_prefix[:, taus]
    right = within_suffix[:, taus]
    cross = total - left - right
    energy = 2.0 * cross / (m * k) - 2.0 * left / (m * (m - 1)) - 2.0 * right / (k * (k - 1))
    out[:, taus] = m * k / n * energy
    return out


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


def _rank_p_values(values: np.ndarray, split: np.ndarray, min_segment: int) -> np.ndarray:
    """Two-sided Mann-Whitney p at each row's split, Bonferroni-corrected for the candidate splits.

    Why this test: ranks shrug off the latency spikes that inflate a t-test's variance, and the Bonferroni
    factor (n - 2 min_segment + 1) makes the selection of the best split honest (conservative: the
    candidates are correlated), which is what a precision-first detector wants.
    """
    batch, n = values.shape
    ranks = stats.rankdata(values, axis=1)
    rank_prefix = np.cumsum(ranks, axis=1)
    m = split.astype(np.float64)
    k = n - m
    left_rank_sum = rank_prefix[np.arange(batch), split - 1]
    u = left_rank_sum - m * (m + 1) / 2.0
    variance = m * k / 12.0 * ((n + 1) - _tie_term(values) / (n * (n - 1)))
    deviation = np.maximum(np.abs(u - m * k / 2.0) - 0.5, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(variance > 0, deviation / np.sqrt(np.where(variance > 0, variance, 1.0)), 0.0)
    two_sided = 2.0 * special.ndtr(-z)
    candidates = n - 2 * min_segment + 1
    return np.minimum(1.0, two_sided * candidates)


def _series_seed(values: np.ndarray, seed: int) -> np.random.Generator:
    """A generator that depends only on the series and the seed, not on its neighbours in the batch."""
    digest = zlib.crc32(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return np.random.default_rng(np.random.SeedSequence([seed, digest]))


def _permutation_p_values(values: np.ndarray, observed: np.ndarray, config: ChangePointConfig) -> np.ndarray:
    """(1 + #permuted maxima >= observed) / (1 + permutations): the max over splits corrects itself."""
    batch, n = values.shape
    exceed = np.zeros(batch, dtype=np.int64)
    shuffled = np.empty((config.permutations, n))
    for row in range(batch):
        generator = _series_seed(values[row], config.seed)
        shuffled[...] = generator.permuted(np.broadcast_to(values[row], shuffled.shape), axis=1)
        maxima = energy_statistics(shuffled, config.min_segment).max(axis=1)
        exceed[row] = int(np.count_nonzero(maxima >= observed[row] * (1.0 - 1e-12)))
    return (1.0 + exceed) / (1.0 + config.permutations)


# ----------------------------------------------------------------------------------------------------------
# Public batch API
# ----------------------------------------------------------------------------------------------------------


def _locate_stack(stack: np.ndarray, config: ChangePointConfig) -> list[ChangePoint]:
    """Most significant change point of every row of an equal-length (B, n) stack."""
    batch, n = stack.shape
    if n < 2 * config.min_segment:
        return [_NO_CHANGE] * batch
    q = energy_statistics(stack, config.min_segment)
    split = np.argmax(q, axis=1)
    best = q[np.arange(batch), split]
    constant = np.ptp(stack, axis=1) == 0
    if config.test == "rank":
        p_values = _rank_p_values(stack, split, config.min_segment)
    else:
        p_values = _permutation_p_values(stack, best, config)
    results: list[ChangePoint] = []
    for row in range(batch):
        if constant[row] or not np.isfinite(best[row]):
            results.append(_NO_CHANGE)
            continue
        p_value = float(p_values[row])
        results.append(
            ChangePoint(
                index=int(split[row]),
                statistic=float(best[row]),
                p_value=p_value,
                significant=p_value <= config.max_p_value,
            )
        )
    return results


def _as_float_arrays(series: Sequence[np.ndarray]) -> list[np.ndarray]:
    arrays = [np.asarray(s, dtype=np.float64).reshape(-1) for s in series]
    for array in arrays:
        if not np.all(np.isfinite(array)):
            raise ValueError("series must be finite (drop or fill missing values first)")
    return arrays


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
    arrays = _as_float_arrays(series)
    results: list[ChangePoint] = [_NO_CHANGE] * len(arrays)
    by_length: dict[int, list[int]] = {}
    for position, array in enumerate(arrays):
        by_length.setdefault(array.shape[0], []).append(position)
    for length, positions in sorted(by_length.items()):
        chunk = max(1, config.batch_elements // max(length, 1))
        for start in range(0, len(positions), chunk):
            members = positions[start : start + chunk]
            stack = np.stack([arrays[p] for p in members]) if length else np.empty((len(members), 0))
            for position, point in zip(members, _locate_stack(stack, config), strict=True):
                results[position] = point
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
    """Every significant change point of each series by hierarchical E-divisive (binary segmentation).

    Each round tests the current segments of all series in one batched call and splits the significant
    ones; a segment shorter than 2 * min_segment cannot split. Points come back sorted by index, with
    indices into the whole series. With ``fdr_q`` set, each round's candidates across the whole batch
    are accepted by Benjamini-Hochberg at fdr_q instead of p <= max_p_value (reported in ``q_value``).
    """
    arrays = _as_float_arrays(series)
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
        for (s, start, end), point in zip(testable, points, strict=True):
            if point.index is None or not point.significant or len(found[s]) >= max_change_points:
                continue
            split = start + point.index
            found[s].append(replace(point, index=split))
            open_segments.extend([(s, start, split), (s, split, end)])
    return [sorted(points, key=lambda p: p.index or 0) for points in found]
