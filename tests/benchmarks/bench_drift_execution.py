"""The production drift path (`radar drift score`, the Dagster drift asset): one instance's anchored pairs
scored as `score_execution_drift` does since issue 27 (flat arrays into the batched kernel), against the
long frame it built before (one row per sample, `score_drift`) and a plain numpy/scipy loop per pair
(bench_drift_score's peer).

``RADAR_BENCH_EXEC_PAIRS`` pairs (default 2,000: the issue's size), ``RADAR_BENCH_EXEC_SAMPLES`` samples per
side (default 300), lognormal (seed 20261206), the design profile (the calibrated one adds the same
permutation nulls to both paths). Checks that both production paths give the same rows.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl

from jobs.drift.config import DriftConfig, DriftScoreConfig
from jobs.drift.execution import _score_instance
from jobs.drift.scorer import score_drift
from tests.benchmarks.bench_drift_score import generate, keys_for, peer

RESULTS = Path(".bench/results")
SEED = 20261206


def main() -> None:
    pairs = int(os.environ.get("RADAR_BENCH_EXEC_PAIRS", 2_000))
    samples = int(os.environ.get("RADAR_BENCH_EXEC_SAMPLES", 300))
    config = DriftConfig(score=DriftScoreConfig(profile="design"))
    base_values, cand_values = generate(pairs, samples, np.random.default_rng(SEED))
    keys = keys_for(pairs, "exec")
    base = keys.with_columns(pl.Series("samples", base_values.tolist(), dtype=pl.List(pl.Float64)))
    candidate = keys.select(
        pl.col("query_hash").repeat_by(samples).explode(), pl.col("metric").repeat_by(samples).explode()
    ).with_columns(pl.Series("value", cand_values.reshape(-1)))

    started = time.perf_counter()
    ours = _score_instance(base, candidate, config)
    ours_s = time.perf_counter() - started

    started = time.perf_counter()
    long = pl.concat(
        [
            base.select("query_hash", "metric", pl.lit("baseline").alias("side"), "samples")
            .explode("samples")
            .rename({"samples": "value"}),
            candidate.select("query_hash", "metric", pl.lit("candidate").alias("side"), "value"),
        ]
    )
    before = score_drift(long, config.score)
    before_s = time.perf_counter() - started

    started = time.perf_counter()
    for i in range(pairs):
        peer(base_values[i], cand_values[i], config.score)
    peer_s = time.perf_counter() - started

    result = {
        "pairs": pairs,
        "samples_per_side": samples,
        "ours_s": round(ours_s, 3),
        "long_frame_s": round(before_s, 3),
        "numpy_scipy_loop_s": round(peer_s, 3),
        "ours_vs_loop": round(peer_s / ours_s, 2),
        "long_frame_vs_loop": round(peer_s / before_s, 2),
        "same_rows": ours.equals(before),
    }
    print(
        f"{pairs:,} pairs x {samples} samples per side: ours {ours_s:.3f} s "
        f"(x{result['ours_vs_loop']} the numpy/scipy loop's speed), the long frame before {before_s:.3f} s "
        f"(x{result['long_frame_vs_loop']}), loop {peer_s:.3f} s; same rows: {result['same_rows']}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_execution.json").write_text(json.dumps(result, indent=2) + "\n")
