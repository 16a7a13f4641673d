"""Pure statistics of the gate: outlier filtering, candidate/baseline ratios with seeded bootstrap
confidence intervals, and the termination decision. Arrays in, frozen dataclasses out; identical inputs
give identical results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from jobs.gate.config import GateConfig

# Why a run stopped.
ALL_SETTLED = "all_settled"  # every query settled: CI narrow enough or decisively past/below thresholds
MAX_ROUNDS = "max_rounds"
ALL_FAILED = "all_failed"  # every query failed on the candidate: nothing left to measure
MAX_SECONDS = "max_seconds"


@dataclass(frozen=True)
class OutlierFilter:
    kept: np.ndarray
    dropped: int
    low_fence: float
    high_fence: float


def filter_outliers(values: np.ndarray, config: GateConfig) -> OutlierFilter:
    """Drop values beyond Tukey fences (k x IQR) or beyond z x MAD (scaled) of the median.

    A stall of the client, a checkpoint or a scheduler hiccup lands on one side only, and a median is
    robust to it but a p95 is not; fences that wide (k = 3) leave a real slow mode in place.
    """
    x = np.asarray(values, dtype=float)
    low, high = _fences(x, config)
    keep = (x >= low) & (x <= high)
    return OutlierFilter(x[keep], int(x.size - keep.sum()), float(low), float(high))


@dataclass(frozen=True)
class LatencyComparison:
    """Candidate vs baseline latency of one query (ms); ratios > 1 mean the candidate is slower."""

    n_baseline: int
    n_candidate: int
    dropped_baseline: int
    dropped_candidate: int
    baseline_p50_ms: float
    candidate_p50_ms: float
    baseline_p95_ms: float
    candidate_p95_ms: float
    p50_ratio: float
    p50_ci: tuple[float, float]
    p95_ratio: float
    p95_ci: tuple[float, float]
    p_value: float  # Mann-Whitney U, two-sided: do the two distributions differ at all?
    rounds: int | None = None  # resampled clusters (rounds); None: calls resampled independently

    @property
    def p50_precision(self) -> float:
        """Half the CI width relative to the estimate (0.05 = ±5%)."""
        lo, hi = self.p50_ci
        return (hi - lo) / 2.0 / self.p50_ratio if self.p50_ratio > 0 else float("inf")


Samples = np.ndarray | Sequence[Sequence[float]]


def as_rounds(values: Samples) -> np.ndarray:
    """(rounds, calls) latencies, NaN-padded; a 1-D array is one call per round (independent calls)."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        return values.astype(float)[:, None]
    if isinstance(values, np.ndarray) and values.ndim == 2:
        return values.astype(float)
    rounds = [np.asarray(r, dtype=float).ravel() for r in values]
    out = np.full((len(rounds), max((r.size for r in rounds), default=0)), np.nan)
    for i, r in enumerate(rounds):
        out[i, : r.size] = r
    return out


def _p50_p95(flat: np.ndarray) -> np.ndarray:
    """Median and p95 (numpy's linear interpolation) along the last axis, ignoring NaN: shape (2, ...).
    Sorting once is faster than nanquantile on bootstrap batches."""
    ordered = np.sort(np.where(np.isnan(flat), np.inf, flat), axis=-1)
    last = np.maximum(np.isfinite(ordered).sum(axis=-1) - 1, 0)
    out = []
    for q in (0.5, 0.95):
        pos = last * q
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, last)
        a = np.take_along_axis(ordered, lo[..., None], axis=-1)[..., 0]
        b = np.take_along_axis(ordered, hi[..., None], axis=-1)[..., 0]
        out.append(np.where(hi > lo, a + (b - a) * (pos - lo), a))
    return np.stack(out)


def _pooled(rounds: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """p50/p95 of the calls of the rounds ``idx`` (..., R) picks, pooled: shape (2, ...)."""
    picked = rounds[idx]  # (..., R, calls)
    return _p50_p95(picked.reshape(*idx.shape[:-1], -1))


def _fences(x: np.ndarray, config: GateConfig) -> tuple[float, float]:
    values = x[np.isfinite(x)]
    if config.outlier_method == "none" or values.size < 4:
        return -np.inf, np.inf
    if config.outlier_method == "tukey":
        q1, q3 = np.quantile(values, [0.25, 0.75])
        return q1 - config.tukey_k * (q3 - q1), q3 + config.tukey_k * (q3 - q1)
    median = float(np.median(values))
    mad = float(stats.median_abs_deviation(values, scale="normal"))
    return median - config.mad_z * mad, median + config.mad_z * mad


def widen_for_few_clusters(
    point: np.ndarray, low: np.ndarray, high: np.ndarray, clusters: int, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Stretch a percentile-bootstrap CI (in log-ratio space, about the estimate) by t(R-1)/z x
    sqrt(R/(R-1)): with R resampled rounds the percentile bootstrap is too narrow (it behaves like a
    z-interval with the biased variance). Negligible from ~50 rounds on; 1.35x at R = 6."""
    if clusters < 2:
        return np.zeros_like(point), np.full_like(point, np.inf)
    tail = 0.5 + confidence / 2.0
    factor = stats.t.ppf(tail, clusters - 1) / stats.norm.ppf(tail) * np.sqrt(clusters / (clusters - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = point * np.exp(factor * np.log(np.maximum(low, 1e-300) / point))
        hi = point * np.exp(factor * np.log(high / point))
    return np.where(low > 0, lo, low), hi


def compare_latencies(baseline_ms: Samples, candidate_ms: Samples, config: GateConfig) -> LatencyComparison:
    """Filter outliers on each side, then ratio of medians and of p95s with seeded bootstrap CIs.

    Given per-round samples (a list of rounds, or a 2-D rounds x calls array) with as many rounds on
    both sides, the bootstrap resamples *rounds*, the same rounds on both sides: calls of one round
    share the machine's state of that moment (a busy core, the backend's placement), so resampling
    single calls would pretend to a precision the run does not have. A 1-D array is independent calls.
    """
    base, cand = as_rounds(baseline_ms), as_rounds(candidate_ms)
    dropped = []
    for side in (base, cand):
        low, high = _fences(side, config)
        outside = np.isfinite(side) & ((side < low) | (side > high))
        dropped.append(int(outside.sum()))
        side[outside] = np.nan
    x, y = base[np.isfinite(base)], cand[np.isfinite(cand)]
    if x.size < 2 or y.size < 2:
        raise ValueError(f"need at least 2 samples per side after filtering, got {x.size} and {y.size}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("latencies must be positive")
    qx, qy = _p50_p95(x), _p50_p95(y)
    point = qy / qx
    paired = base.shape[0] == cand.shape[0] >= 3 and (base.shape[1] > 1 or cand.shape[1] > 1)
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        # Degenerate (constant) samples: the bootstrap has nothing to resample; the ratio is exact.
        ci_low, ci_high = point.copy(), point.copy()
    else:
        if paired:
            data: tuple[np.ndarray, ...] = (np.arange(base.shape[0]),)

            def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
                return _pooled(cand, idx) / _pooled(base, idx)
        else:
            xs, ys = x[:, None], y[:, None]
            data = (np.arange(x.size), np.arange(y.size))

            def statistic(ix: np.ndarray, iy: np.ndarray, axis: int = -1) -> np.ndarray:  # type: ignore[misc]
                return _pooled(ys, iy) / _pooled(xs, ix)

        result = stats.bootstrap(
            data,
            statistic,
            n_resamples=config.bootstrap_resamples,
            confidence_level=config.confidence,
            method="percentile",
            vectorized=True,
            paired=paired,
            rng=np.random.default_rng(config.seed),
        )
        # NaN: a degenerate bootstrap distribution (every resample the same): the ratio is exact.
        ci_low = np.where(np.isnan(result.confidence_interval.low), point, result.confidence_interval.low)
        ci_high = np.where(np.isnan(result.confidence_interval.high), point, result.confidence_interval.high)
        clusters = base.shape[0] if paired else min(x.size, y.size)
        ci_low, ci_high = widen_for_few_clusters(point, ci_low, ci_high, clusters, config.confidence)
    p_value = 1.0 if np.array_equal(np.sort(x), np.sort(y)) else float(stats.mannwhitneyu(x, y).pvalue)
    return LatencyComparison(
        n_baseline=int(x.size),
        n_candidate=int(y.size),
        dropped_baseline=dropped[0],
        dropped_candidate=dropped[1],
        baseline_p50_ms=float(qx[0]),
        candidate_p50_ms=float(qy[0]),
        baseline_p95_ms=float(qx[1]),
        candidate_p95_ms=float(qy[1]),
        p50_ratio=float(point[0]),
        p50_ci=(float(min(ci_low[0], point[0])), float(max(ci_high[0], point[0]))),
        p95_ratio=float(point[1]),
        p95_ci=(float(min(ci_low[1], point[1])), float(max(ci_high[1], point[1]))),
        p_value=p_value,
        rounds=int(base.shape[0]) if paired else None,
    )


PRECISE = "precise"  # the p50-ratio CI is within ±target_precision of the estimate
DECISIVE = "decisive"  # the CI lies wholly on one side of every verdict threshold
IMMATERIAL = "immaterial"  # even the CI's upper bound adds less than min_latency_increase_ms per call


def settle_reason(comparison: LatencyComparison, config: GateConfig) -> str | None:
    """Why more rounds would not change this query's latency verdict, or None while they might."""
    if comparison.p50_precision <= config.target_precision:
        return PRECISE
    lo, hi = comparison.p50_ci
    # (warn_min_ci_lower matters only when hi reaches the warn ratio, which the warn check covers.)
    if all(not (lo < t <= hi) for t in (config.p50_warn_ratio, config.p50_block_ratio)):
        return DECISIVE
    if comparison.baseline_p50_ms * (hi - 1.0) < config.min_latency_increase_ms:
        return IMMATERIAL
    return None


def is_settled(comparison: LatencyComparison, config: GateConfig) -> bool:
    return settle_reason(comparison, config) is not None


@dataclass(frozen=True)
class TerminationDecision:
    stop: bool
    reason: str | None  # ALL_SETTLED, MAX_ROUNDS, MAX_SECONDS, or None while running
    settled: tuple[str, ...]
    unsettled: tuple[str, ...]


def decide_termination(
    comparisons: Mapping[str, LatencyComparison | None], rounds: int, elapsed_s: float, config: GateConfig
) -> TerminationDecision:
    """Stop when every query is settled (after min_rounds), or when a budget is spent.

    ``None`` stands for a query with too few samples to compare yet (never settled).
    """
    settled = tuple(sorted(n for n, c in comparisons.items() if c is not None and is_settled(c, config)))
    unsettled = tuple(sorted(n for n in comparisons if n not in settled))
    if rounds >= config.min_rounds and not unsettled:
        return TerminationDecision(True, ALL_SETTLED, settled, unsettled)
    if rounds >= config.max_rounds:
        return TerminationDecision(True, MAX_ROUNDS, settled, unsettled)
    if elapsed_s >= config.max_seconds:
        return TerminationDecision(True, MAX_SECONDS, settled, unsettled)
    return TerminationDecision(False, None, settled, unsettled)
