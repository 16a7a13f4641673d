"""The scenario gate's judgement on inline series: levels, exact and bootstrap comparisons, the tail row,
the CI stop rules and the selection over cycles (with and without calibration)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jobs.gate.config import BLOCK, PASS, WARN, GateConfig
from jobs.gate.cycle import (
    TAIL,
    WALLCLOCK,
    blocks_needed,
    bootstrap_ratio_ci,
    compare_samples,
    compare_values,
    decided_by_ci,
    level,
    min_increase_for,
    select_measurement,
    tail_verdict,
    threshold_for,
)
from jobs.gate.selection import Asymmetry

CONFIG = GateConfig(calibration="off")


def test_thresholds_are_the_issue_defaults() -> None:
    assert threshold_for(WALLCLOCK, CONFIG) == 0.10
    assert threshold_for("memory", CONFIG) == threshold_for("rss", CONFIG) == 0.20
    assert threshold_for("temp_blocks", CONFIG) == threshold_for("shared_blocks", CONFIG) == 0.50
    assert min_increase_for("memory", CONFIG) == 1_048_576.0


@pytest.mark.parametrize(
    ("kind", "ci", "increase", "expected"),
    [
        ("strong_regression", (1.10, 1.4), 1.0, BLOCK),  # lower bound at 1 + t
        ("strong_regression", (1.099, 1.4), 1.0, WARN),  # just under: a regression, not decisive
        ("regression", (1.001, 1.2), 1.0, WARN),
        ("regression", (1.0, 1.2), 1.0, PASS),  # the CI reaches 1: no evidence
        ("strong_regression", (1.5, 2.0), 0.5, PASS),  # under the minimum increase (1.0 here)
        ("improvement", (0.5, 0.7), -1.0, PASS),
        ("unchanged", (0.95, 1.05), 0.0, PASS),
    ],
)
def test_level(kind: str, ci: tuple[float, float], increase: float, expected: str) -> None:
    assert level(kind, ci, increase, 0.10, 1.0) == expected


def test_zero_variance_samples_give_an_exact_ratio_and_never_crash() -> None:
    same = compare_samples(WALLCLOCK, [2.0] * 12, [2.0] * 12, CONFIG)
    assert (same.ratio, same.ci, same.verdict, same.kind) == (1.0, (1.0, 1.0), PASS, "unchanged")
    slower = compare_samples(WALLCLOCK, [2.0] * 12, [3.0] * 12, CONFIG)
    assert (slower.ratio, slower.ci, slower.verdict) == (1.5, (1.5, 1.5), BLOCK)
    assert bootstrap_ratio_ci(np.full(5, 1.0), np.full(5, 1.0), "minimum", CONFIG) == (1.0, 1.0)


@pytest.mark.parametrize("how", ["minimum", "mean", "mean_minus_std", "normal_fit", "p50", "p95"])
def test_every_aggregation_compares_and_is_deterministic(how: str) -> None:
    rng = np.random.default_rng(1)
    base = 1.0 + rng.exponential(0.05, 40)
    cand = 1.3 * (1.0 + rng.exponential(0.05, 40))
    first = compare_samples(WALLCLOCK, base, cand, CONFIG, how=how)
    again = compare_samples(WALLCLOCK, base, cand, CONFIG, how=how)
    assert first == again
    assert first.aggregation == how
    assert first.ci[0] <= first.ratio <= first.ci[1]
    assert first.ratio == pytest.approx(1.3, rel=0.12)
    assert first.verdict == BLOCK


def test_improvements_are_reported_and_never_fail() -> None:
    result = compare_samples(WALLCLOCK, [3.0, 3.1, 2.9, 3.0], [1.0, 1.1, 0.9, 1.0], CONFIG)
    assert result.kind == "improvement" and result.verdict == PASS


def test_counters_use_the_minimum_increase_as_a_floor() -> None:
    spill = compare_values("temp_blocks", 0.0, 5000.0, CONFIG)
    assert spill.kind == "strong_regression" and spill.verdict == BLOCK
    assert spill.ratio == 5000.0 / 8.0
    none = compare_values("temp_blocks", 0.0, 0.0, CONFIG)
    assert none.ratio == 1.0 and none.verdict == PASS
    tiny = compare_values("temp_blocks", 2.0, 6.0, CONFIG)  # +4 blocks: under the 8-block minimum
    assert tiny.verdict == PASS
    memory = compare_values("memory", 8_000_000.0, 9_000_000.0, CONFIG)  # +12.5%, under 20%
    assert memory.verdict == PASS and memory.kind == "unchanged"
    grown = compare_values("memory", 8_000_000.0, 12_000_000.0, CONFIG)  # +50% >= 2 x 20%
    assert grown.verdict == BLOCK
    warned = compare_values("memory", 8_000_000.0, 10_000_000.0, CONFIG)  # +25%: regression, not strong
    assert warned.verdict == WARN


def test_a_heavier_tail_under_the_same_median_is_caught_by_the_tail_row_whatever_the_filter() -> None:
    rng = np.random.default_rng(7)
    base = 1.0 + rng.normal(0, 0.02, 200)
    cand = 1.0 + rng.normal(0, 0.02, 200)
    slow = rng.random(200) < 0.10
    cand[slow] *= 12.0  # 10% of executions 12x slower (a sequential scan for some parameters)
    for how in ("fences", "running_mean_sigma", "none"):
        config = replace(CONFIG, sample_filter=how)
        median = compare_samples(WALLCLOCK, base, cand, config, how="p50")
        assert median.verdict == PASS  # the median does not move
    tail = tail_verdict(base, cand, CONFIG)
    assert tail.measurement == TAIL
    assert tail.ratio > 1.5 and tail.verdict == BLOCK
    calm = tail_verdict(base, 1.0 + rng.normal(0, 0.02, 200), CONFIG)
    assert calm.verdict == PASS


def test_ci_stop_rules() -> None:
    block = compare_samples(WALLCLOCK, [1.0, 1.01, 0.99, 1.0, 1.0], [2.0, 2.02, 1.98, 2.0, 2.0], CONFIG)
    assert decided_by_ci(block) == "decisive_block"
    same = compare_samples(WALLCLOCK, [1.0, 1.01, 0.99, 1.0, 1.0], [1.0, 1.0, 1.01, 0.99, 1.0], CONFIG)
    assert decided_by_ci(same) == "decisive_unchanged"
    rng = np.random.default_rng(3)
    noisy = compare_samples(WALLCLOCK, 1 + rng.exponential(0.5, 6), 1 + rng.exponential(0.5, 6), CONFIG)
    assert decided_by_ci(noisy) is None


@pytest.mark.parametrize(
    ("k", "rule", "needed"),
    [
        (1, "median", 1),
        (2, "median", 2),
        (3, "median", 2),
        (4, "median", 3),
        (5, "median", 3),
        (3, "best", 3),
    ],
)
def test_blocks_needed_even_and_odd(k: int, rule: str, needed: int) -> None:
    assert blocks_needed(k, rule) == needed


def _cycles(*ratios: float) -> list:  # type: ignore[type-arg]
    base = [1.0] * 8
    out = []
    for r in ratios:
        out.append(
            compare_samples(
                WALLCLOCK, base, [r * v for v in [1.0, 1.01, 0.99, 1.0, 1.0, 1.0, 1.0, 1.0]], CONFIG
            )
        )
    return out


def test_median_selection_over_cycles_odd_and_even() -> None:
    odd = select_measurement(WALLCLOCK, _cycles(1.0, 1.5, 1.02), None, CONFIG)
    assert odd.chosen_cycle == 2 and odd.verdict == PASS and odd.regressed_cycles == 1
    even = select_measurement(WALLCLOCK, _cycles(1.5, 1.0, 1.6, 1.4), None, CONFIG)
    assert even.chosen_cycle == 3 and even.verdict == BLOCK  # lower middle of 1.0, 1.4, 1.5, 1.6


def test_best_selection_regresses_only_when_every_cycle_did() -> None:
    config = replace(CONFIG, selection="best")
    one_clean = select_measurement(WALLCLOCK, _cycles(1.5, 1.02, 1.6), None, config)
    assert one_clean.verdict == PASS and one_clean.chosen_cycle == 1
    every = select_measurement(WALLCLOCK, _cycles(1.5, 1.45, 1.6), None, config)
    assert every.verdict == BLOCK and every.chosen_cycle == 1


def test_calibration_corrects_wallclock_and_not_counters() -> None:
    asymmetry = Asymmetry("probe", 1.3, (1.28, 1.32), 0.0155, 5, True, "probe over 5 cycles")
    slow_server = select_measurement(WALLCLOCK, _cycles(1.31, 1.29, 1.3), asymmetry, CONFIG)
    assert slow_server.verdict == PASS
    assert slow_server.raw_ratio == pytest.approx(1.3, abs=0.02)
    assert slow_server.chosen.ratio == pytest.approx(1.0, abs=0.02)
    assert "applied" in slow_server.correction
    real = select_measurement(WALLCLOCK, _cycles(2.0, 1.95, 2.05), asymmetry, CONFIG)
    assert real.verdict == BLOCK and real.chosen.ratio == pytest.approx(2.0 / 1.3, rel=0.02)
    counters = [compare_values("temp_blocks", 100.0, 400.0, CONFIG)] * 3
    blocks = select_measurement("temp_blocks", counters, asymmetry, CONFIG)
    assert blocks.verdict == BLOCK and blocks.chosen.ratio == 4.0
    unreliable = replace(asymmetry, reliable=False, note="too wide", log_half_width=0.4)
    ignored = select_measurement(
        WALLCLOCK, _cycles(1.31, 1.29, 1.3), unreliable, replace(CONFIG, calibration_unreliable="ignore")
    )
    assert ignored.verdict == BLOCK and "not applied" in ignored.correction
    carried = select_measurement(WALLCLOCK, _cycles(1.31, 1.29, 1.3), unreliable, CONFIG)  # carry: default
    assert carried.verdict == PASS and "applied with its uncertainty" in carried.correction
    assert carried.chosen.ci[0] < 0.7 and carried.chosen.ci[1] > 1.4  # exp(-+0.4) around 1.0
    big = select_measurement(WALLCLOCK, _cycles(4.0, 4.1, 3.9), unreliable, CONFIG)
    assert big.verdict == BLOCK  # a regression larger than the noise still BLOCKs


def test_tail_levels_need_the_ratio_and_the_ci() -> None:
    rng = np.random.default_rng(11)
    base = 1.0 + rng.normal(0, 0.01, 100)
    mild = 1.10 * (1.0 + rng.normal(0, 0.01, 100))  # +10% mean: under tail_mean_ratio 1.25
    assert tail_verdict(base, mild, CONFIG).verdict == PASS
    noisy = 1.0 + rng.normal(0, 0.01, 30)
    noisy[:4] = 4.0  # mean x1.4, but four values carry it: the CI reaches under 1.25
    result = tail_verdict(1.0 + rng.normal(0, 0.01, 30), noisy, CONFIG)
    assert result.ratio >= 1.25 and 1.0 < result.ci[0] < 1.25
    assert result.verdict == WARN


def test_ci_stop_rules_need_the_whole_ci() -> None:
    rng = np.random.default_rng(5)
    base = 1.0 + rng.normal(0, 0.01, 12)
    cand = 1.25 * (1.0 + rng.normal(0, 0.08, 12))  # BLOCK (lower bound >= 1.1) but not >= 1.2
    block = compare_samples(WALLCLOCK, base, cand, CONFIG, how="mean")
    assert block.verdict == BLOCK and block.ci[0] < 1.2
    assert decided_by_ci(block) is None
    wide = compare_samples(WALLCLOCK, base, np.tile([0.95, 1.17], 6), CONFIG, how="mean")
    assert wide.ci[0] > 1 / 1.1 and wide.ci[1] > 1.1
    assert decided_by_ci(wide) is None


def test_few_measurements_widen_the_bootstrap_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five measurements a side: the percentile bootstrap alone is too narrow; the CI is stretched by
    t(4)/z x sqrt(5/4) about the estimate (about 1.6x on the log scale)."""
    import jobs.gate.cycle as cycle

    base, cand = [1.0, 1.2, 0.9, 1.1, 1.0], [1.3, 1.1, 1.5, 1.2, 1.4]
    widened = compare_samples(WALLCLOCK, base, cand, CONFIG, how="mean")
    monkeypatch.setattr(cycle, "widen_for_few_clusters", lambda p, lo, hi, n, c: (lo, hi))
    narrow = compare_samples(WALLCLOCK, base, cand, CONFIG, how="mean")
    assert widened.ratio == narrow.ratio
    assert np.log(widened.ci[1] / widened.ci[0]) > 1.4 * np.log(narrow.ci[1] / narrow.ci[0])


def test_the_in_cycle_stop_sees_the_corrected_ratio() -> None:
    from jobs.gate.cycle import corrected_for_stop

    raw = compare_samples(WALLCLOCK, [1.0, 1.01, 0.99, 1.0, 1.0], [2.0, 2.02, 1.98, 2.0, 2.0], CONFIG)
    assert decided_by_ci(raw) == "decisive_block"
    slower_server = Asymmetry("aa", 2.0, (1.96, 2.04), 0.02, 5, True, "aa over 5 cycles")
    corrected = corrected_for_stop(raw, slower_server, CONFIG)
    assert corrected.ratio == pytest.approx(1.0) and decided_by_ci(corrected) != "decisive_block"
    assert corrected_for_stop(raw, None, CONFIG) is raw
    noisy = replace(slower_server, reliable=False)
    assert corrected_for_stop(raw, noisy, replace(CONFIG, calibration_unreliable="ignore")) is raw


def test_a_cycle_verdict_for_the_early_stop_is_the_corrected_one() -> None:
    from jobs.gate.cycle import corrected_verdict

    raw = compare_samples(WALLCLOCK, [1.0, 1.01, 0.99, 1.0, 1.0], [2.0, 2.02, 1.98, 2.0, 2.0], CONFIG)
    slower_server = Asymmetry("aa", 2.0, (1.96, 2.04), 0.02, 5, True, "aa over 5 cycles")
    assert raw.verdict == BLOCK and corrected_verdict(raw, slower_server, CONFIG) == PASS
    assert corrected_verdict(raw, None, CONFIG) == BLOCK
    tail = tail_verdict([1.0, 1.01, 0.99, 1.0, 1.0], [2.0, 2.02, 1.98, 2.0, 2.0], CONFIG)
    assert tail.verdict == BLOCK and corrected_verdict(tail, slower_server, CONFIG) == PASS
    blocks = compare_values("temp_blocks", 0.0, 900.0, CONFIG)
    assert corrected_verdict(blocks, slower_server, CONFIG) == BLOCK  # counters are never corrected
