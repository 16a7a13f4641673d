"""The design's benchmark rules, pure: aggregations of one measurement's samples, per-target termination
rules, filters that do not hide tails, the tail-sensitive mean ratio and the relative-threshold comparison.

Arrays in, small frozen dataclasses out. One convention throughout: a *fitted normal* is the maximum-
likelihood fit (``scipy.stats.norm.fit``): the sample mean and the *population* std (ddof = 0). Identical
values (zero variance) are a normal of std 0 and never raise. The rules are selected by name from
:class:`~jobs.gate.config.GateConfig` (``aggregation``, ``sample_filter``, ``termination_rules``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

import numpy as np
from scipy import stats

from jobs.gate.config import GateConfig
from jobs.gate.stats import _p50_p95, filter_outliers

REGRESSION = "regression"
STRONG_REGRESSION = "strong_regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
ComparisonKind = Literal["regression", "strong_regression", "improvement", "unchanged"]


def _finite_1d(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` flattened, NaN (the padding of ragged rounds) dropped; ValueError when nothing is left or
    a value is infinite."""
    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    if x.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: samples must be finite")
    return x


@dataclass(frozen=True)
class NormalFit:
    """A normal fitted by maximum likelihood: ``mean`` and population ``std`` (0 for identical values)."""

    mean: float
    std: float
    n: int


def fit_normal(values: np.ndarray) -> NormalFit:
    """``scipy.stats.norm.fit`` of the finite samples; identical values give their value and std 0 exactly
    (not a rounding-error std)."""
    x = _finite_1d(values, "fit_normal")
    if np.ptp(x) == 0:
        return NormalFit(float(x[0]), 0.0, int(x.size))
    mean, std = stats.norm.fit(x)
    return NormalFit(float(mean), float(std), int(x.size))


# Aggregations -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregate:
    """One measurement's samples as one number (``value``), with the fitted normal of the same samples."""

    how: str
    value: float
    n: int
    mean: float
    std: float  # population std (the fitted normal's)


def aggregate(values: np.ndarray, how: str, config: GateConfig) -> Aggregate:
    """The samples (1-D, or rounds x calls NaN-padded) aggregated by ``how``:

    - ``minimum``: the smallest sample;
    - ``mean``: the arithmetic mean;
    - ``mean_minus_std``: mean - N x population std, N = ``config.aggregation_std_multiple``;
    - ``normal_fit``: the mean of the maximum-likelihood normal (equal to ``mean`` as a number; the fitted
      std travels with it in ``std`` for reports and the overlap rule);
    - ``p50`` / ``p95``: the point estimates of :mod:`jobs.gate.stats` (numpy's linear interpolation, all
      calls pooled); their confidence intervals are the round-level bootstrap of
      :func:`jobs.gate.stats.compare_latencies`, not recomputed here.
    """
    x = _finite_1d(values, f"aggregate {how}")
    fit = fit_normal(x)
    if how == "minimum":
        value = float(x.min())
    elif how in ("mean", "normal_fit"):
        value = fit.mean
    elif how == "mean_minus_std":
        value = fit.mean - config.aggregation_std_multiple * fit.std
    elif how in ("p50", "p95"):
        value = float(_p50_p95(x)[0 if how == "p50" else 1])
    else:
        raise ValueError(f"unknown aggregation {how!r} (minimum, mean, mean_minus_std, normal_fit, p50, p95)")
    return Aggregate(how, value, int(x.size), fit.mean, fit.std)


# Termination rules ------------------------------------------------------------------------------------

NORMAL_OVERLAP = "normal_overlap"
PROBABILITY_FOR_MINIMUM = "probability_for_minimum"
RUN_AT_MOST = "run_at_most"


@dataclass(frozen=True)
class RuleResult:
    """One termination rule on one target's measurement series: does it fire, and why (or why not)."""

    name: str
    fired: bool
    measurements: int
    statistic: float | None  # overlap, probability or count; None when the rule was not checked yet
    reason: str


def overlap_coefficient(a: NormalFit, b: NormalFit) -> float:
    """The overlap coefficient of two normals, the integral of min(pdf_a, pdf_b) (1 = identical, 0 =
    disjoint). Exact: between crossings of the two densities one of them is the lower one throughout, so
    the overlap is the sum over those intervals of the smaller of the two masses. Zero variance: two
    identical point masses overlap 1; a point mass and anything else 0 (no common density)."""
    if a.std == 0 or b.std == 0:
        return 1.0 if (a.std == b.std and a.mean == b.mean) else 0.0
    if a.std == b.std and a.mean == b.mean:
        return 1.0
    # log pdf_a(x) = log pdf_b(x)  <=>  qa x^2 + qb x + qc = 0
    va, vb = a.std**2, b.std**2
    qa = 1.0 / (2.0 * vb) - 1.0 / (2.0 * va)
    qb = a.mean / va - b.mean / vb
    qc = b.mean**2 / (2.0 * vb) - a.mean**2 / (2.0 * va) + math.log(b.std / a.std)
    if qa == 0:
        roots = [-qc / qb]
    else:
        disc = math.sqrt(max(qb * qb - 4.0 * qa * qc, 0.0))
        q = -0.5 * (qb + math.copysign(disc, qb))  # the stable form: no cancellation when qa is tiny
        roots = sorted({q / qa, qc / q} if q != 0 else {0.0})
    edges = [-math.inf, *roots, math.inf]
    total = 0.0
    for lo, hi in pairwise(edges):
        mass_a = stats.norm.cdf(hi, a.mean, a.std) - stats.norm.cdf(lo, a.mean, a.std)
        mass_b = stats.norm.cdf(hi, b.mean, b.std) - stats.norm.cdf(lo, b.mean, b.std)
        total += min(mass_a, mass_b)
    return float(min(max(total, 0.0), 1.0))


def normal_overlap_rule(measurements: np.ndarray, config: GateConfig) -> RuleResult:
    """Fires with n > ``overlap_after_measurements`` measurements when the overlap coefficient of the
    normals fitted to the first n-1 and to all n is >= ``overlap_threshold``: the last measurement no
    longer moves the distribution. It is a convergence rule of the estimate, not of the comparison: on
    simulated i.i.d. series (normal and lognormal, 40 each) it fired between 25 and 32 measurements at the
    default 0.99, whatever the spread."""
    x = np.asarray(measurements, dtype=float).ravel()
    n = int(x.size)
    if n <= config.overlap_after_measurements:
        return RuleResult(
            NORMAL_OVERLAP,
            False,
            n,
            None,
            f"{n} measurements, needs more than {config.overlap_after_measurements}",
        )
    overlap = overlap_coefficient(fit_normal(x[:-1]), fit_normal(x))
    fired = overlap >= config.overlap_threshold
    sign = ">=" if fired else "<"
    return RuleResult(
        NORMAL_OVERLAP,
        fired,
        n,
        overlap,
        f"overlap {overlap:.4f} {sign} {config.overlap_threshold} after {n}",
    )


def probability_below_minimum(measurements: np.ndarray) -> float:
    """P(next < current minimum) under the normal fitted to the measurements: Phi((min - mean) / std);
    0 for identical measurements (no value can be lower)."""
    x = _finite_1d(measurements, "probability_below_minimum")
    fit = fit_normal(x)
    if fit.std == 0:
        return 0.0
    return float(stats.norm.cdf(x.min(), fit.mean, fit.std))


def probability_for_minimum_rule(measurements: np.ndarray, config: GateConfig) -> RuleResult:
    """Fires with n > ``minimum_probability_after_measurements`` measurements when P(next < current
    minimum) < ``minimum_probability_threshold`` (strictly): a new minimum is unlikely. For i.i.d. samples
    the expected P is about 1 / (n + 1), so at 0.01 it needs ~100 normal measurements (simulated: a median
    of 41, often never within 200), and on right-skewed latencies (lognormal, sigma 0.5) it never fired
    within 200: the minimum of a skewed series sits close to the mean in std units. Zero variance fires."""
    x = np.asarray(measurements, dtype=float).ravel()
    n = int(x.size)
    after = config.minimum_probability_after_measurements
    if n <= after:
        return RuleResult(
            PROBABILITY_FOR_MINIMUM, False, n, None, f"{n} measurements, needs more than {after}"
        )
    p = probability_below_minimum(x)
    fired = p < config.minimum_probability_threshold
    sign = "<" if fired else ">="
    return RuleResult(
        PROBABILITY_FOR_MINIMUM,
        fired,
        n,
        p,
        f"P(next < minimum) {p:.4g} {sign} {config.minimum_probability_threshold} after {n}",
    )


def run_at_most_rule(measurements: np.ndarray, config: GateConfig) -> RuleResult:
    """Fires once there are ``max_measurements`` (or more) measurements: the budget, not a statistic."""
    n = int(np.asarray(measurements).size)
    fired = n >= config.max_measurements
    limit = config.max_measurements
    return RuleResult(RUN_AT_MOST, fired, n, float(n), f"{n} of at most {limit} measurements")


_RULES = {
    NORMAL_OVERLAP: normal_overlap_rule,
    PROBABILITY_FOR_MINIMUM: probability_for_minimum_rule,
    RUN_AT_MOST: run_at_most_rule,
}


def evaluate_rules(measurements: np.ndarray, config: GateConfig) -> tuple[RuleResult, ...]:
    """Every rule of ``config.termination_rules`` on the series, in that order."""
    return tuple(_RULES[name](measurements, config) for name in config.termination_rules)


def first_rule_to_fire(measurements: np.ndarray, config: GateConfig) -> RuleResult | None:
    """The first rule in ``config.termination_rules`` order that fires (default order: normal_overlap,
    probability_for_minimum, run_at_most: a statistical stop is reported before the budget when both
    hold), or None while the target should keep measuring. Its ``name`` is what a report shows."""
    for name in config.termination_rules:
        result = _RULES[name](measurements, config)
        if result.fired:
            return result
    return None


# Filters ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilteredSamples:
    """One target's samples after a filter: the kept values in order and the indices that were dropped."""

    how: str
    kept: np.ndarray
    dropped_indices: tuple[int, ...]

    @property
    def dropped(self) -> int:
        return len(self.dropped_indices)


def _running_mean_sigma_keep(x: np.ndarray, sigmas: float) -> np.ndarray:
    keep = np.zeros(x.size, dtype=bool)
    kept = np.empty(x.size)
    count = 0
    for i, value in enumerate(x):
        if count >= 3:
            so_far = kept[:count]
            if np.ptp(so_far) == 0:
                mean, std = float(so_far[0]), 0.0
            else:
                mean, std = float(so_far.mean()), float(so_far.std())
            if value > mean + sigmas * std:
                continue
        keep[i] = True
        kept[count] = value
        count += 1
    return keep


def filter_samples(values: np.ndarray, how: str, config: GateConfig) -> FilteredSamples:
    """One target's samples in measurement order (1-D), filtered by ``how``:

    - ``none``: keep everything;
    - ``drop_first``: drop the first measurement (a series of one becomes empty);
    - ``running_mean_sigma``: walk the series in order; once 3 values are kept, drop a value strictly above
      mean + ``running_filter_sigmas`` x std of the values kept so far (population std; identical kept
      values have std 0, so only a larger value is dropped). Dropped values never enter the running stats;
    - ``fences``: :func:`jobs.gate.stats.filter_outliers` (``outlier_method`` with ``tukey_k`` / ``mad_z``).

    None of them hides a tail from the gate: :func:`tail_comparison` uses the unfiltered samples.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"filter {how}: needs a 1-D series in measurement order, got shape {x.shape}")
    if how == "none":
        keep = np.ones(x.size, dtype=bool)
    elif how == "drop_first":
        keep = np.arange(x.size) > 0
    elif how == "running_mean_sigma":
        keep = _running_mean_sigma_keep(x, config.running_filter_sigmas)
    elif how == "fences":
        fenced = filter_outliers(x, config)
        keep = (x >= fenced.low_fence) & (x <= fenced.high_fence)
    else:
        raise ValueError(f"unknown filter {how!r} (none, drop_first, running_mean_sigma, fences)")
    return FilteredSamples(how, x[keep], tuple(int(i) for i in np.flatnonzero(~keep)))


# The tail-sensitive comparison and the relative-threshold comparison ----------------------------------


def _ratio(baseline: float, candidate: float, what: str) -> float:
    if not (math.isfinite(baseline) and math.isfinite(candidate)) or baseline < 0 or candidate < 0:
        raise ValueError(f"{what}: values must be finite and >= 0, got {baseline!r} and {candidate!r}")
    if baseline == 0:
        return 1.0 if candidate == 0 else math.inf
    return candidate / baseline


@dataclass(frozen=True)
class TailComparison:
    """Candidate / baseline mean of the unfiltered samples (total time per call); ``exceeds`` at or over
    the threshold."""

    baseline_mean: float
    candidate_mean: float
    ratio: float
    threshold: float
    exceeds: bool


def tail_comparison(baseline: np.ndarray, candidate: np.ndarray, config: GateConfig) -> TailComparison:
    """The check that is done whatever the filter: the mean of *all* samples per side (any shape, NaN
    padding ignored), candidate / baseline, flagged when >= ``config.tail_mean_ratio``. A slow mode in a
    tenth of the calls leaves the median alone and moves the mean."""
    base = float(_finite_1d(baseline, "tail_comparison baseline").mean())
    cand = float(_finite_1d(candidate, "tail_comparison candidate").mean())
    ratio = _ratio(base, cand, "tail_comparison")
    return TailComparison(base, cand, ratio, config.tail_mean_ratio, ratio >= config.tail_mean_ratio)


@dataclass(frozen=True)
class Comparison:
    """A higher-is-worse measurement, candidate / baseline, against a relative threshold t."""

    ratio: float
    kind: ComparisonKind
    threshold: float

    @property
    def fails(self) -> bool:
        """Regressions fail; an improvement is reported and never fails."""
        return self.kind in (REGRESSION, STRONG_REGRESSION)


def compare(baseline_value: float, candidate_value: float, threshold: float) -> Comparison:
    """Classify ratio = candidate / baseline of a higher-is-worse measurement (latency, memory, blocks):
    ``strong_regression`` at ratio >= 1 + 2t, ``regression`` at ratio >= 1 + t, ``improvement`` at
    ratio <= 1 / (1 + t) (the baseline would be a regression of the candidate), else ``unchanged``.
    Both 0: ratio 1; baseline 0 and candidate > 0: ratio inf (strong). ``threshold`` is relative (0.10 =
    10%) and must be > 0."""
    if not (threshold > 0 and math.isfinite(threshold)):
        raise ValueError(f"compare: threshold must be a finite relative threshold > 0, got {threshold!r}")
    ratio = _ratio(float(baseline_value), float(candidate_value), "compare")
    kind: ComparisonKind
    if ratio >= 1.0 + 2.0 * threshold:
        kind = "strong_regression"
    elif ratio >= 1.0 + threshold:
        kind = "regression"
    elif ratio <= 1.0 / (1.0 + threshold):
        kind = "improvement"
    else:
        kind = "unchanged"
    return Comparison(ratio, kind, threshold)
