"""The drift scorer (jobs.drift.scorer) against a per-pair scipy loop, and its false-BLOCK rate and recall.

Throughput (seed 20260111): ``RADAR_BENCH_SCORE_PAIRS`` (query hash, metric) pairs (default 2,000; the
issue's full size is 300,000 = 100,000 hashes x 3 metrics), ``RADAR_BENCH_SCORE_SAMPLES`` samples per
side (default 1,000), lognormal with per-pair medians and sigmas, a third of the pairs shifted.

- ours: ``score_drift_arrays`` (design profile; flat arrays + offsets), in blocks of ``BLOCK`` pairs;
- peer: a Python loop per pair doing the same rule with numpy per pair and calling
  ``scipy.spatial.distance.jensenshannon`` (squared: scipy returns the distance) and
  ``scipy.stats.wasserstein_distance``, on the first ``RADAR_BENCH_SCORE_PEER`` pairs (default 2,000),
  scaled to pairs/s; its JS, PSI and W1 are compared with ours (max absolute difference).
- the calibrated profile on the same arrays, for its cost.

Labelled set (both profiles, ``RADAR_BENCH_SCORE_LABELLED`` pairs per kind, default 300): unchanged pairs
(lognormal, sigma 0.3-1.5) at 672 vs 384 and at 200 vs 200 samples give the false-BLOCK (and false-WARN)
rates; injected changes give the recall of BLOCK: a bimodal tail (10% of the candidate 5x slower), a
shift (the whole candidate 1.5x), a cardinality break (Poisson row counts, 10% of the candidate 10x).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl
from scipy.spatial.distance import jensenshannon
from scipy.stats import wasserstein_distance

from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import BLOCK, METRICS, PASS, query_hash, score_drift_arrays

RESULTS = Path(".bench/results")
SEED = 20260111
BLOCK_PAIRS = 5_000


def env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def keys_for(pairs: int, tag: str) -> pl.DataFrame:
    hashes = [query_hash(f"{tag}{i // 3}") for i in range(pairs)]
    return pl.DataFrame({"query_hash": hashes, "metric": [METRICS[i % 3] for i in range(pairs)]})


def generate(pairs: int, samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    median = np.exp(rng.uniform(-3, 5, pairs))[:, None]
    sigma = rng.uniform(0.2, 1.5, pairs)[:, None]
    shift = np.where(np.arange(pairs) % 3 == 0, 1.5, 1.0)[:, None]
    base = median * rng.lognormal(0.0, 1.0, (pairs, samples)) ** sigma
    cand = shift * median * rng.lognormal(0.0, 1.0, (pairs, samples)) ** sigma
    return base, cand


def peer(base: np.ndarray, cand: np.ndarray, config: DriftScoreConfig) -> tuple[float, float, float]:
    """The design's rule for one pair, numpy per pair, scipy for JS and W1."""
    c = np.minimum(cand, np.quantile(cand, config.winsor_quantile))
    lo, hi = min(base.min(), c.min()), max(base.max(), c.max())
    width = (hi - lo) / config.n_bins

    def hist(v: np.ndarray) -> np.ndarray:
        idx = (
            np.zeros(v.size, dtype=np.int64)
            if hi == lo
            else np.minimum(((v - lo) / width).astype(np.int64), config.n_bins - 1)
        )
        f = np.bincount(idx, minlength=config.n_bins) / v.size + config.smoothing
        return f / f.sum()

    p, q = hist(c), hist(base)
    js = float(jensenshannon(p, q, base=2) ** 2)
    psi = float(np.sum((p - q) * np.log(p / q)))
    return js, psi, float(wasserstein_distance(base, cand))


def run_arrays(
    keys: pl.DataFrame, base: np.ndarray, cand: np.ndarray, config: DriftScoreConfig
) -> pl.DataFrame:
    outs = []
    for start in range(0, keys.height, BLOCK_PAIRS):
        b = base[start : start + BLOCK_PAIRS]
        c = cand[start : start + BLOCK_PAIRS]
        b_off = np.concatenate([[0], np.cumsum([row.size for row in b])])
        c_off = np.concatenate([[0], np.cumsum([row.size for row in c])])
        outs.append(
            score_drift_arrays(
                keys.slice(start, BLOCK_PAIRS),
                np.concatenate(list(b)),
                b_off,
                np.concatenate(list(c)),
                c_off,
                config,
            )
        )
    return pl.concat(outs).sort("query_hash", "metric")


def throughput() -> dict[str, object]:
    pairs = env("RADAR_BENCH_SCORE_PAIRS", 2_000)
    samples = env("RADAR_BENCH_SCORE_SAMPLES", 1_000)
    peer_pairs = min(env("RADAR_BENCH_SCORE_PEER", 2_000), pairs)
    rng = np.random.default_rng(SEED)
    base, cand = generate(pairs, samples, rng)
    keys = keys_for(pairs, "t")
    design = DriftScoreConfig(profile="design")
    started = time.perf_counter()
    ours = run_arrays(keys, base, cand, design)
    ours_s = time.perf_counter() - started
    by_key = {(r["query_hash"], r["metric"]): r for r in ours.iter_rows(named=True)}
    started = time.perf_counter()
    peer_rows = [peer(base[i], cand[i], design) for i in range(peer_pairs)]
    peer_s = time.perf_counter() - started
    diff = {"js": 0.0, "psi": 0.0, "wasserstein": 0.0}
    for i, values in enumerate(peer_rows):
        row = by_key[(keys["query_hash"][i], keys["metric"][i])]
        for name, value in zip(diff, values, strict=True):
            diff[name] = max(diff[name], abs(row[name] - value))
    calibrated_pairs = min(pairs, env("RADAR_BENCH_SCORE_CALIBRATED", 2_000))
    started = time.perf_counter()
    calibrated = run_arrays(
        keys.head(calibrated_pairs), base[:calibrated_pairs], cand[:calibrated_pairs], DriftScoreConfig()
    )
    calibrated_s = time.perf_counter() - started
    return {
        "pairs": pairs,
        "samples_per_side": samples,
        "ours_s": round(ours_s, 3),
        "ours_pairs_per_s": round(pairs / ours_s),
        "peer_pairs": peer_pairs,
        "peer_s": round(peer_s, 3),
        "peer_pairs_per_s": round(peer_pairs / peer_s),
        "ratio": round((pairs / ours_s) / (peer_pairs / peer_s), 1),
        "max_abs_diff": diff,
        "calibrated_pairs": calibrated_pairs,
        "calibrated_s": round(calibrated_s, 3),
        "calibrated_null_pairs": int(calibrated["js_noise"].drop_nulls().len()),
    }


def labelled() -> dict[str, dict[str, float]]:
    n = env("RADAR_BENCH_SCORE_LABELLED", 300)
    rng = np.random.default_rng(SEED + 1)

    def lognormal(count: int, size: int) -> np.ndarray:
        sigma = rng.uniform(0.3, 1.5, count)[:, None]
        return np.exp(rng.uniform(-3, 5, count))[:, None] * rng.lognormal(0.0, 1.0, (count, size)) ** sigma

    kinds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    both = lognormal(n, 1056)
    kinds["unchanged 672/384"] = (both[:, :672], both[:, 672:])
    both = lognormal(n, 400)
    kinds["unchanged 200/200"] = (both[:, :200], both[:, 200:])
    both = lognormal(n, 1056)
    tail = both[:, 672:].copy()
    tail[:, : 384 // 10] *= 5.0
    kinds["bimodal tail 10% x5"] = (both[:, :672], tail)
    both = lognormal(n, 1056)
    kinds["shift x1.5"] = (both[:, :672], both[:, 672:] * 1.5)
    rows = rng.poisson(rng.uniform(5, 500, n)[:, None], (n, 1056)).astype(np.float64)
    broken = rows[:, 672:].copy()
    broken[:, : 384 // 10] *= 10.0
    kinds["cardinality break 10% x10"] = (rows[:, :672], broken)
    report: dict[str, dict[str, float]] = {}
    for kind, (b, c) in kinds.items():
        keys = keys_for(n, kind)
        keys = keys.with_columns(
            pl.lit("cardinality" if "cardinality" in kind else "latency").alias("metric")
        )
        keys = keys.with_columns(pl.Series("query_hash", [query_hash(f"{kind}{i}") for i in range(n)]))
        for profile in ("design", "calibrated"):
            out = run_arrays(keys, b, c, DriftScoreConfig(profile=profile))
            report[f"{kind} / {profile}"] = {
                "block_rate": round(float((out["flag"] == BLOCK).mean()), 4),
                "not_pass_rate": round(float((out["flag"] != PASS).mean()), 4),
            }
    return report


def main() -> None:
    started = time.perf_counter()
    report: dict[str, object] = {"throughput": throughput(), "labelled": labelled()}
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_score.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
