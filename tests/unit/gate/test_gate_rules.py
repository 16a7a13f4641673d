"""The design's rules (jobs/gate/rules.py) on tiny inline data: aggregations, termination rules, filters,
the tail-sensitive mean ratio and the relative-threshold comparison. Pure, no server."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from jobs.config.loader import load_settings
from jobs.errors import ConfigError
from jobs.gate.config import GateConfig
from jobs.gate.rules import (
    NormalFit,
    aggregate,
    compare,
    evaluate_rules,
    filter_samples,
    first_rule_to_fire,
    fit_normal,
    normal_overlap_rule,
    overlap_coefficient,
    probability_below_minimum,
    probability_for_minimum_rule,
    run_at_most_rule,
    tail_comparison,
)
from jobs.gate.stats import filter_outliers

CONFIG = GateConfig()


# Aggregations -----------------------------------------------------------------------------------------


def test_aggregations_of_an_odd_count() -> None:
    x = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    std = math.sqrt(2.0)  # population std: sum of squared deviations 10 over 5
    assert aggregate(x, "minimum", CONFIG).value == 1.0
    assert aggregate(x, "mean", CONFIG).value == pytest.approx(3.0)
    assert aggregate(x, "mean_minus_std", CONFIG).value == pytest.approx(3.0 - std)
    two = replace(CONFIG, aggregation_std_multiple=2.0)
    assert aggregate(x, "mean_minus_std", two).value == pytest.approx(3.0 - 2 * std)
    fitted = aggregate(x, "normal_fit", CONFIG)
    loc, scale = stats.norm.fit(x)
    assert (fitted.value, fitted.mean, fitted.std) == pytest.approx((loc, loc, scale))
    assert fitted.std == pytest.approx(std)
    assert aggregate(x, "p50", CONFIG).value == 3.0
    assert aggregate(x, "p95", CONFIG).value == pytest.approx(4.8)
    assert aggregate(x, "minimum", CONFIG).n == 5


def test_aggregations_of_an_even_count() -> None:
    x = np.array([4.0, 1.0, 3.0, 2.0])
    assert aggregate(x, "p50", CONFIG).value == pytest.approx(2.5)
    assert aggregate(x, "p95", CONFIG).value == pytest.approx(3.85)
    assert aggregate(x, "mean", CONFIG).value == pytest.approx(2.5)
    assert aggregate(x, "mean_minus_std", CONFIG).value == pytest.approx(2.5 - math.sqrt(1.25))
    assert aggregate(x, "minimum", CONFIG).value == 1.0


def test_p50_and_p95_are_the_gates_own_point_estimates() -> None:
    rounds = [[1.0, 1.2, 1.1], [1.4, 0.9], [1.3, 1.05, 2.5]]  # ragged rounds, NaN-padded inside
    padded = np.array([[1.0, 1.2, 1.1], [1.4, 0.9, np.nan], [1.3, 1.05, 2.5]])
    flat = np.array([v for r in rounds for v in r])
    assert aggregate(padded, "p50", CONFIG).value == pytest.approx(np.percentile(flat, 50))
    assert aggregate(padded, "p95", CONFIG).value == pytest.approx(np.percentile(flat, 95))
    assert aggregate(padded, "mean", CONFIG).n == 8


def test_aggregations_of_identical_samples() -> None:
    x = np.full(7, 0.1)
    for how in ("minimum", "mean", "mean_minus_std", "normal_fit", "p50", "p95"):
        result = aggregate(x, how, CONFIG)
        assert result.value == 0.1 and result.std == 0.0, how


def test_aggregate_rejects_unknown_names_and_empty_input() -> None:
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        aggregate(np.array([1.0]), "median", CONFIG)
    with pytest.raises(ValueError, match="no samples"):
        aggregate(np.array([np.nan]), "mean", CONFIG)


# Termination: normal overlap --------------------------------------------------------------------------


def _numeric_overlap(a: NormalFit, b: NormalFit) -> float:
    def lower(x: float) -> float:
        return float(min(stats.norm.pdf(x, a.mean, a.std), stats.norm.pdf(x, b.mean, b.std)))

    span = 12 * max(a.std, b.std)
    centre = (a.mean + b.mean) / 2
    value, _ = integrate.quad(lower, centre - span, centre + span, limit=200, points=[a.mean, b.mean])
    return float(value)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (NormalFit(0.0, 1.0, 2), NormalFit(1.0, 1.0, 2)),
        (NormalFit(0.0, 1.0, 2), NormalFit(0.5, 2.0, 2)),
        (NormalFit(10.0, 0.3, 2), NormalFit(10.1, 0.31, 2)),
        (NormalFit(5.0, 1.0, 2), NormalFit(5.0, 3.0, 2)),
        (NormalFit(1.0, 0.1, 2), NormalFit(1.0000001, 0.1000000001, 2)),  # nearly equal stds: stable roots
    ],
)
def test_overlap_coefficient_is_the_integral_of_the_lower_density(a: NormalFit, b: NormalFit) -> None:
    assert overlap_coefficient(a, b) == pytest.approx(_numeric_overlap(a, b), abs=1e-6)
    assert overlap_coefficient(a, b) == pytest.approx(overlap_coefficient(b, a), abs=1e-12)


def test_overlap_coefficient_of_equal_stds_has_its_closed_form() -> None:
    # OVL = 2 Phi(-|mu1 - mu2| / (2 sigma))
    assert overlap_coefficient(NormalFit(0, 2, 2), NormalFit(3, 2, 2)) == pytest.approx(
        2 * stats.norm.cdf(-0.75)
    )
    assert overlap_coefficient(NormalFit(1, 2, 2), NormalFit(1, 2, 2)) == 1.0


def test_overlap_coefficient_of_zero_variance() -> None:
    assert overlap_coefficient(NormalFit(2, 0, 3), NormalFit(2, 0, 4)) == 1.0
    assert overlap_coefficient(NormalFit(2, 0, 3), NormalFit(3, 0, 4)) == 0.0
    assert overlap_coefficient(NormalFit(2, 0, 3), NormalFit(2, 0.1, 4)) == 0.0


def test_normal_overlap_needs_more_than_ten_measurements() -> None:
    ten, eleven = np.full(10, 1.5), np.full(11, 1.5)
    assert not normal_overlap_rule(ten, CONFIG).fired
    assert normal_overlap_rule(ten, CONFIG).statistic is None
    fired = normal_overlap_rule(eleven, CONFIG)
    assert fired.fired and fired.statistic == 1.0 and fired.measurements == 11


def test_normal_overlap_compares_the_fits_of_n_minus_one_and_n() -> None:
    x = np.array([1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.15, 0.85, 1.0, 1.1, 1.02])
    expected = overlap_coefficient(fit_normal(x[:-1]), fit_normal(x))
    result = normal_overlap_rule(x, CONFIG)
    assert result.statistic == pytest.approx(expected)
    at = normal_overlap_rule(x, replace(CONFIG, overlap_threshold=expected))
    above = normal_overlap_rule(x, replace(CONFIG, overlap_threshold=float(np.nextafter(expected, 2.0))))
    assert at.fired and not above.fired  # >= the threshold fires, exactly at it included
    # A far-off last measurement moves the fit: no overlap stop.
    assert not normal_overlap_rule(np.append(x[:-1], 3.0), CONFIG).fired


def test_normal_overlap_after_a_first_change_from_zero_variance_does_not_fire() -> None:
    x = np.append(np.full(11, 1.0), 1.5)  # 11 identical, then one different: point mass vs a normal
    result = normal_overlap_rule(x, CONFIG)
    assert not result.fired and result.statistic == 0.0


# Termination: probability for minimum -----------------------------------------------------------------


def test_probability_below_minimum_under_the_fitted_normal() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    sigma = math.sqrt(35.0 / 12.0)  # population std of 1..6
    assert probability_below_minimum(x) == pytest.approx(stats.norm.cdf((1.0 - 3.5) / sigma))
    assert probability_below_minimum(np.full(6, 2.0)) == 0.0


def test_probability_for_minimum_needs_more_than_five_measurements() -> None:
    assert not probability_for_minimum_rule(np.full(5, 2.0), CONFIG).fired
    six = probability_for_minimum_rule(np.full(6, 2.0), CONFIG)
    assert six.fired and six.statistic == 0.0


def test_probability_for_minimum_fires_strictly_below_its_threshold() -> None:
    x = np.array([1.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    p = probability_below_minimum(x)
    assert 0 < p < 0.5
    assert not probability_for_minimum_rule(x, replace(CONFIG, minimum_probability_threshold=p)).fired
    above = replace(CONFIG, minimum_probability_threshold=float(np.nextafter(p, 1.0)))
    assert probability_for_minimum_rule(x, above).fired
    # Normal-looking data at the default threshold: a new minimum is still likely, keep measuring.
    assert not probability_for_minimum_rule(np.array([1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02]), CONFIG).fired


# Termination: run at most and the first rule to fire --------------------------------------------------


def test_run_at_most_fires_at_max_measurements() -> None:
    config = replace(CONFIG, min_measurements=2, max_measurements=5)
    assert not run_at_most_rule(np.arange(4.0), config).fired
    assert run_at_most_rule(np.arange(5.0), config).fired
    assert run_at_most_rule(np.arange(6.0), config).fired


def test_first_rule_to_fire_follows_the_configured_order() -> None:
    identical = np.full(11, 3.0)  # every rule fires: overlap 1, P = 0, 11 of at most 11
    config = replace(CONFIG, min_measurements=2, max_measurements=11)
    assert all(r.fired for r in evaluate_rules(identical, config))
    first = first_rule_to_fire(identical, config)
    assert first is not None and first.name == "normal_overlap"
    budget_first = replace(config, termination_rules=("run_at_most", "normal_overlap"))
    first = first_rule_to_fire(identical, budget_first)
    assert first is not None and first.name == "run_at_most"
    six = first_rule_to_fire(np.full(6, 3.0), config)  # too few for overlap, enough for the minimum rule
    assert six is not None and six.name == "probability_for_minimum" and "after 6" in six.reason
    assert first_rule_to_fire(np.array([1.0, 1.1, 0.9, 1.05, 0.95, 1.0]), config) is None
    only_budget = replace(config, termination_rules=("run_at_most",))
    assert first_rule_to_fire(np.full(10, 3.0), only_budget) is None


def test_termination_rule_names_are_checked() -> None:
    with pytest.raises(ValueError, match="termination_rules must be distinct names"):
        GateConfig(termination_rules=("normal_overlap", "forever"))
    with pytest.raises(ValueError, match="termination_rules must be distinct names"):
        GateConfig(termination_rules=("run_at_most", "run_at_most"))
    with pytest.raises(ValueError, match="overlap_threshold must be in"):
        GateConfig(overlap_threshold=1.5)


# Filters ----------------------------------------------------------------------------------------------


def test_none_and_drop_first_filters() -> None:
    x = np.array([9.0, 1.0, 2.0])
    assert filter_samples(x, "none", CONFIG).kept.tolist() == [9.0, 1.0, 2.0]
    dropped = filter_samples(x, "drop_first", CONFIG)
    assert dropped.kept.tolist() == [1.0, 2.0] and dropped.dropped_indices == (0,)
    assert filter_samples(np.array([5.0]), "drop_first", CONFIG).kept.size == 0


def test_running_mean_sigma_starts_once_three_values_are_kept() -> None:
    assert filter_samples(np.array([1.0, 1.0, 100.0]), "running_mean_sigma", CONFIG).dropped == 0
    # 5 is dropped against [1, 1, 1]; then 3 is compared with the kept values only (mean 1, std 0), not
    # with [1, 1, 1, 5] (mean 2, std 1.73, which would keep it).
    result = filter_samples(np.array([1.0, 1.0, 1.0, 5.0, 3.0, 1.0]), "running_mean_sigma", CONFIG)
    assert result.dropped_indices == (3, 4) and result.kept.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_running_mean_sigma_boundary_and_population_std() -> None:
    # [1, 3, 3] keeps 1; then the kept [1, 3, 3, 1] have mean 2 and population std 1: the bound is 3.
    keep = filter_samples(np.array([1.0, 3.0, 3.0, 1.0, 3.0]), "running_mean_sigma", CONFIG)
    assert keep.dropped == 0  # exactly at mean + 1 std is kept (only strictly above is dropped)
    drop = filter_samples(np.array([1.0, 3.0, 3.0, 1.0, 3.1]), "running_mean_sigma", CONFIG)
    assert drop.dropped_indices == (4,)  # the sample std (1.155) would have kept 3.1
    wider = replace(CONFIG, running_filter_sigmas=2.0)
    assert filter_samples(np.array([1.0, 3.0, 3.0, 1.0, 3.9]), "running_mean_sigma", wider).dropped == 0


def test_running_mean_sigma_with_zero_variance() -> None:
    assert filter_samples(np.full(6, 0.1), "running_mean_sigma", CONFIG).dropped == 0
    above = filter_samples(np.array([2.0, 2.0, 2.0, 2.0000001, 1.9]), "running_mean_sigma", CONFIG)
    assert above.dropped_indices == (3,)


def test_fences_filter_is_the_gates_outlier_filter() -> None:
    x = np.array([1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 40.0, 1.02])
    result = filter_samples(x, "fences", CONFIG)
    assert result.kept.tolist() == filter_outliers(x, CONFIG).kept.tolist()
    assert result.dropped_indices == (6,)
    assert filter_samples(x, "fences", replace(CONFIG, outlier_method="none")).dropped == 0


def test_filters_reject_unknown_names_and_2d_input() -> None:
    with pytest.raises(ValueError, match="unknown filter 'tukey'"):
        filter_samples(np.array([1.0]), "tukey", CONFIG)
    with pytest.raises(ValueError, match="1-D series"):
        filter_samples(np.ones((2, 2)), "none", CONFIG)


# Tail-sensitive comparison ----------------------------------------------------------------------------


def test_same_median_heavier_tail_is_caught_whatever_the_filter() -> None:
    baseline = np.ones(100)
    candidate = np.concatenate([np.ones(90), np.full(10, 12.5)])  # a slow mode in 10% of the calls
    fenced = filter_samples(candidate, "fences", CONFIG)
    assert fenced.dropped == 10  # the fences hide the slow mode entirely...
    assert np.median(fenced.kept) == np.median(baseline)
    tail = tail_comparison(baseline, candidate, CONFIG)  # ...the unfiltered mean does not
    assert tail.ratio == pytest.approx(2.15) and tail.exceeds


def test_tail_comparison_at_its_threshold() -> None:
    base = np.array([1.0, 1.0])
    assert tail_comparison(base, np.array([1.25, 1.25]), CONFIG).exceeds  # at the ratio: flagged
    assert not tail_comparison(base, np.array([1.2499, 1.2499]), CONFIG).exceeds
    padded = np.array([[1.0, np.nan], [1.0, 1.0]])
    assert tail_comparison(padded, padded, CONFIG).ratio == 1.0
    zeros = tail_comparison(np.zeros(3), np.zeros(3), CONFIG)
    assert zeros.ratio == 1.0 and not zeros.exceeds


# Relative-threshold comparison ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "kind"),
    [
        (150.0, "strong_regression"),  # exactly 1 + 2t
        (149.99, "regression"),
        (125.0, "regression"),  # exactly 1 + t
        (124.99, "unchanged"),
        (100.0, "unchanged"),
        (80.01, "unchanged"),
        (80.0, "improvement"),  # exactly 1 / (1 + t)
        (10.0, "improvement"),
    ],
)
def test_compare_kinds_and_boundaries(candidate: float, kind: str) -> None:
    result = compare(100.0, candidate, 0.25)
    assert result.kind == kind and result.ratio == pytest.approx(candidate / 100.0)
    assert result.fails == (kind in ("regression", "strong_regression"))


def test_compare_at_ten_percent_and_with_zeros() -> None:
    assert compare(100.0, 110.0, 0.10).kind == "regression"
    assert compare(100.0, 120.0, 0.10).kind == "strong_regression"
    assert not compare(100.0, 50.0, 0.10).fails  # an improvement never fails
    assert compare(0.0, 0.0, 0.5).kind == "unchanged"
    zero_to_some = compare(0.0, 4.0, 0.5)
    assert zero_to_some.ratio == math.inf and zero_to_some.kind == "strong_regression"


def test_compare_rejects_bad_input() -> None:
    for baseline, candidate, threshold in ((1.0, -1.0, 0.1), (math.nan, 1.0, 0.1), (1.0, 1.0, 0.0)):
        with pytest.raises(ValueError, match="compare"):
            compare(baseline, candidate, threshold)


# Config -----------------------------------------------------------------------------------------------


def test_rule_defaults_keep_todays_gate_and_bad_names_are_rejected() -> None:
    assert (CONFIG.aggregation, CONFIG.sample_filter) == ("p50", "fences")
    assert CONFIG.termination_rules == ("normal_overlap", "probability_for_minimum", "run_at_most")
    with pytest.raises(ValueError, match="sample_filter must be one of"):
        GateConfig(sample_filter="mean_sigma")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aggregation must be one of"):
        GateConfig(aggregation="median")  # type: ignore[arg-type]


def test_rule_names_in_a_config_file_are_checked_without_a_traceback(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[gate]\nsample_filter = "running_mean_sigma"\ntermination_rules = ["run_at_most"]\n')
    gate = load_settings(good, env={}).settings.gate
    assert (gate.sample_filter, gate.termination_rules) == ("running_mean_sigma", ("run_at_most",))
    bad = tmp_path / "bad.toml"
    bad.write_text('[gate]\ntermination_rules = ["normal_overlap", "forever"]\n')
    with pytest.raises(ConfigError, match=r"bad.toml: \[gate\] .*termination_rules must be distinct names"):
        load_settings(bad, env={})
    typo = tmp_path / "typo.toml"
    typo.write_text('[gate]\nsample_filter = "drop_frist"\n')
    with pytest.raises(ConfigError, match="did you mean 'drop_first'"):
        load_settings(typo, env={})
