"""The design's drift scorer (jobs.drift.scorer): hand-computed values, bands, floors, winsorizing, the PSI
fallback, determinism, the calibrated profile's noise floor and the CI payload contract."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from scipy.stats import wasserstein_distance

import jobs.drift.scorer as scorer_module
from jobs.drift.config import DriftScoreConfig
from jobs.drift.contract import PayloadError, parse_payload, score_payload, validate_payload
from jobs.drift.scorer import (
    BLOCK,
    METRICS,
    PASS,
    WARN,
    _prepare,
    _Samples,
    exceedance_union_p,
    flag_pairs,
    log_offsets,
    log_ratios,
    query_hash,
    score_drift,
    score_drift_arrays,
    score_drift_segments,
    shard_of,
    slow_mode_p_value,
    slow_mode_scores,
    slow_tail_p_values,
    slow_tail_significant,
)

DESIGN = DriftScoreConfig(profile="design", compute_wasserstein=True)  # W1 is checked here; off by default
TINY = DriftScoreConfig(profile="design", min_samples=0)
H1 = query_hash("select 1")
H2 = query_hash("select 2")


def frame(pairs: dict[tuple[str, str], tuple[object, object]]) -> pl.DataFrame:
    """(query_hash, metric) -> (baseline values, candidate values) as the scorer's long frame."""
    parts = []
    for (qh, metric), sides in pairs.items():
        for side, values in zip(("baseline", "candidate"), sides, strict=True):
            v = np.asarray(values, dtype=np.float64)
            parts.append(
                pl.DataFrame(
                    {"query_hash": [qh] * v.size, "metric": [metric] * v.size, "side": side, "value": v}
                )
            )
    return pl.concat(parts).with_columns(pl.col("side").cast(pl.String))


def one(baseline: object, candidate: object, config: DriftScoreConfig = DESIGN) -> dict[str, object]:
    return score_drift(frame({(H1, "latency"): (baseline, candidate)}), config).row(0, named=True)


def lognormal(seed: int, n: int, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(0.0, 1.0, n) * scale


# --- hand-computed values ---


def test_js_and_psi_match_the_hand_computed_two_bin_case() -> None:
    # grid [0, 1], 2 bins: baseline [0,0,1,1] -> (1/2, 1/2), candidate [0,1,1,1] -> (1/4, 3/4)
    row = one(
        [0, 0, 1, 1],
        [0, 1, 1, 1],
        DriftScoreConfig(profile="design", min_samples=0, n_bins=2, compute_wasserstein=True),
    )
    p, q = (0.25, 0.75), (0.5, 0.5)
    m = (0.375, 0.625)
    js = 0.5 * sum(a * math.log2(a / c) for a, c in zip(p, m, strict=True))
    js += 0.5 * sum(b * math.log2(b / c) for b, c in zip(q, m, strict=True))
    assert row["js"] == pytest.approx(js, abs=1e-8)  # 0.048795...
    assert row["psi"] == pytest.approx(math.log(3) / 4, abs=1e-8)  # 0.25 ln 2 + 0.25 ln 1.5
    assert row["wasserstein"] == pytest.approx(0.25)
    assert (row["flag"], row["reason"]) == (BLOCK, "psi_block")  # PSI 0.2747 > 0.25


def test_disjoint_histograms_give_js_one_and_a_finite_psi() -> None:
    row = one([0.0] * 10, [1.0] * 10, TINY)
    assert row["js"] == pytest.approx(1.0, abs=1e-7)
    assert math.isfinite(row["psi"])
    eps = 1e-9 / (10 + 32e-9)  # the empty bin's probability: smoothing on its count, then normalisation
    top = (10 + 1e-9) / (10 + 32e-9)
    assert row["psi"] == pytest.approx(2 * (top - eps) * math.log(top / eps), rel=1e-9)
    assert row["psi_data_quality"] is True  # PSI ~41 > 10: falls back to JS, which blocks
    assert (row["flag"], row["reason"]) == (BLOCK, "js_block")


def test_identical_and_constant_samples_score_zero() -> None:
    same = np.linspace(1.0, 2.0, 300)
    row = one(same, same)
    assert (row["js"], row["psi"], row["wasserstein"], row["flag"]) == (0.0, 0.0, 0.0, PASS)
    constant = one([7.0] * 300, [7.0] * 300)  # hi == lo: one bin, no division by zero
    assert (constant["js"], constant["psi"], constant["flag"]) == (0.0, 0.0, PASS)


def test_the_design_rule_warns_on_identical_heavy_tailed_samples_the_calibrated_one_does_not() -> None:
    # winsorizing only the candidate moves its top 1% into a lower bin while the baseline's stay in bins
    # the candidate left empty: PSI 0.22 (design: smoothing on counts; 0.16 with the calibrated profile's
    # smoothing on frequencies) for the very same 300 samples on both sides
    same = lognormal(1, 300)
    design = one(same, same)
    assert (design["flag"], design["reason"], design["wasserstein"]) == (WARN, "psi_warn", 0.0)
    calibrated = one(same, same, DriftScoreConfig(null_resamples=200))
    assert calibrated["psi"] < design["psi"] and calibrated["flag"] == PASS
    assert calibrated["psi_noise"] > calibrated["psi"]


def test_bounds_hold_and_empty_bins_stay_finite_on_random_inputs() -> None:
    rng = np.random.default_rng(7)
    pairs = {}
    for i in range(40):
        b = rng.lognormal(rng.normal(), rng.uniform(0.1, 3), rng.integers(1, 60))
        c = rng.lognormal(rng.normal(), rng.uniform(0.1, 3), rng.integers(1, 60))
        pairs[(query_hash(f"q{i}"), "cost")] = (b, c)
    out = score_drift(frame(pairs), TINY)
    assert out.height == 40
    assert out["js"].is_between(0.0, 1.0).all()
    assert out["psi"].is_finite().all() and (out["psi"] >= 0).all()


# --- bands and floors ---


def test_each_band_is_strict_except_psi_warn() -> None:
    enough = np.full((8, 2), 500)
    js = np.array([0.1, 0.1001, 0.25, 0.2501, 0.0, 0.0, 0.0, 0.0])
    psi = np.array([0.0, 0.0, 0.0, 0.0, 0.0999, 0.1, 0.25, 0.2501])
    flag, reason, _ = flag_pairs(js, psi, enough, DESIGN)
    assert list(flag) == [PASS, WARN, WARN, BLOCK, PASS, WARN, WARN, BLOCK]
    assert list(reason) == [
        "within_bands",
        "js_warn",
        "js_warn",
        "js_block",
        "within_bands",
        "psi_warn",
        "psi_warn",
        "psi_block",
    ]


def test_fewer_than_200_samples_on_either_side_warns_never_passes() -> None:
    same = np.linspace(1.0, 2.0, 400)
    assert one(same[:199], same[:300])["reason"] == "insufficient_samples"
    assert one(same[:300], same[:199])["flag"] == WARN
    assert one(same[:200], same[:200])["flag"] == PASS  # 200 is enough
    blow_out = one(same[:150], same[:150] * 50)  # even an obvious blow-out: WARN, not BLOCK
    assert (blow_out["flag"], blow_out["reason"]) == (WARN, "insufficient_samples")
    flag, reason, _ = flag_pairs([0.0], [0.0], [[200, 199]], DESIGN)
    assert (flag[0], reason[0]) == (WARN, "insufficient_samples")


def test_a_runaway_outlier_does_not_hide_a_blow_out() -> None:
    base = lognormal(3, 600)
    cand = np.concatenate([lognormal(4, 599) * 4, [1e9]])  # 4x slower, plus one runaway sample
    row = one(base, cand)
    assert (row["flag"], row["reason"]) == (BLOCK, "js_block")
    # without winsorizing the grid stretches to 1e9, every sample lands in bin 0 and the blow-out hides
    hidden = one(base, cand, DriftScoreConfig(profile="design", winsor_quantile=1.0))
    assert hidden["flag"] == PASS
    assert row["wasserstein"] > 1e6  # W1 is on the raw samples (metadata), the outlier shows there


def test_psi_over_the_data_quality_limit_falls_back_to_js() -> None:
    base = np.linspace(0.0, 1.0, 1000, endpoint=False)
    cand = np.concatenate([np.linspace(0.0, 1.0, 950, endpoint=False), [2.0] * 50])  # 5% in empty bins
    plain = one(base, cand)
    assert plain["psi"] > 0.25 and plain["js"] < 0.1 and not plain["psi_data_quality"]
    assert (plain["flag"], plain["reason"]) == (BLOCK, "psi_block")
    config = DriftScoreConfig(profile="design", psi_data_quality=plain["psi"] - 0.01)
    fallback = one(base, cand, config)
    assert fallback["psi_data_quality"] is True
    assert (fallback["flag"], fallback["reason"]) == (PASS, "psi_data_quality_fallback")
    flag, reason, quality = flag_pairs([0.15, 0.3], [11.0, 11.0], [[500, 500], [500, 500]], DESIGN)
    assert list(flag) == [WARN, BLOCK] and list(reason) == ["js_warn", "js_block"] and quality.all()


def test_the_data_quality_limit_is_strict() -> None:
    flag, reason, quality = flag_pairs([0.0, 0.0], [10.0, 10.0001], [[500, 500], [500, 500]], DESIGN)
    assert list(flag) == [BLOCK, PASS] and list(reason) == ["psi_block", "psi_data_quality_fallback"]
    assert list(quality) == [False, True]


def test_a_band_counts_only_over_its_noise_threshold() -> None:
    enough = np.full((4, 2), 500)
    js, psi = [0.3, 0.3, 0.0, 0.0], [0.0, 0.0, 0.3, 0.3]
    js_noise, psi_noise = [0.35, 0.2, 0.0, 0.0], [1.0, 1.0, 0.4, 0.2]
    flag, reason, _ = flag_pairs(js, psi, enough, DESIGN, js_noise, psi_noise)
    assert list(flag) == [PASS, BLOCK, PASS, BLOCK]
    assert list(reason) == ["within_bands", "js_block", "within_bands", "psi_block"]
    warn, _, _ = flag_pairs([0.15, 0.15], [0.0, 0.0], enough[:2], DESIGN, [0.2, 0.12], [1.0, 1.0])
    assert list(warn) == [PASS, WARN]


def test_negative_and_non_finite_samples_are_rejected_naming_the_pair() -> None:
    with pytest.raises(ValueError, match=rf"query_hash={H1}, metric=latency.*negative"):
        one([1.0, -0.5], [1.0])
    with pytest.raises(ValueError, match="not finite"):
        one([1.0], [float("nan")])
    with pytest.raises(ValueError, match="metric 'rows' not in"):
        score_drift(frame({(H1, "rows"): ([1.0], [1.0])}))
    with pytest.raises(ValueError, match="not 64 lower-case hex"):
        score_drift(frame({(H1.upper(), "cost"): ([1.0], [1.0])}))
    with pytest.raises(ValueError, match="missing columns"):
        score_drift(pl.DataFrame({"query_hash": [H1]}))


# --- the design profile equals a plain per-pair implementation ---


def plain_rule(baseline: np.ndarray, candidate: np.ndarray, c: DriftScoreConfig) -> tuple[float, float, str]:
    """The design's rule for one pair, written out in plain Python."""
    cand = np.minimum(candidate, np.quantile(candidate, c.winsor_quantile))
    lo = min(baseline.min(), cand.min())
    hi = max(baseline.max(), cand.max())
    width = (hi - lo) / c.n_bins

    def histogram(values: np.ndarray) -> np.ndarray:
        counts = np.zeros(c.n_bins)
        for v in values:
            counts[0 if hi == lo else min(int((v - lo) / width), c.n_bins - 1)] += 1
        smoothed = counts + c.smoothing  # the design: smoothing on each bin's count
        return smoothed / smoothed.sum()

    p, q = histogram(cand), histogram(baseline)
    m = (p + q) / 2
    js = min(max(0.5 * sum(p * np.log2(p / m)) + 0.5 * sum(q * np.log2(q / m)), 0.0), 1.0)
    psi = sum((p - q) * np.log(p / q))
    if len(baseline) < c.min_samples or len(candidate) < c.min_samples:
        return 0.0, 0.0, WARN  # no score from too few samples
    if psi > c.psi_data_quality:
        return js, psi, BLOCK if js > c.js_block else WARN if js > c.js_warn else PASS
    if js > c.js_block or psi > c.psi_block:
        return js, psi, BLOCK
    if js > c.js_warn or psi >= c.psi_warn:
        return js, psi, WARN
    return js, psi, PASS


def test_design_profile_equals_the_plain_rule_on_random_inputs() -> None:
    rng = np.random.default_rng(11)
    pairs = {}
    for i in range(60):
        nb, nc = rng.integers(150, 500, 2)
        b = rng.lognormal(0, rng.uniform(0.2, 2), nb)
        kind = i % 5
        c = rng.lognormal(rng.choice([0.0, 0.1, 0.5, 1.5]), rng.uniform(0.2, 2), nc)
        if kind == 1:
            b, c = np.round(b), np.round(c)  # ties, integer cardinalities
        elif kind == 2:
            c = np.concatenate([c, [1e6]])  # a runaway outlier
        elif kind == 3:
            b, c = np.full(nb, 3.0), np.full(nc, 3.0)  # hi == lo
        pairs[(query_hash(f"r{i}"), METRICS[i % 3])] = (b, c)
    out = score_drift(frame(pairs), DESIGN)
    flags = set()
    for row in out.iter_rows(named=True):
        b, c = pairs[(row["query_hash"], row["metric"])]
        js, psi, flag = plain_rule(b, c, DESIGN)
        assert row["js"] == pytest.approx(js, abs=1e-12)
        assert row["psi"] == pytest.approx(psi, rel=1e-12, abs=1e-12)
        assert row["flag"] == flag
        assert row["wasserstein"] == pytest.approx(wasserstein_distance(b, c), rel=1e-9, abs=1e-12)
        flags.add(flag)
    assert flags == {PASS, WARN, BLOCK}


def test_a_finite_outlier_too_large_for_an_integer_bin_is_the_top_bin_not_a_crash() -> None:
    """(1e300 - lo) / width overflows an int64: cast first, it became a negative key and bincount raised
    (the design profile's payload then exited 1, a traceback CI reads as WARN). The rule's min() puts it
    in the top bin, as the plain-Python reference does."""
    rng = np.random.default_rng(3)
    b = rng.lognormal(0, 1, 300)
    c = np.concatenate([rng.lognormal(0, 1, 299), [1e300]])
    row = one(b, c)
    js, psi, flag = plain_rule(b, c, DESIGN)
    assert row["js"] == pytest.approx(js, abs=1e-12) and row["psi"] == pytest.approx(psi, rel=1e-12)
    assert row["flag"] == flag
    assert one(b, c, DriftScoreConfig(null_resamples=50))["flag"] in (PASS, WARN, BLOCK)


def test_w1_is_null_unless_asked() -> None:
    """W1 is metadata computed only when asked (issue 27): by default null, never 0."""
    assert DriftScoreConfig().compute_wasserstein is False
    same = np.linspace(1.0, 2.0, 300)
    for profile in ("design", "calibrated"):
        assert (
            one(same, same * 2, DriftScoreConfig(profile=profile, null_resamples=50))["wasserstein"] is None
        )


def test_segments_in_any_order_with_unused_samples_give_the_arrays_bytes() -> None:
    """score_drift_segments (the production path: per-pair lists flattened as they lie) gives the same
    bytes as score_drift_arrays on the same pairs, whatever the segments' order and with samples of no
    pair between them; a bad sample of a pair is named, one outside every pair is not read."""
    rng = np.random.default_rng(5)
    sizes = [(300, 210), (1, 3), (250, 250), (0, 40), (220, 0)]
    keys = pl.DataFrame(
        {
            "query_hash": [query_hash(f"s{i}") for i in range(5)],
            "metric": ["latency", "cost"] * 2 + ["latency"],
        }
    )
    base = [rng.lognormal(0, 1, nb) for nb, _ in sizes]
    cand = [rng.lognormal(0.3, 1, nc) for _, nc in sizes]
    config = DriftScoreConfig(null_resamples=60, compute_wasserstein=True)
    expected = score_drift_arrays(
        keys,
        np.concatenate(base),
        np.concatenate(([0], np.cumsum([v.size for v in base]))),
        np.concatenate(cand),
        np.concatenate(([0], np.cumsum([v.size for v in cand]))),
        config,
    )

    def laid_out(parts: list[np.ndarray], junk: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        flat, starts = [np.full(7, junk)], np.zeros(len(parts), dtype=np.int64)
        at = 7
        for i in (4, 2, 0, 3, 1):  # reversed-ish order, junk between segments
            starts[i] = at
            flat += [parts[i], np.full(3, junk)]
            at += parts[i].size + 3
        return np.concatenate(flat), starts, np.array([p.size for p in parts])

    b_val, b_start, b_size = laid_out(base, 5.0)
    c_val, c_start, c_size = laid_out(cand, 9.0)
    got = score_drift_segments(keys, b_val, b_start, b_size, c_val, c_start, c_size, config)
    assert _bytes(got) == _bytes(expected)
    b_val[:7] = -1.0  # outside every pair: not read
    assert _bytes(
        score_drift_segments(keys, b_val, b_start, b_size, c_val, c_start, c_size, config)
    ) == _bytes(expected)
    c_val[c_start[2] + 5] = np.nan
    with pytest.raises(ValueError, match=rf"candidate value nan of query_hash={keys['query_hash'][2]}"):
        score_drift_segments(keys, b_val, b_start, b_size, c_val, c_start, c_size, config)


def test_wasserstein_of_pairs_sharing_their_sample_counts_matches_scipy() -> None:
    """Pairs with one (n_baseline, n_candidate) are scored as a 2-D block (equal counts: the mean gap of
    the order statistics; unequal: one merge pattern); a few ragged ones go through the flat merge."""
    rng = np.random.default_rng(21)
    pairs = {}
    for i in range(40):
        nb, nc = ((230, 230), (230, 217), (3, 1))[i % 3] if i < 36 else rng.integers(1, 40, 2)
        b, c = np.round(rng.lognormal(0, 1, nb), 1), np.round(rng.lognormal(0.2, 1, nc), 1)  # ties
        pairs[(query_hash(f"w{i}"), METRICS[i % 3])] = (b, c)
    out = score_drift(frame(pairs), DESIGN)
    for row in out.iter_rows(named=True):
        b, c = pairs[(row["query_hash"], row["metric"])]
        assert row["wasserstein"] == pytest.approx(wasserstein_distance(b, c), rel=1e-12, abs=1e-12)
        alone = score_drift(frame({(row["query_hash"], row["metric"]): (b, c)}), DESIGN)  # the flat path
        assert alone["wasserstein"][0] == row["wasserstein"]  # the same bytes, whichever path


def test_w1_is_computed_only_when_asked_and_nothing_else_moves() -> None:
    pairs = {
        (query_hash(f"n{i}"), METRICS[i % 3]): (
            lognormal(i, 200 + 7 * i),
            lognormal(50 + i, 230 + 3 * i, 1.5),
        )
        for i in range(12)
    }
    for profile in ("design", "calibrated"):
        config = DriftScoreConfig(profile=profile, null_resamples=60)
        bare = score_drift(frame(pairs), config)  # the default: W1 not asked for, null (never 0)
        full = score_drift(frame(pairs), replace(config, compute_wasserstein=True))
        assert full["wasserstein"].null_count() == 0 and bare["wasserstein"].null_count() == bare.height
        assert _bytes(bare.drop("wasserstein")) == _bytes(full.drop("wasserstein"))


def test_chunks_and_threads_never_change_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.drift import scorer

    pairs = {
        (query_hash(f"t{i}"), m): (lognormal(i, 210), lognormal(i + 40, 205 + i, 1.0 + i / 10))
        for i in range(7)
        for m in METRICS
    }
    samples = frame(pairs)
    for profile in ("design", "calibrated"):
        one_chunk = score_drift(samples, DriftScoreConfig(profile=profile, null_resamples=60, threads=1))
        monkeypatch.setattr(scorer, "_CHUNK_PAIRS", 4)
        for threads in (1, 3):
            chunked = score_drift(
                samples, DriftScoreConfig(profile=profile, null_resamples=60, threads=threads)
            )
            assert _bytes(chunked) == _bytes(one_chunk)
        monkeypatch.setattr(scorer, "_CHUNK_PAIRS", 4096)


# --- determinism ---


def _bytes(out: pl.DataFrame) -> bytes:
    return out.write_csv().encode() + json.dumps(out.schema, default=str).encode()


@pytest.mark.parametrize("profile", ["design", "calibrated"])
def test_same_bytes_twice_and_in_any_row_order(profile: str) -> None:
    pairs = {
        (query_hash(f"d{i}"), m): (lognormal(i, 250), lognormal(i + 100, 220, 1.3))
        for i in range(4)
        for m in METRICS
    }
    samples = frame(pairs)
    config = DriftScoreConfig(profile=profile, null_resamples=100)
    first = score_drift(samples, config)
    assert _bytes(first) == _bytes(score_drift(samples, config))
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=5)
    assert _bytes(first) == _bytes(score_drift(shuffled, config))
    # a pair's calibrated result does not depend on the other pairs of the batch
    alone = score_drift(samples.filter(pl.col("query_hash") == query_hash("d2")), config)
    assert _bytes(alone) == _bytes(first.filter(pl.col("query_hash") == query_hash("d2")))


def test_the_arrays_entry_point_gives_the_frames_bytes() -> None:
    pairs = {
        (query_hash(f"a{i}"), m): (lognormal(i, 210 + i), lognormal(50 + i, 205, 1.5))
        for i in range(3)
        for m in METRICS
    }
    items = list(pairs.items())[::-1]  # keys in any order
    keys = pl.DataFrame({"query_hash": [k[0] for k, _ in items], "metric": [k[1] for k, _ in items]})
    offsets = [np.concatenate([[0], np.cumsum([len(v[side]) for _, v in items])]) for side in (0, 1)]
    values = [np.concatenate([v[side] for _, v in items]) for side in (0, 1)]
    for profile in ("design", "calibrated"):
        config = DriftScoreConfig(profile=profile, null_resamples=50)
        arrays = score_drift_arrays(keys, values[0], offsets[0], values[1], offsets[1], config)
        assert _bytes(arrays) == _bytes(score_drift(frame(pairs), config))
    bad = values[1].copy()
    bad[offsets[1][2]] = -1.0  # first sample of the third pair given
    with pytest.raises(ValueError, match=f"query_hash={items[2][0][0]}, metric={items[2][0][1]}"):
        score_drift_arrays(keys, values[0], offsets[0], bad, offsets[1])
    with pytest.raises(ValueError, match="candidate_offsets"):
        score_drift_arrays(keys, values[0], offsets[0], values[1], offsets[1][:-1])


# --- the calibrated profile ---


def test_calibrated_profile_stops_flagging_noise_but_still_blocks_a_shift() -> None:
    noise = {
        (query_hash(f"n{i}"), "latency"): (lognormal(i, 672), lognormal(1000 + i, 384)) for i in range(20)
    }
    samples = frame(noise)
    design = score_drift(samples, DESIGN)
    calibrated = score_drift(samples, DriftScoreConfig(null_resamples=200))
    assert (design["flag"] != PASS).sum() >= 10  # the exact rule flags sampling noise...
    assert (calibrated["flag"] == BLOCK).sum() <= 1  # ...the calibrated one mostly does not
    assert (calibrated["flag"] != PASS).sum() <= 1, calibrated.filter(pl.col("flag") != PASS)
    assert calibrated["js_noise"].drop_nulls().len() > 0
    shifted = one(lognormal(1, 672), lognormal(2, 384, 2.0), DriftScoreConfig(null_resamples=200))
    assert shifted["flag"] == BLOCK and shifted["js"] > shifted["js_noise"]
    assert shifted["profile"] == "calibrated"


def test_the_default_sees_a_moderate_shift_of_heavy_tailed_latency_the_linear_grid_does_not() -> None:
    # Pareto alpha 1.5 (infinite variance): on a linear grid the tail takes the bins and a x1.5 shift of
    # every execution hides in the first one; in log space it is a clear move of the whole distribution.
    rng = np.random.default_rng(11)
    base, cand = rng.pareto(1.5, 600) + 1.0, (rng.pareto(1.5, 500) + 1.0) * 1.5
    config = DriftScoreConfig(null_resamples=300)
    assert one(base, cand, replace(config, profile="calibrated_linear"))["flag"] == PASS
    seen = one(base, cand, config)
    assert seen["flag"] == BLOCK, seen
    # a x1.2 shift of lognormal sigma 0.5: material (over x1.1) and beyond its noise: WARN by the shift
    rng = np.random.default_rng(12)
    moved = one(rng.lognormal(0, 0.5, 500), rng.lognormal(0, 0.5, 500) * 1.2, config)
    assert (moved["flag"], moved["reason"]) == (WARN, "shift_warn"), moved


def test_a_new_slow_tail_is_flagged_by_the_exceedance_test_a_faster_tail_is_not_a_tail_flag() -> None:
    rng = np.random.default_rng(13)
    base = rng.lognormal(0, 0.5, 2000)
    cand = rng.lognormal(0, 0.5, 2000)
    cand[:200] *= 5.0  # 10% of the executions 5x slower
    config = DriftScoreConfig(null_resamples=300)
    seen = one(base, cand, config)
    assert seen["flag"] != PASS and seen["reason"].startswith(("tail_", "js_", "psi_")), seen
    faster = rng.lognormal(0, 0.5, 2000)
    faster[:200] /= 5.0  # a faster tail: no slow-tail flag (it may be a shape change, never "tail_")
    assert not one(base, faster, config)["reason"].startswith("tail_")


def test_the_slow_tail_p_value_is_the_exact_exceedance_law() -> None:
    rng = np.random.default_rng(14)
    n_b, n_c, k = 50, 40, 5  # the baseline's 0.9 quantile: its 5th largest sample
    exceed = []
    for _ in range(20_000):
        values = rng.random(n_b + n_c)
        exceed.append(int((values[n_b:] > np.sort(values[:n_b])[n_b - k]).sum()))
    counts = np.bincount(exceed, minlength=n_c + 1)
    for x in (8, 12):
        b = np.sort(rng.random(n_b))
        c = np.sort(np.r_[b[n_b - k] + 0.5 * rng.random(x), b[0] * rng.random(n_c - x)])
        samples = _Samples(
            pl.DataFrame({"query_hash": [H1], "metric": ["latency"]}),
            b,
            np.array([0, n_b]),
            c,
            np.array([0, n_c]),
        )
        p = slow_tail_p_values(samples, 0.9)[0]
        assert p == pytest.approx(counts[x:].sum() / counts.sum(), abs=0.005), x


def test_a_tail_only_the_p95_and_p99_counts_see_is_flagged_and_unchanged_pairs_are_not() -> None:
    # 3% of the executions 5x slower: most of them land above the baseline's p99, few more above its p90
    # (at the level 0.001 on both: the p90 count's p lies between 0.001 and the default WARN level 0.003;
    # the slow-mode test off: at its default level it sees this tail too, and the test is the counts')
    config = DriftScoreConfig(
        null_resamples=300, tail_p_value=0.001, tail_block_p_value=0.001, slow_mode_p_value=0.0
    )
    p90_only = replace(config, tail_quantiles=(0.9,))
    for seed in (40, 41, 42):
        rng = np.random.default_rng(seed)
        base, cand = rng.lognormal(0, 0.5, 1000), rng.lognormal(0, 0.5, 1000)
        cand[:30] *= 5.0
        samples = _prepare(frame({(H1, "latency"): (base, cand)}))
        assert slow_tail_p_values(samples, 0.9)[0] > 0.001 > 3 * slow_tail_p_values(samples, 0.99)[0]
        assert one(base, cand, p90_only)["flag"] == PASS  # the p90 count alone: blind
        seen = one(base, cand, config)
        assert seen["flag"] != PASS and seen["reason"].startswith("tail_"), (seed, seen)
    unchanged = {
        (query_hash(f"aa{i}"), "latency"): (lognormal(100 + i, n_b), lognormal(200 + i, n_c))
        for i, (n_b, n_c) in enumerate([(200, 200), (500, 2000), (2000, 500), (1000, 1000)] * 5)
    }
    samples = _prepare(frame(unchanged))
    assert not slow_tail_significant(samples, (0.9, 0.95, 0.99), 0.001, np.ones(20, dtype=bool)).any()
    out = score_drift(frame(unchanged), config)
    assert not out["reason"].str.starts_with("tail_").any(), out.filter(pl.col("flag") != PASS)


def test_a_tail_significant_at_the_warn_level_only_warns_and_blocks_only_at_the_block_level() -> None:
    # A 10% slow mode (x6) grown to 16%, 400 samples a side: its p90/p95 ratio is far over x2, its tail
    # p between the BLOCK level (0.001) and the WARN level (0.003). Bimodal A/A pairs BLOCKed 0.60% at one
    # level of 0.003 (held out, 3,000 pairs): the p90 sits on the boundary between the modes.
    rng = np.random.default_rng(63)

    def bimodal(n: int, share: float) -> np.ndarray:
        values = rng.lognormal(0, 0.3, n)
        return np.where(rng.random(n) < share, values * 6, values)

    base, cand = bimodal(400, 0.10), bimodal(400, 0.16)
    default = DriftScoreConfig(null_resamples=300)
    assert (default.tail_p_value, default.tail_block_p_value) == (0.003, 0.001)
    assert one(base, cand, default)["reason"] == "tail_warn"
    assert one(base, cand, replace(default, tail_block_p_value=0.003))["reason"] == "tail_block"
    # (the slow-mode test off: it would see this pair at its own level)
    assert one(base, cand, replace(default, tail_p_value=0.001, slow_mode_p_value=0.0))["flag"] == PASS
    with pytest.raises(ValueError, match="tail_block_p_value <= tail_p_value"):
        DriftScoreConfig(tail_p_value=0.001, tail_block_p_value=0.003)


def _bimodal_with_new_tail(seed: int, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """A cache-miss shape (90% lognormal sigma 0.3, 10% of it 6x slower) on both sides; then 10% of the
    candidate 5x slower: the body's new slow mode lands between the body and the old slow mode."""
    rng = np.random.default_rng(seed)

    def bimodal() -> np.ndarray:
        values = rng.lognormal(0.0, 0.3, n)
        return np.where(rng.random(n) < 0.10, values * 6.0, values)

    base, cand = bimodal(), bimodal()
    cand[rng.choice(n, n // 10, replace=False)] *= 5.0
    return base, cand


def test_a_new_slow_mode_between_a_body_and_an_old_slow_mode_is_warned_by_the_slow_mode_test() -> None:
    # 200 samples a side (seed 3): the quantile counts, the shift and JS / PSI leave it a PASS; the
    # slow-mode test (a share of executions k times slower, scored on the pooled density) warns.
    base, cand = _bimodal_with_new_tail(3)
    default = DriftScoreConfig(null_resamples=300)
    assert default.slow_mode_p_value == 0.0025
    assert one(base, cand, default)["reason"] == "slow_mode_warn"
    assert one(base, cand, default)["flag"] == WARN
    assert one(base, cand, replace(default, slow_mode_p_value=0.0))["flag"] == PASS
    # a relabelling count too small to reach the level can never warn (its smallest p: 1 / 301)
    assert one(base, cand, replace(default, slow_mode_permutations=300))["flag"] == PASS
    with pytest.raises(ValueError, match="slow_mode_factors > 1"):
        DriftScoreConfig(slow_mode_factors=(1.0, 2.0))


def test_the_slow_mode_p_value_is_a_permutation_p_value_whatever_the_shape() -> None:
    # Unchanged pairs of three shapes: the p (screen off) is (1 + exceedances) / (1 + relabellings), and
    # it is uniform under no change: its share at or below 0.1 stays near 0.1 (exactness of relabelling
    # the pooled samples, which the scores do not tell apart).
    config = DriftScoreConfig(slow_mode_permutations=99, slow_mode_screen_z=-np.inf)
    rng = np.random.default_rng(11)
    draws = {
        "lognormal": lambda n: rng.lognormal(0.0, 1.0, n),
        "pareto": lambda n: rng.pareto(1.5, n) + 1.0,
        "bimodal": lambda n: np.where(rng.random(n) < 0.1, 6.0, 1.0) * rng.lognormal(0.0, 0.3, n),
    }
    for name, draw in draws.items():
        p = np.array(
            [
                slow_mode_p_value(np.log(draw(200)), np.log(draw(150)), config, np.random.default_rng(i))
                for i in range(300)
            ]
        )
        assert np.allclose(p * 100, np.round(p * 100)) and p.min() >= 0.01, name
        assert 0.05 <= (p <= 0.1).mean() <= 0.15, (name, (p <= 0.1).mean())
    # stopping once the p is sure to be above a level never changes whether it is at most that level
    for i in range(60):
        base, cand = np.log(draws["lognormal"](300)), np.log(draws["lognormal"](300) * 1.15)
        full = slow_mode_p_value(base, cand, config, np.random.default_rng(i))
        for level in (0.02, 0.05, 0.2):
            early = slow_mode_p_value(base, cand, config, np.random.default_rng(i), stop_above=level)
            assert (full <= level) == (early <= level) and (early == full or early > level), (i, level)
    # the scores are the pooled sample's: relabelling the values permutes them, nothing else
    pooled = np.log(draws["pareto"](300))
    order = np.random.default_rng(5).permutation(300)
    scores = slow_mode_scores(pooled, config.slow_mode_shares, config.slow_mode_factors)
    assert scores is not None and scores.shape == (300, 12)
    assert np.allclose(
        slow_mode_scores(pooled[order], config.slow_mode_shares, config.slow_mode_factors), scores[order]
    )
    assert slow_mode_scores(np.zeros(300), config.slow_mode_shares, config.slow_mode_factors) is None


def test_the_slow_mode_test_is_the_same_bytes_in_any_batch_and_row_order() -> None:
    pairs = {(query_hash(f"slow{i}"), "latency"): _bimodal_with_new_tail(i) for i in range(24)}
    config = DriftScoreConfig(null_resamples=300)
    whole = score_drift(frame(pairs), config)
    assert (whole["reason"] == "slow_mode_warn").any()
    shuffled = frame(pairs).sample(fraction=1.0, shuffle=True, seed=4)
    assert score_drift(shuffled, config).equals(whole)
    alone = [score_drift(frame({key: value}), config) for key, value in pairs.items()]
    assert pl.concat(alone).sort("query_hash", "metric").equals(whole)


def _min_p_law(n_b: int, n_c: int, quantiles: tuple[float, ...], draws: int, seed: int) -> np.ndarray:
    """The smallest exceedance p of ``draws`` unchanged pairs (uniform samples), by simulation."""
    rng = np.random.default_rng(seed)
    keys = pl.DataFrame({"query_hash": [H1], "metric": ["latency"]})
    smallest = np.empty(draws)
    for i in range(draws):
        values = rng.random(n_b + n_c)
        s = _Samples(keys, np.sort(values[:n_b]), np.array([0, n_b]), values[n_b:], np.array([0, n_c]))
        smallest[i] = min(slow_tail_p_values(s, q)[0] for q in quantiles)
    return smallest


def test_the_combined_tail_test_has_its_exact_level_not_the_smallest_p() -> None:
    # the law of the smallest of the p90 / p95 / p99 exceedance p under no change: P(min p <= t) is the
    # lattice sum with each count's critical value at t, more than t (three chances), less than 3t
    n_b, n_c, quantiles = 60, 50, (0.9, 0.95, 0.99)
    ks = [max(1, math.floor((1 - q) * n_b + 1e-9)) for q in quantiles]  # 6, 3, 1
    smallest = _min_p_law(n_b, n_c, quantiles, 6000, 15)
    grid = np.arange(n_c + 1)
    for t in (0.2, 0.05, 0.02):
        critical = []
        for k in ks:
            p = np.array([scorer_module._exceedance_p(np.array(k), np.array(x), n_b, n_c) for x in grid])
            critical.append(int(np.flatnonzero(p <= t)[0]))
        level = exceedance_union_p(n_b, n_c, ks, critical)
        assert t < level < 3 * t
        assert (smallest <= t).mean() == pytest.approx(level, abs=4 * math.sqrt(level / 6000)), t
    # one count alone: the lattice sum is its hypergeometric p
    alone = exceedance_union_p(200, 200, [20], [35])
    assert alone == pytest.approx(float(scorer_module._exceedance_p(np.array(20), np.array(35), 200, 200)))


def test_the_tail_decision_is_the_exact_level_also_between_the_smallest_p_and_bonferroni(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pairs whose smallest p lies in [level / 3, level): the decision needs the lattice sum
    rng = np.random.default_rng(16)
    seen = []
    keys = pl.DataFrame({"query_hash": [H1], "metric": ["latency"]})
    quantiles, level, checked = (0.9, 0.95, 0.99), 0.001, 0
    for _ in range(400):
        base, cand = np.sort(rng.lognormal(0, 0.5, 300)), rng.lognormal(0, 0.5, 300)
        cand[: int(rng.integers(5, 25))] *= 5.0
        s = _Samples(keys, base, np.array([0, 300]), cand, np.array([0, 300]))
        p = [slow_tail_p_values(s, q)[0] for q in quantiles]
        if not level / 3 <= min(p) < level:
            continue
        checked += 1
        ks = [max(1, math.floor((1 - q) * 300 + 1e-9)) for q in quantiles]
        critical = []
        for k in ks:
            by_x = scorer_module._exceedance_p(np.full(301, k), np.arange(301), 300, 300)
            critical.append(int(np.flatnonzero(by_x <= min(p))[0]))
        exact = exceedance_union_p(300, 300, ks, critical)
        assert slow_tail_significant(s, quantiles, level, np.array([True]))[0] == (exact < level)
        seen.append((s, exact < level))
    assert checked >= 5 and any(found for _, found in seen) and not all(found for _, found in seen)
    # over the pooled-size bound the lattice sum is skipped: Bonferroni's answer (none of these)
    monkeypatch.setattr(scorer_module, "_LATTICE_MAX_POOLED", 599)
    assert not any(slow_tail_significant(s, quantiles, level, np.array([True]))[0] for s, _ in seen)


def test_log_offsets_are_a_share_of_the_baseline_median_and_finite_for_zeros() -> None:
    pairs = {
        (H1, "cardinality"): ([0.0] * 150 + [4.0] * 50, [0.0] * 200),  # median 0: the positive mean
        (H2, "cardinality"): ([0.0] * 200, [0.0] * 200),  # nothing positive: 1
        (query_hash("x"), "latency"): ([2.0] * 201, [3.0] * 200),
    }
    samples = _prepare(frame(pairs))
    offsets = dict(zip(samples.keys["query_hash"], log_offsets(samples, 0.01).tolist(), strict=True))
    assert offsets == pytest.approx({H1: 0.04, H2: 1.0, query_hash("x"): 0.02})
    out = score_drift(frame(pairs), DriftScoreConfig(null_resamples=50))
    lows = dict(zip(out["query_hash"], out["support_lo"], strict=True))
    assert out["js"].is_finite().all() and lows == {H1: 0.0, H2: 0.0, query_hash("x"): 2.0}


def test_config_rejects_an_unknown_profile_and_empty_or_bad_tail_quantiles() -> None:
    with pytest.raises(ValueError, match="profile"):
        DriftScoreConfig(profile="strict")
    for quantiles in ((), (0.9, 1.0)):
        with pytest.raises(ValueError, match="tail_quantiles"):
            DriftScoreConfig(tail_quantiles=quantiles)


# --- identity and shard key ---


def test_query_hash_and_shard_key() -> None:
    assert query_hash("select $1") == hashlib.sha256(b"select $1").hexdigest()
    assert shard_of(H1, 64) == int(H1[-8:], 16) % 64
    out = score_drift(frame({(H1, "cost"): ([1.0] * 3, [1.0] * 3), (H2, "cost"): ([1.0] * 3, [1.0] * 3)}))
    assert out["shard"].to_list() == [shard_of(h, 64) for h in out["query_hash"]]


# --- the CI payload contract ---

GOOD = {
    "query_hash": H1,
    "metric": "latency",
    "baseline_version": "v1.2.3",
    "candidate_samples": [0.5, 1, 2.25],
    "captured_at": "2026-12-01T18:00:00Z",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("query_hash", H1.upper()),
        ("query_hash", H1[:63]),
        ("query_hash", 12),
        ("metric", "rows"),
        ("baseline_version", ""),
        ("baseline_version", 3),
        ("candidate_samples", []),
        ("candidate_samples", "1,2"),
        ("candidate_samples/1", ["1.5"]),
        ("candidate_samples/1", [True]),
        ("candidate_samples/1", [-0.1]),
        ("candidate_samples/1", [None]),
        ("candidate_samples/1", [float("nan")]),
        ("captured_at", "2026-12-01 18:00"),
        ("captured_at", "2026-13-01T18:00:00Z"),
        ("captured_at", 1733076000),
    ],
)
def test_each_contract_violation_is_rejected_naming_the_field(field: str, value: object) -> None:
    payload = dict(GOOD)
    key = field.split("/")[0]
    payload[key] = [1.0, *value] if field.endswith("/1") else value
    with pytest.raises(PayloadError, match=f"drift payload: {field}"):
        validate_payload(payload)


@pytest.mark.parametrize("missing", ["query_hash", "metric", "baseline_version", "candidate_samples"])
def test_a_missing_required_field_is_named(missing: str) -> None:
    payload = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(PayloadError, match=f"drift payload: {missing}: "):
        validate_payload(payload)


def test_additional_properties_are_rejected_and_a_good_payload_passes() -> None:
    with pytest.raises(PayloadError, match="drift payload: extra: "):
        validate_payload({**GOOD, "extra": 1})
    assert validate_payload(GOOD) == GOOD
    without_time = {k: v for k, v in GOOD.items() if k != "captured_at"}
    assert validate_payload(without_time) == without_time
    with pytest.raises(PayloadError, match="NaN"):
        parse_payload(json.dumps(GOOD).replace("2.25", "NaN"))
    with pytest.raises(PayloadError, match="not JSON"):
        parse_payload("{")


def test_score_payload_scores_a_validated_candidate() -> None:
    payload = {**GOOD, "candidate_samples": list(lognormal(8, 300, 3.0))}
    row = score_payload(payload, lognormal(9, 300), DESIGN)
    assert (row["query_hash"], row["metric"], row["flag"]) == (H1, "latency", BLOCK)
    with pytest.raises(PayloadError, match="metric"):
        score_payload({**GOOD, "metric": "Latency"}, [1.0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # numbers no finite double holds: an OverflowError traceback (exit 1, read by CI as WARN) before
        ('"candidate_samples": [1.0, 1' + "0" * 400 + "]", r"candidate_samples/1: 1000.*not a finite double"),
        ('"candidate_samples": [1.0, 1e400]', r"candidate_samples/1: 1e400 \(not a finite double\)"),
        ('"candidate_samples": [1.0, -1e400]', r"candidate_samples/1: -1e400"),
        # a key given twice took the last value without a word
        ('"candidate_samples": [1.0], "metric": "cost"', r"drift payload: metric: the key is given twice"),
    ],
)
def test_numbers_no_double_holds_and_duplicate_keys_are_rejected_naming_the_field(
    text: str, expected: str
) -> None:
    head = json.dumps({k: v for k, v in GOOD.items() if k != "candidate_samples"})[:-1]
    with pytest.raises(PayloadError, match=expected):
        parse_payload(f"{head}, {text}}}")


def test_a_payload_over_the_size_cap_or_nested_too_deeply_is_refused() -> None:
    text = json.dumps(GOOD)
    assert parse_payload(text, max_bytes=len(text)) == GOOD
    with pytest.raises(PayloadError, match=r"larger than 10 bytes \(\[drift\] max_payload_bytes\)"):
        parse_payload(text, max_bytes=10)
    with pytest.raises(PayloadError, match="nested too deeply"):
        parse_payload("[" * 100_000 + "]" * 100_000)


def test_samples_checked_in_bulk_name_the_first_bad_one_as_the_contract_does() -> None:
    many = [1.0] * 10_000
    for index, bad, words in (
        (7_000, "1.5", "is not of type 'number'"),
        (9_999, -0.5, "less than the minimum"),
    ):
        samples = [*many]
        samples[index] = bad
        with pytest.raises(PayloadError, match=f"candidate_samples/{index}: .*{words}"):
            validate_payload({**GOOD, "candidate_samples": samples})
    assert validate_payload({**GOOD, "candidate_samples": many})["candidate_samples"] is many


def test_the_design_profile_is_the_designs_rule_on_the_issues_minimal_case() -> None:
    """Smoothing on counts, not on frequencies (issue 27): five candidate samples in a bin the baseline
    never had give PSI 0.279 and BLOCK, as the design computes (frequency smoothing gave 0.204, WARN)."""
    row = one([0.0] * 200 + [1.0] * 200, [0.0] * 197 + [0.5] * 5 + [1.0] * 198)
    total = 400 + 32e-9
    p = {0: 197, 16: 5, 31: 198}  # candidate counts per bin (0.5 falls in bin 16 of 32 over [0, 1])
    q = {0: 200, 31: 200}
    psi = sum(
        ((p.get(b, 0) + 1e-9) - (q.get(b, 0) + 1e-9))
        / total
        * math.log((p.get(b, 0) + 1e-9) / (q.get(b, 0) + 1e-9))
        for b in range(32)
    )
    assert row["psi"] == pytest.approx(psi, rel=1e-9)
    assert round(row["psi"], 3) == 0.279 and row["flag"] == BLOCK
    assert (row["bins"], row["support_lo"], row["support_hi"]) == (32, 0.0, 1.0)
    thin = one([0.0] * 10, [1.0] * 10)  # the design reports no score from too few samples
    assert (thin["js"], thin["psi"], thin["flag"], thin["reason"]) == (0.0, 0.0, WARN, "insufficient_samples")


def test_w1_in_blocks_gives_the_same_bytes_and_scipys_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # a side's breakpoints are done in blocks (bounded memory for a payload of millions of samples): blocks
    # that cut through pairs must give the very same W1 as one block, and scipy's value
    rng = np.random.default_rng(27)
    sizes = [(1, 3), (7, 5), (300, 210), (1, 1), (40, 160), (999, 2)]
    pairs = {
        (query_hash(f"w{i}"), "latency"): (
            rng.lognormal(0, 1, nb).round(1),
            rng.lognormal(0.2, 1, nc).round(1),
        )
        for i, (nb, nc) in enumerate(sizes)
    }
    whole = score_drift(frame(pairs), DESIGN)
    monkeypatch.setattr(scorer_module, "_W1_BLOCK", 5)
    blocked = score_drift(frame(pairs), DESIGN)
    assert _bytes(blocked) == _bytes(whole)
    for row in blocked.iter_rows(named=True):
        b, c = pairs[(row["query_hash"], row["metric"])]
        assert row["wasserstein"] == pytest.approx(wasserstein_distance(b, c), rel=1e-12)


def test_the_tail_size_reads_a_quantile_only_where_both_sides_have_ten_samples_above_it() -> None:
    """200 baseline samples put p99 on their two largest: a candidate whose p99 alone is ×3 has no tail
    size from it (p90 and p95 unchanged); with 1,000 a side the same p99 counts."""
    keys = pl.DataFrame({"query_hash": [H1], "metric": ["latency"]})

    def tail_of(n_b: int, n_c: int) -> float:
        base = np.linspace(1.0, 2.0, n_b)
        cand = np.linspace(1.0, 2.0, n_c)
        cand[cand > np.quantile(cand, 0.985)] *= 3.0  # only the top 1.5%: p99 ×3, p90 and p95 as before
        s = _Samples(keys, np.log(base), np.array([0, n_b]), np.log(np.sort(cand)), np.array([0, n_c]))
        return float(log_ratios(s)[1][0])

    assert abs(tail_of(200, 2000)) < 0.01
    assert tail_of(1000, 1000) > np.log(2.5)
