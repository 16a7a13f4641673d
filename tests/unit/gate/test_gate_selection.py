"""Multi-cycle selection and calibration against asymmetric servers (jobs/gate/selection.py): tiny inline
numbers, no database."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from jobs.config.loader import load_settings
from jobs.errors import ConfigError
from jobs.gate.config import GateConfig
from jobs.gate.selection import (
    BASELINE,
    CANDIDATE,
    Asymmetry,
    CycleResult,
    baseline_first,
    correct_cycle,
    correct_for_asymmetry,
    correct_ratio,
    cycle_order,
    estimate_asymmetry,
    probe_cycles,
    select_best,
    select_cycle,
    select_median,
)

CONFIG = GateConfig(calibration="off")
AB, BA = (BASELINE, CANDIDATE), (CANDIDATE, BASELINE)
Z95 = 1.959963984540054
T95_DF2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom


def cycles(*ratios: float, verdicts: str | None = None, spread: float = 0.0) -> list[CycleResult]:
    """Cycle i has ratio ratios[i], CI ratio·exp(∓spread), verdict verdicts[i] (P/W/B) if given."""
    names = {"P": "PASS", "W": "WARN", "B": "BLOCK"}
    return [
        CycleResult(
            i,
            r,
            (r * math.exp(-spread), r * math.exp(spread)),
            names[verdicts[i]] if verdicts else None,
        )
        for i, r in enumerate(ratios)
    ]


def judge(ratio: float, ci: tuple[float, float]) -> str:
    """The gate's p50 rule shape: BLOCK when the CI low is at or over 1.25, WARN at 1.10 with low > 1.05."""
    if ci[0] >= 1.25:
        return "BLOCK"
    if ratio >= 1.10 and ci[0] > 1.05:
        return "WARN"
    return "PASS"


# ---------------------------------------------------------------------------------------------------------
# Cycle order
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (1, (AB,)),
        (2, (AB, BA)),
        (3, (AB, BA, BA)),
        (4, (AB, BA, BA, AB)),
        (5, (AB, BA, BA, AB, AB)),
        (8, (AB, BA, BA, AB, AB, BA, BA, AB)),
    ],
)
def test_abba_order_for_even_and_odd_cycle_counts(k: int, expected: tuple[tuple[str, str], ...]) -> None:
    assert cycle_order(k) == expected
    assert cycle_order(k, "abba") == cycle_order(k)  # deterministic, abba is the default


def slot_sums(order: tuple[tuple[str, str], ...], power: int) -> dict[str, int]:
    """Sum of slot**power per side; slots 2i and 2i+1 are cycle i's first and second measurement."""
    sums = {BASELINE: 0, CANDIDATE: 0}
    for i, pair in enumerate(order):
        sums[pair[0]] += (2 * i) ** power
        sums[pair[1]] += (2 * i + 1) ** power
    return sums


@pytest.mark.parametrize("k", range(1, 13))
def test_abba_cancels_first_side_and_linear_drift_every_two_cycles_quadratic_every_four(k: int) -> None:
    order = cycle_order(k)
    firsts = sum(pair[0] == BASELINE for pair in order)
    # even k: k/2 each; odd k: the last, unpaired cycle's first side once more (AB at k % 4 == 1, BA at 3)
    assert firsts == {0: k // 2, 1: k // 2 + 1, 2: k // 2, 3: k // 2}[k % 4]
    linear, quadratic = slot_sums(order, 1), slot_sums(order, 2)
    assert (linear[BASELINE] == linear[CANDIDATE]) == (k % 2 == 0)
    if k % 4 == 0:
        assert quadratic[BASELINE] == quadratic[CANDIDATE]


def test_alternate_cancels_linear_but_not_quadratic_drift() -> None:
    order = cycle_order(4, "alternate")
    assert slot_sums(order, 1)[BASELINE] == slot_sums(order, 1)[CANDIDATE]
    assert slot_sums(order, 2) == {BASELINE: 74, CANDIDATE: 66}
    assert slot_sums(cycle_order(4), 2) == {BASELINE: 70, CANDIDATE: 70}


def test_alternate_and_fixed_orders() -> None:
    assert cycle_order(4, "alternate") == (AB, BA, AB, BA)
    assert cycle_order(3, "alternate") == (AB, BA, AB)
    assert cycle_order(3, "baseline_first") == (AB, AB, AB)
    assert [baseline_first(i) for i in range(8)] == [True, False, False, True, True, False, False, True]


def test_bad_cycle_orders_are_refused() -> None:
    with pytest.raises(ValueError, match="cycles must be >= 1"):
        cycle_order(0)
    with pytest.raises(ValueError, match="cycle order must be abba"):
        cycle_order(2, "abab")
    with pytest.raises(ValueError, match="cycle must be >= 0"):
        baseline_first(-1)


# ---------------------------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratios", "chosen"),
    [
        ((1.30,), 0),  # K = 1: the only cycle
        ((1.30, 1.10), 1),  # K = 2: the lower middle (the smaller ratio)
        ((1.30, 1.10, 1.20), 2),  # K = 3: the median
        ((1.40, 1.10, 1.30, 1.20), 3),  # K = 4: the lower middle, 1.20 (not 1.30, not their mean)
        ((1.50, 1.10, 1.40, 1.20, 1.30), 4),  # K = 5
    ],
)
def test_median_selection_for_even_and_odd_k(ratios: tuple[float, ...], chosen: int) -> None:
    selected = select_median(cycles(*ratios))
    assert selected.rule == "median"
    assert selected.chosen.cycle == chosen
    assert selected.chosen.ratio == ratios[chosen]
    assert [c.cycle for c in selected.cycles] == list(range(len(ratios)))
    assert ("lower middle" in selected.note) == (len(ratios) % 2 == 0)


def test_median_ties_and_zero_variance_pick_the_earliest_cycle() -> None:
    assert select_median(cycles(1.2, 1.2, 1.2, 1.2)).chosen.cycle == 1  # position (4-1)//2 = 1 of 0,1,2,3
    assert select_median(cycles(1.2, 1.2, 1.2)).chosen.cycle == 1
    assert select_median(cycles(1.0, 1.0)).chosen.cycle == 0
    # ties across the middle: sorted (1.1, c1), (1.2, c0), (1.2, c2), (1.3, c3) -> position 1 is cycle 0
    assert select_median(cycles(1.2, 1.1, 1.2, 1.3)).chosen.cycle == 0


def test_selection_does_not_depend_on_the_input_order() -> None:
    data = cycles(1.4, 1.1, 1.3, 1.2, verdicts="BPBW")
    for rule in ("median", "best"):
        forward, backward = select_cycle(data, rule), select_cycle(list(reversed(data)), rule)
        assert forward == backward


@pytest.mark.parametrize(
    ("ratios", "verdicts", "chosen", "everywhere"),
    [
        ((1.30,), "P", 0, False),  # K = 1, clean
        ((1.30,), "B", 0, True),  # K = 1, regressed: shown, and regressed in every cycle
        ((1.30, 1.10), "PW", 0, False),  # K = 2: the lowest ratio regressed, the next clean one wins
        ((1.30, 1.10, 1.20), "PPP", 1, False),  # K = 3: the lowest ratio
        ((1.40, 1.10, 1.30, 1.20), "BBWB", 1, True),  # K = 4: all regressed -> lowest ratio
        ((1.40, 1.10, 1.30, 1.20), "BBWP", 3, False),
    ],
)
def test_best_selection(ratios: tuple[float, ...], verdicts: str, chosen: int, everywhere: bool) -> None:
    selected = select_best(cycles(*ratios, verdicts=verdicts))
    assert selected.rule == "best"
    assert selected.chosen.cycle == chosen
    assert selected.regressed_in_every_cycle is everywhere
    assert selected.regressed_cycles == sum(v != "P" for v in verdicts)


def test_best_ties_pick_the_earliest_cycle_and_unjudged_cycles_count_as_clean() -> None:
    assert select_best(cycles(1.2, 1.1, 1.1, verdicts="PPP")).chosen.cycle == 1
    assert select_best(cycles(1.2, 1.2, verdicts="BB")).chosen.cycle == 0
    assert select_best(cycles(1.2, 1.2, 1.2)).chosen.cycle == 0  # zero variance, no verdicts
    assert not select_best(cycles(1.3)).regressed_in_every_cycle


def test_bad_selections_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one cycle"):
        select_median([])
    with pytest.raises(ValueError, match="distinct"):
        select_best([CycleResult(0, 1.1, (1.1, 1.1)), CycleResult(0, 1.2, (1.2, 1.2))])
    with pytest.raises(ValueError, match="median or best"):
        select_cycle(cycles(1.1), "mean")
    with pytest.raises(ValueError, match="ratio must be positive"):
        CycleResult(0, 0.0, (0.0, 0.0))
    with pytest.raises(ValueError, match="CI low <= ratio <= CI high"):
        CycleResult(2, 1.2, (1.21, 1.3))


# ---------------------------------------------------------------------------------------------------------
# Calibration: the asymmetry
# ---------------------------------------------------------------------------------------------------------


def test_asymmetry_with_zero_variance_is_exact_and_reliable() -> None:
    asym = estimate_asymmetry(cycles(1.15, 1.15, 1.15), "aa", CONFIG)
    assert asym.ratio == pytest.approx(1.15, rel=1e-12)
    assert asym.ci == pytest.approx((1.15, 1.15), rel=1e-12)
    assert asym.log_half_width == pytest.approx(0.0, abs=1e-12)
    assert asym.reliable and asym.cycles == 3 and asym.method == "aa"


def test_asymmetry_is_the_geometric_mean_with_a_t_interval_over_the_cycles() -> None:
    # log ratios 0.1, 0.2, 0.3: mean 0.2, sample variance 0.01, variance of the mean 0.01/3, t(2) quantile.
    asym = estimate_asymmetry(cycles(math.exp(0.1), math.exp(0.2), math.exp(0.3)), "aa", CONFIG)
    half = T95_DF2 * math.sqrt(0.01 / 3)
    assert asym.ratio == pytest.approx(math.exp(0.2), rel=1e-12)
    assert asym.log_half_width == pytest.approx(half, rel=1e-9)
    assert asym.ci == pytest.approx((math.exp(0.2 - half), math.exp(0.2 + half)), rel=1e-9)
    assert not asym.reliable and "over the limit ±10.0%" in asym.note  # half-width ≈ ±25%


def test_asymmetry_uses_the_cycles_own_cis_when_they_say_more_than_the_spread() -> None:
    # Two identical ratios (no spread) whose CIs are ±z·0.02 on the log scale: se 0.02 each, the variance
    # of the mean is 0.02²/2, the half-width t(1)·0.02/sqrt(2).
    data = cycles(1.15, 1.15, spread=Z95 * 0.02)
    asym = estimate_asymmetry(data, "aa", CONFIG)
    t1 = 12.706204736174698
    assert asym.log_half_width == pytest.approx(t1 * 0.02 / math.sqrt(2), rel=1e-9)
    # One cycle with a CI: the normal quantile, se 0.01 -> half-width z·0.01, ±2%: reliable.
    one = estimate_asymmetry(cycles(1.15, spread=Z95 * 0.01), "aa", CONFIG)
    assert one.log_half_width == pytest.approx(Z95 * 0.01, rel=1e-9)
    assert one.reliable


def test_one_calibration_cycle_without_a_ci_is_unreliable() -> None:
    asym = estimate_asymmetry(cycles(1.15), "probe", CONFIG)
    assert not asym.reliable and "spread is unknown" in asym.note
    with pytest.raises(ValueError, match="no cycles"):
        estimate_asymmetry([], "aa", CONFIG)


def test_the_reliability_limit_is_the_config_field() -> None:
    data = cycles(1.14, 1.16, 1.15)  # log sd ≈ 0.0087, half-width ≈ ±2.2%
    assert estimate_asymmetry(data, "aa", CONFIG).reliable
    strict = GateConfig(calibration_max_half_width=0.02)
    assert not estimate_asymmetry(data, "aa", strict).reliable


def test_probe_cycles_pair_the_timings_per_cycle() -> None:
    probes = probe_cycles([2.0, 2.0, 4.0], [2.3, 2.2, 4.8])
    assert [c.ratio for c in probes] == pytest.approx([1.15, 1.1, 1.2])
    assert all(c.ci == (c.ratio, c.ratio) and c.verdict is None for c in probes)
    assert estimate_asymmetry(probes, "probe", CONFIG).ratio == pytest.approx((1.15 * 1.1 * 1.2) ** (1 / 3))
    with pytest.raises(ValueError, match="2 baseline timings but 1 candidate"):
        probe_cycles([1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="probe cycle 1: timings must be positive"):
        probe_cycles([1.0, 0.0], [1.0, 1.0])


# ---------------------------------------------------------------------------------------------------------
# Calibration: the corrected ratio
# ---------------------------------------------------------------------------------------------------------


def asymmetry(ratio: float, half: float, reliable: bool = True) -> Asymmetry:
    ci = (ratio * math.exp(-half), ratio * math.exp(half))
    return Asymmetry("aa", ratio, ci, half, 3, reliable, "test")


def test_correction_divides_and_adds_log_variances_per_side() -> None:
    raw_ci = (1.15 * math.exp(-0.03), 1.15 * math.exp(0.04))  # asymmetric, as a bootstrap CI
    out = correct_ratio(1.15, raw_ci, asymmetry(1.15, 0.04))
    assert out.applied and out.reason.startswith("applied: ×1.150 / asymmetry ×1.150 = ×1.000")
    assert out.ratio == pytest.approx(1.0)
    assert out.ci == pytest.approx((math.exp(-0.05), math.exp(math.hypot(0.04, 0.04))))
    assert (out.raw_ratio, out.raw_ci) == (1.15, raw_ci)
    exact = correct_ratio(1.15, raw_ci, asymmetry(1.15, 0.0))  # an exact asymmetry only rescales the CI
    assert exact.ci == pytest.approx((raw_ci[0] / 1.15, raw_ci[1] / 1.15))


def test_correction_off_or_unreliable_keeps_the_raw_ratio_and_says_why() -> None:
    raw_ci = (1.10, 1.20)
    off = correct_ratio(1.15, raw_ci, None)
    assert (off.ratio, off.ci, off.applied, off.reason, off.asymmetry) == (
        1.15,
        raw_ci,
        False,
        "calibration off",
        None,
    )
    wide = asymmetry(1.15, 0.2, reliable=False)
    kept = correct_ratio(1.15, raw_ci, wide)
    assert (kept.ratio, kept.ci, kept.applied) == (1.15, raw_ci, False)
    assert kept.reason.startswith("not applied: unreliable") and kept.asymmetry is wide


def test_correct_cycle_judges_again_or_drops_the_stale_verdict() -> None:
    raw = CycleResult(2, 1.16, (1.12, 1.20), "WARN")
    again = correct_cycle(raw, asymmetry(1.15, 0.01), judge)
    assert again.cycle == 2 and again.ratio == pytest.approx(1.16 / 1.15) and again.verdict == "PASS"
    assert correct_cycle(raw, asymmetry(1.15, 0.01), None).verdict is None
    assert correct_cycle(raw, asymmetry(1.15, 0.2, reliable=False), judge) == raw
    assert correct_cycle(raw, None, judge) == raw


# Identical databases on two servers, the candidate's 15% slower: observed cycles around ×1.15 with noise
# (each cycle's CI ±3%), A/A calibration cycles around ×1.15 (CIs ±2%).
SLOW_SERVER = (1.17, 1.13, 1.16, 1.14, 1.155)
AA = (1.16, 1.14, 1.15)
AA_CONFIG = GateConfig(calibration="aa")


def observed(ratios: tuple[float, ...], factor: float = 1.0) -> list[CycleResult]:
    """Cycles of ratio r × factor with a ±3% CI, judged raw."""
    out = []
    for i, r in enumerate(ratios):
        ci = (r * factor * math.exp(-0.03), r * factor * math.exp(0.03))
        out.append(CycleResult(i, r * factor, ci, judge(r * factor, ci)))
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("rule", ["median", "best"])
def test_a_slower_server_is_no_regression_after_calibration(k: int, rule: str) -> None:
    data = observed(SLOW_SERVER[:k])
    assert all(c.verdict == "WARN" for c in data)  # uncorrected, every cycle says WARN
    config = replace(AA_CONFIG, selection=rule)
    result = correct_for_asymmetry(data, cycles(*AA, spread=0.02), config, judge)
    corrected = result.correction
    assert corrected.applied and corrected.asymmetry is not None
    assert corrected.asymmetry.ratio == pytest.approx(1.15, abs=0.005)
    assert corrected.ratio == pytest.approx(1.0, abs=0.02)
    assert corrected.ci[0] < 1.0 < corrected.ci[1]
    assert corrected.raw_ratio == pytest.approx(result.selection.chosen.ratio * corrected.asymmetry.ratio)
    assert result.selection.chosen.verdict == "PASS" and result.selection.regressed_cycles == 0


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_a_real_regression_on_a_slower_server_stays_after_calibration(k: int) -> None:
    data = observed(SLOW_SERVER[:k], factor=1.5)
    result = correct_for_asymmetry(data, cycles(*AA, spread=0.02), AA_CONFIG, judge)
    assert result.correction.ratio == pytest.approx(1.5, abs=0.03)
    assert result.selection.chosen.verdict == "BLOCK"
    assert result.selection.regressed_in_every_cycle


def test_calibration_off_or_unreliable_is_not_applied_and_the_result_says_so() -> None:
    data = observed(SLOW_SERVER[:3])
    off = correct_for_asymmetry(data, cycles(*AA, spread=0.02), CONFIG, judge)  # calibration = "off"
    assert not off.correction.applied and off.correction.asymmetry is None
    assert off.correction.ratio == off.correction.raw_ratio == 1.16  # the median of 1.17, 1.13, 1.16
    assert off.selection.chosen.verdict == "WARN"
    none = correct_for_asymmetry(data, None, AA_CONFIG, judge)
    assert not none.correction.applied and none.correction.reason == "calibration off"
    noisy = correct_for_asymmetry(data, cycles(1.0, 1.3, 1.15), AA_CONFIG, judge)
    assert not noisy.correction.applied and noisy.correction.asymmetry is not None
    assert not noisy.correction.asymmetry.reliable
    assert "unreliable" in noisy.correction.reason and noisy.correction.ratio == 1.16
    assert noisy.selection.chosen.verdict == "WARN"  # the raw verdict stands


def test_seeded_noisy_runs_on_a_slower_server_pass_after_calibration_and_a_regression_stays() -> None:
    """20 simulated gate runs at the defaults (K = 3 cycles, 5 A/A cycles), every cycle ×1.15 × lognormal
    noise σ = 3%: uncorrected, most cycles WARN; corrected, every run's ratio is within 0.07 of 1 (about 3
    standard deviations of the median of 3 over the mean of 5) and passes; the same runs with a ×1.5
    regression on top are within 0.11 of 1.5 and block."""
    rng = np.random.default_rng(12)
    raw_warns = 0
    for run in range(20):
        noise = np.exp(rng.normal(0.0, 0.03, size=8))
        aa = cycles(*(1.15 * noise[:5]), spread=0.02)
        same = observed(tuple(1.15 * noise[5:]))
        raw_warns += sum(c.verdict == "WARN" for c in same)
        passed = correct_for_asymmetry(same, aa, AA_CONFIG, judge)
        assert passed.correction.applied, (run, passed.correction.reason)
        assert passed.correction.ratio == pytest.approx(1.0, abs=0.07), run
        assert passed.selection.chosen.verdict == "PASS", run
        slower = correct_for_asymmetry(observed(tuple(1.15 * noise[5:]), factor=1.5), aa, AA_CONFIG, judge)
        assert slower.correction.ratio == pytest.approx(1.5, abs=0.11), run
        assert slower.selection.chosen.verdict == "BLOCK", run
    assert raw_warns > 30  # of 60 raw cycles: the uncorrected gate would not pass these runs


def test_same_inputs_same_outputs() -> None:
    runs = [
        correct_for_asymmetry(observed(SLOW_SERVER), cycles(*AA, spread=0.02), AA_CONFIG, judge)
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
    probe = replace(AA_CONFIG, calibration="probe", selection="best")
    timings = probe_cycles([1.0, 1.0, 1.0], [1.15, 1.16, 1.14])
    assert correct_for_asymmetry(observed(SLOW_SERVER), timings, probe, judge) == correct_for_asymmetry(
        observed(SLOW_SERVER), timings, probe, judge
    )


# ---------------------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------------------


def test_cycle_and_calibration_settings_defaults_and_checks() -> None:
    default = GateConfig()
    assert (default.cycles, default.cycle_order, default.selection, default.calibration) == (
        3,
        "abba",
        "median",
        "auto",
    )
    assert (CONFIG.calibration_cycles, CONFIG.calibration_max_half_width) == (5, 0.10)
    for bad, message in (
        ({"cycles": 0}, "cycles and calibration_cycles must be >= 1"),
        ({"calibration_cycles": 0}, "cycles and calibration_cycles must be >= 1"),
        ({"cycle_order": "abab"}, "cycle_order must be"),
        ({"selection": "mean"}, "selection must be median or best"),
        ({"calibration": "on"}, "calibration must be off, auto, aa or probe"),
        ({"calibration_max_half_width": 0.0}, "calibration_max_half_width must be > 0"),
    ):
        with pytest.raises(ValueError, match=message):
            GateConfig(**bad)  # type: ignore[arg-type]


def test_cycle_and_calibration_settings_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "radar.toml"
    path.write_text(
        '[gate]\ncycles = 4\nselection = "best"\ncalibration = "aa"\ncalibration_max_half_width = 0.1\n'
    )
    gate = load_settings(path, env={}).settings.gate
    assert (gate.cycles, gate.selection, gate.calibration, gate.calibration_max_half_width) == (
        4,
        "best",
        "aa",
        0.1,
    )
    path.write_text('[gate]\nselection = "medain"\n')
    with pytest.raises(ConfigError, match=r"selection must be one of .*did you mean 'median'"):
        load_settings(path, env={})
    path.write_text("[gate]\ncycles = 0\n")
    with pytest.raises(ConfigError, match=r"cycles and calibration_cycles must be >= 1"):
        load_settings(path, env={})
