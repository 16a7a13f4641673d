"""The energy statistic of E-divisive means (alpha = 1), batched: a reference O(n^2) form and the fast
rank-sum form the detector uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


_LOOP_MIN_BATCH = 256  # below it numpy's accumulate is faster than a Python step per row (measured)


def running_sum(rows: np.ndarray, out: np.ndarray, exclusive: bool = False) -> np.ndarray:
    """Cumulative sum along axis 0 by a Python loop over rows, or numpy's accumulate for narrow batches.

    Why: with the batch on the contiguous last axis each step is one SIMD add over all series, while
    numpy's own accumulate along a non-last axis is 10-20x slower for wide batches; for a batch of a few
    long series (the whole-series scales) the loop's per-row call costs 2-3x the accumulate. Both add in
    the same order, so the sums are the same bits.
    """
    if rows.ndim >= 2 and rows[0].size < _LOOP_MIN_BATCH:
        start = 1 if exclusive else 0
        if exclusive:
            out[0] = 0
        np.add.accumulate(rows, axis=0, dtype=out.dtype, out=out[start : start + rows.shape[0]])
        return out
    if exclusive:
        out[0] = 0
        for step in range(rows.shape[0]):
            np.add(out[step], rows[step], out=out[step + 1])
    else:
        out[0] = rows[0]
        for step in range(1, rows.shape[0]):
            np.add(out[step - 1], rows[step], out=out[step])
    return out


_LEAF_BITS = 4  # groups of 16 ranks are finished by direct pair comparisons (measured fastest)
_LEVEL_INDEX_CACHE: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, int]]] = {}


def _level_index_constants(padded: int, batch: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per level, the parts of the scatter index that do not depend on the data (cached per shape)."""
    key = (padded, batch)
    cached = _LEVEL_INDEX_CACHE.get(key)
    if cached is not None:
        return cached
    levels = padded.bit_length() - 1
    columns = np.arange(batch, dtype=np.intp)
    constants = []
    for level in range(levels - 1, -1, -1):
        size = 1 << (level + 1)
        groups = padded // size
        stride = 2 * groups * batch  # one step of position-in-group in the next level's layout
        position = np.arange(size, dtype=np.intp)[:, None, None]
        base = (2 * np.arange(groups, dtype=np.intp)[:, None] * batch + columns[None, :])[None]
        one_offset = np.ascontiguousarray(
            np.broadcast_to(base + position * stride + batch, (size, groups, batch))
        )
        zero_shift = np.ascontiguousarray(
            np.broadcast_to(stride + position * stride + batch, (size, groups, batch))
        )
        constants.append((one_offset, zero_shift, stride))
    if len(_LEVEL_INDEX_CACHE) > 16:
        _LEVEL_INDEX_CACHE.clear()
    _LEVEL_INDEX_CACHE[key] = constants
    return constants


def _less_sums_by_rank(x_time: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L[t] = sum_{i<t, rank_i<rank_t} (x_t - x_i) for an (n, B) time-major stack, in O(n log n) per series.

    ``order`` is the (B, n) argsort of each series. Every pair (i < t) is counted once, at the highest bit
    where the (distinct) ranks differ: a wavelet-tree construction keeps each column ordered by
    (rank >> (level + 1), time), laid out as (position in group, group, series), so within each group of
    2^(level + 1) ranks the pairs to count are "a zero bit earlier in time than a one bit" — a running sum —
    and a stable partition by the bit (one scatter) moves to the next level. O(n log n) element work in
    O(n) numpy calls per batch. Returns (L in rank order, the sorted values, the rank of each time point).
    """
    n, batch = x_time.shape
    levels = max(1, (n - 1).bit_length())
    padded = 1 << levels
    rank_dtype = np.int16 if padded <= np.iinfo(np.int16).max else np.int32
    columns = np.arange(batch)
    ranks = np.empty((padded, batch), dtype=rank_dtype)
    ranks[order.T, columns] = np.arange(n, dtype=rank_dtype)[:, None]
    # Padding sits after the series in time with the largest ranks: never earlier than a real point.
    ranks[n:] = np.arange(n, padded, dtype=rank_dtype)[:, None]
    rank_of_time = ranks[:n].copy()
    x = np.zeros((padded, batch))
    x[:n] = x_time
    less = np.zeros((padded, batch))
    zeros_through = np.empty((padded, batch), dtype=np.intp)
    zero_sum_through = np.empty((padded, batch))
    leaf_bits = min(levels, _LEAF_BITS)
    for (one_offset, zero_shift, stride), level in zip(
        _level_index_constants(padded, batch)[: levels - leaf_bits],
        range(levels - 1, leaf_bits - 1, -1),
        strict=True,
    ):
        size = 1 << (level + 1)
        shape = (size, padded // size, batch)
        # Only the groups holding a real rank: a group of ranks all >= n is padding alone, never earlier
        # than a real point, and nothing of it is returned (up to half the work for a length just past a
        # power of two). Its slots of the next level are left unset and never read.
        real = -(-n // size)
        zero = (ranks.reshape(shape)[:, :real] & rank_dtype(1 << level)) == 0
        x3 = x.reshape(shape)[:, :real]
        count3 = zeros_through.reshape(shape)[:, :real]
        sum3 = zero_sum_through.reshape(shape)[:, :real]
        running_sum(zero, out=count3)
        running_sum(x3 * zero, out=sum3)
        contribution = x3 * count3
        contribution -= sum3
        contribution *= ~zero
        less3 = less.reshape(shape)[:, :real]
        less3 += contribution
        # Destination in the next level's (size / 2, 2 * groups, batch) layout: a zero goes to position
        # (zeros before it) of the lower child group, a one to (ones before it) of the upper child group.
        scaled = count3 * stride
        target = 2 * scaled
        target -= zero_shift[:, :real]
        target *= zero
        target += one_offset[:, :real]
        target -= scaled
        flat = target.reshape(-1)
        moved_ranks = np.empty_like(ranks)
        moved_ranks.reshape(-1)[flat] = ranks.reshape(shape)[:, :real].reshape(-1)
        moved_x = np.empty_like(x)
        moved_x.reshape(-1)[flat] = x3.reshape(-1)
        moved_less = np.empty_like(less)
        moved_less.reshape(-1)[flat] = less3.reshape(-1)
        ranks, x, less = moved_ranks, moved_x, moved_less
    # Leaves: groups of 2^leaf_bits consecutive ranks, each in time order. Their pairs are fewer than the
    # element work of the levels they replace, so count them directly.
    leaf = 1 << leaf_bits
    real = -(-n // leaf)
    shape = (leaf, padded // leaf, batch)
    ranks3 = ranks.reshape(shape)[:, :real]
    x3 = x.reshape(shape)[:, :real]
    less3 = less.reshape(shape)[:, :real]
    for later in range(1, leaf):
        for earlier in range(later):
            difference = x3[later] - x3[earlier]
            difference *= ranks3[earlier] < ranks3[later]
            less3[later] += difference
    flat = (ranks3.astype(np.intp) * batch + columns).reshape(-1)
    less_by_rank = np.empty_like(less)
    less_by_rank.reshape(-1)[flat] = less3.reshape(-1)
    sorted_x = np.empty_like(x)
    sorted_x.reshape(-1)[flat] = x3.reshape(-1)
    return less_by_rank[:n], sorted_x[:n], rank_of_time


@dataclass(frozen=True)
class EnergyPass:
    """Everything one location pass computes that the significance tests reuse."""

    statistic: np.ndarray  # (n - 2 min_segment + 1, B) Q at tau = min_segment + row
    sorted_values: np.ndarray  # (n, B)
    rank_of_time: np.ndarray  # (n, B) distinct ranks 0..n-1


def energy_pass(stack: np.ndarray, min_segment: int) -> EnergyPass:
    """Q(tau) for every allowed tau of a (B, n) stack; requires n >= 2 * min_segment."""
    batch, n = stack.shape
    order = np.argsort(stack, axis=1)
    x_time = np.ascontiguousarray(stack.T)
    less_by_rank, sorted_values, rank_of_time = _less_sums_by_rank(x_time, order)
    gather = (rank_of_time.astype(np.intp) * batch + np.arange(batch)).reshape(-1)
    less = less_by_rank.reshape(-1)[gather].reshape(n, batch)
    prefix_x = running_sum(x_time, np.empty((n + 1, batch)), exclusive=True)
    time = np.arange(n, dtype=np.float64)[:, None]
    # D_prefix[t] = sum_{i<t} |x_t - x_i| = 2 L[t] + sum_{i<t} x_i - t x_t
    before = 2.0 * less + prefix_x[:n] - time * x_time
    below = running_sum(sorted_values, np.empty((n + 1, batch)), exclusive=True)
    total_x = below[n]
    # D_all at rank p = sum_j |v_p - v_j| from prefix sums of the sorted values.
    all_by_rank = sorted_values * (2.0 * time - (n - 1)) - below[:n] + (total_x - below[1:])
    after = all_by_rank.reshape(-1)[gather].reshape(n, batch) - before
    within_prefix = running_sum(before, np.empty((n + 1, batch)), exclusive=True)
    after_prefix = running_sum(after, np.empty((n + 1, batch)), exclusive=True)
    taus = slice(min_segment, n - min_segment + 1)
    left = within_prefix[taus]
    right = after_prefix[n] - after_prefix[taus]
    cross = within_prefix[n] - left - right
    m = np.arange(min_segment, n - min_segment + 1, dtype=np.float64)[:, None]
    k = n - m
    statistic = (2.0 / n) * cross - (2.0 * k / (n * (m - 1))) * left - (2.0 * m / (n * (k - 1))) * right
    return EnergyPass(statistic=statistic, sorted_values=sorted_values, rank_of_time=rank_of_time)


def energy_statistics(values: np.ndarray, min_segment: int) -> np.ndarray:
    """Q(tau) of a (B, n) stack for every tau in [0, n]; -inf outside [min_segment, n - min_segment]."""
    stack = np.ascontiguousarray(values, dtype=np.float64)
    batch, n = stack.shape
    out = np.full((batch, n + 1), -np.inf)
    if n < 2 * min_segment:
        return out
    out[:, min_segment : n - min_segment + 1] = energy_pass(stack, min_segment).statistic.T
    return out
