"""One test (or more) per rule of the regression detector, each series built so that exactly that rule
decides the outcome: removing or loosening the rule in jobs/detect/deploy_analysis.py turns the test red.

Series are tiny, inline and seeded; the detector is pure (frames in, frames out), so no lake or database.
A sample lasts 10 s; with ``first=-30`` sample i starts at DEPLOY_AT + (i - 30) * 10 s, so index 30 + k
of a series is k * 10 s after the deploy. The deploy window is 5 min before + 10 min after (tolerance
0.2 x 15 min = 3 min = 18 samples).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import polars as pl
import pytest
from scipy import stats

from jobs.collect.deploys import DeployEvent, events_frame
from jobs.detect.config import RegressionConfig
from jobs.detect.deploy_analysis import detect_regressions
from jobs.detect.unannounced import NO_REPORTABLE_STEP, detect_unannounced_regressions, latency_steps_possible
from tests.support.lakes import SERIES_DEPLOY_AT, SERIES_STEP, series_samples, series_texts

DEPLOY_AT = SERIES_DEPLOY_AT
STEP = SERIES_STEP
WINDOW = {"window_before": timedelta(minutes=5), "window_after": timedelta(minutes=10)}
CONFIG = RegressionConfig(**WINDOW)
QUERY = "select total from invoices where account_id = $1"
CALLS = 1000  # per 10 s sample: 100 calls/s, so a +0.1 ms step adds 10 ms/s (material) unless said


def samples_for(
    values: np.ndarray, *, calls: int = CALLS, instance: str = "alpha", queryid: int = 7, first: int = -30
) -> pl.DataFrame:
    """tests.support.lakes.series_samples with this file's default queryid."""
    return series_samples(values, calls=calls, instance=instance, queryid=queryid, first=first)


texts_for = series_texts


def level(n: int, mean: float, seed: int, spread: float = 0.02) -> np.ndarray:
    """n latencies around mean (lognormal, about ±2%): tight enough that only the rule under test decides."""
    return mean * np.random.default_rng(seed).lognormal(0.0, spread, n)


def analyse(samples: pl.DataFrame, config: RegressionConfig = CONFIG) -> dict:
    texts = texts_for([("alpha", 7, QUERY)])
    deploys = events_frame([DeployEvent(version="v7", deployed_at=DEPLOY_AT, instance="alpha")]).drop("date")
    out = detect_regressions(samples, texts, deploys, config)
    assert out.height == 1
    return out.row(0, named=True)


def verdict(row: dict) -> tuple[str, str]:
    return row["status"], row["reason"]


def offset_of(row: dict) -> timedelta:
    return row["detected_change_at"] - DEPLOY_AT


def welch_p(after: np.ndarray, before: np.ndarray) -> float:
    return float(stats.ttest_ind(after, before, equal_var=False).pvalue)


# ---------------------------------------------------------------------------------------------------------
# Stage 0: naive pre/post change


def test_stage_zero_rejects_a_real_step_below_twenty_percent() -> None:
    """+15% at the deploy: a clean, significant change point, yet stage 0 rejects it with its reason."""
    values = np.concatenate([level(30, 1.0, 1), level(60, 1.15, 2)])
    row = analyse(samples_for(values))
    assert verdict(row) == ("no_regression", "below_latency_change_threshold")
    assert 0.10 < row["latency_change"] < 0.20
    assert row["changepoint_index"] is None  # stages 1 and 2 did not run
    # Only stage 0 stood in the way: with its threshold at 10% the same series is a detection.
    lowered = RegressionConfig(**WINDOW, latency_change_threshold=0.10)
    again = analyse(samples_for(values), lowered)
    assert verdict(again) == ("detected", "detected")
    assert again["changepoint_index"] == 30 and again["changepoint_p_value"] < 1e-6


def test_stage_zero_passes_a_step_just_above_twenty_percent() -> None:
    values = np.concatenate([level(30, 1.0, 1), level(60, 1.25, 2)])
    row = analyse(samples_for(values))
    assert 0.20 < row["latency_change"] < 0.30
    assert verdict(row) == ("detected", "detected")


# ---------------------------------------------------------------------------------------------------------
# Stage 1: the change point test and its tolerance


def test_no_significant_change_point_is_not_a_regression_even_when_welch_would_say_so() -> None:
    """Noisy +30% shift (sd 40% of the mean): the rank test at the located split, corrected for ~80
    candidate splits, is not significant at 0.01, while a Welch test of the same segments would be."""
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(1.0, 0.4, 30), rng.normal(1.3, 0.4, 60)]).clip(0.05)
    row = analyse(samples_for(values))
    assert verdict(row) == ("no_regression", "no_significant_change_point")
    # Every later gate would pass: at the deploy, >20%, slower, material, Welch p far below 0.05.
    assert row["changepoint_index"] == 30 and row["detected_change_at"] == DEPLOY_AT
    assert row["changepoint_p_value"] > CONFIG.changepoint.max_p_value
    assert row["latency_change"] > 0.2 and row["added_load_ms_per_s"] > CONFIG.min_added_load_ms_per_s
    assert row["p_value"] < 0.001


@pytest.mark.parametrize(
    ("seconds_after", "expected"),
    [(170, ("detected", "detected")), (190, ("no_regression", "change_point_outside_tolerance"))],
)
def test_tolerance_is_a_fraction_of_the_window(seconds_after: int, expected: tuple[str, str]) -> None:
    """Tolerance 0.2 x 15 min = 180 s: a 5x step 170 s after the deploy is it, 190 s after is not."""
    k = seconds_after // 10
    row = analyse(samples_for(np.concatenate([level(30 + k, 1.0, 10), level(60 - k, 5.0, 11)])))
    assert CONFIG.tolerance() == timedelta(seconds=180)
    assert offset_of(row) == timedelta(seconds=seconds_after)
    assert row["changepoint_p_value"] < 1e-6 and row["p_value"] < 1e-6  # a real step either way
    assert verdict(row) == expected


def test_tolerance_floor_applies_on_short_windows() -> None:
    """Window 3 + 2 min: 0.2 x 5 min = 60 s, floored at 2 min; a step 90 s before the deploy is within."""
    short = RegressionConfig(window_before=timedelta(minutes=3), window_after=timedelta(minutes=2))
    assert short.tolerance() == timedelta(minutes=2)
    row = analyse(samples_for(np.concatenate([level(9, 1.0, 12), level(21, 5.0, 13)]), first=-18), short)
    assert offset_of(row) == timedelta(seconds=-90)
    assert verdict(row) == ("detected", "detected")
    floorless = RegressionConfig(
        window_before=timedelta(minutes=3),
        window_after=timedelta(minutes=2),
        changepoint_tolerance_floor=timedelta(0),
    )
    values = np.concatenate([level(9, 1.0, 12), level(21, 5.0, 13)])
    assert analyse(samples_for(values, first=-18), floorless)["reason"] == "change_point_outside_tolerance"


# ---------------------------------------------------------------------------------------------------------
# Stage 2: Welch on the change point's segments


def test_welch_runs_on_the_change_point_segments_not_the_deploy_split() -> None:
    """A 5x step 150 s before the deploy (within tolerance) with one 30 ms spike just after the step.

    Deploy split: its 'before' mixes 15 fast samples, 14 slow ones and the spike, so Welch p is ~0.24
    (not significant). Change point split: 15 fast vs 75 slow, p ~1e-20: detected, with those segments.
    """
    values = np.concatenate([level(15, 1.0, 3), level(75, 5.0, 4)])
    values[20] = 30.0
    assert welch_p(values[30:], values[:30]) > 0.1  # the deploy split alone would not detect
    row = analyse(samples_for(values))
    assert row["latency_change"] > 0.2  # stage 0 (naive deploy split) passes
    assert row["changepoint_index"] == 15 and offset_of(row) == timedelta(seconds=-150)
    assert verdict(row) == ("detected", "detected")
    assert (row["before_count"], row["after_count"]) == (15, 75)
    assert row["before_mean_ms"] == pytest.approx(values[:15].mean())
    assert row["after_mean_ms"] == pytest.approx(values[15:].mean())
    assert row["p_value"] == pytest.approx(welch_p(values[15:], values[:15]), rel=1e-6)
    assert row["p_value"] < 1e-10


def test_a_located_change_point_that_welch_does_not_confirm_is_not_a_regression() -> None:
    """1.0 -> 1.5 ms at the deploy, clear to the rank test, plus one 300 ms spike after it: the after
    segment's variance makes Welch p ~0.27, so the (spike-inflated) +500% is not detected."""
    values = np.concatenate([level(30, 1.0, 5), level(60, 1.5, 6)])
    values[60] = 300.0
    row = analyse(samples_for(values))
    assert row["changepoint_index"] == 30 and row["changepoint_p_value"] < 1e-6
    assert row["after_mean_ms"] > row["before_mean_ms"] and row["added_load_ms_per_s"] > 10
    assert row["p_value"] == pytest.approx(welch_p(values[30:], values[:30]), rel=1e-6)
    assert row["p_value"] > 0.05
    assert verdict(row) == ("no_regression", "welch_not_significant")
    # The gate is the configured level: at p < 0.5 the same row is a detection.
    assert analyse(samples_for(values), RegressionConfig(**WINDOW, p_value_threshold=0.5))["status"] == (
        "detected"
    )


def test_a_significant_speed_up_at_the_change_point_is_not_a_regression() -> None:
    """1 ms before the deploy, 0.8 ms right after it, then a 3 ms step 150 s later.

    The naive deploy split sees +145% (stage 0 passes); the change point nearest the deploy is the
    speed-up at the deploy itself, and across it (up to the later step) latency falls very significantly
    by Welch: latency_not_increased. (Materiality would also reject a fall, as a negative increase is
    never material: the status alone cannot tell this gate from that one, the reason does.)
    """
    values = np.concatenate([level(30, 1.0, 7), level(15, 0.8, 8), level(45, 3.0, 9)])
    row = analyse(samples_for(values))
    assert row["latency_change"] > 0.2
    assert row["changepoint_index"] == 30 and offset_of(row) == timedelta(0)
    assert row["changepoint_p_value"] < 1e-4 and row["p_value"] < 1e-4
    assert row["after_mean_ms"] < row["before_mean_ms"]
    assert verdict(row) == ("no_regression", "latency_not_increased")


# ---------------------------------------------------------------------------------------------------------
# Materiality: added load per second, or latency per call


def tiny_query(calls: int) -> pl.DataFrame:
    """0.01 -> 0.03 ms at the deploy (x3), ``calls`` per 10 s."""
    return samples_for(np.concatenate([level(30, 0.01, 20), level(60, 0.03, 21)]), calls=calls)


def test_a_tiny_query_tripling_with_few_calls_is_not_reported() -> None:
    row = analyse(tiny_query(CALLS))  # 100 calls/s x +0.02 ms = 2 ms/s < 10 ms/s; +0.02 ms < 50 ms
    assert row["p_value"] < 1e-50 and row["latency_change"] > 1.5
    assert row["added_load_ms_per_s"] == pytest.approx(2.0, rel=0.05)
    assert verdict(row) == ("no_regression", "below_materiality_threshold")


def test_the_same_tripling_at_a_high_call_rate_is_reported() -> None:
    row = analyse(tiny_query(1_000_000))  # 100,000 calls/s x +0.02 ms = 2,000 ms/s of extra work
    assert row["added_load_ms_per_s"] == pytest.approx(2000.0, rel=0.05)
    assert verdict(row) == ("detected", "detected")


@pytest.mark.parametrize(
    ("before_ms", "after_ms", "expected"),
    [(30.0, 90.0, ("detected", "detected")), (20.0, 60.0, ("no_regression", "below_materiality_threshold"))],
)
def test_a_rare_query_is_reported_when_each_call_slowed_by_more_than_fifty_ms(
    before_ms: float, after_ms: float, expected: tuple[str, str]
) -> None:
    """One call per 10 s, tripling: +60 ms per call (6 ms/s) is material, +40 ms (4 ms/s) is not."""
    values = np.concatenate([level(30, before_ms, 22), level(60, after_ms, 23)])
    row = analyse(samples_for(values, calls=1))
    assert row["added_load_ms_per_s"] < CONFIG.min_added_load_ms_per_s
    assert row["p_value"] < 1e-50
    assert verdict(row) == expected


# ---------------------------------------------------------------------------------------------------------
# Unannounced analysis: Benjamini-Hochberg across the fleet and require_ongoing


def stepped_with_spike(spike_ms: float, instance: str, seed: int) -> pl.DataFrame:
    """1.0 -> 1.5 ms after 40 samples, with one spike in the slow segment that weakens Welch."""
    values = np.concatenate([level(40, 1.0, 50 + seed), level(60, 1.5, 60 + seed)])
    values[70] = spike_ms
    return samples_for(values, instance=instance, first=-100)


def test_unannounced_p_values_are_benjamini_hochberg_adjusted_across_the_fleet() -> None:
    """Three candidate steps with Welch p ~0.029, ~0.276, ~0.276: alone the first is below 0.05; adjusted
    over the three (0.029 x 3 = 0.086) it is not."""
    samples = pl.concat(
        [
            stepped_with_spike(26.0, "a", 0),
            stepped_with_spike(300.0, "b", 1),
            # Not seed 2: its slow segment holds a chance 2% shift at sample 52 (exact rank p 0.0056),
            # a second change point whose segment holds the spike, i.e. a fourth candidate step.
            stepped_with_spike(300.0, "c", 3),
        ]
    )
    texts = texts_for([(name, 7, QUERY) for name in ("a", "b", "c")])
    out = detect_unannounced_regressions(samples, texts, CONFIG).sort("instance")
    assert out["changepoint_index"].to_list() == [40, 40, 40]
    p, adjusted = out["p_value"].to_numpy(), out["p_adjusted"].to_numpy()
    assert p[0] < CONFIG.fdr_q < adjusted[0]
    np.testing.assert_allclose(adjusted, stats.false_discovery_control(p, method="bh"), rtol=1e-12)
    assert (adjusted >= p).all()
    assert out["reason"].to_list() == ["not_significant_after_fdr"] * 3
    assert out["fdr_method"][0] == "benjamini-hochberg q=0.05 over 3 candidate steps"


def test_unannounced_significant_speed_up_is_not_a_step_up() -> None:
    """2 ms -> 1 ms: a located, very significant change, but only increases are candidates. (Here too a
    fall is never material, so the status alone cannot tell the two gates apart; the reason does.)"""
    values = np.concatenate([level(40, 2.0, 82), level(60, 1.0, 83)])
    out = detect_unannounced_regressions(
        samples_for(values, first=-100), texts_for([("alpha", 7, QUERY)]), CONFIG
    )
    row = out.row(0, named=True)
    assert row["changepoint_index"] == 40 and row["p_value"] < 1e-50
    assert row["latency_change"] == pytest.approx(-0.5, abs=0.02)
    assert verdict(row) == ("no_regression", "below_latency_change_threshold")
    assert row["p_adjusted"] is None or np.isnan(row["p_adjusted"])  # not a candidate of the adjustment


@pytest.mark.parametrize(
    ("calls", "expected"),
    [(CALLS, ("no_regression", "below_materiality_threshold")), (1_000_000, ("detected", "detected"))],
)
def test_unannounced_materiality_is_the_same_rule(calls: int, expected: tuple[str, str]) -> None:
    """0.01 -> 0.03 ms: 2 ms/s of extra work at 100 calls/s is not reported, 2,000 ms/s at 100,000 is.
    Searched (search_every_series): the step is found and judged immaterial; by default a series whose
    range cannot hold a material step is not searched, and says so."""
    values = np.concatenate([level(40, 0.01, 80), level(60, 0.03, 81)])
    samples = samples_for(values, calls=calls, first=-100)
    texts = texts_for([("alpha", 7, QUERY)])
    out = detect_unannounced_regressions(samples, texts, replace(CONFIG, search_every_series=True))
    row = out.row(0, named=True)
    assert row["changepoint_index"] == 40 and row["p_value"] < 1e-50
    assert verdict(row) == expected
    default = detect_unannounced_regressions(samples, texts, CONFIG).row(0, named=True)
    if expected[0] == "detected":
        assert {k: default[k] for k in row} == row
    else:
        assert verdict(default) == ("no_regression", NO_REPORTABLE_STEP)
        assert default["changepoint_index"] is None


def test_latency_steps_possible_is_exact_at_the_gates() -> None:
    """Groups of two intervals, 20% and materiality (50 ms, or 10 ms/s at the highest rate) at the edge."""
    config = RegressionConfig()
    values = np.array([10.0, 12.0, 10.0, 11.9, 1.0, 51.0, 1.0, 2.0, 1.0, 2.0, 0.0, 0.0])
    rates = np.array([0.0, 5.0, 100.0, 100.0, 0.0, 0.0, 9.0, 10.0, 1.0, 9.9, 5.0, 5.0])
    sizes = np.array([2, 2, 2, 2, 2, 2])
    # +2 ms x 5/s = 10 ms/s: yes; x1.19: no; +50 ms: yes; +1 ms x 10/s: yes; +1 ms x 9.9/s: no; flat: no.
    assert latency_steps_possible(values, sizes, rates, config).tolist() == [
        True,
        False,
        True,
        True,
        False,
        False,
    ]


def test_unannounced_step_that_came_back_is_recovered_unless_ongoing_is_not_required() -> None:
    """4x for 30 samples, then back to +10% of the level before (below the 20% that stays a step)."""
    values = np.concatenate([level(40, 1.0, 70), level(30, 4.0, 71), level(40, 1.1, 72)])
    samples = samples_for(values, first=-110)
    texts = texts_for([("alpha", 7, QUERY)])
    row = detect_unannounced_regressions(samples, texts, CONFIG).row(0, named=True)
    assert row["changepoint_index"] == 40 and row["p_value"] < 1e-10
    assert verdict(row) == ("no_regression", "recovered")
    anyway = RegressionConfig(**WINDOW, require_ongoing=False)
    again = detect_unannounced_regressions(samples, texts, anyway).row(0, named=True)
    assert again["changepoint_index"] == 40
    assert verdict(again) == ("detected", "detected")


def test_unannounced_step_whose_remainder_is_immaterial_is_recovered() -> None:
    """The demo's beta under load: a lock bump x80 on a 0.015 ms UPDATE (100 calls/s), over after 30
    samples; the host's load then leaves it x1.5 (0.0075 ms more: 0.75 ms/s of added load, far below 10).
    Past the 20% threshold, but what is left is no step the analysis would report: recovered. The rule
    before (threshold only) reported the ended bump as ongoing."""
    values = np.concatenate([level(40, 0.015, 80), level(30, 1.2, 81), level(40, 0.0225, 82)])
    samples = samples_for(values, first=-110)
    texts = texts_for([("alpha", 7, QUERY)])
    row = detect_unannounced_regressions(samples, texts, CONFIG).row(0, named=True)
    assert row["changepoint_index"] == 40
    assert verdict(row) == ("no_regression", "recovered")
    before = replace(CONFIG, recovered_when_remainder_immaterial=False)
    assert verdict(detect_unannounced_regressions(samples, texts, before).row(0, named=True)) == (
        "detected",
        "detected",
    )
    # A remainder that is material stays a regression: x1.5 of a 1 ms query at 100 calls/s adds 50 ms/s.
    material = np.concatenate([level(40, 1.0, 80), level(30, 80.0, 81), level(40, 1.5, 82)])
    row = detect_unannounced_regressions(samples_for(material, first=-110), texts, CONFIG).row(0, named=True)
    assert verdict(row) == ("detected", "detected")


def test_unannounced_reports_the_step_that_adds_the_most_load() -> None:
    """A hot query (2,500 calls/s) shifts x1.3 with its host's load (0.036 -> 0.047 ms: 27 ms/s more,
    material), then its index is dropped (x600). Tight noise on both sides makes the shift's Welch p the
    smaller; the series' regression is the drop, which `unannounced_pick = "smallest_p"` did not report."""
    values = np.concatenate([level(30, 0.036, 90), level(30, 0.047, 91), level(40, 28.0, 92, spread=0.15)])
    samples = samples_for(values, calls=25_000, first=-100)
    texts = texts_for([("alpha", 7, QUERY)])
    row = detect_unannounced_regressions(samples, texts, CONFIG).row(0, named=True)
    assert (verdict(row), row["changepoint_index"]) == (("detected", "detected"), 60)
    assert row["before_mean_ms"] == pytest.approx(0.047, rel=0.05)
    by_p = detect_unannounced_regressions(samples, texts, replace(CONFIG, unannounced_pick="smallest_p"))
    shift = by_p.row(0, named=True)
    assert (verdict(shift), shift["changepoint_index"]) == (("detected", "detected"), 30)
    assert shift["p_adjusted"] < row["p_adjusted"]
