"""Pure statistics the gate's rules share: the outlier fences, the p50 / p95 point estimates and the widening
of a percentile-bootstrap CI drawn from few measurements. Arrays in, arrays out; deterministic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from jobs.gate.config import GateConfig


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
