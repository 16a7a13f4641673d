"""Verdicts bounded by their confidence (verdict_rule = bounded), on inline samples: PASS only when the CI
rules the regression out, WARN/BLOCK when its lower bound says so, INCONCLUSIVE otherwise with the largest
regression the data could hide; the design rule kept beside it as a profile; a stored run judged again."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN
from jobs.gate.cycle import (
    CI_OVER_ONE,
    CI_OVER_STRONG,
    CI_UNDER_THRESHOLD,
    IMMATERIAL,
    TAIL,
    UNDECIDED,
    WALLCLOCK,
    bounded_level,
    compare_samples,
    decided_in_cycle,
    tail_verdict,
)
from jobs.gate.replay import ReplayError, replay_report
from jobs.gate.suite import judge_scenario, run_verdict
from jobs.gate.suite_report import suite_report_dict
from tests.support.gate_reports import CONFIG, SCENARIO, noisy_cycles, suite_report

DESIGN = replace(CONFIG, verdict_rule="design")


@pytest.mark.parametrize(
    ("ratio", "ci", "baseline", "verdict", "rule"),
    [
        (1.50, (1.30, 1.70), 1.0, BLOCK, CI_OVER_STRONG),  # strong, lower bound over 1 + t
        (1.30, (1.05, 1.60), 1.0, WARN, CI_OVER_ONE),  # strong estimate, lower bound only over 1
        (1.15, (1.05, 1.25), 1.0, WARN, CI_OVER_ONE),
        (1.02, (0.95, 1.09), 1.0, PASS, CI_UNDER_THRESHOLD),  # rules out x1.1
        (0.80, (0.75, 0.85), 1.0, PASS, CI_UNDER_THRESHOLD),  # an improvement, decided
        (1.02, (0.90, 1.15), 1.0, INCONCLUSIVE, UNDECIDED),  # cannot rule out x1.15
        (1.30, (0.95, 1.80), 1.0, INCONCLUSIVE, UNDECIDED),  # a regression, or not
        (0.80, (0.60, 1.20), 1.0, INCONCLUSIVE, UNDECIDED),  # improvements never fail, nor PASS blind
        (1.05, (0.80, 1.50), 0.01, PASS, IMMATERIAL),  # +0.005 ms at the upper bound: under 0.02 ms
        (1.50, (1.30, 1.70), 0.01, PASS, IMMATERIAL),  # x1.5 of 0.01 ms: not material either
    ],
)
def test_bounded_level_of_wallclock(
    ratio: float, ci: tuple[float, float], baseline: float, verdict: str, rule: str
) -> None:
    assert bounded_level(WALLCLOCK, ratio, ci, baseline, CONFIG) == (verdict, rule)


def test_bounded_level_of_counts_reads_the_floor_and_the_tail_its_own_ratio() -> None:
    # temp blocks 0 -> 900: compared floored at the 8-block minimum, a material strong regression
    assert bounded_level("temp_blocks", 900 / 8, (900 / 8, 900 / 8), 0.0, CONFIG)[0] == BLOCK
    assert bounded_level("temp_blocks", 1.0, (1.0, 1.0), 0.0, CONFIG) == (PASS, CI_UNDER_THRESHOLD)
    # the tail row: tail_mean_ratio (1.25) is both its threshold and its BLOCK bound
    assert bounded_level(TAIL, 1.40, (1.30, 1.50), 1.0, CONFIG)[0] == BLOCK
    assert bounded_level(TAIL, 1.30, (1.10, 1.50), 1.0, CONFIG)[0] == WARN
    assert bounded_level(TAIL, 1.10, (1.00, 1.20), 1.0, CONFIG)[0] == PASS
    assert bounded_level(TAIL, 1.10, (0.90, 1.40), 1.0, CONFIG)[0] == INCONCLUSIVE


def test_a_quiet_identical_run_passes_with_the_bound_it_rules_out() -> None:
    result = judge_scenario(SCENARIO, noisy_cycles(CONFIG, 0.02, 1.0), (), {}, CONFIG)
    assert result.verdict == PASS, result.reasons
    wall = next(m for m in result.selected if m.measurement == WALLCLOCK)
    assert wall.decided and wall.decided_by == CI_UNDER_THRESHOLD
    assert wall.rules_out is not None and wall.rules_out < 1.1


def test_a_noisy_run_is_inconclusive_and_says_what_it_could_hide() -> None:
    """Noise sigma 0.5 per measurement: a x1.0 and a x1.2 both read with CIs reaching well over x1.1. The
    design's rule PASSes both (nothing over the threshold with a CI lower bound over 1); bounded says it
    cannot tell, and how large a regression it could not rule out."""
    for factor in (1.0, 1.2):
        cycles = noisy_cycles(CONFIG, 0.5, factor)
        bounded = judge_scenario(SCENARIO, cycles, (), {}, CONFIG)
        assert bounded.verdict == INCONCLUSIVE, bounded.reasons
        wall = next(m for m in bounded.selected if m.measurement == WALLCLOCK)
        assert not wall.decided and wall.decided_by == UNDECIDED
        assert wall.rules_out is not None and wall.rules_out > 1.1
        reason = next(r for r in bounded.reasons if r.startswith("INCONCLUSIVE: wallclock"))
        assert f"cannot rule out a regression up to ×{wall.rules_out:.3f}" in reason
        design = judge_scenario(SCENARIO, cycles, (), {}, DESIGN)
        assert design.verdict == PASS, design.reasons  # the design's rule: a PASS that means "could not tell"


def test_a_clear_regression_blocks_under_both_rules() -> None:
    cycles = noisy_cycles(CONFIG, 0.03, 1.5)
    assert judge_scenario(SCENARIO, cycles, (), {}, CONFIG).verdict == BLOCK
    assert judge_scenario(SCENARIO, cycles, (), {}, DESIGN).verdict == BLOCK


def test_the_bounded_pass_rate_of_true_regressions_is_nil_where_the_design_rule_passes_them() -> None:
    """200 simulated runs per case (noise sigma 0.3 per measurement, 3 cycles of 25): the design's rule
    PASSes a true x1.2 often; the bounded rule never PASSes a x1.1 or x1.2."""
    passes = {"bounded": {1.1: 0, 1.2: 0}, "design": {1.1: 0, 1.2: 0}}
    for seed in range(200):
        for factor in (1.1, 1.2):
            cycles = noisy_cycles(CONFIG, 0.3, factor, seed=seed)
            for name, config in (("bounded", CONFIG), ("design", DESIGN)):
                passes[name][factor] += judge_scenario(SCENARIO, cycles, (), {}, config).verdict == PASS
    assert passes["bounded"] == {1.1: 0, 1.2: 0}, passes
    assert passes["design"][1.2] > 20, passes


def test_the_in_cycle_stop_decides_only_what_the_bounded_verdict_would() -> None:
    rng = np.random.default_rng(4)
    base = 1.0 + rng.normal(0, 0.01, 30)
    assert decided_in_cycle(compare_samples(WALLCLOCK, base, base * 2.0, CONFIG), CONFIG) == "decisive_block"
    same = compare_samples(WALLCLOCK, base, 1.0 + rng.normal(0, 0.01, 30), CONFIG)
    assert decided_in_cycle(same, CONFIG) == "decided_pass"
    noisy = compare_samples(WALLCLOCK, np.exp(rng.normal(0, 0.5, 12)), np.exp(rng.normal(0, 0.5, 12)), CONFIG)
    assert decided_in_cycle(noisy, CONFIG) is None


def test_the_run_verdict_orders_inconclusive_above_warn_and_under_block() -> None:
    from jobs.gate.suite import ScenarioResult

    def results(*verdicts: str) -> list[ScenarioResult]:
        return [ScenarioResult(f"s{i}", v) for i, v in enumerate(verdicts)]

    assert run_verdict(results(PASS, WARN, INCONCLUSIVE), "complete", CONFIG) == INCONCLUSIVE
    assert run_verdict(results(INCONCLUSIVE, BLOCK), "complete", CONFIG) == BLOCK
    assert run_verdict(results(PASS, PASS), "budget", CONFIG) == PASS  # bounded: decided by the data
    assert run_verdict(results(PASS, PASS), "budget", DESIGN) == INCONCLUSIVE  # design: any spent budget


def test_a_stored_run_is_judged_again_with_other_thresholds_and_rules() -> None:
    """The report keeps every execution's time; replaying it with the same configuration gives the same
    verdict and figures, and with a wider threshold or the design rule a different, explained one."""
    cycles = noisy_cycles(CONFIG, 0.15, 1.16, seed=3)
    stored = json.loads(json.dumps(suite_report_dict(suite_report(cycles, CONFIG))))
    same = replay_report(stored, CONFIG, "run.json")
    assert same.verdict == stored["verdict"]
    assert same.replay_of == "run.json" and any("no server was measured" in n for n in same.notes)
    assert [r["ratio"] for r in suite_report_dict(same)["rows"]] == [r["ratio"] for r in stored["rows"]]
    looser = replay_report(stored, replace(CONFIG, wallclock_threshold=0.5, tail_mean_ratio=2.0), "run.json")
    assert looser.verdict == PASS and stored["verdict"] != PASS
    assert replay_report(stored, CONFIG, "run.json") == same  # deterministic: byte-identical figures


def test_a_run_without_raw_measurements_cannot_be_replayed() -> None:
    stored = json.loads(json.dumps(suite_report_dict(suite_report(noisy_cycles(CONFIG, 0.02, 1.0), CONFIG))))
    del stored["scenarios"][0]["cycles"][1]["raw"]
    with pytest.raises(ReplayError, match=r"old\.json: scenario 'lookup' cycle 1: raw: missing"):
        replay_report(stored, CONFIG, "old.json")


def test_tail_verdict_is_unchanged_as_a_cycle_level_check() -> None:
    rng = np.random.default_rng(11)
    base = 1.0 + rng.normal(0, 0.01, 100)
    assert tail_verdict(base, 1.10 * base, CONFIG).verdict == PASS


def test_memory_readings_carry_their_spread_into_the_verdict() -> None:
    """Three readings a side. Allocator noise on identical databases (one reading x2.3 of another) is not
    a regression: BLOCK needs every candidate reading over every baseline one by 1 + t; a bigger sort
    whose every reading doubles is. The worker processes' memory has its own (design) threshold, 50%."""
    from jobs.gate.cycle import compare_readings, judge_selected, select_measurement

    mib = 2.0**20
    noisy = compare_readings(
        "rss", [3 * mib, 7 * mib, 4 * mib], [3.2 * mib, 3.1 * mib, 6.9 * mib], CONFIG, "minimum"
    )
    assert noisy.ci[0] < 1.0 < 1.2 < noisy.ci[1] and noisy.verdict == PASS
    bounded = judge_selected(select_measurement("rss", [noisy] * 3, None, CONFIG), CONFIG)
    assert bounded.verdict == INCONCLUSIVE and not bounded.decided
    grown = compare_readings(
        "rss", [8 * mib, 8.2 * mib, 8.1 * mib], [16 * mib, 16.5 * mib, 17 * mib], CONFIG, "minimum"
    )
    assert grown.verdict == BLOCK and grown.ci[0] == pytest.approx(16 / 8.2)
    workers = compare_readings("worker_rss", [8 * mib] * 3, [11 * mib] * 3, CONFIG, "minimum")
    assert workers.threshold == 0.5 and workers.verdict == PASS  # +37.5%: under the workers' 50%
    small = compare_readings("rss", [0.1 * mib] * 3, [0.4 * mib] * 3, CONFIG, "minimum")
    assert small.verdict == PASS  # x4 of 0.1 MiB: under the 1 MiB minimum increase


def test_a_confident_probe_cannot_hide_a_regression() -> None:
    """Measured with a busy neighbour beside the candidate's server: the probe read x2.03 with a narrow
    CI while the scan it should correct was x1.74 slower there, so a true x1.1 read x0.92 and PASSed. The
    probe's model uncertainty (x1.5) makes that INCONCLUSIVE; at 0 it PASSes as before."""
    from jobs.gate.selection import estimate_asymmetry, probe_cycles

    probe_seconds = [0.100, 0.101, 0.099, 0.100, 0.100]
    probe = estimate_asymmetry(
        probe_cycles(probe_seconds, [2.03 * s for s in probe_seconds]), "probe", CONFIG
    )
    assert not probe.reliable and probe.ci[1] / probe.ratio > 1.45 and "model uncertainty" in probe.note
    trusted_config = replace(CONFIG, probe_model_uncertainty=0.0)
    trusted = estimate_asymmetry(
        probe_cycles(probe_seconds, [2.03 * s for s in probe_seconds]), "probe", trusted_config
    )
    assert trusted.reliable
    cycles = noisy_cycles(CONFIG, 0.02, 1.74 * 1.1)  # the scan: x1.74 from the server, x1.1 from the data
    asymmetries = {WALLCLOCK: probe, TAIL: probe}
    assert judge_scenario(SCENARIO, cycles, (), asymmetries, CONFIG).verdict == INCONCLUSIVE
    trusting = {WALLCLOCK: trusted, TAIL: trusted}
    assert judge_scenario(SCENARIO, cycles, (), trusting, trusted_config).verdict == PASS  # what it hid
