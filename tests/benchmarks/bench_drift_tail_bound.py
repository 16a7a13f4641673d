"""An upper bound on any test's recall of a new 10% slow tail (x5) at bench_drift_calibration's pairs
(issue 27: is "recall >= 90% for a new tail on every shape" attainable at 1% false flags?).

The bound is the Neyman-Pearson oracle: it knows the baseline distribution F (shape and the pair's scale)
and the alternative G = 0.9 F + 0.1 F(x / 5) exactly, and flags a candidate sample when its log likelihood
ratio sum(log g(x) / f(x)) exceeds the threshold that F's own samples of that size exceed 1% of the time
(``ALPHA``, the issue's allowance for WARN + BLOCK; ``NULL_DRAWS`` simulated samples per size, seed
20261206). By the Neyman-Pearson lemma no test of F against G at that false-flag rate is more powerful on
i.i.d. samples from G; a two-sample test that knows F only from a baseline sample of 200-2,000 can only
do worse. The pairs are bench_drift_calibration's (its generators, seeds, shapes and pair-size mix): the
candidate of each "new tail" pair, divided by its pair's scale. Its generator sets exactly n // 10 of the
candidate's samples x5 (not an i.i.d. mixture), which the oracle does not use; its recall on i.i.d. G
samples of the same sizes is reported beside (``iid``) as the check that the two agree.

Reported per shape: the oracle's recall overall, by the smaller side's sample count (as the calibration
table is) and by the candidate's own (what the oracle's power depends on), its false-flag rate on the
calibration's A/A pairs (should be about ``ALPHA``), and the default profile's figures on the same pairs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import BLOCK, PASS, score_drift_arrays
from tests.benchmarks.bench_drift_calibration import CHANGES, SEED, SHAPES, SIZES, generate_with_scale

RESULTS = Path(".bench/results")
ALPHA = 0.01
TAIL_SHARE, TAIL_FACTOR = 0.10, 5.0
NULL_DRAWS = int(os.environ.get("RADAR_BENCH_TAIL_BOUND_NULL_DRAWS", 20_000))
TAIL_CHANGE = "new tail 10% x5"
AA_CHANGE = "unchanged (A/A)"


def _lognormal_logpdf(sigma: float, mu: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: stats.norm.logpdf(np.log(x), mu, sigma) - np.log(x)


def _pareto_logpdf(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(x >= 1.0, np.log(1.5) - 2.5 * np.log(np.maximum(x, 1.0)), -np.inf)


def _bimodal_logpdf(x: np.ndarray) -> np.ndarray:
    body = np.log(0.9) + _lognormal_logpdf(0.3)(x)
    slow = np.log(0.1) + _lognormal_logpdf(0.3, np.log(6.0))(x)
    return np.logaddexp(body, slow)


LOGPDF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "lognormal sigma 0.5": _lognormal_logpdf(0.5),
    "lognormal sigma 1.0": _lognormal_logpdf(1.0),
    "pareto alpha 1.5": _pareto_logpdf,
    "bimodal 10% x6": _bimodal_logpdf,
}
"""The log density of each of bench_drift_calibration's SHAPES at scale 1 (kept in step with them)."""


def log_lr(shape: str, x: np.ndarray) -> np.ndarray:
    """log g(x) / f(x) per sample, x at scale 1: g = 0.9 f + 0.1 f(x / 5) / 5."""
    logpdf = LOGPDF[shape]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = logpdf(x / TAIL_FACTOR) - np.log(TAIL_FACTOR) - logpdf(x)
    return np.logaddexp(np.log(1.0 - TAIL_SHARE), np.log(TAIL_SHARE) + ratio)


def statistic(shape: str, samples: np.ndarray) -> np.ndarray:
    """The oracle's statistic of each row of a 2-D array of samples (one candidate per row)."""
    return log_lr(shape, samples).sum(axis=1)


def thresholds(shape: str, rng: np.random.Generator) -> dict[int, float]:
    """Per candidate size, the statistic's 1 - ALPHA quantile under F (simulated, in blocks)."""
    out = {}
    for n in SIZES:
        block = max(1, 2_000_000 // n)
        values = []
        for first in range(0, NULL_DRAWS, block):
            rows = min(block, NULL_DRAWS - first)
            values.append(statistic(shape, SHAPES[shape](rng, rows * n).reshape(rows, n)))
        out[n] = float(np.quantile(np.concatenate(values), 1.0 - ALPHA, method="higher"))
    return out


def oracle_flags(
    shape: str, cand: np.ndarray, offsets: np.ndarray, scale: np.ndarray, cut: dict[int, float]
) -> np.ndarray:
    """The oracle's flag (statistic > its size's threshold) for every pair of the flat candidate array."""
    sizes = np.diff(offsets)
    per_sample = log_lr(shape, cand / np.repeat(scale, sizes))
    stat = np.add.reduceat(per_sample, offsets[:-1])
    return stat > np.array([cut[int(n)] for n in sizes])


def iid_recall(
    shape: str, cut: dict[int, float], rng: np.random.Generator, draws: int = 5_000
) -> dict[str, float]:
    """The oracle's recall on i.i.d. samples of G (each sample x5 with probability 0.1), per size."""
    out = {}
    for n in SIZES:
        x = SHAPES[shape](rng, draws * n).reshape(draws, n)
        x = np.where(rng.random(x.shape) < TAIL_SHARE, x * TAIL_FACTOR, x)
        out[str(n)] = round(float((statistic(shape, x) > cut[n]).mean()), 4)
    return out


def _share_by(values: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    return {str(int(g)): round(float(values[groups == g].mean()), 4) for g in SIZES if (groups == g).any()}


def main() -> None:
    pairs = int(os.environ.get("RADAR_BENCH_CALIBRATION_PAIRS", 1000))
    started = time.perf_counter()
    rows: list[dict[str, object]] = []
    change_index = {name: i for i, name in enumerate(CHANGES)}
    for s_index, shape in enumerate(SHAPES):
        cut = thresholds(shape, np.random.default_rng([SEED, s_index, 99]))
        row: dict[str, object] = {"shape": shape, "pairs": pairs, "alpha": ALPHA, "null_draws": NULL_DRAWS}
        for change, label in ((AA_CHANGE, "aa"), (TAIL_CHANGE, "tail")):
            rng = np.random.default_rng([SEED, s_index, change_index[change]])
            keys, base, base_off, cand, cand_off, scale = generate_with_scale(shape, change, pairs, rng)
            flags = oracle_flags(shape, cand, cand_off, scale, cut)
            n_b, n_c = np.diff(base_off), np.diff(cand_off)
            smaller = np.minimum(n_b, n_c)
            row[f"oracle_{label}_flagged"] = round(float(flags.mean()), 4)
            if label == "tail":
                row["oracle_tail_by_smaller_side"] = _share_by(flags, smaller)
                row["oracle_tail_by_candidate_size"] = _share_by(flags, n_c)
                out = score_drift_arrays(keys, base, base_off, cand, cand_off, config=DriftScoreConfig())
                position = {h: i for i, h in enumerate(keys["query_hash"].to_list())}
                order = np.array([position[h] for h in out["query_hash"].to_list()])  # output row -> pair
                ours = (out["flag"] != PASS).to_numpy()
                smaller_sorted = smaller[order]
                row["calibrated_tail_flagged"] = round(float(ours.mean()), 4)
                row["calibrated_tail_blocked"] = round(float((out["flag"] == BLOCK).mean()), 4)
                row["calibrated_tail_by_smaller_side"] = _share_by(ours, smaller_sorted)
                row["calibrated_tail_by_candidate_size"] = _share_by(ours, n_c[order])
                assert (out["n_candidate"].to_numpy() == n_c[order]).all()
        row["oracle_tail_iid_by_candidate_size"] = iid_recall(
            shape, cut, np.random.default_rng([SEED, s_index, 98])
        )
        row["oracle_meets_90"] = bool(row["oracle_tail_flagged"] >= 0.90)
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {"rows": rows, "seconds": round(time.perf_counter() - started, 1)}
    print(
        pl.DataFrame(
            {
                "shape": [r["shape"] for r in rows],
                "oracle A/A": [r["oracle_aa_flagged"] for r in rows],
                "oracle tail": [r["oracle_tail_flagged"] for r in rows],
                "calibrated tail": [r["calibrated_tail_flagged"] for r in rows],
            }
        )
    )
    print(f"{report['seconds']} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_tail_bound.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
