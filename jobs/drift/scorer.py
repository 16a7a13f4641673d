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
3. each histogram becomes frequencies (count / n; an empty side: all zeros), gets ``smoothing`` (1e-9)
   added to every bin, and is normalised to sum 1 (p = candidate, q = baseline);
4. JS = Jensen-Shannon *divergence*, base 2 (in [0, 1]; clipped to it against rounding): the drift score.
   PSI = sum((p - q) * ln(p / q)). KL appears only inside JS. Wasserstein-1 between the sorted *raw*
   samples (candidate not winsorized), in the metric's unit: metadata only, never a flag;
5. flags: fewer than ``min_samples`` (200) on either side: WARN ``insufficient_samples`` (never a silent
   PASS); PSI > ``psi_data_quality`` (10): the PSI is not trusted (``psi_data_quality`` is true) and the
   flag falls back to JS alone (reason ``psi_data_quality_fallback`` unless JS itself says WARN/BLOCK);
   else BLOCK if JS > 0.25 or PSI > 0.25, WARN if JS > 0.1 or PSI >= 0.1, else PASS.

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
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from jobs.drift.config import PROFILES as PROFILES
from jobs.drift.config import DriftScoreConfig

PASS = "PASS"
WARN = "WARN"
BLOCK = "BLOCK"
METRICS = ("cost", "latency", "cardinality")
SIDES = ("baseline", "candidate")
# Reasons, one per row, first that applies: insufficient_samples, then (PSI > psi_data_quality)
# js_block / js_warn / psi_data_quality_fallback; else js_block, psi_block, js_warn, psi_warn, within_bands.
INSUFFICIENT_SAMPLES = "insufficient_samples"
PSI_DATA_QUALITY_FALLBACK = "psi_data_quality_fallback"
WITHIN_BANDS = "within_bands"
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
    keys: pl.DataFrame  # one row per pair, sorted: query_hash, metric
    values: np.ndarray  # float64, sorted by (pair, side, value)
    group: np.ndarray  # int64 pair * 2 + side, per value
    counts: np.ndarray  # int64 (pairs, 2): samples per side


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
    group = pair * 2 + frame["side_code"].to_numpy()
    counts = np.bincount(group, minlength=keys.height * 2).reshape(keys.height, 2).astype(np.int64)
    return _Samples(keys, frame["value"].to_numpy().astype(np.float64), group, counts)


# ---------------------------------------------------------------------------------------------------------
# The kernel: every pair at once


def _sorted_by(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The permutation sorting by (key, value) for a non-negative int64 key: one float argsort, then a
    stable LSD radix over the key's 16-bit digits (numpy radix-sorts uint16; np.lexsort is ~3x slower)."""
    order = np.argsort(values)
    top = int(key.max()) if key.size else 0
    shift = 0
    while True:
        digit = ((key[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
        if top >> shift == 0:
            return order


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


def _normalised(counts: np.ndarray, n: np.ndarray, smoothing: float) -> np.ndarray:
    """Frequencies (count / n, zeros for n == 0) + smoothing, normalised over the last axis."""
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


def _wasserstein(values: np.ndarray, group: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """W1 between the raw sorted samples of both sides of every pair (NaN when a side is empty)."""
    pairs = counts.shape[0]
    pair = group // 2
    order = _sorted_by(pair, values)
    v = values[order]
    p = pair[order]
    is_cand = (group[order] % 2).astype(np.int64)
    # cumulative counts per side within each pair, up to and including each position
    cum_c = np.cumsum(is_cand)
    cum_b = np.cumsum(1 - is_cand)
    starts = np.concatenate(([0], np.cumsum(counts.sum(axis=1))[:-1]))
    base_c = np.concatenate(([0], cum_c))[starts]
    base_b = np.concatenate(([0], cum_b))[starts]
    n_b = counts[:, 0].astype(np.float64)
    n_c = counts[:, 1].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        f_b = (cum_b - base_b[p]) / n_b[p]
        f_c = (cum_c - base_c[p]) / n_c[p]
    delta = np.zeros_like(v)
    delta[:-1] = v[1:] - v[:-1]
    same_pair = np.zeros(v.shape, dtype=bool)
    same_pair[:-1] = p[1:] == p[:-1]
    contribution = np.where(same_pair, np.abs(f_b - f_c) * delta, 0.0)
    contribution = np.where(np.isnan(contribution), 0.0, contribution)
    w = np.bincount(p, weights=contribution, minlength=pairs)
    w[(counts[:, 0] == 0) | (counts[:, 1] == 0)] = np.nan
    return w


@dataclass(frozen=True)
class _Histograms:
    js: np.ndarray
    psi: np.ndarray
    pooled: np.ndarray  # (pairs, n_bins): baseline + raw candidate counts on the observed grid


def _histograms(s: _Samples, config: DriftScoreConfig) -> _Histograms:
    pairs = s.counts.shape[0]
    n_bins = config.n_bins
    sizes = s.counts.reshape(-1)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    has = sizes > 0
    first = np.where(has, s.values[np.minimum(starts, max(s.values.size - 1, 0))], np.inf)
    last = np.where(has, s.values[np.minimum(starts + sizes - 1, max(s.values.size - 1, 0))], -np.inf)
    cand = np.arange(pairs) * 2 + 1
    cand_has = has[cand]
    winsor = np.full(pairs, np.inf)
    winsor[cand_has] = _linear_quantile(
        s.values, starts[cand][cand_has], sizes[cand][cand_has], config.winsor_quantile
    )
    is_cand = (s.group % 2) == 1
    pair = s.group // 2
    winsorized = np.where(is_cand, np.minimum(s.values, winsor[pair]), s.values)
    last_w = last.copy()
    last_w[cand] = np.minimum(last[cand], winsor)
    lo = np.minimum(first[0::2], first[1::2])
    hi = np.maximum(last_w[0::2], last_w[1::2])
    width = (hi - lo) / n_bins

    flat = width > 0
    safe_width = np.where(flat, width, 1.0)  # hi == lo: (v - lo) is 0 for every sample, so bin 0

    def bin_index(v: np.ndarray, at: np.ndarray) -> np.ndarray:
        raw = (v - lo[at]) / safe_width[at]
        return np.minimum(raw.astype(np.int64), n_bins - 1)  # astype truncates toward zero, as int()

    index = bin_index(winsorized, pair)
    hist = np.bincount(s.group * n_bins + index, minlength=pairs * 2 * n_bins).reshape(pairs, 2, n_bins)
    if config.profile == "calibrated":  # the permutation null pools the raw candidate on the same grid
        cand_pair = pair[is_cand]
        raw_cand = np.bincount(
            cand_pair * n_bins + bin_index(s.values[is_cand], cand_pair), minlength=pairs * n_bins
        ).reshape(pairs, n_bins)
    else:
        raw_cand = np.zeros((pairs, n_bins), dtype=np.int64)
    q = _normalised(hist[:, 0, :], s.counts[:, 0], config.smoothing)
    p = _normalised(hist[:, 1, :], s.counts[:, 1], config.smoothing)
    js, psi = _js_psi(p, q)
    return _Histograms(js, psi, hist[:, 0, :] + raw_cand)


def _pair_seed(config: DriftScoreConfig, query_hash_value: str, metric: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{query_hash_value}\x00{metric}".encode()).digest()
    return np.random.default_rng([config.seed, int.from_bytes(digest[:16], "big")])


def _noise(
    s: _Samples, h: _Histograms, which: np.ndarray, config: DriftScoreConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The permutation null's ``null_quantile`` of JS and PSI for the pairs ``which`` (others NaN)."""
    pairs = s.counts.shape[0]
    js_noise = np.full(pairs, np.nan)
    psi_noise = np.full(pairs, np.nan)
    idx = np.flatnonzero(which)
    if idx.size == 0:
        return js_noise, psi_noise
    r = config.null_resamples
    hashes = s.keys["query_hash"].to_list()
    metrics = s.keys["metric"].to_list()
    draws = np.empty((idx.size, r, config.n_bins), dtype=np.int64)
    for k, i in enumerate(idx):  # one generator per pair: a pair's null never depends on the batch
        rng = _pair_seed(config, hashes[i], metrics[i])
        draws[k] = rng.multivariate_hypergeometric(h.pooled[i], int(s.counts[i, 1]), size=r)
    n_c = s.counts[idx, 1]
    n_b = s.counts[idx, 0]
    pseudo_base = h.pooled[idx][:, None, :] - draws
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
    p = _normalised(pseudo_cand, np.broadcast_to(n_c[:, None], (idx.size, r)), config.smoothing)
    q = _normalised(pseudo_base, np.broadcast_to(n_b[:, None], (idx.size, r)), config.smoothing)
    js, psi = _js_psi(p, q)
    js_noise[idx] = np.quantile(js, config.null_quantile, axis=1)
    psi_noise[idx] = np.quantile(psi, config.null_quantile, axis=1)
    return js_noise, psi_noise


def flag_pairs(
    js: np.ndarray,
    psi: np.ndarray,
    counts: np.ndarray,
    config: DriftScoreConfig,
    js_noise: np.ndarray | None = None,
    psi_noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flag, reason, psi_data_quality) per pair from the distances and the (pairs, 2) sample counts
    (baseline, candidate); a noise threshold of None / NaN means no noise floor (the design rule)."""
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
    conditions = [
        insufficient,
        data_quality & js_block,
        data_quality & js_warn,
        data_quality,
        js_block,
        psi_block,
        js_warn,
        psi_warn,
    ]
    flag = np.select(conditions, [WARN, BLOCK, WARN, PASS, BLOCK, BLOCK, WARN, WARN], default=PASS)
    reason = np.select(
        conditions,
        [
            INSUFFICIENT_SAMPLES,
            "js_block",
            "js_warn",
            PSI_DATA_QUALITY_FALLBACK,
            "js_block",
            "psi_block",
            "js_warn",
            "psi_warn",
        ],
        default=WITHIN_BANDS,
    )
    return flag, reason, data_quality


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
    keys = keys.select(pl.col("query_hash").cast(pl.String), pl.col("metric").cast(pl.String))
    pairs = keys.height
    b_off = np.asarray(baseline_offsets, dtype=np.int64)
    c_off = np.asarray(candidate_offsets, dtype=np.int64)
    b_val = np.asarray(baseline, dtype=np.float64)
    c_val = np.asarray(candidate, dtype=np.float64)
    for name, off, val in (("baseline", b_off, b_val), ("candidate", c_off, c_val)):
        if off.shape != (pairs + 1,) or off[0] != 0 or off[-1] != val.size or (np.diff(off) < 0).any():
            raise ValueError(
                f"drift samples: {name}_offsets must be {pairs + 1} non-decreasing offsets 0..{val.size}"
            )
    if keys.is_duplicated().any():
        row = keys.filter(keys.is_duplicated()).row(0, named=True)
        raise ValueError(f"drift samples: pair query_hash={row['query_hash']}, {row['metric']} given twice")
    _check_keys(keys)
    for name, off, val in (("baseline", b_off, b_val), ("candidate", c_off, c_val)):
        bad = np.flatnonzero(~np.isfinite(val) | (val < 0))
        if bad.size:
            row = keys.row(int(np.searchsorted(off, bad[0], side="right") - 1), named=True)
            raise ValueError(
                f"drift samples: {name} value {val[bad[0]]!r} of query_hash={row['query_hash']},"
                f" metric={row['metric']} is negative or not finite (rejected, not clipped)"
            )
    order = np.asarray(keys.select(pl.int_range(pl.len()).sort_by("query_hash", "metric")).to_series())
    rank = np.empty(pairs, dtype=np.int64)
    rank[order] = np.arange(pairs)
    b_pair = np.repeat(rank, np.diff(b_off))
    c_pair = np.repeat(rank, np.diff(c_off))
    group = np.concatenate([b_pair * 2, c_pair * 2 + 1])
    values = np.concatenate([b_val, c_val])
    sort = _sorted_by(group, values)
    counts = np.stack([np.diff(b_off)[order], np.diff(c_off)[order]], axis=1)
    return _score(_Samples(keys[order], values[sort], group[sort], counts), config)


def _score(s: _Samples, config: DriftScoreConfig) -> pl.DataFrame:
    h = _histograms(s, config)
    wasserstein = _wasserstein(s.values, s.group, s.counts)
    pairs = s.counts.shape[0]
    js_noise = np.full(pairs, np.nan)
    psi_noise = np.full(pairs, np.nan)
    if config.profile == "calibrated":
        design_flag, _, _ = flag_pairs(h.js, h.psi, s.counts, config, js_noise, psi_noise)
        sufficient = (s.counts >= config.min_samples).all(axis=1)
        js_noise, psi_noise = _noise(s, h, sufficient & (design_flag != PASS), config)
    flag, reason, data_quality = flag_pairs(h.js, h.psi, s.counts, config, js_noise, psi_noise)
    out = s.keys.with_columns(
        shard_expr(config.shard_count),
        pl.Series("n_baseline", s.counts[:, 0], dtype=pl.Int64),
        pl.Series("n_candidate", s.counts[:, 1], dtype=pl.Int64),
        pl.Series("js", h.js, dtype=pl.Float64),
        pl.Series("psi", h.psi, dtype=pl.Float64),
        pl.Series("wasserstein", wasserstein, dtype=pl.Float64, nan_to_null=True),
        pl.Series("flag", flag.astype(str), dtype=pl.String),
        pl.Series("reason", reason.astype(str), dtype=pl.String),
        pl.Series("psi_data_quality", data_quality, dtype=pl.Boolean),
        pl.lit(config.profile, dtype=pl.String).alias("profile"),
        pl.Series("js_noise", js_noise, dtype=pl.Float64, nan_to_null=True),
        pl.Series("psi_noise", psi_noise, dtype=pl.Float64, nan_to_null=True),
    )
    return out.select(list(OUTPUT_SCHEMA))
