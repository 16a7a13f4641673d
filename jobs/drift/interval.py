"""Latency distribution drift: has the *shape* of a query's latency changed against a baseline?

The regression detector tests steps in the mean; a plan that flips for some parameter values adds a slow
tail or a second mode that a mean test can miss (most calls got faster, some much slower). Here each
series (``SERIES_KEY``: instance, database, query) of per-interval mean latencies (built exactly as the
detector builds it: ``fingerprinted_samples`` + ``merge_intervals``) is compared between a current window
and a baseline window, for every series of the fleet at once:

- baseline: the most specific applicable anchor of ``drift_baselines`` (instance + fingerprint, instance,
  fingerprint, fleet; then the newest), else the ``baseline_days`` before the current window;
- shared bins per series: ``bins`` log-spaced edges over the baseline's range plus an underflow and an
  overflow bin, so both windows are histogrammed on the same edges; each interval weighs its calls (the
  histogram approximates what calls experienced, not what snapshots saw);
- metrics: Jensen-Shannon distance (base 2) and PSI (epsilon-smoothed) of the two histograms, and the
  Wasserstein-1 distance between the calls-weighted log latency distributions (in natural-log units, so
  it is scale-free: 0.1 means mass moved by ~10% on average, for a 0.01 ms and a 10 s query alike).

Precision first, a "drift" needs all of: enough intervals in both windows; the three metrics agree (PSI,
JS and W1 each over its threshold); the upper tail moved up by ``min_tail_increase`` (calls-weighted
p95) and an exact, distribution-free exceedance test says more current intervals sit above the
baseline's upper tail than chance allows; and the change is material (the detector's two materiality
rules). A shape that got faster is "improved"; a slower one with only watch-level divergence is "watch".
The metric kernel is numpy over (series, bin) ids with bincount; no Python loop per series.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from jobs.drift.clock import as_utc
from jobs.drift.config import DriftConfig
from jobs.lake import io as lake
from jobs.query.series import SERIES_KEY, fingerprinted_samples, merge_intervals, series_identity
from jobs.schemas.analysed import DRIFT_BASELINES, LATENCY_DRIFT
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS

DRIFT = "drift"
WATCH = "watch"
IMPROVED = "improved"
NO_DRIFT = "no_drift"
INSUFFICIENT_DATA = "insufficient_data"
KEYS = list(SERIES_KEY)


# ---------------------------------------------------------------------------------------------------------
# The metric kernel: every series at once


@dataclass(frozen=True)
class DriftMetrics:
    """Per series (index = series id): histograms, divergences, quantiles and the exceedance tests."""

    baseline_hist: np.ndarray
    """(S, bins + 2) probabilities: underflow, the bins, overflow."""
    current_hist: np.ndarray
    js: np.ndarray
    psi: np.ndarray
    wasserstein: np.ndarray
    baseline_count: np.ndarray
    current_count: np.ndarray
    baseline_weight: np.ndarray
    current_weight: np.ndarray
    baseline_p50: np.ndarray
    baseline_p95: np.ndarray
    current_p50: np.ndarray
    current_p95: np.ndarray
    tail_p_up: np.ndarray
    """Bonferroni (x2) p of 'more current intervals above the baseline's upper tail than chance'."""
    tail_p_down: np.ndarray
    """The same for 'below the baseline's lower tail' (an improvement)."""


def _segment_offsets(segment: np.ndarray, segments: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.bincount(segment, minlength=segments)
    starts = np.zeros(segments, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return counts, starts


def _weighted_quantiles(
    sorted_values: np.ndarray,
    sorted_weights: np.ndarray,
    segment: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    quantiles: tuple[float, ...],
) -> list[np.ndarray]:
    """Inverted-CDF weighted quantiles per segment (the first value whose cumulative weight reaches q):
    one searchsorted over ``segment + cumulative share``, which increases through the sorted points."""
    segments = counts.shape[0]
    if sorted_values.size == 0:
        return [np.full(segments, np.nan) for _ in quantiles]
    total = np.bincount(segment, weights=sorted_weights, minlength=segments)
    cumulative = np.cumsum(sorted_weights)
    before = np.where(starts > 0, cumulative[np.maximum(starts - 1, 0)], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        key = segment + (cumulative - before[segment]) / total[segment]
    out = []
    for q in quantiles:
        index = np.searchsorted(key, np.arange(segments) + q, side="left")
        index = np.clip(index, starts, starts + np.maximum(counts, 1) - 1)
        out.append(np.where(counts > 0, sorted_values[np.minimum(index, sorted_values.shape[0] - 1)], np.nan))
    return out


def _exceedance_p(
    count_b: np.ndarray, count_c: np.ndarray, rank: np.ndarray, exceed: np.ndarray
) -> np.ndarray:
    """P(at least ``exceed`` current points beyond the baseline's ``rank``-th most extreme point) under
    exchangeability: that many or more current points among the top rank - 1 + exceed of the pool."""
    draws = rank - 1 + exceed
    with np.errstate(invalid="ignore"):
        p = stats.hypergeom.sf(exceed - 1, count_b + count_c, count_c, draws)
    return np.where(exceed > 0, p, 1.0)


def _order_within(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Indices ordering the points by (group, value). The values are laid out in a padded (groups, longest)
    matrix and sorted along its rows: many small cache-friendly sorts, ~50x faster than one global
    lexsort of the same points. Very unequal group sizes (padding > 4x the points) fall back to lexsort."""
    n = values.shape[0]
    counts = np.bincount(group, minlength=groups)
    longest = int(counts.max()) if n else 0
    if n == 0 or groups * longest > 4 * n + 1024:
        return np.lexsort((values, group))
    presorted = bool(np.all(group[1:] >= group[:-1]))
    starts = np.zeros(groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    if presorted and bool(np.all(counts == longest)):  # equal-length groups: a plain reshape
        return (starts[:, None] + np.argsort(values.reshape(groups, longest), axis=1)).ravel()
    by_group = np.arange(n) if presorted else np.argsort(group, kind="stable")
    g = group[by_group]
    padded = np.full(groups * longest, np.inf)
    padded[g * longest + np.arange(n) - starts[g]] = values[by_group]
    local = np.argsort(padded.reshape(groups, longest), axis=1)[np.arange(longest) < counts[:, None]]
    return by_group[np.repeat(starts, counts) + local]


def drift_kernel(
    series: np.ndarray,
    current: np.ndarray,
    latency_ms: np.ndarray,
    weights: np.ndarray,
    n_series: int,
    config: DriftConfig = DriftConfig(),
    block_points: int = 1 << 18,
) -> DriftMetrics:
    """Metrics of ``n_series`` series from flat arrays: series id, current-window flag, latency, weight.

    Vectorized over whole blocks of consecutive series of about ``block_points`` points each (thousands
    of series per block; a block's temporaries stay a few MB, where fleet-sized ones cost more in page
    faults than in arithmetic). Series lacking one of the windows get NaN metrics.
    """
    series = np.asarray(series, dtype=np.int64)
    current = np.asarray(current, dtype=bool)
    weights = np.asarray(weights, dtype=np.float64)
    latency = np.asarray(latency_ms, dtype=np.float64)
    if series.size and not bool(np.all(series[1:] >= series[:-1])):
        order = np.argsort(series, kind="stable")
        series, current, weights, latency = series[order], current[order], weights[order], latency[order]
    ends = np.searchsorted(series, np.arange(1, n_series + 1), side="left")  # end of each series' points
    blocks, first = [], 0
    while first < n_series:
        start = int(ends[first - 1]) if first else 0
        last = max(int(np.searchsorted(ends, start + block_points, side="right")), first + 1)
        last = min(last, n_series)
        rows = slice(start, int(ends[last - 1]))
        blocks.append(
            _kernel_block(
                series[rows] - first, current[rows], latency[rows], weights[rows], last - first, config
            )
        )
        first = last
    if len(blocks) <= 1:
        return blocks[0] if blocks else _kernel_block(series, current, latency, weights, 0, config)
    return DriftMetrics(
        **{
            name: np.concatenate([getattr(b, name) for b in blocks])
            for name in DriftMetrics.__dataclass_fields__
        }
    )


def _kernel_block(
    series: np.ndarray,
    current: np.ndarray,
    latency: np.ndarray,
    weights: np.ndarray,
    n_series: int,
    config: DriftConfig,
) -> DriftMetrics:
    """drift_kernel on one block: one sort per (series, window), bincounts over (series, window, bin)."""
    logv = np.log(np.maximum(latency, config.latency_floor_ms))
    nbins = config.bins + 2
    segments = 2 * n_series
    segment = 2 * series + current
    order = _order_within(segment, logv, segments)
    s_seg, s_log, s_w = segment[order], logv[order], weights[order]
    counts, starts = _segment_offsets(s_seg, segments)
    count_b, count_c = counts[0::2], counts[1::2]
    start_b = starts[0::2]
    has_b = count_b > 0
    last = max(s_log.shape[0] - 1, 0)
    lo = np.where(has_b, s_log[np.minimum(start_b, last)], np.nan)
    hi = np.where(has_b, s_log[np.minimum(start_b + count_b - 1, last)], np.nan)
    # Shared log-spaced edges per series from the baseline's range, widened to min_relative_range.
    min_span = math.log1p(config.min_relative_range)
    centre = (lo + hi) / 2
    narrow = (hi - lo) < min_span
    lo = np.where(narrow, centre - min_span / 2, lo)
    hi = np.where(narrow, centre + min_span / 2, hi)
    width = (hi - lo) / config.bins
    # Below lo: floor < 0 -> underflow bin 0; the baseline's max (== hi) stays in the last inner bin.
    with np.errstate(invalid="ignore"):
        position = np.floor((logv - lo[series]) / width[series])
        bin_id = np.clip(np.nan_to_num(position, nan=-1.0), -1, config.bins - 1).astype(np.int64) + 1
        bin_id[logv > hi[series]] = nbins - 1
    hist = np.bincount(segment * nbins + bin_id, weights=weights, minlength=segments * nbins)
    hist = hist.reshape(n_series, 2, nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = hist[:, 0, :] / hist[:, 0, :].sum(axis=1, keepdims=True)
        q = hist[:, 1, :] / hist[:, 1, :].sum(axis=1, keepdims=True)
        m = (p + q) / 2
        kl_p = np.where(p > 0, p * np.log(p / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
        kl_q = np.where(q > 0, q * np.log(q / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
        js = np.sqrt(np.maximum((kl_p + kl_q) / 2 / math.log(2), 0.0))
        eps = config.psi_epsilon
        ps = (p + eps) / (1 + nbins * eps)
        qs = (q + eps) / (1 + nbins * eps)
        psi = ((qs - ps) * np.log(qs / ps)).sum(axis=1)
    both = has_b & (count_c > 0)
    js = np.where(both, js, np.nan)
    psi = np.where(both, psi, np.nan)

    # Wasserstein-1 of the weighted log latencies: integral of |F_b - F_c| over the merged sorted values.
    weight_b = np.bincount(series[~current], weights=weights[~current], minlength=n_series)
    weight_c = np.bincount(series[current], weights=weights[current], minlength=n_series)
    by_value = _order_within(series, logv, n_series)
    v_series, v_log = series[by_value], logv[by_value]
    with np.errstate(invalid="ignore", divide="ignore"):
        signed = np.where(
            current[by_value], -weights[by_value] / weight_c[v_series], weights[by_value] / weight_b[v_series]
        )
    cumulative = np.cumsum(np.nan_to_num(signed))
    _, v_starts = _segment_offsets(v_series, n_series)
    before = np.where(v_starts > 0, cumulative[np.maximum(v_starts - 1, 0)], 0.0)
    gap = np.abs(cumulative - before[v_series])
    if v_log.shape[0] > 1:
        same = v_series[1:] == v_series[:-1]
        area = np.where(same, gap[:-1] * np.diff(v_log), 0.0)
        wasserstein = np.bincount(v_series[:-1], weights=area, minlength=n_series)
    else:
        wasserstein = np.zeros(n_series)
    wasserstein = np.where(both, wasserstein, np.nan)

    # Calls-weighted quantiles per window (in ms).
    s_values = np.exp(s_log)
    p50, p95 = _weighted_quantiles(s_values, s_w, s_seg, counts, starts, (0.5, 0.95))

    # Exact exceedance tests (intervals, unweighted): at the tail quantile and at the extreme, Bonferroni x2.
    tail_rank = np.maximum(1, np.ceil(count_b * (1 - config.tail_quantile) - 1e-9)).astype(np.int64)
    tail_rank = np.minimum(tail_rank, np.maximum(count_b, 1))
    c_series = s_seg[s_seg % 2 == 1] // 2
    c_log = s_log[s_seg % 2 == 1]
    p_up = np.ones(n_series)
    p_down = np.ones(n_series)
    for rank in (tail_rank, np.ones(n_series, dtype=np.int64)):
        upper = s_log[np.clip(start_b + count_b - rank, 0, last)] if s_log.size else np.zeros(n_series)
        lower = s_log[np.clip(start_b + rank - 1, 0, last)] if s_log.size else np.zeros(n_series)
        above = np.bincount(c_series, weights=(c_log > upper[c_series]), minlength=n_series).astype(np.int64)
        below = np.bincount(c_series, weights=(c_log < lower[c_series]), minlength=n_series).astype(np.int64)
        p_up = np.minimum(p_up, _exceedance_p(count_b, count_c, rank, above))
        p_down = np.minimum(p_down, _exceedance_p(count_b, count_c, rank, below))
    p_up = np.where(both, np.minimum(2 * p_up, 1.0), np.nan)
    p_down = np.where(both, np.minimum(2 * p_down, 1.0), np.nan)
    return DriftMetrics(
        baseline_hist=p,
        current_hist=q,
        js=js,
        psi=psi,
        wasserstein=wasserstein,
        baseline_count=count_b,
        current_count=count_c,
        baseline_weight=weight_b,
        current_weight=weight_c,
        baseline_p50=p50[0::2],
        baseline_p95=p95[0::2],
        current_p50=p50[1::2],
        current_p95=p95[1::2],
        tail_p_up=p_up,
        tail_p_down=p_down,
    )


def drift_verdicts(
    metrics: DriftMetrics,
    baseline_mean_ms: np.ndarray,
    current_mean_ms: np.ndarray,
    current_calls_per_s: np.ndarray,
    config: DriftConfig = DriftConfig(),
) -> tuple[np.ndarray, np.ndarray]:
    """(status, reason) per series; the first failing gate names the reason."""
    m = metrics
    few_b = m.baseline_count < config.min_samples
    few_c = m.current_count < config.min_samples
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = m.current_p95 / m.baseline_p95
        strong = (m.psi >= config.psi_drift) & (m.js >= config.js_drift)
        moderate = (m.psi >= config.psi_watch) & (m.js >= config.js_watch)
        moved = m.wasserstein >= config.min_wasserstein
        slower = (ratio >= 1 + config.min_tail_increase) & (m.tail_p_up < config.tail_p_value)
        faster = (
            (ratio <= 1 / (1 + config.min_tail_increase))
            & (m.current_p50 <= m.baseline_p50)
            & (m.tail_p_down < config.tail_p_value)
        )
        added_load = (current_mean_ms - baseline_mean_ms) * current_calls_per_s
        material = (added_load >= config.min_added_load_ms_per_s) | (
            (m.current_p95 - m.baseline_p95) >= config.min_latency_increase_ms
        )
    conditions = [
        few_b,
        few_c,
        ~(moderate & moved),
        ~slower & faster,
        ~slower,
        ~material,
        strong,
    ]
    reasons = [
        "too_few_baseline_samples",
        "too_few_current_samples",
        "below_divergence_threshold",
        "faster_shape",
        "not_significantly_slower",
        "below_materiality_threshold",
        "slower_tail",
    ]
    statuses = [INSUFFICIENT_DATA, INSUFFICIENT_DATA, NO_DRIFT, IMPROVED, NO_DRIFT, NO_DRIFT, DRIFT]
    reason = np.select(conditions, reasons, default="slower_tail_watch_level")
    status = np.select(conditions, statuses, default=WATCH)
    return status, reason


# ---------------------------------------------------------------------------------------------------------
# Baselines


def baseline_id(
    instance: str | None, fingerprint: str | None, start: datetime, end: datetime, label: str
) -> str:
    key = f"{instance or '*'}|{fingerprint or '*'}|{start.isoformat()}|{end.isoformat()}|{label}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def anchor_baseline(
    lake_root: Path,
    *,
    start: datetime,
    end: datetime,
    instance: str | None = None,
    label: str,
    fingerprint: str | None = None,
    now: datetime | None = None,
) -> dict[str, object]:
    """Record a known-good window as the drift baseline of an instance (or the fleet), optionally of one
    query; anchoring the same window and label again records it once. Returns the row written."""
    start, end = as_utc(start), as_utc(end)
    if not start < end:
        raise ValueError("anchor_baseline: start must be before end")
    if not label or not label.strip():
        raise ValueError("anchor_baseline: label must not be empty")
    created = as_utc(now or datetime.now(UTC))
    ident = baseline_id(instance, fingerprint, start, end, label)
    row: dict[str, object] = {
        "baseline_id": ident,
        "instance": instance,
        "fingerprint": fingerprint,
        "window_start": start,
        "window_end": end,
        "label": label,
        "created_at": created,
    }
    frame = pl.DataFrame([row], schema=DRIFT_BASELINES.polars_schema)
    lake.write_table(lake_root, DRIFT_BASELINES, frame, {"date": created.strftime("%Y-%m-%d")}, ident)
    return row


def load_baselines(lake_root: Path) -> pl.DataFrame:
    """Every anchored baseline once (by id, the first recorded)."""
    frame = lake.read_table(lake_root, DRIFT_BASELINES)
    return (
        frame.sort("created_at", "baseline_id")
        .unique("baseline_id", keep="first", maintain_order=True)
        .select(DRIFT_BASELINES.column_names)
    )


def assign_baselines(
    keys: pl.DataFrame, baselines: pl.DataFrame, current_start: datetime, default_start: datetime
) -> pl.DataFrame:
    """Per series: the most specific anchor ending by ``current_start`` (then the newest), else default."""
    ts = pl.Datetime("us", "UTC")
    anchors = baselines.filter(
        (pl.col("window_end") <= current_start) & (pl.col("window_start") < pl.col("window_end"))
    ).select(
        pl.col("instance").alias("a_instance"),
        pl.col("fingerprint").alias("a_fingerprint"),
        "baseline_id",
        pl.col("label").alias("baseline_label"),
        pl.col("window_start").cast(ts).alias("baseline_start"),
        pl.col("window_end").cast(ts).alias("baseline_end"),
        pl.col("created_at").cast(ts),
    )
    picked = (
        keys.join(anchors, how="cross")
        .filter(
            (pl.col("a_instance").is_null() | (pl.col("a_instance") == pl.col("instance")))
            & (pl.col("a_fingerprint").is_null() | (pl.col("a_fingerprint") == pl.col("fingerprint")))
        )
        .with_columns(
            (
                2 * pl.col("a_instance").is_not_null().cast(pl.Int64)
                + pl.col("a_fingerprint").is_not_null().cast(pl.Int64)
            ).alias("specificity")
        )
        .sort(
            [*KEYS, "specificity", "created_at", "baseline_end", "baseline_id"],
            descending=[False, False, True, True, True, False],
        )
        .unique(KEYS, keep="first", maintain_order=True)
        .select(*KEYS, "baseline_id", "baseline_label", "baseline_start", "baseline_end")
    )
    out = keys.join(picked, on=KEYS, how="left")
    anchored = pl.col("baseline_id").is_not_null()
    return out.with_columns(
        pl.when(anchored).then(pl.lit("anchored")).otherwise(pl.lit("default")).alias("baseline_source"),
        pl.when(anchored).then(pl.col("baseline_start")).otherwise(pl.lit(default_start).cast(ts)),
        pl.when(anchored).then(pl.col("baseline_end")).otherwise(pl.lit(current_start).cast(ts)),
    )


# ---------------------------------------------------------------------------------------------------------
# Frames in, frames out


def drift_from_samples(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    baselines: pl.DataFrame | None = None,
    config: DriftConfig = DriftConfig(),
    now: datetime | None = None,
) -> pl.DataFrame:
    """One latency_drift row per (instance, query) with samples in its current or baseline window.

    ``samples``: query_samples rows plus ``instance``; ``texts``: query_texts rows plus ``instance`` (or
    fingerprint_texts output); ``baselines``: drift_baselines rows (may be empty or None). ``now`` (the
    end of the current window) defaults to the latest interval_end of the samples. Pure and
    deterministic: the same inputs give the same rows in the same order.
    """
    if samples.height == 0:
        return LATENCY_DRIFT.empty()
    points = fingerprinted_samples(samples, texts)
    end = as_utc(now or points["interval_end"].max())  # type: ignore[arg-type]
    current_start = end - config.current_window
    default_start = current_start - timedelta(days=config.baseline_days)
    points = points.filter(pl.col("interval_end") <= end)
    if baselines is None:
        baselines = DRIFT_BASELINES.empty()
    keys = points.select(*KEYS, "fingerprint").unique(KEYS).sort(KEYS)
    assigned = assign_baselines(keys, baselines, current_start, default_start)
    series = merge_intervals(points, KEYS).join(assigned, on=KEYS, how="left")
    in_current = pl.col("interval_end") > current_start
    in_baseline = (pl.col("interval_end") > pl.col("baseline_start")) & (
        pl.col("interval_end") <= pl.col("baseline_end")
    )
    series = series.filter(in_current | in_baseline).with_columns(in_current.alias("is_current"))
    if series.height == 0:
        return LATENCY_DRIFT.empty()
    groups = series.select(KEYS).unique(maintain_order=True).with_row_index("sid")
    series = series.join(groups, on=KEYS, how="left", maintain_order="left")
    sid = series["sid"].to_numpy().astype(np.int64)
    is_current = series["is_current"].to_numpy()
    calls = series["calls"].to_numpy().astype(np.float64)
    exec_ms = series["total_exec_time"].to_numpy().astype(np.float64)
    seconds = series["interval_seconds"].to_numpy().astype(np.float64)
    n = groups.height
    weights = calls if config.weight_by_calls else np.ones_like(calls)
    metrics = drift_kernel(sid, is_current, series["value"].to_numpy(), weights, n, config)
    calls_b = np.bincount(sid[~is_current], weights=calls[~is_current], minlength=n)
    calls_c = np.bincount(sid[is_current], weights=calls[is_current], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_b = np.bincount(sid[~is_current], weights=exec_ms[~is_current], minlength=n) / calls_b
        mean_c = np.bincount(sid[is_current], weights=exec_ms[is_current], minlength=n) / calls_c
        rate_c = calls_c / np.bincount(sid[is_current], weights=seconds[is_current], minlength=n)
    status, reason = drift_verdicts(metrics, mean_b, mean_c, rate_c, config)
    identity = series_identity(points.join(groups.select(KEYS), on=KEYS, how="semi"), KEYS)

    def col(name: str, values: np.ndarray) -> pl.Series:
        return pl.Series(name, values, dtype=pl.Float64).fill_nan(None)

    out = groups.with_columns(
        pl.Series("baseline_count", metrics.baseline_count, dtype=pl.Int64),
        pl.Series("current_count", metrics.current_count, dtype=pl.Int64),
        pl.Series("baseline_calls", calls_b.astype(np.int64), dtype=pl.Int64),
        pl.Series("current_calls", calls_c.astype(np.int64), dtype=pl.Int64),
        col("baseline_mean_ms", mean_b),
        col("current_mean_ms", mean_c),
        col("baseline_p50_ms", metrics.baseline_p50),
        col("baseline_p95_ms", metrics.baseline_p95),
        col("current_p50_ms", metrics.current_p50),
        col("current_p95_ms", metrics.current_p95),
        col("js", metrics.js),
        col("psi", metrics.psi),
        col("wasserstein", metrics.wasserstein),
        col("tail_p_value", metrics.tail_p_up),
        col("added_load_ms_per_s", (mean_c - mean_b) * rate_c),
        pl.Series("status", status.astype(str), dtype=pl.String),
        pl.Series("reason", reason.astype(str), dtype=pl.String),
        pl.lit(current_start).cast(pl.Datetime("us", "UTC")).alias("current_start"),
        pl.lit(end).cast(pl.Datetime("us", "UTC")).alias("current_end"),
    )
    out = out.join(assigned.drop("fingerprint"), on=KEYS, how="left").join(identity, on=KEYS, how="left")
    return LATENCY_DRIFT.conform(out.select(LATENCY_DRIFT.column_names)).sort(KEYS)


def run_drift(
    lake_root: Path, config: DriftConfig = DriftConfig(), now: datetime | None = None
) -> pl.DataFrame:
    """Read samples, texts and anchors from the lake, compute drift, write one latency_drift file.

    The file is partitioned by the date of the current window's end and named after it, so running again
    for the same ``now`` replaces it. ``now`` defaults to the latest sample in the lake.
    """
    samples = lake.read_table(lake_root, QUERY_SAMPLES)
    texts = lake.read_table(lake_root, QUERY_TEXTS)
    result = drift_from_samples(samples, texts, load_baselines(lake_root), config, now)
    if result.height:
        end = result["current_end"][0]
        lake.write_table(
            lake_root, LATENCY_DRIFT, result, {"date": end.strftime("%Y-%m-%d")}, lake.stem_for(end)
        )
    return result
