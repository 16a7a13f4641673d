"""The design's distribution-drift scorer: pure and vectorized over every (query_hash, metric) pair at once.

Input: a long frame ``query_hash, metric, side, value`` (side ``baseline`` or ``candidate``; one row per
sample). Output: one row per (query_hash, metric), sorted by it, with the drift score and a
PASS / WARN / BLOCK flag. Per pair, exactly as the design says (``profile="design"``):

1. the candidate is winsorized at its ``winsor_quantile`` (0.99): every candidate value above the
   quantile (numpy's default ``linear`` method: virtual index h = (n - 1) * q, value x[floor(h)] +
   (x[floor(h) + 1] - x[floor(h)]) * frac(h), numpy's two-sided lerp) is set to it; the baseline is not;
2. one grid over the union support of baseline and winsorized candidate: lo = min, hi = max,
   ``bin_width = (hi - lo) / n_bins``, ``index = min(int((v - lo) / bin_width), n_bins - 1)``; int()
   truncates toward zero and v >= lo, so it is a floor; hi == lo puts every sample in bin 0 (JS = PSI = 0);
3. each histogram gets ``smoothing`` (1e-9) added to every bin's *count* and is normalised to sum 1
   (p = candidate, q = baseline; an empty side: uniform);
4. JS = Jensen-Shannon *divergence*, base 2 (in [0, 1]; clipped to it against rounding): the drift score.
   PSI = sum((p - q) * ln(p / q)). KL appears only inside JS. Wasserstein-1 between the sorted *raw*
   samples (candidate not winsorized), in the metric's unit: metadata only, never a flag;
5. flags: fewer than ``min_samples`` (200) on either side: WARN ``insufficient_samples`` with JS = PSI = 0
   (never a silent PASS, and no score from too few samples); PSI > ``psi_data_quality`` (10): the PSI is
   not trusted (``psi_data_quality`` is true) and the flag falls back to JS alone (reason
   ``psi_data_quality_fallback`` unless JS itself says WARN/BLOCK); else BLOCK if JS > 0.25 or PSI > 0.25,
   WARN if JS > 0.1 or PSI >= 0.1, else PASS.

Every row also carries its grid: ``bins``, ``support_lo``, ``support_hi`` (null for a side with no sample).

Before issue 27 the design profile added the smoothing to each bin's *frequency* (count / n): an empty
bin then weighs 1e-9 instead of 1e-9 / n, and the PSI of a few candidate samples in a bin the baseline
never had came out smaller (baseline 200 x 0 and 200 x 1, candidate 197 x 0, 5 x 0.5, 198 x 1: PSI 0.204
WARN, the design's 0.279 BLOCK). The calibrated profile keeps the frequency form it was measured with.

The default ``profile="calibrated"`` keeps the scale, bands and flag names but a band only counts when the
distance also exceeds what sampling noise gives at the pair's sample sizes: a permutation null per pair
(``null_resamples`` relabellings of the pooled samples into n_baseline / n_candidate, on the observed
grid, the pseudo-candidate winsorized at the bin level as the real one is), whose ``null_quantile`` of JS
and of PSI are ``js_noise`` / ``psi_noise``. A rule fires only when the distance is over its band *and*
over its noise quantile. Only pairs that the design rule would flag get a null (the others PASS either
way). Each pair's draws come from its own generator, seeded with ``seed`` and the pair's key, so a pair's
result never depends on which other pairs share the batch, nor on row order.

Negative and non-finite samples are rejected (ValueError naming the pair), never clipped.
``query_hash`` = SHA-256 hex of the query fingerprint (``query_hash``); the shard key
``int(query_hash[-8:], 16) % shard_count`` is ``shard_of`` and the output's ``shard`` column.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from scipy import stats

from jobs.drift.config import DriftScoreConfig

PASS = "PASS"
WARN = "WARN"
BLOCK = "BLOCK"
METRICS = ("cost", "latency", "cardinality")
SIDES = ("baseline", "candidate")
# Reasons, one per row, first that applies: insufficient_samples, then (PSI > psi_data_quality)
# js_block / js_warn / psi_data_quality_fallback; else js_block, psi_block, js_warn, psi_warn, within_bands
# (the calibrated profile adds shift_block / tail_block / shift_warn / tail_warn / slow_mode_warn).
INSUFFICIENT_SAMPLES = "insufficient_samples"
PSI_DATA_QUALITY_FALLBACK = "psi_data_quality_fallback"
WITHIN_BANDS = "within_bands"
SLOW_MODE_WARN = "slow_mode_warn"
QUERY_HASH_PATTERN = re.compile(r"^[a-f0-9]{64}$")
INPUT_COLUMNS = ("query_hash", "metric", "side", "value")
OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "query_hash": pl.String(),
    "metric": pl.String(),
    "shard": pl.Int64(),
    "n_baseline": pl.Int64(),
    "n_candidate": pl.Int64(),
    "js": pl.Float64(),
    "psi": pl.Float64(),
    "wasserstein": pl.Float64(),
    "flag": pl.String(),
    "reason": pl.String(),
    "psi_data_quality": pl.Boolean(),
    "profile": pl.String(),
    "js_noise": pl.Float64(),
    "psi_noise": pl.Float64(),
    "bins": pl.Int64(),
    "support_lo": pl.Float64(),
    "support_hi": pl.Float64(),
}


def query_hash(fingerprint: str) -> str:
    """SHA-256 hex of the query fingerprint: the pair's ``query_hash``."""
    return hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()


def shard_of(query_hash: str, shard_count: int) -> int:
    """The shard key of a query hash: ``int(query_hash[-8:], 16) % shard_count``."""
    return int(query_hash[-8:], 16) % shard_count


def shard_expr(shard_count: int, column: str = "query_hash") -> pl.Expr:
    """``shard_of`` as a polars expression (the last 8 hex digits, mod shard_count)."""
    return (
        pl.col(column).str.slice(-8).str.to_integer(base=16, strict=True).cast(pl.Int64) % shard_count
    ).alias("shard")


# ---------------------------------------------------------------------------------------------------------
# Input: a long frame, checked and sorted (pair, side, value)


@dataclass(frozen=True)
class _Samples:
    """Every pair's samples as flat arrays, each side sorted within its pair: pair i's baseline is
    ``baseline[baseline_offsets[i]:baseline_offsets[i + 1]]`` (ascending), the candidate's likewise."""

    keys: pl.DataFrame  # one row per pair, sorted: query_hash, metric
    baseline: np.ndarray  # float64
    baseline_offsets: np.ndarray  # int64, pairs + 1
    candidate: np.ndarray
    candidate_offsets: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """(pairs, 2) samples per side: baseline, candidate."""
        return np.stack([np.diff(self.baseline_offsets), np.diff(self.candidate_offsets)], axis=1)


def _check_keys(frame: pl.DataFrame) -> None:
    for column in ("query_hash", "metric"):
        nulls = frame.filter(pl.col(column).is_null())
        if nulls.height:
            raise ValueError(f"drift samples: null {column} ({nulls.row(0, named=True)})")
    bad_hash = frame.filter(~pl.col("query_hash").str.contains(QUERY_HASH_PATTERN.pattern))
    if bad_hash.height:
        raise ValueError(f"drift samples: query_hash {bad_hash['query_hash'][0]!r} is not 64 lower-case hex")
    bad = frame.filter(~pl.col("metric").is_in(METRICS))
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(
            f"drift samples: metric {row['metric']!r} not in {METRICS} (query_hash={row['query_hash']})"
        )


def _prepare(samples: pl.DataFrame) -> _Samples:
    missing = [c for c in INPUT_COLUMNS if c not in samples.columns]
    if missing:
        raise ValueError(f"drift samples: missing columns {missing}")
    frame = samples.select(
        pl.col("query_hash").cast(pl.String),
        pl.col("metric").cast(pl.String),
        pl.col("side").cast(pl.String),
        pl.col("value").cast(pl.Float64),
    )
    for column in INPUT_COLUMNS:
        nulls = frame.filter(pl.col(column).is_null())
        if nulls.height:
            row = nulls.row(0, named=True)
            raise ValueError(
                f"drift samples: null {column} (query_hash={row['query_hash']}, {row['metric']})"
            )
    _check_keys(frame)
    for column, allowed in (("side", SIDES),):
        bad = frame.filter(~pl.col(column).is_in(allowed))
        if bad.height:
            row = bad.row(0, named=True)
            raise ValueError(
                f"drift samples: {column} {row[column]!r} not in {allowed}"
                f" (query_hash={row['query_hash']}, {row['metric']})"
            )
    bad_value = frame.filter(~pl.col("value").is_finite() | (pl.col("value") < 0))
    if bad_value.height:
        row = bad_value.sort("query_hash", "metric", "side", "value").row(0, named=True)
        raise ValueError(
            f"drift samples: {row['side']} value {row['value']!r} of query_hash={row['query_hash']},"
            f" metric={row['metric']} is negative or not finite (rejected, not clipped)"
        )
    frame = frame.with_columns((pl.col("side") == "candidate").cast(pl.Int64).alias("side_code")).sort(
        "query_hash", "metric", "side_code", "value"
    )
    keys = frame.select("query_hash", "metric").unique(maintain_order=True)
    pair = frame.select(pl.struct("query_hash", "metric").rle_id()).to_series().to_numpy().astype(np.int64)
    is_candidate = frame["side_code"].to_numpy().astype(bool)
    values = frame["value"].to_numpy().astype(np.float64)
    sides = []
    for mask in (~is_candidate, is_candidate):
        counts = np.bincount(pair[mask], minlength=keys.height)
        sides += [values[mask], np.concatenate(([0], np.cumsum(counts))).astype(np.int64)]
    return _Samples(keys, *sides)


# ---------------------------------------------------------------------------------------------------------
# The kernel: every pair at once


_LOOP_SORT_MIN_MEAN = 32
"""Segments at least this long on average are sorted one by one in place (a C sort per segment, no index
arrays); shorter ones by length, as 2-D blocks, where a call per segment would cost more than its sort."""


def _sort_segments(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``values`` sorted within each segment ``[offsets[i], offsets[i + 1])``. Either way each segment
    goes through numpy's sort of its own values alone (a 2-D sort sorts each row as a 1-D array), so
    the bytes are the same; the loop avoids gathering each length's block through index arrays (3x
    faster for ragged sizes of a few hundred)."""
    sizes = np.diff(offsets)
    if sizes.size and values.size >= _LOOP_SORT_MIN_MEAN * sizes.size:
        out = values.copy()
        for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            out[start:stop].sort()
        return out
    out = np.empty_like(values)
    for size in np.unique(sizes):
        if size == 0:
            continue
        segments = np.flatnonzero(sizes == size)
        if segments.size == sizes.size:  # one length for all (the usual batch): a reshape, no gather
            return np.sort(values.reshape(segments.size, size), axis=1).reshape(-1)
        index = offsets[segments][:, None] + np.arange(size)
        out[index] = np.sort(values[index], axis=1)
    return out


def _gathered_sorted(values: np.ndarray, starts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Segments ``values[starts[i]:starts[i] + size_i]`` (sizes from ``offsets``) copied to
    ``[offsets[i], offsets[i + 1])`` and each sorted there: ``_sort_segments`` of their gather, the same
    numpy sort of the same values, so the same bytes. Long segments are copied and sorted one by one in
    place (no per-sample index arrays: the gather's repeat, arange and fancy indexing were a sixth of the
    ragged scoring's CPU); short ones go through the gather and ``_sort_segments``."""
    sizes = np.diff(offsets)
    if not sizes.size or int(offsets[-1]) < _LOOP_SORT_MIN_MEAN * sizes.size:
        gather = np.repeat(starts - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
        return _sort_segments(values[gather], offsets)
    if (starts[1:] == starts[:-1] + sizes[:-1]).all():  # the segments lie in this order: one copy
        out = values[int(starts[0]) : int(starts[0]) + int(offsets[-1])].copy()
        for first, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            out[first:stop].sort()
        return out
    out = np.empty(int(offsets[-1]))
    for start, first, stop in zip(starts.tolist(), offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        segment = out[first:stop]
        segment[...] = values[start : start + stop - first]
        segment.sort()
    return out


def _linear_quantile(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray, q: float) -> np.ndarray:
    """numpy's 'linear' quantile of each sorted segment (size >= 1), with numpy's exact arithmetic."""
    virtual = (sizes - 1) * q
    previous = np.floor(virtual)
    gamma = virtual - previous
    prev_i = previous.astype(np.int64)
    next_i = prev_i + 1
    above = virtual >= sizes - 1
    prev_i[above] = sizes[above] - 1
    next_i[above] = sizes[above] - 1
    a = values[starts + prev_i]
    b = values[starts + next_i]
    diff = b - a
    out = a + diff * gamma
    high = gamma >= 0.5
    out[high] = b[high] - diff[high] * (1 - gamma[high])
    return out


def _segment_ends(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) of each sorted segment: its min and max (+inf / -inf when empty)."""
    has = np.diff(offsets) > 0
    if values.size == 0:
        return np.full(has.size, np.inf), np.full(has.size, -np.inf)
    top = values.size - 1
    first = np.where(has, values[np.minimum(offsets[:-1], top)], np.inf)
    last = np.where(has, values[np.minimum(offsets[1:] - 1, top)], -np.inf)
    return first, last


def _bin_keys(
    values: np.ndarray, offsets: np.ndarray, lo: np.ndarray, width: np.ndarray, n_bins: int
) -> np.ndarray:
    """pair * n_bins + min(int((v - lo) / width), n_bins - 1) for every sample on its pair's grid (astype
    truncates toward zero, as int() does; v >= lo, so it is a floor). Sorted when each segment is. The
    min is taken on the double before the cast (the same integer for x >= 0): a quotient too large for an
    int64 (a finite outlier such as 1e300 above a narrow grid) is the top bin, as the rule's min() says,
    where casting it first gave a negative key and a crash."""
    pairs = offsets.size - 1
    sizes = np.diff(offsets)
    if pairs and (sizes == sizes[0]).all():  # one length for every pair: broadcast, no per-sample repeat
        raw = values.reshape(pairs, int(sizes[0])) - lo[:, None]
        raw /= width[:, None]
        np.minimum(raw, n_bins - 1, out=raw)
        key = raw.astype(np.int64)
        key += (np.arange(pairs, dtype=np.int64) * n_bins)[:, None]
        return key.reshape(-1)
    raw = values - np.repeat(lo, sizes)
    raw /= np.repeat(width, sizes)
    np.minimum(raw, n_bins - 1, out=raw)
    small = pairs * n_bins < 2**31  # int32 keys: half the bytes through the cast, repeat and bincount
    kind = np.int32 if small else np.int64
    key = raw.astype(kind)
    key += np.repeat(np.arange(pairs, dtype=kind) * n_bins, sizes)
    return key


def _binned_counts(keys: np.ndarray, pairs: int, n_bins: int) -> np.ndarray:
    """(pairs, n_bins) counts from bin keys: one bincount counts every bin of every pair (one pass over the
    keys; a searchsorted of every bin's edge in the sorted keys gave the same counts in twice the time)."""
    return np.bincount(keys, minlength=pairs * n_bins).reshape(pairs, n_bins)


def _clipped_at(counts: np.ndarray, top_bin: np.ndarray) -> np.ndarray:
    """Counts with every sample above bin ``top_bin[pair]`` moved into it: the histogram of min(v, w) when
    top_bin is w's bin, because the bin index is monotone (index(min(v, w)) = min(index(v), index(w)))."""
    bins = np.arange(counts.shape[1])
    above = bins[None, :] > top_bin[:, None]
    moved = np.where(above, counts, 0).sum(axis=1)
    out = np.where(above, 0, counts)
    out[np.arange(counts.shape[0]), top_bin] += moved
    return out


def _normalised(
    counts: np.ndarray, n: np.ndarray, smoothing: float, *, on_counts: bool = False
) -> np.ndarray:
    """The histogram + smoothing, normalised over the last axis: added to each bin's count
    (``on_counts``, the design's rule) or to its frequency (count / n, zeros for n == 0: calibrated)."""
    if on_counts:
        smoothed = counts + smoothing
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            freq = np.where(n[..., None] > 0, counts / np.maximum(n, 1)[..., None], 0.0)
        smoothed = freq + smoothing
    return smoothed / smoothed.sum(axis=-1, keepdims=True)


def _js_psi(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """JS divergence (base 2, clipped to [0, 1]) and PSI (natural log), p = candidate, q = baseline."""
    m = 0.5 * (p + q)
    kl_pm = (p * np.log2(p / m)).sum(axis=-1)
    kl_qm = (q * np.log2(q / m)).sum(axis=-1)
    js = np.clip(0.5 * kl_pm + 0.5 * kl_qm, 0.0, 1.0)
    psi = ((p - q) * np.log(p / q)).sum(axis=-1)
    return js, psi


_BLOCK_MIN_PAIRS = 8
"""Pairs sharing (n_baseline, n_candidate) with at least this many members get W1 as one 2-D block."""


def _side_matrix(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
    """The sorted samples of pairs ``rows`` (each with ``size`` of them) as a (rows, size) matrix."""
    if rows.size * size == values.size:  # every pair, one length: a view, no gather
        return values.reshape(rows.size, size)
    return values[offsets[rows][:, None] + np.arange(size)]


def _quantile_merge(
    n_b: np.ndarray, n_c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The interleaved breakpoints of the two empirical quantile functions of pairs with (n_b, n_c) samples
    (both >= 1): per merged position its pair, its dt (the length of t it covers) and the indexes of Qb and
    Qc over it. b's i-th breakpoint i / n_b lands at (i - 1) + #(j: j / n_c < i / n_b) = (i - 1) +
    (i n_c - 1) // n_b, c's j-th at (j - 1) + (j n_b) // n_c (integer arithmetic, ties b first), so each
    side's own sort is all W1 needs: no merge sort of the union."""
    pairs = n_b.size
    pair_ids = np.arange(pairs, dtype=np.int64)
    seg_b = np.repeat(pair_ids, n_b)
    seg_c = np.repeat(pair_ids, n_c)
    i = np.arange(seg_b.size, dtype=np.int64) - np.repeat(np.cumsum(n_b) - n_b, n_b) + 1
    j = np.arange(seg_c.size, dtype=np.int64) - np.repeat(np.cumsum(n_c) - n_c, n_c) + 1
    m_off = np.concatenate(([0], np.cumsum(n_b + n_c)))
    pos_b = m_off[seg_b] + (i - 1) + (i * n_c[seg_b] - 1) // n_b[seg_b]
    pos_c = m_off[seg_c] + (j - 1) + (j * n_b[seg_c]) // n_c[seg_c]
    total = int(m_off[-1])
    t = np.empty(total)
    t[pos_b] = i / n_b[seg_b]
    t[pos_c] = j / n_c[seg_c]
    is_b = np.zeros(total, dtype=np.int64)
    is_b[pos_b] = 1
    seg = np.repeat(pair_ids, n_b + n_c)
    start = m_off[:-1][seg]
    position = np.arange(total, dtype=np.int64)
    b_before = np.concatenate(([0], np.cumsum(is_b)))
    ib = b_before[position] - b_before[start]  # baseline breakpoints before this one: Qb's index here
    ic = position - start - ib
    ib = np.minimum(ib, n_b[seg] - 1)  # past the last breakpoint only at t = 1, where dt = 0
    ic = np.minimum(ic, n_c[seg] - 1)
    dt = t.copy()
    dt[1:] -= t[:-1]
    first = position == start
    dt[first] = t[first]
    return seg, dt, ib, ic


def _pair_sums(contributions: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per-pair sums of consecutive runs (sizes >= 1): one reduction per run over its own contiguous
    values, so a pair's sum is the same bytes whichever path (block or flat) and batch produced it."""
    return np.add.reduceat(contributions, np.concatenate(([0], np.cumsum(sizes)[:-1])))


def _wasserstein(s: _Samples) -> np.ndarray:
    """W1 between the raw samples of both sides of every pair (NaN when a side is empty): the integral over
    t in (0, 1] of |Qb(t) - Qc(t)| of the two empirical quantile functions (``_quantile_merge``). Pairs that
    share their sample counts are one 2-D block each (one merge pattern and one gather); the rest go through
    the flat merge together. Both give each pair the same contributions in the same order."""
    b, b_off, c, c_off = s.baseline, s.baseline_offsets, s.candidate, s.candidate_offsets
    counts = s.counts
    pairs = counts.shape[0]
    w = np.full(pairs, np.nan)
    both = (counts > 0).all(axis=1)
    if not both.any():
        return w
    size_keys = np.where(
        both, counts[:, 0].astype(np.int64) * (int(counts[:, 1].max()) + 1) + counts[:, 1], -1
    )
    _, inverse, members = np.unique(size_keys, return_inverse=True, return_counts=True)
    blocked = both & (members[inverse] >= _BLOCK_MIN_PAIRS)
    by_group = np.argsort(inverse, kind="stable")
    group_starts = np.concatenate(([0], np.cumsum(members)))
    for k in np.flatnonzero(members >= _BLOCK_MIN_PAIRS):
        rows = by_group[group_starts[k] : group_starts[k + 1]]
        if not both[rows[0]]:
            continue
        n_b, n_c = int(counts[rows[0], 0]), int(counts[rows[0], 1])
        _, dt, ib, ic = _quantile_merge(np.array([n_b]), np.array([n_c]))
        base, cand = _side_matrix(b, b_off, rows, n_b), _side_matrix(c, c_off, rows, n_c)
        covers = dt > 0  # a tie of breakpoints covers no t: dropped, as the flat path drops it
        if n_b == n_c:  # the pattern is b1 c1 b2 c2 ...: exactly the b breakpoints cover t
            contributions = np.abs(base - cand) * dt[covers]
        else:
            contributions = np.abs(base[:, ib[covers]] - cand[:, ic[covers]]) * dt[covers]
        w[rows] = _pair_sums(contributions.reshape(-1), np.full(rows.size, int(covers.sum())))
    rest = np.flatnonzero(both & ~blocked)
    if rest.size:
        w[rest] = _wasserstein_ragged(s, rest)
    return w


_W1_BLOCK = 1 << 14
"""Breakpoints handled at once by ``_wasserstein_ragged``: consecutive pairs are taken together up to this
many breakpoints of both sides (a longer pair alone, each side of it in blocks of this many), so its
dozen temporaries stay in the CPU cache (2^20 at a time: 1.7x slower on 200-700 samples a side) and stay
small when one pair brings millions of samples (a 5.6 M-sample CI payload took 600 MB over its samples)."""


def _wasserstein_ragged(s: _Samples, rest: np.ndarray) -> np.ndarray:
    """W1 of the pairs ``rest`` (both sides non-empty, sizes of their own), consecutive pairs up to
    ``_W1_BLOCK`` breakpoints at a time (``_wasserstein_merged``). A pair's sum never depends on the pairs
    beside it, so the grouping leaves the bytes as they are."""
    length = np.cumsum(s.counts[rest].sum(axis=1, dtype=np.int64))
    out = np.empty(rest.size)
    start = 0
    while start < rest.size:
        before = int(length[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(length, before + _W1_BLOCK, side="right")))
        out[start:stop] = _wasserstein_merged(s, rest[start:stop])
        start = stop
    return out


def _wasserstein_merged(s: _Samples, rest: np.ndarray) -> np.ndarray:
    """W1 of the pairs ``rest`` (both sides non-empty): ``_quantile_merge``'s
    contributions, each side's computed over that side's own breakpoints (its i-th at t = i / n, the
    interval since the previous breakpoint of either side, the other side's sample there) and then put in
    merged order. The same contributions in the same order as the merge gives, so the same sums, without
    its passes over the merged length (scatter, cumulative counts, per-slot gathers): 1.5x faster. Each
    breakpoint's term depends on its pair's sizes alone, so a side is done in blocks of ``_W1_BLOCK``."""
    n_b = s.counts[rest, 0].astype(np.int64)
    n_c = s.counts[rest, 1].astype(np.int64)
    length = n_b + n_c
    merged_start = np.cumsum(length) - length
    contributions = np.empty(int(length.sum()))
    covers = np.empty(contributions.size, dtype=bool)
    sides = (
        (s.baseline, s.baseline_offsets, n_b, s.candidate, s.candidate_offsets, n_c, True),
        (s.candidate, s.candidate_offsets, n_c, s.baseline, s.baseline_offsets, n_b, False),
    )
    for own, own_off, n_own, other, other_off, n_other, is_baseline in sides:
        own_start = np.cumsum(n_own) - n_own  # each pair's first breakpoint among this side's
        own_end = own_start + n_own
        for first in range(0, int(n_own.sum()), _W1_BLOCK):
            last = first + min(_W1_BLOCK, int(own_end[-1]) - first)
            pairs = slice(
                int(np.searchsorted(own_end, first, side="right")), int(np.searchsorted(own_start, last))
            )
            here = np.minimum(own_end[pairs], last) - np.maximum(own_start[pairs], first)
            n_own_each = np.repeat(n_own[pairs], here)
            n_other_each = np.repeat(n_other[pairs], here)
            i = np.arange(first, last, dtype=np.int64) - np.repeat(own_start[pairs], here) + 1
            # the other side's breakpoints before this one (at a tie the baseline's comes first): i / n_own
            # against j / n_other in integers, as _quantile_merge places them
            scaled = i * n_other_each
            if is_baseline:
                scaled -= 1
            other_before = scaled // n_own_each
            t = i / n_own_each
            dt = t - np.maximum((i - 1) / n_own_each, other_before / n_other_each)  # since the previous one
            own_at = own[np.repeat(own_off[rest[pairs]], here) + (i - 1)]
            other_rows = np.repeat(other_off[rest[pairs]], here) + np.minimum(other_before, n_other_each - 1)
            other_at = other[other_rows]
            gap = np.abs(own_at - other_at) if is_baseline else np.abs(other_at - own_at)
            position = np.repeat(merged_start[pairs], here) + (i - 1) + other_before
            contributions[position] = dt * gap
            covers[position] = dt > 0  # a tie of breakpoints covers no t: dropped, as the merge drops it
    kept = np.add.reduceat(covers.astype(np.int64), merged_start)
    return _pair_sums(contributions[covers], kept)


@dataclass(frozen=True)
class _Histograms:
    js: np.ndarray
    psi: np.ndarray
    pooled: np.ndarray  # (pairs, n_bins): baseline + raw candidate counts on the observed grid
    baseline_counts: np.ndarray  # (pairs, n_bins) on the observed grid
    candidate_counts: np.ndarray  # (pairs, n_bins) raw (not winsorized) candidate counts
    support_lo: np.ndarray  # the grid's ends (NaN: no sample on either side)
    support_hi: np.ndarray


def _histograms(s: _Samples, config: DriftScoreConfig) -> _Histograms:
    n_bins = config.n_bins
    counts = s.counts
    b_first, b_last = _segment_ends(s.baseline, s.baseline_offsets)
    c_first, c_last = _segment_ends(s.candidate, s.candidate_offsets)
    cand_has = counts[:, 1] > 0
    winsor = np.full(counts.shape[0], np.inf)
    winsor[cand_has] = _linear_quantile(
        s.candidate, s.candidate_offsets[:-1][cand_has], counts[cand_has, 1], config.winsor_quantile
    )
    lo = np.minimum(b_first, c_first)
    hi = np.maximum(b_last, np.minimum(c_last, winsor))
    with np.errstate(invalid="ignore"):
        width = (hi - lo) / n_bins
    safe_width = np.where(width > 0, width, 1.0)  # hi == lo: (v - lo) is 0 for every sample, so bin 0
    safe_lo = np.where(np.isfinite(lo), lo, 0.0)
    pairs = counts.shape[0]
    base_hist = _binned_counts(
        _bin_keys(s.baseline, s.baseline_offsets, safe_lo, safe_width, n_bins), pairs, n_bins
    )
    raw_cand = _binned_counts(
        _bin_keys(s.candidate, s.candidate_offsets, safe_lo, safe_width, n_bins), pairs, n_bins
    )
    # the winsorized candidate min(v, w) without a copy: its bins are the raw bins clipped at w's bin
    winsor_bin = np.where(
        cand_has,
        np.minimum(((np.where(cand_has, winsor, 0.0) - safe_lo) / safe_width).astype(np.int64), n_bins - 1),
        n_bins - 1,
    )
    cand_hist = _clipped_at(raw_cand, winsor_bin)
    design = config.profile == "design"
    q = _normalised(base_hist, counts[:, 0], config.smoothing, on_counts=design)
    p = _normalised(cand_hist, counts[:, 1], config.smoothing, on_counts=design)
    js, psi = _js_psi(p, q)
    if design:  # too few samples on a side: no score (the design reports 0 with its WARN)
        thin = (counts < config.min_samples).any(axis=1)
        js, psi = np.where(thin, 0.0, js), np.where(thin, 0.0, psi)
    pooled = base_hist if design else base_hist + raw_cand
    return _Histograms(
        js,
        psi,
        pooled,
        base_hist,
        raw_cand,
        np.where(np.isfinite(lo), lo, np.nan),
        np.where(np.isfinite(hi), hi, np.nan),
    )


def _pair_seed(
    config: DriftScoreConfig, query_hash_value: str, metric: str, stream: int = 0
) -> np.random.Generator:
    """The pair's own generator (``stream`` 0: the noise null; 1: the slow-mode test's relabellings)."""
    digest = hashlib.sha256(f"{query_hash_value}\x00{metric}".encode()).digest()
    key = [config.seed, int.from_bytes(digest[:16], "big")]
    return np.random.default_rng(key if stream == 0 else [*key, stream])


_NULL_GROUP_PAIRS = 16
"""Pairs whose permutation nulls are computed together: (16, null_resamples, n_bins) temporaries stay a
few MB, reused by the allocator (a whole chunk at once faulted in hundreds of MB per step)."""


def _noise(
    s: _Samples, h: _Histograms, which: np.ndarray, config: DriftScoreConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The permutation null's ``null_quantile`` of JS, PSI and the shift statistic (``_shift``) for the
    pairs ``which`` (others NaN)."""
    counts = s.counts
    pairs = counts.shape[0]
    noise = [np.full(pairs, np.nan) for _ in range(3)]
    chosen = np.flatnonzero(which)
    hashes = s.keys["query_hash"].to_list()
    metrics = s.keys["metric"].to_list()
    for start in range(0, chosen.size, _NULL_GROUP_PAIRS):
        idx = chosen[start : start + _NULL_GROUP_PAIRS]
        null = _null_distances(h.pooled[idx], counts[idx], [(hashes[i], metrics[i]) for i in idx], config)
        for out, values in zip(noise, null, strict=True):
            out[idx] = np.quantile(values, config.null_quantile, axis=1)
    js_noise, psi_noise, shift_noise = noise
    return js_noise, psi_noise, shift_noise


def _shift(base: np.ndarray, cand: np.ndarray, n_b: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """|mean bin of the candidate - mean bin of the baseline| of binned counts (last axis: bins): the
    calibrated profile's location statistic (on its log grid, about a t-test of the log values), which
    a moderate shift of the whole distribution moves long before JS and PSI over 32 bins leave noise."""
    bins = np.arange(base.shape[-1], dtype=np.float64)
    nb = np.maximum(n_b, 1).astype(np.float64)
    nc = np.maximum(n_c, 1).astype(np.float64)
    return np.abs((cand * bins).sum(axis=-1) / nc - (base * bins).sum(axis=-1) / nb)


def _exceedances(s: _Samples, quantile: float, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, x) of the pairs ``rows`` (both sides non-empty): k = max(1, floor((1 - quantile) n_b)), the
    rank from the top of the baseline's ``quantile`` sample, and x, the candidate's samples strictly above
    it (ties count as not above: conservative)."""
    counts = s.counts
    pairs = counts.shape[0]
    n_b = counts[rows, 0]
    k = np.maximum(1, np.floor((1.0 - quantile) * n_b + 1e-9).astype(np.int64))  # (1 - 0.9) * 50 < 5
    per_pair = np.full(pairs, np.inf)
    per_pair[rows] = s.baseline[s.baseline_offsets[:-1][rows] + n_b - k]
    owner = np.repeat(np.arange(pairs), np.diff(s.candidate_offsets))
    above = np.bincount(owner, weights=(s.candidate > per_pair[owner]).astype(np.float64), minlength=pairs)
    return k, above[rows].astype(np.int64)


def _exceedance_p(k: np.ndarray, x: np.ndarray, n_b: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """P(X >= x) of the count X of candidates above the baseline's k-th largest under no change:
    P(at most k - 1 baseline samples among the pooled top x + k - 1), a hypergeometric CDF (1 at x = 0)."""
    return np.where(x > 0, stats.hypergeom.cdf(k - 1, n_b + n_c, n_b, x + k - 1), 1.0)


def slow_tail_p_values(s: _Samples, quantile: float) -> np.ndarray:
    """Per pair, the exact p-value of the candidate's samples above the baseline's ``quantile`` (its k-th
    largest sample, k = max(1, floor((1 - quantile) n_b))): with exchangeable samples the count X of
    candidates above it satisfies P(X >= x) = P(at most k - 1 baseline samples among the pooled top
    x + k - 1), a hypergeometric CDF. A new slow tail (10% of executions 5x slower) raises X far more
    than it moves JS, PSI or the mean. Ties count as not above (conservative). NaN when a side is empty."""
    counts = s.counts
    out = np.full(counts.shape[0], np.nan)
    rows = np.flatnonzero((counts > 0).all(axis=1))
    if rows.size:
        k, x = _exceedances(s, quantile, rows)
        out[rows] = _exceedance_p(k, x, counts[rows, 0], counts[rows, 1])
    return out


def exceedance_union_p(n_b: int, n_c: int, ks: list[int], critical: list[int]) -> float:
    """P(X_j >= critical[j] for some j) under no change, X_j the candidates above the baseline's
    ``ks[j]``-th largest sample: the exact level of several exceedance counts read together.

    With exchangeable samples the pooled samples' labels, read from the largest down, are a uniformly
    random arrangement of n_b baseline and n_c candidate labels: a lattice path whose step from (b, c)
    (labels seen so far) is a baseline label with probability (n_b - b) / (N - b - c). X_j >= c_j exactly
    when the path reaches c = c_j while b < k_j, so the event is the path crossing the barrier
    c <= U(b) = min(c_j - 1 : k_j > b). Its probability is summed over the anti-diagonals b + c = d (each
    depends on the previous one only), one vector over c per d; a diagonal crosses the barrier at most
    once (b + U(b) is increasing), so the sum is the same bytes whatever the array's length."""
    total = n_b + n_c
    last = max(ks)  # the path is decided once it has seen this many baseline labels
    barrier = np.full(last, n_c, dtype=np.int64)
    for k, c in zip(ks, critical, strict=True):
        barrier[:k] = np.minimum(barrier[:k], c - 1)
    if (barrier < 0).any():  # a critical count of 0: always reached
        return 1.0
    top = int(barrier.max())
    c = np.arange(top + 2)  # top + 1: beyond every barrier
    mass = np.zeros(top + 2)
    mass[0] = 1.0
    crossed = 0.0
    for d in range(last + top):  # the last diagonal with mass: b = last - 1, c = top
        b = d - c
        inside = (b >= 0) & (b < last)
        left = total - d
        to_b = np.where(inside, (n_b - b) / left, 0.0)
        to_c = np.where(inside, (n_c - c) / left, 0.0)
        step = mass * to_b  # a baseline label: (b + 1, c)
        step[1:] += mass[:-1] * to_c[:-1]  # a candidate label: (b, c + 1)
        b_next = d + 1 - c
        over = (b_next >= 0) & (b_next < last) & (c > barrier[np.clip(b_next, 0, last - 1)])
        crossed += float(step[over].sum())
        step[over | (b_next >= last) | (b_next < 0)] = 0.0  # crossed, or decided (the last-th baseline)
        mass = step
    return crossed


_LATTICE_MAX_POOLED = 20_000
"""Pairs with more pooled samples than this take the Bonferroni bound alone (the smallest p times the
number of quantiles: still at most the level, a little less powerful): the lattice sum walks about
(0.1 n_b + c) x c cells, c the largest critical count (about a tenth of n_c), and a CI payload of
millions of candidate samples would take minutes (at 20,000: up to 0.17 s a pair, measured)."""


def slow_tail_significant(
    s: _Samples, quantiles: tuple[float, ...], level: float, which: np.ndarray
) -> np.ndarray:
    """Per pair of ``which`` (others False): the slow-tail test over several baseline quantiles at the
    exact ``level``. The statistic is the smallest of the quantiles' exceedance p (``slow_tail_p_values``);
    its p-value is the probability under no change that any count reaches the count that would give a p
    that small (``exceedance_union_p``): at least that smallest p, at most it times the number of
    quantiles (Bonferroni), so the lattice sum runs only for pairs between the two (and at most
    ``_LATTICE_MAX_POOLED`` samples; larger ones keep Bonferroni's answer). p90 sees a tail that
    spreads over the upper tenth (Pareto, bimodal), p99 one far beyond a tight body (lognormal sigma 0.5,
    where p90 alone left 1 in 4 of the calibration's new 10% x5 tails unseen at 200 samples a side)."""
    counts = s.counts
    out = np.zeros(counts.shape[0], dtype=bool)
    rows = np.flatnonzero(which & (counts > 0).all(axis=1))
    if rows.size == 0:
        return out
    n_b, n_c = counts[rows, 0], counts[rows, 1]
    ks, xs = zip(*(_exceedances(s, q, rows) for q in quantiles), strict=True)
    p = np.stack([_exceedance_p(k, x, n_b, n_c) for k, x in zip(ks, xs, strict=True)], axis=1)
    smallest = p.min(axis=1)
    out[rows] = smallest * len(quantiles) < level
    between = (smallest < level) & ~out[rows] & (n_b + n_c <= _LATTICE_MAX_POOLED)
    for r in np.flatnonzero(between):
        nb, nc = int(n_b[r]), int(n_c[r])
        grid = np.arange(nc + 1)
        critical = []
        for k in ks:  # the smallest count whose p is at most the observed smallest (the same computation)
            p_of = _exceedance_p(
                np.full(grid.size, k[r]), grid, np.full(grid.size, nb), np.full(grid.size, nc)
            )
            reached = np.flatnonzero(p_of <= smallest[r])
            critical.append(int(reached[0]) if reached.size else nc + 1)
        out[rows[r]] = exceedance_union_p(nb, nc, [int(k[r]) for k in ks], critical) < level
    return out


_SLOW_MODE_GRID = 1024
"""Points of the slow-mode test's density grid (linear binning, then a Gaussian kernel by convolution)."""


def slow_mode_scores(
    pooled: np.ndarray, shares: tuple[float, ...], factors: tuple[float, ...]
) -> np.ndarray | None:
    """(N, shares x factors) scores of the pooled log values w: log(1 - e + e f(w - log k) / f(w)), f a
    Gaussian kernel density of the pooled values (Silverman's bandwidth, binned on a grid), i.e. how much
    likelier each value is if a share e of the executions became k times slower. The density is the
    pooled sample's, so the scores do not depend on which side a value came from and relabelling the
    pooled samples gives an exact test. None when the values have no spread."""
    n = pooled.size
    spread = float(pooled.std())
    q75, q25 = np.quantile(pooled, [0.75, 0.25])
    if q75 > q25:
        spread = min(spread, float(q75 - q25) / 1.34)
    if not spread > 0 or not np.isfinite(spread):
        return None
    bandwidth = 0.9 * spread * n**-0.2
    shifts = np.log(np.asarray(factors, dtype=np.float64))
    lo = float(pooled.min()) - float(shifts.max()) - 5.0 * bandwidth
    hi = float(pooled.max()) + 5.0 * bandwidth
    step = (hi - lo) / (_SLOW_MODE_GRID - 1)
    position = (pooled - lo) / step
    left = np.minimum(position.astype(np.int64), _SLOW_MODE_GRID - 2)
    frac = position - left
    mass = np.bincount(left, 1.0 - frac, _SLOW_MODE_GRID) + np.bincount(left + 1, frac, _SLOW_MODE_GRID)
    reach = int(np.ceil(5.0 * bandwidth / step))
    kernel = np.exp(-0.5 * (np.arange(-reach, reach + 1) * step / bandwidth) ** 2)
    density = np.convolve(mass, kernel, mode="same")
    grid = lo + step * np.arange(_SLOW_MODE_GRID)
    log_density = np.log(np.maximum(density, 1e-300))
    here = np.interp(pooled, grid, log_density)
    columns = []
    for shift in shifts:
        # f(w - log k) / f(w), its log capped where exp would overflow (the density's floor is 1e-300)
        ratio = np.exp(np.minimum(np.interp(pooled - shift, grid, log_density) - here, 700.0))
        for share in shares:
            columns.append(np.log1p(share * (ratio - 1.0)))
    return np.stack(columns, axis=1)


_SLOW_MODE_BLOCK_ELEMENTS = 4_000_000
"""Relabellings are drawn in blocks of at most this many (relabelling x sample) cells (32 MB)..."""
_SLOW_MODE_BLOCK_ROWS = 200
"""...and at most this many relabellings, so a pair that is clearly not significant stops early."""


def slow_mode_p_value(
    base: np.ndarray,
    cand: np.ndarray,
    config: DriftScoreConfig,
    rng: np.random.Generator,
    stop_above: float | None = None,
) -> float:
    """The slow-mode test's p of one pair (log values; NaN when it does not run: no spread, or the best
    standardised sum under ``slow_mode_screen_z``): the largest candidate sum of ``slow_mode_scores``
    against its ``slow_mode_permutations`` relabellings, (1 + exceedances) / (1 + relabellings).
    ``stop_above``: stop relabelling once the p is sure to be above it (the value returned is then the
    p so far, already above it; whether the p is at most ``stop_above`` never depends on stopping)."""
    pooled = np.concatenate([base, cand])
    scores = slow_mode_scores(pooled, config.slow_mode_shares, config.slow_mode_factors)
    if scores is None:
        return float("nan")
    n, n_c = pooled.size, cand.size
    labels = np.zeros(n)
    labels[base.size :] = 1.0
    observed = labels @ scores
    mean = scores.mean(axis=0) * n_c
    deviation = np.sqrt(scores.var(axis=0) * n_c * (n - n_c) / max(n - 1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(deviation > 0, (observed - mean) / deviation, -np.inf)
    if not z.max() >= config.slow_mode_screen_z:
        return float("nan")
    best = float(observed.max())
    at_least = best - 1e-9 * max(1.0, abs(best))  # a relabelling equal to the observed one counts
    total = config.slow_mode_permutations
    enough = np.inf if stop_above is None else stop_above * (1 + total) - 1  # exceedances past the level
    exceed = 0
    block = max(1, min(_SLOW_MODE_BLOCK_ROWS, _SLOW_MODE_BLOCK_ELEMENTS // n))
    for first in range(0, total, block):
        rows = min(block, total - first)
        relabelled = rng.permuted(np.broadcast_to(labels, (rows, n)), axis=1)
        exceed += int(((relabelled @ scores).max(axis=1) >= at_least).sum())
        if exceed > enough:
            break
    return (1 + exceed) / (1 + total)


def slow_mode_significant(logs: _Samples, config: DriftScoreConfig, which: np.ndarray) -> np.ndarray:
    """Per pair of ``which`` (others False; log values): the slow-mode test below ``slow_mode_p_value``.
    Each pair relabels with its own generator (``_pair_seed`` stream 1)."""
    counts = logs.counts
    out = np.zeros(counts.shape[0], dtype=bool)
    level = config.slow_mode_p_value
    if level <= 0:
        return out
    rows = np.flatnonzero(
        which & (counts > 0).all(axis=1) & (counts.sum(axis=1) <= config.slow_mode_max_pooled)
    )
    hashes = logs.keys["query_hash"].to_list()
    metrics = logs.keys["metric"].to_list()
    for r in rows:
        base = logs.baseline[logs.baseline_offsets[r] : logs.baseline_offsets[r + 1]]
        cand = logs.candidate[logs.candidate_offsets[r] : logs.candidate_offsets[r + 1]]
        rng = _pair_seed(config, hashes[r], metrics[r], stream=1)
        out[r] = slow_mode_p_value(base, cand, config, rng, stop_above=level) <= level
    return out


def _null_distances(
    pooled: np.ndarray, counts: np.ndarray, keys: list[tuple[str, str]], config: DriftScoreConfig
) -> tuple[np.ndarray, ...]:
    """(pairs, null_resamples) JS and PSI of random relabellings of each pair's pooled bin counts into
    n_baseline / n_candidate samples, the pseudo-candidate winsorized at the bin level as the real one is;
    and (the calibrated profile's) shift statistic of the same relabellings, not winsorized."""
    r = config.null_resamples
    draws = np.empty((len(keys), r, config.n_bins), dtype=np.int64)
    for k, (query_hash_value, metric) in enumerate(keys):  # a pair's null never depends on the batch
        rng = _pair_seed(config, query_hash_value, metric)
        draws[k] = rng.multivariate_hypergeometric(pooled[k], int(counts[k, 1]), size=r)
    n_c = counts[:, 1]
    n_b = counts[:, 0]
    pseudo_base = pooled[:, None, :] - draws
    shift = _shift(pseudo_base, draws, n_b[:, None], n_c[:, None])
    # winsorize each pseudo-candidate at the bin level: its quantile's bin takes everything above it
    virtual = (n_c - 1) * config.winsor_quantile
    rank = np.minimum(np.ceil(virtual), n_c - 1).astype(np.int64)  # 0-based rank of the upper neighbour
    cum = np.cumsum(draws, axis=-1)
    q_bin = (cum <= rank[:, None, None]).sum(axis=-1)  # first bin whose cumulative count passes the rank
    bins = np.arange(config.n_bins)
    below = bins[None, None, :] < q_bin[..., None]
    at = bins[None, None, :] == q_bin[..., None]
    before = np.where(below, draws, 0).sum(axis=-1)
    pseudo_cand = np.where(below, draws, 0) + np.where(at, (n_c[:, None] - before)[..., None], 0)
    p = _normalised(pseudo_cand, np.broadcast_to(n_c[:, None], (len(keys), r)), config.smoothing)
    q = _normalised(pseudo_base, np.broadcast_to(n_b[:, None], (len(keys), r)), config.smoothing)
    js, psi = _js_psi(p, q)
    return js, psi, shift


def flag_pairs(
    js: np.ndarray,
    psi: np.ndarray,
    counts: np.ndarray,
    config: DriftScoreConfig,
    js_noise: np.ndarray | None = None,
    psi_noise: np.ndarray | None = None,
    moves: ShiftTail | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flag, reason, psi_data_quality) per pair from the distances and the (pairs, 2) sample counts
    (baseline, candidate); a noise threshold of None / NaN means no noise floor (the design rule).
    ``moves``: the calibrated profile's significant shift and tail bands (None: none)."""
    js, psi = np.asarray(js, dtype=np.float64), np.asarray(psi, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 2)
    js_noise = np.full(js.shape, np.nan) if js_noise is None else np.asarray(js_noise, dtype=np.float64)
    psi_noise = np.full(psi.shape, np.nan) if psi_noise is None else np.asarray(psi_noise, dtype=np.float64)
    js_floor = np.where(np.isnan(js_noise), -np.inf, js_noise)
    psi_floor = np.where(np.isnan(psi_noise), -np.inf, psi_noise)
    js_over_noise = js > js_floor
    psi_over_noise = psi > psi_floor
    js_block = (js > config.js_block) & js_over_noise
    js_warn = (js > config.js_warn) & js_over_noise
    psi_block = (psi > config.psi_block) & psi_over_noise
    psi_warn = (psi >= config.psi_warn) & psi_over_noise
    insufficient = (counts[:, 0] < config.min_samples) | (counts[:, 1] < config.min_samples)
    data_quality = psi > config.psi_data_quality
    none = np.zeros(js.shape, dtype=bool)
    moves = moves or ShiftTail(none, none, none, none, none)
    # first that applies: (flag, reason, condition)
    rules = [
        (WARN, INSUFFICIENT_SAMPLES, insufficient),
        (BLOCK, "js_block", data_quality & js_block),
        (BLOCK, "shift_block", data_quality & moves.shift_block),
        (BLOCK, "tail_block", data_quality & moves.tail_block),
        (WARN, "js_warn", data_quality & js_warn),
        (WARN, "shift_warn", data_quality & moves.shift_warn),
        (WARN, "tail_warn", data_quality & moves.tail_warn),
        (WARN, SLOW_MODE_WARN, data_quality & moves.slow_mode_warn),
        (PASS, PSI_DATA_QUALITY_FALLBACK, data_quality),
        (BLOCK, "js_block", js_block),
        (BLOCK, "psi_block", psi_block),
        (BLOCK, "shift_block", moves.shift_block),
        (BLOCK, "tail_block", moves.tail_block),
        (WARN, "js_warn", js_warn),
        (WARN, "psi_warn", psi_warn),
        (WARN, "shift_warn", moves.shift_warn),
        (WARN, "tail_warn", moves.tail_warn),
        (WARN, SLOW_MODE_WARN, moves.slow_mode_warn),
    ]
    conditions = [condition for _, _, condition in rules]
    flag = np.select(conditions, [f for f, _, _ in rules], default=PASS)
    reason = np.select(conditions, [r for _, r, _ in rules], default=WITHIN_BANDS)
    return flag, reason, data_quality


@dataclass(frozen=True)
class ShiftTail:
    """The calibrated profile's two tests beside JS and PSI, per pair, each significant and material: the
    shift (mean log value beyond its permutation noise quantile; geometric-mean ratio over its band) and
    the slow tail (exact exceedance tests over the baseline's ``tail_quantiles``; the largest p90/p95/p99
    ratio over its band)."""

    shift_block: np.ndarray
    shift_warn: np.ndarray
    tail_block: np.ndarray
    tail_warn: np.ndarray
    slow_mode_warn: np.ndarray
    """The slow-mode test (``slow_mode_significant``), run only where the others leave a PASS."""


TAIL_QUANTILES = (0.90, 0.95, 0.99)
"""The quantiles whose candidate / baseline ratio measures a tail change (the largest in size counts)."""
TAIL_MIN_ABOVE = 10
"""A quantile's ratio counts only where each side has at least this many samples above it (p99 from 1,000
samples a side, p95 from 200): 200 baseline samples put p99 on their two largest, whose ratio to a
candidate's p99 alone made A/A tail BLOCKs. The lowest quantile always counts."""


def log_ratios(logs: _Samples) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, in the log space (NaN when a side is empty): the shift, mean log candidate - mean log
    baseline (the log of the geometric means' ratio), and the tail, the log ratio of candidate to baseline
    quantile at the one of ``TAIL_QUANTILES`` where it is largest in size (signed), of those both sides'
    samples support (``TAIL_MIN_ABOVE``)."""
    counts = logs.counts
    pairs = counts.shape[0]
    both = (counts > 0).all(axis=1)
    means = []
    for values, off in ((logs.baseline, logs.baseline_offsets), (logs.candidate, logs.candidate_offsets)):
        owner = np.repeat(np.arange(pairs), np.diff(off))
        sums = np.bincount(owner, weights=values, minlength=pairs)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append(sums / np.diff(off))
    shift = np.where(both, means[1] - means[0], np.nan)
    tail = np.full(pairs, np.nan)
    rows = np.flatnonzero(both)
    if rows.size:
        best = np.zeros(rows.size)
        smaller = counts[rows].min(axis=1)
        for i, q in enumerate(TAIL_QUANTILES):
            b = _linear_quantile(logs.baseline, logs.baseline_offsets[:-1][rows], counts[rows, 0], q)
            c = _linear_quantile(logs.candidate, logs.candidate_offsets[:-1][rows], counts[rows, 1], q)
            supported = (i == 0) | (smaller * (1 - q) >= TAIL_MIN_ABOVE)
            best = np.where(supported & (np.abs(c - b) > np.abs(best)), c - b, best)
        tail[rows] = best
    return shift, tail


def score_drift(samples: pl.DataFrame, config: DriftScoreConfig = DriftScoreConfig()) -> pl.DataFrame:
    """Score every (query_hash, metric) pair of the long frame ``samples`` (``query_hash, metric, side,
    value``); one row per pair in ``OUTPUT_SCHEMA``, sorted by (query_hash, metric). Pure; the same
    samples in any row order give byte-identical output."""
    if samples.height == 0:
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    return _score(_prepare(samples), config)


def score_drift_arrays(
    keys: pl.DataFrame,
    baseline: np.ndarray,
    baseline_offsets: np.ndarray,
    candidate: np.ndarray,
    candidate_offsets: np.ndarray,
    config: DriftScoreConfig = DriftScoreConfig(),
) -> pl.DataFrame:
    """``score_drift`` over flat arrays: pair i (row i of ``keys``: query_hash, metric, unique) has the
    baseline samples ``baseline[baseline_offsets[i]:baseline_offsets[i + 1]]`` and the candidate's
    likewise (offsets: pairs + 1 non-decreasing, from 0). Same output, same checks, no long frame."""
    pairs = keys.height
    sides = []
    for name, offsets, values in (
        ("baseline", baseline_offsets, baseline),
        ("candidate", candidate_offsets, candidate),
    ):
        off = np.asarray(offsets, dtype=np.int64)
        val = np.asarray(values, dtype=np.float64)
        if off.shape != (pairs + 1,) or off[0] != 0 or off[-1] != val.size or (np.diff(off) < 0).any():
            raise ValueError(
                f"drift samples: {name}_offsets must be {pairs + 1} non-decreasing offsets 0..{val.size}"
            )
        sides += [val, off[:-1], np.diff(off)]
    return score_drift_segments(keys, *sides, config)


def score_drift_segments(
    keys: pl.DataFrame,
    baseline: np.ndarray,
    baseline_starts: np.ndarray,
    baseline_sizes: np.ndarray,
    candidate: np.ndarray,
    candidate_starts: np.ndarray,
    candidate_sizes: np.ndarray,
    config: DriftScoreConfig = DriftScoreConfig(),
) -> pl.DataFrame:
    """``score_drift_arrays`` with each pair's samples anywhere in the flat arrays: pair i's baseline is
    ``baseline[baseline_starts[i]:baseline_starts[i] + baseline_sizes[i]]`` (segments may come in any
    order, and samples of no pair are ignored). The production path's per-pair lists are flattened once,
    as they lie, and never reordered into pair order before the scorer's own gather (a copy of every
    sample). Same output, same checks."""
    keys = keys.select(pl.col("query_hash").cast(pl.String), pl.col("metric").cast(pl.String))
    pairs = keys.height
    b_val = np.asarray(baseline, dtype=np.float64)
    c_val = np.asarray(candidate, dtype=np.float64)
    b_start, b_size = np.asarray(baseline_starts, dtype=np.int64), np.asarray(baseline_sizes, dtype=np.int64)
    c_start, c_size = (
        np.asarray(candidate_starts, dtype=np.int64),
        np.asarray(candidate_sizes, dtype=np.int64),
    )
    given = (("baseline", b_start, b_size, b_val), ("candidate", c_start, c_size, c_val))
    for name, start, size, val in given:
        if (
            start.shape != (pairs,)
            or size.shape != (pairs,)
            or (pairs and ((size < 0).any() or (start < 0).any() or (start + size > val.size).any()))
        ):
            raise ValueError(
                f"drift samples: {name} segments must be {pairs} (start, size) within 0..{val.size}"
            )
    if keys.is_duplicated().any():
        row = keys.filter(keys.is_duplicated()).row(0, named=True)
        raise ValueError(f"drift samples: pair query_hash={row['query_hash']}, {row['metric']} given twice")
    _check_keys(keys)
    for name, start, size, val in given:
        if val.size == 0 or (val.min() >= 0 and val.max() < np.inf):  # two reductions; NaN fails both
            continue
        bad = ~np.isfinite(val) | (val < 0)
        before = np.concatenate(([0], np.cumsum(bad)))
        hit = np.flatnonzero(before[start + size] > before[start])  # pairs with a bad sample
        if hit.size:
            pair = int(hit[0])
            at = int(start[pair] + np.argmax(bad[start[pair] : start[pair] + size[pair]]))
            row = keys.row(pair, named=True)
            raise ValueError(
                f"drift samples: {name} value {float(val[at])!r} of query_hash={row['query_hash']},"
                f" metric={row['metric']} is negative or not finite (rejected, not clipped)"
            )
    order = np.asarray(keys.select(pl.int_range(pl.len()).sort_by("query_hash", "metric")).to_series())
    sorted_keys = keys[order]

    def chunk(start: int, stop: int) -> _Samples:
        """Pairs [start, stop) of the sorted keys, each side gathered and sorted here, a chunk at a time
        (small temporaries: the allocator reuses them instead of faulting in fresh pages)."""
        picked = order[start:stop]
        sides: list[np.ndarray] = []
        for side, (starts, sizes_all, val) in enumerate(((b_start, b_size, b_val), (c_start, c_size, c_val))):
            sizes = sizes_all[picked]
            new_off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
            if uniform[side]:  # one length, laid out in row order: a row gather and one 2-D sort
                rows = val[: pairs * int(sizes_all[0])].reshape(pairs, int(sizes_all[0]))[picked]
                rows.sort(axis=1)
                sides += [rows.reshape(-1), new_off]
                continue
            sides += [_gathered_sorted(val, starts[picked], new_off), new_off]
        return _Samples(sorted_keys.slice(start, stop - start), *sides)

    uniform = [
        pairs > 0 and bool((size == size[0]).all() and (start == np.arange(pairs) * size[0]).all())
        for start, size in ((b_start, b_size), (c_start, c_size))
    ]
    return _score_chunks(sorted_keys, chunk, config)


_CHUNK_PAIRS = 1024
"""Pairs per kernel call: bounds the temporaries (a few arrays of the chunk's samples, reused by the
allocator instead of faulting in fresh pages; 256-4096 measured, 512-1024 fastest) and is the unit of work
of the thread pool. Pairs are independent, so the chunking never changes a result."""


def _chunk(s: _Samples, start: int, stop: int) -> _Samples:
    """Pairs [start, stop) as their own _Samples (views of the flat arrays)."""
    b_off = s.baseline_offsets[start : stop + 1]
    c_off = s.candidate_offsets[start : stop + 1]
    return _Samples(
        s.keys.slice(start, stop - start),
        s.baseline[b_off[0] : b_off[-1]],
        b_off - b_off[0],
        s.candidate[c_off[0] : c_off[-1]],
        c_off - c_off[0],
    )


def log_offsets(s: _Samples, share: float) -> np.ndarray:
    """Per pair, the offset of the calibrated profile's log space: ``share`` of the baseline's median (a
    fixed fraction of the pair's own scale, so the space does not depend on the metric's unit); a baseline
    whose median is 0 (row counts of an often-empty query) takes ``share`` of the mean of every positive
    sample of the pair; a pair with no positive sample, 1."""
    pairs = s.counts.shape[0]
    offsets = np.ones(pairs)
    b_sizes = np.diff(s.baseline_offsets)
    has = b_sizes > 0
    if has.any():
        offsets[has] = share * _linear_quantile(s.baseline, s.baseline_offsets[:-1][has], b_sizes[has], 0.5)
    missing = ~(offsets > 0)
    if missing.any():
        total = np.zeros(pairs)
        positive = np.zeros(pairs)
        for values, off in ((s.baseline, s.baseline_offsets), (s.candidate, s.candidate_offsets)):
            owner = np.repeat(np.arange(pairs), np.diff(off))
            total += np.bincount(owner, weights=values, minlength=pairs)
            positive += np.bincount(owner, weights=(values > 0).astype(np.float64), minlength=pairs)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(positive > 0, total / np.maximum(positive, 1.0), 0.0)
        offsets[missing] = np.where(mean[missing] > 0, share * mean[missing], 1.0)
    return offsets


def _in_log_space(s: _Samples, offsets: np.ndarray) -> _Samples:
    """``s`` with every sample v of pair i replaced by log(v + offsets[i]): monotone, so each side stays
    sorted within its pair."""
    return _Samples(
        s.keys,
        np.log(s.baseline + np.repeat(offsets, np.diff(s.baseline_offsets))),
        s.baseline_offsets,
        np.log(s.candidate + np.repeat(offsets, np.diff(s.candidate_offsets))),
        s.candidate_offsets,
    )


def _kernel(s: _Samples, config: DriftScoreConfig) -> tuple[np.ndarray, ...]:
    """(js, psi, wasserstein, flag, reason, psi_data_quality, js_noise, psi_noise, support_lo, support_hi)
    of every pair of ``s``."""
    if config.profile == "calibrated":  # the grid in log space; W1 and the support in the metric's unit
        offsets = log_offsets(s, config.log_offset_share)
        logs = _in_log_space(s, offsets)
        h = _histograms(logs, config)
        b_first, _ = _segment_ends(s.baseline, s.baseline_offsets)
        c_first, _ = _segment_ends(s.candidate, s.candidate_offsets)
        lowest = np.minimum(b_first, c_first)  # exact: the smaller first sample
        h = replace(
            h,
            support_lo=np.where(np.isfinite(lowest), lowest, np.nan),
            support_hi=np.exp(h.support_hi) - offsets,
        )
    else:
        h = _histograms(s, config)
    counts = s.counts
    wasserstein = _wasserstein(s) if config.compute_wasserstein else np.full(counts.shape[0], np.nan)
    pairs = counts.shape[0]
    js_noise = np.full(pairs, np.nan)
    psi_noise = np.full(pairs, np.nan)
    moves = None
    if config.profile != "design":
        design_flag, _, _ = flag_pairs(h.js, h.psi, counts, config, js_noise, psi_noise)
        sufficient = (counts >= config.min_samples).all(axis=1)
        screened = design_flag != PASS
        if config.profile == "calibrated":
            shift, tail = log_ratios(logs)
            with np.errstate(invalid="ignore"):
                shift_size, tail_size = np.abs(shift), np.abs(tail)
                shift_material = shift_size >= np.log(config.shift_warn_ratio)
                tail_material = tail_size >= np.log(config.tail_warn_ratio)
            screened = screened | shift_material | tail_material
        js_noise, psi_noise, shift_noise = _noise(s, h, sufficient & screened, config)
        if config.profile == "calibrated":
            shift_seen = _shift(h.baseline_counts, h.candidate_counts, counts[:, 0], counts[:, 1])
            with np.errstate(invalid="ignore"):
                shift_significant = sufficient & (shift_seen > shift_noise)  # NaN noise: False
                candidates = sufficient & tail_material & (tail > 0)  # the only pairs it could flag
            slower_tail = slow_tail_significant(s, config.tail_quantiles, config.tail_p_value, candidates)
            with np.errstate(invalid="ignore"):
                block_sized = slower_tail & (tail_size >= np.log(config.tail_block_ratio))
            # A BLOCK needs the stricter level (a WARN level of its own spends the A/A budget on WARNs).
            block_tail = (
                block_sized
                if config.tail_block_p_value >= config.tail_p_value
                else slow_tail_significant(s, config.tail_quantiles, config.tail_block_p_value, block_sized)
            )
            with np.errstate(invalid="ignore"):
                moves = ShiftTail(
                    shift_block=shift_significant & (shift_size >= np.log(config.shift_block_ratio)),
                    shift_warn=shift_significant & shift_material,
                    tail_block=block_tail,
                    tail_warn=slower_tail & tail_material,
                    slow_mode_warn=np.zeros(pairs, dtype=bool),
                )
            if config.slow_mode_p_value > 0:
                so_far, _, _ = flag_pairs(h.js, h.psi, counts, config, js_noise, psi_noise, moves)
                slow_mode = slow_mode_significant(logs, config, sufficient & (so_far == PASS))
                moves = replace(moves, slow_mode_warn=slow_mode)
    flag, reason, data_quality = flag_pairs(h.js, h.psi, counts, config, js_noise, psi_noise, moves)
    return (
        h.js,
        h.psi,
        wasserstein,
        flag,
        reason,
        data_quality,
        js_noise,
        psi_noise,
        h.support_lo,
        h.support_hi,
    )


def _score(s: _Samples, config: DriftScoreConfig) -> pl.DataFrame:
    return _score_chunks(s.keys, lambda start, stop: _chunk(s, start, stop), config)


def _score_chunks(
    keys: pl.DataFrame, chunk: Callable[[int, int], _Samples], config: DriftScoreConfig
) -> pl.DataFrame:
    """Score pairs [0, keys.height) chunk by chunk (``chunk(start, stop)`` gives their samples)."""
    pairs = keys.height
    if pairs == 0:
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    bounds = [(start, min(start + _CHUNK_PAIRS, pairs)) for start in range(0, pairs, _CHUNK_PAIRS)]
    # a thread gets two chunks or more: with one each (2,000 pairs on 2 threads) the threads only took the
    # GIL from each other between the kernel's short numpy calls (ragged 200-700 a side: 0.034-0.057 s of
    # wall time on two against 0.030-0.032 s on one; 300 a side: no faster)
    threads = min(config.threads or os.cpu_count() or 1, max(1, len(bounds) // 2))

    def work(bound: tuple[int, int]) -> tuple[np.ndarray, ...]:
        part = chunk(*bound)
        return (*_kernel(part, config), part.counts)

    if threads > 1:  # numpy's sorts and ufunc loops release the GIL
        with ThreadPoolExecutor(max_workers=threads) as pool:
            parts = list(pool.map(work, bounds))
    else:
        parts = [work(bound) for bound in bounds]
    js, psi, wasserstein, flag, reason, data_quality, js_noise, psi_noise, support_lo, support_hi, counts = (
        np.concatenate(column) for column in zip(*parts, strict=True)
    )
    out = keys.with_columns(
        shard_expr(config.shard_count),
        pl.Series("n_baseline", counts[:, 0], dtype=pl.Int64),
        pl.Series("n_candidate", counts[:, 1], dtype=pl.Int64),
        pl.Series("js", js, dtype=pl.Float64),
        pl.Series("psi", psi, dtype=pl.Float64),
        pl.Series("wasserstein", wasserstein, dtype=pl.Float64, nan_to_null=True),
        pl.Series("flag", flag.astype(str), dtype=pl.String),
        pl.Series("reason", reason.astype(str), dtype=pl.String),
        pl.Series("psi_data_quality", data_quality, dtype=pl.Boolean),
        pl.lit(config.profile, dtype=pl.String).alias("profile"),
        pl.Series("js_noise", js_noise, dtype=pl.Float64, nan_to_null=True),
        pl.Series("psi_noise", psi_noise, dtype=pl.Float64, nan_to_null=True),
        pl.lit(config.n_bins, dtype=pl.Int64).alias("bins"),
        pl.Series("support_lo", support_lo, dtype=pl.Float64, nan_to_null=True),
        pl.Series("support_hi", support_hi, dtype=pl.Float64, nan_to_null=True),
    )
    return out.select(list(OUTPUT_SCHEMA))
