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

The oracle's threshold is F's: a test that holds its false-flag rate for *every* latency distribution
(the scorer must: it does not know a query's) cannot use one. Such a test compares the candidate with the
pair's own pooled samples, as each of the scorer's rules does (permutation nulls, exact exceedance counts):
it is a permutation test, and among permutation tests at ``ALPHA`` the most powerful against G is the one
whose statistic is the oracle's own, sum(log g / f) over the candidate, referred to its distribution over
the relabellings of the pair's pooled samples (Lehmann and Stein 1949; Lehmann and Romano, *Testing
Statistical Hypotheses*, on most powerful permutation tests). That test knows F, G and the pair's scale,
so no permutation test that knows less is more powerful: its recall (``permutation_*``) bounds what any
such scorer can reach. Its conditional threshold is estimated from ``PERMUTATIONS`` random relabellings per
pair; ``permutation_*_flagged`` rejects at an estimated p <= ``ALPHA`` (a valid test, slightly less powerful
than the exact one), ``permutation_*_upper`` at an estimated p <= ``ALPHA`` + 2 standard errors of that
estimate (``UPPER_MARGIN``), which errs towards more power than the exact test: the figure to read as the
bound.
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
PERMUTATIONS = int(os.environ.get("RADAR_BENCH_TAIL_BOUND_PERMUTATIONS", 4_000))
UPPER_MARGIN = 2.0 * float(np.sqrt(ALPHA * (1.0 - ALPHA) / PERMUTATIONS))
PERMUTATION_AA_PAIRS = 300
"""A/A pairs the permutation test is checked on (its level holds by construction; the check is cheap)."""
IID_PAIRS_PER_SIZE = int(os.environ.get("RADAR_BENCH_TAIL_BOUND_IID_PAIRS", 100))


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


def permutation_p_values(
    shape: str,
    base: np.ndarray,
    base_off: np.ndarray,
    cand: np.ndarray,
    cand_off: np.ndarray,
    scale: np.ndarray,
    rng: np.random.Generator,
    pairs: int,
) -> np.ndarray:
    """Per pair (the first ``pairs``), the share of ``PERMUTATIONS`` random relabellings of its pooled
    samples whose candidate has an oracle statistic at least the observed one: the most powerful permutation
    test's p-value against G, estimated."""
    out = np.empty(pairs)
    for i in range(pairs):
        b = base[base_off[i] : base_off[i + 1]] / scale[i]
        c = cand[cand_off[i] : cand_off[i + 1]] / scale[i]
        per_sample = log_lr(shape, np.concatenate([b, c]))
        observed = per_sample[b.size :].sum()
        exceed = 0
        block = max(1, 4_000_000 // per_sample.size)
        for first in range(0, PERMUTATIONS, block):
            rows = min(block, PERMUTATIONS - first)
            chosen = np.argpartition(rng.random((rows, per_sample.size)), c.size, axis=1)[:, : c.size]
            exceed += int((per_sample[chosen].sum(axis=1) >= observed).sum())
        out[i] = exceed / PERMUTATIONS
    return out


def _iid_pairs(
    shape: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``IID_PAIRS_PER_SIZE`` pairs of every size pair (the calibration's mix), scale 1, the candidate
    i.i.d. G (each sample x5 with probability 0.1): (baseline, offsets, candidate, offsets, scale)."""
    base, cand, n_b, n_c = [], [], [], []
    for size_b in SIZES:
        for size_c in SIZES:
            for _ in range(IID_PAIRS_PER_SIZE):
                base.append(SHAPES[shape](rng, size_b))
                x = SHAPES[shape](rng, size_c)
                cand.append(np.where(rng.random(size_c) < TAIL_SHARE, x * TAIL_FACTOR, x))
                n_b.append(size_b)
                n_c.append(size_c)
    offsets = [np.concatenate(([0], np.cumsum(n))).astype(np.int64) for n in (n_b, n_c)]
    return np.concatenate(base), offsets[0], np.concatenate(cand), offsets[1], np.ones(len(n_b))


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
        perm_rng = np.random.default_rng([SEED, s_index, 97])
        for change, label in ((AA_CHANGE, "aa"), (TAIL_CHANGE, "tail")):
            rng = np.random.default_rng([SEED, s_index, change_index[change]])
            _, base, base_off, cand, cand_off, scale = generate_with_scale(shape, change, pairs, rng)
            count = min(pairs, PERMUTATION_AA_PAIRS) if label == "aa" else pairs
            p = permutation_p_values(shape, base, base_off, cand, cand_off, scale, perm_rng, count)
            row[f"permutation_{label}_flagged"] = round(float((p <= ALPHA).mean()), 4)
            row[f"permutation_{label}_upper"] = round(float((p <= ALPHA + UPPER_MARGIN).mean()), 4)
            if label == "tail":
                smaller = np.minimum(np.diff(base_off), np.diff(cand_off))
                row["permutation_tail_upper_by_smaller_side"] = _share_by(p <= ALPHA + UPPER_MARGIN, smaller)
        base, base_off, cand, cand_off, scale = _iid_pairs(shape, np.random.default_rng([SEED, s_index, 96]))
        p = permutation_p_values(shape, base, base_off, cand, cand_off, scale, perm_rng, scale.size)
        smaller = np.minimum(np.diff(base_off), np.diff(cand_off))
        row["permutation_tail_iid_upper"] = round(float((p <= ALPHA + UPPER_MARGIN).mean()), 4)
        row["permutation_tail_iid_upper_by_smaller_side"] = _share_by(p <= ALPHA + UPPER_MARGIN, smaller)
        row["permutation_meets_90"] = bool(
            max(row["permutation_tail_upper"], row["permutation_tail_iid_upper"]) >= 0.90
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {"rows": rows, "seconds": round(time.perf_counter() - started, 1)}
    print(
        pl.DataFrame(
            {
                "shape": [r["shape"] for r in rows],
                "oracle A/A": [r["oracle_aa_flagged"] for r in rows],
                "oracle tail": [r["oracle_tail_flagged"] for r in rows],
                "permutation bound A/A": [r["permutation_aa_flagged"] for r in rows],
                "permutation bound tail": [r["permutation_tail_upper"] for r in rows],
                "permutation bound tail (i.i.d.)": [r["permutation_tail_iid_upper"] for r in rows],
                "calibrated tail": [r["calibrated_tail_flagged"] for r in rows],
            }
        )
    )
    print(f"{report['seconds']} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_tail_bound.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
