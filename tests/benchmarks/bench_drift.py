"""Drift metric throughput against a per-series scipy loop, and the verdict's precision and recall.

Data (seed 20261129): 100,000 series of 144 baseline + 48 current interval mean latencies (3 days and
1 day at 30-minute intervals), lognormal noise (sigma 0.1-0.6) around medians from 0.01 ms to 10 s,
calls 1-1,000 per interval. Labelled: half the series are positives (a new slow tail: 5-20% of the
current intervals 3-20x slower; or a shift of the whole shape 1.3-3x slower), the other half negatives
(80% unchanged, 20% faster 0.4-0.8x, which must not be called drift).

Contenders on the same arrays:
- ``jobs.drift.interval.drift_kernel``: vectorized over blocks of thousands of series (bincounts over ids);
- peer: a Python loop per series calling ``scipy.spatial.distance.jensenshannon`` and
  ``scipy.stats.wasserstein_distance`` (plus ``np.histogram`` on the same edges and the PSI formula),
  run on the first ``PEER_SERIES`` series and scaled to series/s; its metrics are checked equal.
Then the end-to-end ``drift_from_samples`` (polars frames in, the table out) on ``E2E_SERIES`` series.
Precision / recall are of status == "drift" over all 100,000 series with materiality off (the labels are
about shape, not about importance), and at the default materiality for the record.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
from scipy.spatial.distance import jensenshannon
from scipy.stats import wasserstein_distance

from jobs.drift.config import DriftConfig
from jobs.drift.interval import drift_from_samples, drift_kernel, drift_verdicts

RESULTS = Path(".bench/results")
SEED = 20261129
BASELINE_POINTS = 144
CURRENT_POINTS = 48
STEP = timedelta(minutes=30)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sizes() -> tuple[int, int, int]:
    return (
        int(os.environ.get("RADAR_BENCH_DRIFT_SERIES", 100_000)),
        int(os.environ.get("RADAR_BENCH_DRIFT_PEER", 2_000)),
        int(os.environ.get("RADAR_BENCH_DRIFT_E2E", 20_000)),
    )


def generate(series: int) -> dict[str, np.ndarray]:
    """Flat arrays (series id, current flag, latency ms, calls) and per-series labels."""
    rng = np.random.default_rng(SEED)
    per = BASELINE_POINTS + CURRENT_POINTS
    sid = np.repeat(np.arange(series, dtype=np.int64), per)
    current = np.tile(np.r_[np.zeros(BASELINE_POINTS, bool), np.ones(CURRENT_POINTS, bool)], series)
    median = np.exp(rng.uniform(np.log(0.01), np.log(10_000.0), series))
    sigma = rng.uniform(0.1, 0.6, series)
    latency = median[sid] * np.exp(sigma[sid] * rng.standard_normal(sid.shape[0]))
    calls = rng.integers(1, 1001, sid.shape[0]).astype(np.float64)
    kind = np.where(rng.random(series) < 0.5, 1, 0)  # 1: positive
    positive = kind == 1
    tail = positive & (rng.random(series) < 0.5)
    shift = positive & ~tail
    faster = ~positive & (rng.random(series) < 0.2)
    tail_share = rng.uniform(0.05, 0.20, series)
    tail_factor = rng.uniform(3.0, 20.0, series)
    shift_factor = rng.uniform(1.3, 3.0, series)
    faster_factor = rng.uniform(0.4, 0.8, series)
    hit = current & tail[sid] & (rng.random(sid.shape[0]) < tail_share[sid])
    latency = np.where(hit, latency * tail_factor[sid], latency)
    latency = np.where(current & shift[sid], latency * shift_factor[sid], latency)
    latency = np.where(current & faster[sid], latency * faster_factor[sid], latency)
    return {
        "sid": sid,
        "current": current,
        "latency": latency,
        "calls": calls,
        "positive": positive,
        "tail": tail,
        "shift": shift,
        "faster": faster,
    }


def peer_histogram(logv: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """np.histogram on the interior edges plus the underflow and overflow bins, normalized."""
    inner, _ = np.histogram(logv, bins=edges, weights=weights)
    under, over = weights[logv < edges[0]].sum(), weights[logv > edges[-1]].sum()
    full = np.concatenate([[under], inner, [over]])
    return full / full.sum()


def peer_metrics(data: dict[str, np.ndarray], series: int, config: DriftConfig) -> np.ndarray:
    """The named peer: one loop iteration per series, scipy for JS and W1, np.histogram for the bins."""
    out = np.empty((series, 3))
    per = BASELINE_POINTS + CURRENT_POINTS
    span = np.log1p(config.min_relative_range)
    for s in range(series):
        rows = slice(s * per, (s + 1) * per)
        logv = np.log(np.maximum(data["latency"][rows], config.latency_floor_ms))
        w, cur = data["calls"][rows], data["current"][rows]
        lo, hi = logv[~cur].min(), logv[~cur].max()
        if hi - lo < span:
            lo, hi = (lo + hi) / 2 - span / 2, (lo + hi) / 2 + span / 2
        edges = np.linspace(lo, hi, config.bins + 1)
        p, q = peer_histogram(logv[~cur], w[~cur], edges), peer_histogram(logv[cur], w[cur], edges)
        eps = config.psi_epsilon
        ps, qs = (p + eps) / (1 + p.size * eps), (q + eps) / (1 + q.size * eps)
        out[s, 0] = jensenshannon(p, q, base=2)
        out[s, 1] = float(((qs - ps) * np.log(qs / ps)).sum())
        out[s, 2] = wasserstein_distance(logv[~cur], logv[cur], w[~cur], w[cur])
    return out


def series_means(data: dict[str, np.ndarray], series: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sid, cur, calls = data["sid"], data["current"], data["calls"]
    exec_ms = data["latency"] * calls
    mean_b = np.bincount(sid[~cur], exec_ms[~cur], series) / np.bincount(sid[~cur], calls[~cur], series)
    calls_c = np.bincount(sid[cur], calls[cur], series)
    mean_c = np.bincount(sid[cur], exec_ms[cur], series) / calls_c
    rate_c = calls_c / (CURRENT_POINTS * STEP.total_seconds())
    return mean_b, mean_c, rate_c


def scores(status: np.ndarray, data: dict[str, np.ndarray]) -> dict[str, float]:
    flagged = status == "drift"
    positive = data["positive"]
    tp = int((flagged & positive).sum())
    fp = int((flagged & ~positive).sum())
    return {
        "precision": tp / max(tp + fp, 1),
        "recall": tp / int(positive.sum()),
        "false_positive_rate_unchanged": float(
            (flagged & ~positive & ~data["faster"]).sum() / max((~positive & ~data["faster"]).sum(), 1)
        ),
        "recall_tail": float((flagged & data["tail"]).sum() / max(data["tail"].sum(), 1)),
        "recall_shift": float((flagged & data["shift"]).sum() / max(data["shift"].sum(), 1)),
        "faster_called_improved": float(
            ((status == "improved") & data["faster"]).sum() / max(data["faster"].sum(), 1)
        ),
        "faster_called_drift": int((flagged & data["faster"]).sum()),
    }


def frames_for(data: dict[str, np.ndarray], series: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    per = BASELINE_POINTS + CURRENT_POINTS
    rows = series * per
    position = np.tile(np.arange(per), series)
    end = np.datetime64(NOW.replace(tzinfo=None), "us") - (per - 1 - position) * np.timedelta64(30, "m")
    samples = pl.DataFrame(
        {
            "instance": np.char.add("db", (data["sid"][:rows] % 50).astype(str)),
            "queryid": data["sid"][:rows],
            "interval_start": end - np.timedelta64(30, "m"),
            "interval_end": end,
            "calls": data["calls"][:rows].astype(np.int64),
            "total_exec_time": data["latency"][:rows] * data["calls"][:rows],
        }
    ).with_columns(pl.col("interval_start", "interval_end").dt.replace_time_zone("UTC"))
    ids = np.arange(series)
    prints = pl.DataFrame(
        {
            "instance": np.char.add("db", (ids % 50).astype(str)),
            "queryid": ids,
            "query": [f"select {i}" for i in ids],
            "fingerprint": [f"fp{i}" for i in ids],
        }
    )
    return samples, prints


def main() -> None:
    series, peer_series, e2e_series = sizes()
    config = replace(DriftConfig(), current_window=CURRENT_POINTS * STEP, baseline_days=3)
    started = time.perf_counter()
    data = generate(series)
    generate_s = time.perf_counter() - started
    points = data["sid"].shape[0]

    started = time.perf_counter()
    metrics = drift_kernel(data["sid"], data["current"], data["latency"], data["calls"], series, config)
    kernel_s = time.perf_counter() - started
    peer_data = {k: v[: peer_series * (BASELINE_POINTS + CURRENT_POINTS)] for k, v in data.items()}
    started = time.perf_counter()
    peer = peer_metrics(peer_data, peer_series, config)
    peer_s = time.perf_counter() - started
    ours = np.column_stack([metrics.js, metrics.psi, metrics.wasserstein])[:peer_series]
    max_diff = float(np.max(np.abs(ours - peer)))

    mean_b, mean_c, rate_c = series_means(data, series)
    shape_only = replace(config, min_added_load_ms_per_s=0.0, min_latency_increase_ms=0.0)
    status, _ = drift_verdicts(metrics, mean_b, mean_c, rate_c, shape_only)
    status_default, _ = drift_verdicts(metrics, mean_b, mean_c, rate_c, config)
    shape_scores = scores(status, data)
    default_scores = scores(status_default, data)

    samples, prints = frames_for(data, e2e_series)
    started = time.perf_counter()
    table = drift_from_samples(samples, prints, None, shape_only, NOW)
    e2e_s = time.perf_counter() - started
    e2e_agree = float(np.mean(table.sort("queryid")["status"].to_numpy() == status[:e2e_series]))

    kernel_rate = series / kernel_s
    peer_rate = peer_series / peer_s
    report = {
        "series": series,
        "points": points,
        "baseline_points": BASELINE_POINTS,
        "current_points": CURRENT_POINTS,
        "generate_s": generate_s,
        "kernel_s": kernel_s,
        "kernel_series_per_s": kernel_rate,
        "peer": "per-series loop: np.histogram, scipy jensenshannon, PSI formula, scipy wasserstein_distance",
        "peer_series_timed": peer_series,
        "peer_s": peer_s,
        "peer_series_per_s": peer_rate,
        "peer_scaled_s_for_all": series / peer_rate,
        "speedup": kernel_rate / peer_rate,
        "max_abs_metric_difference_vs_peer": max_diff,
        "end_to_end_series": e2e_series,
        "end_to_end_s": e2e_s,
        "end_to_end_series_per_s": e2e_series / e2e_s,
        "end_to_end_status_agreement_with_kernel": e2e_agree,
        "shape_only": shape_scores,
        "default_materiality": default_scores,
    }
    print(f"{series:,} series x ({BASELINE_POINTS} baseline + {CURRENT_POINTS} current) = {points:,} points")
    print(f"{'contender':<52}{'seconds':>10}{'series/s':>14}")
    lines = (
        ("drift_kernel (vectorized, blocks of ~262k points)", kernel_s, kernel_rate),
        (f"peer: scipy loop ({peer_series:,} series, scaled)", series / peer_rate, peer_rate),
        (f"drift_from_samples end to end ({e2e_series:,} series)", e2e_s, e2e_series / e2e_s),
    )
    for label, seconds, rate in lines:
        print(f"{label:<52}{seconds:>10.2f}{rate:>14,.0f}")
    print(f"speedup kernel vs peer: {kernel_rate / peer_rate:,.0f}x; max |metric difference| {max_diff:.1e}")
    for label, s in (("materiality off", shape_scores), ("default materiality", default_scores)):
        print(
            f"{label:<20} precision {s['precision']:.3f} recall {s['recall']:.3f} "
            f"(tails {s['recall_tail']:.3f}, shifts {s['recall_shift']:.3f}) "
            f"FPR unchanged {s['false_positive_rate_unchanged']:.4f}; faster: improved "
            f"{s['faster_called_improved']:.3f}, drift {s['faster_called_drift']}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
