"""The drift scorer (jobs.drift.scorer) against a per-pair scipy loop, and its false-BLOCK rate and recall.

Throughput (seed 20260111): ``RADAR_BENCH_SCORE_PAIRS`` (query hash, metric) pairs (default the issue's
full size, 300,000 = 100,000 hashes x 3 metrics), ``RADAR_BENCH_SCORE_SAMPLES`` samples per side (default
1,000), lognormal with per-pair medians and sigmas, a third of the pairs shifted; generated and scored in
blocks of 5,000 pairs (only the scoring timed).

- ours: ``score_drift_arrays`` (design profile; flat arrays + offsets; its threads: one per CPU);
- peer: a Python loop per pair doing the same rule with numpy per pair and calling
  ``scipy.spatial.distance.jensenshannon`` (squared: scipy returns the distance) and
  ``scipy.stats.wasserstein_distance``, on the first ``RADAR_BENCH_SCORE_PEER`` pairs (default 2,000),
  scaled to pairs/s; its JS, PSI and W1 are compared with ours (max absolute difference; W1's relative).
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
from jobs.drift.scorer import BLOCK, METRICS, PASS, WARN, query_hash, score_drift_arrays

RESULTS = Path(".bench/results")
SEED = 20260111
BLOCK_PAIRS = 5_000


def env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def keys_for(pairs: int, tag: str, start: int = 0) -> pl.DataFrame:
    hashes = [query_hash(f"{tag}{i // 3}") for i in range(start, start + pairs)]
    return pl.DataFrame(
        {"query_hash": hashes, "metric": [METRICS[i % 3] for i in range(start, start + pairs)]}
    )


def generate(pairs: int, samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    median = np.exp(rng.uniform(-3, 5, pairs))[:, None]
    sigma = rng.uniform(0.2, 1.5, pairs)[:, None]
    shift = np.where(np.arange(pairs) % 3 == 0, 1.5, 1.0)[:, None]
    base = median * rng.lognormal(0.0, 1.0, (pairs, samples)) ** sigma
    cand = shift * median * rng.lognormal(0.0, 1.0, (pairs, samples)) ** sigma
    return base, cand


def peer(
    base: np.ndarray, cand: np.ndarray, config: DriftScoreConfig, *, w1: bool = True
) -> tuple[float, float, float]:
    """The design's rule for one pair, numpy per pair, scipy for JS and W1 (NaN unless ``w1``)."""
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
    return js, psi, float(wasserstein_distance(base, cand)) if w1 else float("nan")


def score_block(
    keys: pl.DataFrame, base: np.ndarray, cand: np.ndarray, config: DriftScoreConfig
) -> pl.DataFrame:
    """One block of equal-size pairs through the flat-array entry point (what a scoring job hands it)."""
    offsets = np.arange(keys.height + 1, dtype=np.int64) * base.shape[1]
    c_offsets = np.arange(keys.height + 1, dtype=np.int64) * cand.shape[1]
    return score_drift_arrays(keys, base.reshape(-1), offsets, cand.reshape(-1), c_offsets, config)


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
    """The issue's size by default: 100,000 hashes x 3 metrics x 1,000 samples per side, generated and
    scored block by block (5,000 pairs, seeded per block; only the scoring is timed), so memory stays flat.
    The peer scores the first block's first RADAR_BENCH_SCORE_PEER pairs; both rates are pairs/s."""
    pairs = env("RADAR_BENCH_SCORE_PAIRS", 300_000)
    samples = env("RADAR_BENCH_SCORE_SAMPLES", 1_000)
    peer_pairs = min(env("RADAR_BENCH_SCORE_PEER", 2_000), pairs, BLOCK_PAIRS)
    design = DriftScoreConfig(profile="design", compute_wasserstein=True)  # the peer computes W1 too
    ours_s = 0.0
    flags = {PASS: 0, WARN: 0, BLOCK: 0}
    diff = {"js": 0.0, "psi": 0.0, "wasserstein": 0.0}
    rel_w = 0.0
    peer_s = 0.0
    first: tuple[pl.DataFrame, np.ndarray, np.ndarray] | None = None
    for block, start in enumerate(range(0, pairs, BLOCK_PAIRS)):
        size = min(BLOCK_PAIRS, pairs - start)
        base, cand = generate(size, samples, np.random.default_rng([SEED, block]))
        keys = keys_for(size, "t", start)
        started = time.perf_counter()
        out = score_block(keys, base, cand, design)
        ours_s += time.perf_counter() - started
        for flag, count in out.group_by("flag").len().iter_rows():
            flags[flag] += count
        if first is None:
            first = (out, base, cand)
            by_key = {(r["query_hash"], r["metric"]): r for r in out.iter_rows(named=True)}
            started = time.perf_counter()
            peer_rows = [peer(base[i], cand[i], design) for i in range(peer_pairs)]
            peer_s = time.perf_counter() - started
            for i, values in enumerate(peer_rows):
                row = by_key[(keys["query_hash"][i], keys["metric"][i])]
                for name, value in zip(diff, values, strict=True):
                    diff[name] = max(diff[name], abs(row[name] - value))
                rel_w = max(rel_w, abs(row["wasserstein"] - values[2]) / max(abs(values[2]), 1e-300))
    assert first is not None
    calibrated_pairs = min(pairs, env("RADAR_BENCH_SCORE_CALIBRATED", 2_000))
    _, base, cand = first
    started = time.perf_counter()
    calibrated = score_block(
        keys_for(calibrated_pairs, "t"), base[:calibrated_pairs], cand[:calibrated_pairs], DriftScoreConfig()
    )
    calibrated_s = time.perf_counter() - started
    return {
        "pairs": pairs,
        "samples_per_side": samples,
        "threads": design.threads or os.cpu_count(),
        "ours_s": round(ours_s, 3),
        "ours_pairs_per_s": round(pairs / ours_s),
        "peer_pairs": peer_pairs,
        "peer_s": round(peer_s, 3),
        "peer_pairs_per_s": round(peer_pairs / peer_s),
        "ratio": round((pairs / ours_s) / (peer_pairs / peer_s), 1),
        "max_abs_diff": diff,
        "max_rel_diff_wasserstein": rel_w,
        "design_flags": flags,
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
