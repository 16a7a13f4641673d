"""Pure judgement of one scenario's measurement in one cycle, and of the scenario over its cycles.

A cycle measures a scenario on both targets (interleaved, measurement by measurement) until each target's
termination rule fires (:mod:`jobs.gate.rules`) or the comparison is decided by its CI. What comes out:

- per measurement (:data:`MEASUREMENTS`) a :class:`MeasurementComparison`: both sides aggregated, the ratio
  candidate / baseline with a seeded bootstrap CI (wallclock) or exact (the per-execution counters and the
  memory peaks), classified by :func:`jobs.gate.rules.compare` against the measurement's own relative
  threshold, and a verdict: BLOCK for a strong regression (ratio >= 1 + 2t) whose CI lower bound is at or
  over 1 + t, WARN for a regression (>= 1 + t) whose CI lower bound is over 1, never for an improvement
  and never under the measurement's minimum absolute increase;
- for wallclock also the tail check on the unfiltered samples (mean ratio, :func:`tail_verdict`), so a
  heavier tail under the same median is caught whatever the filter dropped;
- over the K cycles, per measurement, the cycle selected by ``config.selection`` on asymmetry-corrected
  ratios (wallclock only: memory and block counts do not depend on the server's speed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN, GateConfig
from jobs.gate.rules import (
    IMPROVEMENT,
    REGRESSION,
    STRONG_REGRESSION,
    UNCHANGED,
    aggregate,
    compare,
    filter_samples,
)
from jobs.gate.selection import (
    Asymmetry,
    CorrectedRatio,
    CycleResult,
    CycleSelection,
    Judge,
    correct_cycle,
    correct_ratio,
    select_cycle,
)
from jobs.gate.stats import widen_for_few_clusters

WALLCLOCK = "wallclock"
MEASUREMENTS: tuple[str, ...] = (
    WALLCLOCK,
    "memory",
    "rss",
    "worker_rss",
    "temp_blocks",
    "shared_blocks",
    "wal_bytes",
    "planning",
)
UNITS = {
    WALLCLOCK: "ms",
    "memory": "bytes",
    "rss": "bytes",
    "worker_rss": "bytes",
    "temp_blocks": "blocks",
    "shared_blocks": "blocks",
    "wal_bytes": "bytes",
    "planning": "ms",
}
TAIL = "wallclock_mean"  # the tail-sensitive row: mean wallclock of the unfiltered samples


def threshold_for(measurement: str, config: GateConfig) -> float:
    """The measurement's relative threshold t (strong at 2t)."""
    name = {
        WALLCLOCK: "wallclock_threshold",
        TAIL: "wallclock_threshold",
        "memory": "memory_threshold",
        "rss": "memory_threshold",
        "worker_rss": "worker_memory_threshold",
        "temp_blocks": "temp_blocks_threshold",
        "shared_blocks": "shared_blocks_threshold",
        "wal_bytes": "wal_bytes_threshold",
        "planning": "planning_threshold",
    }[measurement]
    return float(getattr(config, name))


def min_increase_for(measurement: str, config: GateConfig) -> float:
    """The absolute increase (in the measurement's unit) a regression needs."""
    return float(
        {
            WALLCLOCK: config.min_latency_increase_ms,
            TAIL: config.min_latency_increase_ms,
            "memory": config.memory_min_increase_bytes,
            "rss": config.memory_min_increase_bytes,
            "worker_rss": config.memory_min_increase_bytes,
            "temp_blocks": config.blocks_min_increase,
            "shared_blocks": config.blocks_min_increase,
            "wal_bytes": config.wal_min_increase_bytes,
            "planning": config.planning_min_increase_ms,
        }[measurement]
    )


def level(kind: str, ci: tuple[float, float], increase: float, threshold: float, min_increase: float) -> str:
    """The verdict of a classified ratio: BLOCK = strong regression with CI lower bound >= 1 + t; WARN =
    regression (or strong) with CI lower bound > 1; PASS otherwise, and always under the minimum absolute
    increase. Improvements never fail."""
    if increase < min_increase:
        return PASS
    if kind == STRONG_REGRESSION and ci[0] >= 1.0 + threshold:
        return BLOCK
    if kind in (REGRESSION, STRONG_REGRESSION) and ci[0] > 1.0:
        return WARN
    return PASS


@dataclass(frozen=True)
class MeasurementComparison:
    """One measurement of one scenario in one cycle (or the selected cycle of the scenario)."""

    measurement: str
    unit: str
    aggregation: str
    baseline: float
    candidate: float
    ratio: float
    ci: tuple[float, float]
    threshold: float
    kind: str
    """regression | strong_regression | improvement | unchanged (:func:`jobs.gate.rules.compare`)"""
    verdict: str
    n_baseline: int
    n_candidate: int
    dropped_baseline: int = 0
    dropped_candidate: int = 0

    @property
    def increase(self) -> float:
        return self.candidate - self.baseline


def _floored_ratio(baseline: float, candidate: float, floor: float) -> float:
    """Counts and peaks below the minimum increase are read as the minimum: 0 -> 5000 temp blocks is a
    finite (strong) ratio, 0 -> 0 is 1."""
    floor = max(floor, 1e-12)
    return max(candidate, floor) / max(baseline, floor)


def compare_values(
    measurement: str, baseline: float, candidate: float, config: GateConfig, how: str = "mean"
) -> MeasurementComparison:
    """An exact comparison of one number per side (a per-execution counter or a memory peak)."""
    threshold = threshold_for(measurement, config)
    floor = min_increase_for(measurement, config)
    ratio = _floored_ratio(baseline, candidate, floor)
    kind = compare(1.0, ratio, threshold).kind
    verdict = level(kind, (ratio, ratio), candidate - baseline, threshold, floor)
    return MeasurementComparison(
        measurement, UNITS.get(measurement, "ms"), how, baseline, candidate, ratio, (ratio, ratio),
        threshold, kind, verdict, 1, 1,
    )  # fmt: skip


def compare_readings(
    measurement: str, baseline: Sequence[float], candidate: Sequence[float], config: GateConfig, how: str
) -> MeasurementComparison:
    """Memory readings of one cycle (``memory_executions`` a side), aggregated by ``how`` (minimum, mean or
    maximum) and compared like counts (floored at the minimum increase), with a CI spanning what the
    readings allow: min(candidate) / max(baseline) to max(candidate) / min(baseline). One reading a side
    gives an exact ratio. A BLOCK then needs every candidate reading over every baseline one by 1 + t, and
    a bounded PASS the largest candidate reading under the smallest baseline one by 1 + t (or immaterial):
    allocator noise (identical databases read x0.27-x2.33 on this host) stays undecided, not a regression."""
    if not baseline or not candidate:
        raise ValueError(f"{measurement}: no readings")
    agg = {"minimum": min, "maximum": max}.get(how, lambda v: sum(v) / len(v))
    b, c = float(agg(baseline)), float(agg(candidate))
    threshold = threshold_for(measurement, config)
    floor = min_increase_for(measurement, config)
    ratio = _floored_ratio(b, c, floor)
    lo = _floored_ratio(max(baseline), min(candidate), floor)
    hi = _floored_ratio(min(baseline), max(candidate), floor)
    ci = (min(lo, ratio), max(hi, ratio))
    kind = compare(1.0, ratio, threshold).kind
    verdict = level(kind, ci, c - b, threshold, floor)
    return MeasurementComparison(
        measurement, UNITS.get(measurement, "bytes"), how, b, c, ratio, ci, threshold, kind, verdict,
        len(baseline), len(candidate),
    )  # fmt: skip


def _aggregate_resamples(samples: np.ndarray, how: str, config: GateConfig) -> np.ndarray:
    """``how`` over the last axis of a (resamples x n) array: the vectorized twin of rules.aggregate."""
    if how == "minimum":
        return samples.min(axis=-1)
    if how in ("mean", "normal_fit"):
        return samples.mean(axis=-1)
    if how == "mean_minus_std":
        return samples.mean(axis=-1) - config.aggregation_std_multiple * samples.std(axis=-1)
    if how in ("p50", "p95"):
        return np.percentile(samples, 50 if how == "p50" else 95, axis=-1)
    raise ValueError(f"unknown aggregation {how!r}")


def bootstrap_ratio_ci(
    baseline: np.ndarray, candidate: np.ndarray, how: str, config: GateConfig, salt: int = 0
) -> tuple[float, float]:
    """Seeded percentile bootstrap of aggregate(candidate) / aggregate(baseline), each side resampled on
    its own. Constant samples give the exact ratio (no crash on zero variance)."""
    x, y = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    point = float(aggregate(y, how, config).value) / float(aggregate(x, how, config).value)
    rng = np.random.default_rng([config.seed, salt])
    n = config.bootstrap_resamples
    bx = _aggregate_resamples(x[rng.integers(0, x.size, size=(n, x.size))], how, config)
    by = _aggregate_resamples(y[rng.integers(0, y.size, size=(n, y.size))], how, config)
    ok = bx > 0
    ratios = by[ok] / bx[ok]
    if ratios.size == 0:
        return point, point
    tail = (1.0 - config.confidence) / 2.0 * 100.0
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    # With few measurements the percentile bootstrap is too narrow (a z-interval with the biased variance):
    # stretched by t(n-1)/z x sqrt(n/(n-1)) about the estimate, as the paired-rounds engine does.
    wide_lo, wide_hi = widen_for_few_clusters(
        np.array([point]), np.array([lo]), np.array([hi]), min(x.size, y.size), config.confidence
    )
    lo, hi = float(min(wide_lo[0], point)), float(max(wide_hi[0], point))
    # Symmetric on the log scale, by its wider side: the percentile bootstrap of a median over few
    # measurements is lumpy, and one side can hug the estimate (seen: x1.002 with a CI of 0.335-1.020 from
    # 15 measurements of a 0-4 ms sleep, which PASSed what it could not rule out).
    if lo > 0 and point > 0:
        spread = max(hi / point, point / lo)
        lo, hi = point / spread, point * spread
    return lo, hi


def compare_samples(
    measurement: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    config: GateConfig,
    how: str | None = None,
    sample_filter: str | None = None,
    salt: int = 0,
) -> MeasurementComparison:
    """Filter each side (``config.sample_filter``), aggregate (``config.aggregation``), bootstrap the ratio
    CI, classify and judge. Needs >= 2 kept samples per side."""
    how = how or config.aggregation
    fb = filter_samples(np.asarray(baseline, dtype=float), sample_filter or config.sample_filter, config)
    fc = filter_samples(np.asarray(candidate, dtype=float), sample_filter or config.sample_filter, config)
    if fb.kept.size < 2 or fc.kept.size < 2:
        raise ValueError(
            f"{measurement}: need >= 2 samples per side after filtering, "
            f"got {fb.kept.size} and {fc.kept.size}"
        )
    base = aggregate(fb.kept, how, config).value
    cand = aggregate(fc.kept, how, config).value
    if not (base > 0 and cand > 0):
        raise ValueError(f"{measurement}: aggregated values must be positive, got {base} and {cand}")
    ratio = cand / base
    ci = bootstrap_ratio_ci(fb.kept, fc.kept, how, config, salt)
    threshold = threshold_for(measurement, config)
    kind = compare(base, cand, threshold).kind
    verdict = level(kind, ci, cand - base, threshold, min_increase_for(measurement, config))
    return MeasurementComparison(
        measurement, UNITS.get(measurement, "ms"), how, base, cand, ratio, ci, threshold, kind, verdict,
        int(fb.kept.size), int(fc.kept.size), fb.dropped, fc.dropped,
    )  # fmt: skip


def tail_verdict(
    baseline: Sequence[float], candidate: Sequence[float], config: GateConfig, salt: int = 0
) -> MeasurementComparison:
    """The tail check, on *unfiltered* samples: mean wallclock candidate / baseline with a bootstrap CI.
    WARN at ratio >= ``tail_mean_ratio`` with CI lower bound > 1; BLOCK when the CI lower bound itself is at
    or over ``tail_mean_ratio``. A slow mode in a tenth of the executions leaves the median alone and moves
    the mean."""
    x, y = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    base, cand = float(x.mean()), float(y.mean())
    ratio = cand / base
    ci = bootstrap_ratio_ci(x, y, "mean", config, salt + 7919)
    t = config.tail_mean_ratio
    if cand - base < config.min_latency_increase_ms:
        verdict = PASS
    elif ci[0] >= t:
        verdict = BLOCK
    elif ratio >= t and ci[0] > 1.0:
        verdict = WARN
    else:
        verdict = PASS
    kind = STRONG_REGRESSION if verdict == BLOCK else REGRESSION if verdict == WARN else UNCHANGED
    if ratio <= 1.0 / t:
        kind = IMPROVEMENT
    return MeasurementComparison(
        TAIL,
        "ms",
        "mean (unfiltered)",
        base,
        cand,
        ratio,
        ci,
        t - 1.0,
        kind,
        verdict,
        int(x.size),
        int(y.size),
    )


def decided_by_ci(comparison: MeasurementComparison) -> str | None:
    """The CI-based stop rules of a wallclock comparison: ``decisive_block`` (CI lower bound >= 1 + 2t),
    ``decisive_unchanged`` (CI inside (1 / (1 + t), 1 + t)), else None."""
    t = comparison.threshold
    lo, hi = comparison.ci
    if comparison.verdict == BLOCK and lo >= 1.0 + 2.0 * t:
        return "decisive_block"
    if 1.0 / (1.0 + t) < lo and hi < 1.0 + t:
        return "decisive_unchanged"
    return None


def corrected_for_stop(
    comparison: MeasurementComparison, asymmetry: Asymmetry | None, config: GateConfig
) -> MeasurementComparison:
    """The comparison as the verdict will see it, for the in-cycle CI stop: ratio and CI divided by the
    asymmetry (its uncertainty carried; an unreliable one only with calibration_unreliable = carry)."""
    if asymmetry is None or (not asymmetry.reliable and config.calibration_unreliable != "carry"):
        return comparison
    corrected = correct_ratio(comparison.ratio, comparison.ci, replace(asymmetry, reliable=True))
    return replace(comparison, ratio=corrected.ratio, ci=corrected.ci)


def corrected_verdict(
    comparison: MeasurementComparison, asymmetry: Asymmetry | None, config: GateConfig
) -> str:
    """One cycle's verdict as the selection will see it: wallclock and its tail row judged on the
    asymmetry-corrected ratio and CI, every other measurement as measured."""
    if comparison.measurement not in (WALLCLOCK, TAIL):
        return comparison.verdict
    corrected = corrected_for_stop(comparison, asymmetry, config)
    if corrected is comparison:
        return comparison.verdict
    if comparison.measurement == TAIL:
        return _tail_judge(config)(corrected.ratio, corrected.ci)
    return judge_corrected(WALLCLOCK, comparison.baseline, config)(corrected.ratio, corrected.ci)


def judge_corrected(measurement: str, baseline_value: float, config: GateConfig) -> Judge:
    """A judge for :func:`jobs.gate.selection.correct_cycle`: the verdict of a corrected ratio and CI."""
    threshold = threshold_for(measurement, config)
    floor = min_increase_for(measurement, config)

    def judge(ratio: float, ci: tuple[float, float]) -> str:
        kind = compare(1.0, ratio, threshold).kind
        return level(kind, ci, baseline_value * (ratio - 1.0), threshold, floor)

    return judge


@dataclass(frozen=True)
class SelectedMeasurement:
    """One measurement of a scenario over its cycles: every cycle, the selected one and the correction."""

    measurement: str
    cycles: tuple[MeasurementComparison, ...]
    chosen: MeasurementComparison
    """The selected cycle's comparison (its ratio, CI and verdict corrected when calibration applied)."""
    chosen_cycle: int
    raw_ratio: float
    correction: str
    regressed_cycles: int
    verdict: str
    decided: bool = True
    """verdict_rule = bounded: False while the CI straddles a threshold (the verdict is then INCONCLUSIVE);
    the design rule always decides."""
    decided_by: str = ""
    """Which rule settled the verdict (:data:`BOUNDED_RULES`), or ``design_selection``."""
    rules_out: float | None = None
    """The CI's upper bound: the data rule out a regression larger than this ratio (None: unbounded)."""


def select_measurement(
    measurement: str,
    cycles: Sequence[MeasurementComparison],
    asymmetry: Asymmetry | None,
    config: GateConfig,
) -> SelectedMeasurement:
    """Select the cycle standing for the scenario (``config.selection`` over asymmetry-corrected ratios;
    only wallclock and its tail row are corrected). With the best rule the scenario regressed only if every
    cycle did."""
    if not cycles:
        raise ValueError(f"{measurement}: no cycles to select from")
    results = [
        CycleResult(i, _positive(c.ratio), _positive_ci(c.ci, c.ratio), c.verdict)
        for i, c in enumerate(cycles)
    ]
    corrected_kind = measurement in (WALLCLOCK, TAIL)
    baseline_value = float(np.median([c.baseline for c in cycles]))
    judge = (
        judge_corrected(measurement, baseline_value, config) if measurement != TAIL else _tail_judge(config)
    )
    if asymmetry is not None and not asymmetry.reliable and config.calibration_unreliable == "carry":
        asymmetry = replace(asymmetry, reliable=True, note=f"{asymmetry.note}; applied with its uncertainty")
    selection, correction = _select(results, asymmetry if corrected_kind else None, config, judge)
    chosen = selection.chosen
    raw = cycles[chosen.cycle]
    verdict = chosen.verdict or raw.verdict  # best: a regressed chosen cycle means every cycle regressed
    kind = compare(1.0, chosen.ratio, raw.threshold).kind if measurement != TAIL else raw.kind
    selected = MeasurementComparison(
        raw.measurement, raw.unit, raw.aggregation, raw.baseline, raw.candidate, chosen.ratio, chosen.ci,
        raw.threshold, kind, verdict, raw.n_baseline, raw.n_candidate, raw.dropped_baseline,
        raw.dropped_candidate,
    )  # fmt: skip
    regressed = selection.regressed_cycles
    return SelectedMeasurement(
        measurement, tuple(cycles), selected, chosen.cycle, raw.ratio, correction.reason,
        regressed, verdict,
    )  # fmt: skip


def select_interleaved(
    measurement: str,
    raw: Sequence[MeasurementComparison],
    corrected: Sequence[MeasurementComparison],
    calibration: Sequence[MeasurementComparison],
    config: GateConfig,
) -> SelectedMeasurement:
    """Interleaved A/A (aa_timing = interleaved): every cycle is judged on its own corrected comparison,
    the candidate against the baseline's copy on the candidate's server measured in the same cycle
    ((C / B) / (A' / B) = C / A' for one aggregate), and the cycle is selected by ``config.selection``
    over those. The row keeps the chosen cycle's measured baseline and candidate values and its raw ratio,
    and says what that cycle's asymmetry was."""
    if not cycles_aligned(raw, corrected, calibration):
        raise ValueError(
            f"{measurement}: {len(raw)} raw, {len(corrected)} corrected and {len(calibration)} calibration "
            "cycles; need one of each per cycle"
        )
    selection = select_measurement(measurement, corrected, None, config)
    i = selection.chosen_cycle
    chosen = replace(selection.chosen, baseline=raw[i].baseline, candidate=raw[i].candidate)
    correction = (
        f"interleaved A/A: raw ×{raw[i].ratio:.3f}, the baseline's copy ×{calibration[i].ratio:.3f} in the "
        f"same cycle; candidate / copy ×{selection.chosen.ratio:.3f}"
    )
    return replace(selection, chosen=chosen, raw_ratio=raw[i].ratio, correction=correction)


def cycles_aligned(*per_cycle: Sequence[MeasurementComparison]) -> bool:
    return bool(per_cycle) and len({len(c) for c in per_cycle}) == 1 and len(per_cycle[0]) > 0


def _tail_judge(config: GateConfig) -> Judge:
    t = config.tail_mean_ratio

    def judge(ratio: float, ci: tuple[float, float]) -> str:
        if ci[0] >= t:
            return BLOCK
        if ratio >= t and ci[0] > 1.0:
            return WARN
        return PASS

    return judge


def _positive(x: float) -> float:
    return x if x > 0 and math.isfinite(x) else 1e-12 if x <= 0 else 1e12


def _positive_ci(ci: tuple[float, float], ratio: float) -> tuple[float, float]:
    r = _positive(ratio)
    return min(_positive(ci[0]), r), max(_positive(ci[1]), r)


def _select(
    results: list[CycleResult], asymmetry: Asymmetry | None, config: GateConfig, judge: Judge
) -> tuple[CycleSelection, CorrectedRatio]:
    """Every cycle corrected by the asymmetry (unchanged without one), the selection over them, and the
    chosen cycle's raw and corrected ratio."""
    corrected = [correct_cycle(c, asymmetry, judge) for c in results]
    selection = select_cycle(corrected, config.selection)
    raw = results[selection.chosen.cycle]
    return selection, correct_ratio(raw.ratio, raw.ci, asymmetry)


def blocks_needed(cycles: int, rule: str) -> int:
    """BLOCKed cycles after which the scenario's verdict is BLOCK whatever the remaining cycles say: the
    median (position (K - 1) // 2 by ratio) is then among them; the best rule needs every cycle."""
    return cycles if rule == "best" else cycles - (cycles - 1) // 2


# The verdict bounded by its confidence (verdict_rule = bounded) --------------------------------------------

# Why a bounded verdict is what it is.
CI_OVER_STRONG = "ci_lower_over_threshold"  # BLOCK: ratio >= 1 + 2t, CI lower bound >= 1 + t
CI_OVER_ONE = "ci_lower_over_one"  # WARN: ratio >= 1 + t, CI lower bound > 1
CI_UNDER_THRESHOLD = "ci_upper_under_threshold"  # PASS: the CI's upper bound is under 1 + t
IMMATERIAL = "immaterial"  # PASS: even at the CI's upper bound the increase is under the minimum
UNDECIDED = "undecided"  # INCONCLUSIVE (so far): the CI straddles a threshold
BOUNDED_RULES = (CI_OVER_STRONG, CI_OVER_ONE, CI_UNDER_THRESHOLD, IMMATERIAL, UNDECIDED)


def bounded_level(
    measurement: str, ratio: float, ci: tuple[float, float], baseline_value: float, config: GateConfig
) -> tuple[str, str]:
    """(verdict, rule) of a ratio and its CI, the verdict bounded by its confidence:

    - BLOCK when the ratio is a strong regression (>= 1 + 2t) and the CI's lower bound is >= 1 + t;
    - WARN when the ratio is a regression (>= 1 + t) and the CI's lower bound is > 1;
    - PASS when the CI's upper bound is < 1 + t (the run rules out a regression at the threshold), or the
      increase at the upper bound is under the measurement's minimum absolute increase (immaterial);
    - else INCONCLUSIVE (undecided).

    A WARN or BLOCK also needs the point increase to reach the minimum. Improvements never fail: a ratio
    under 1 / (1 + t) with a CI reaching 1 + t is undecided, not a regression. The tail row uses
    ``tail_mean_ratio`` for 1 + t and for the strong level (as :func:`tail_verdict`)."""
    lo, hi = ci
    if measurement == TAIL:
        warn_at = strong_at = block_lo = config.tail_mean_ratio
    else:
        t = threshold_for(measurement, config)
        warn_at, strong_at, block_lo = 1.0 + t, 1.0 + 2.0 * t, 1.0 + t
    floor = min_increase_for(measurement, config)
    # Counts and peaks are compared floored at the minimum (_floored_ratio): 0 -> 900 blocks is 900 more.
    baseline_value = max(baseline_value, floor)
    material = baseline_value * (ratio - 1.0) >= floor
    if material and ratio >= strong_at and lo >= block_lo:
        return BLOCK, CI_OVER_STRONG
    if material and ratio >= warn_at and lo > 1.0:
        return WARN, CI_OVER_ONE
    if hi < warn_at:
        return PASS, CI_UNDER_THRESHOLD
    if baseline_value * (hi - 1.0) < floor:
        return PASS, IMMATERIAL
    return INCONCLUSIVE, UNDECIDED


def judge_selected(design: SelectedMeasurement, config: GateConfig) -> SelectedMeasurement:
    """verdict_rule = bounded: the design's selection (the cycle chosen by ``config.selection``, its ratio
    and CI corrected by the asymmetry where one applies) judged by :func:`bounded_level` on that CI instead
    of its point estimate. The median of K cycles keeps one slow stretch from deciding; the CI bound keeps
    a noisy cycle from PASSing what it cannot rule out."""
    chosen = design.chosen
    verdict, rule = bounded_level(design.measurement, chosen.ratio, chosen.ci, chosen.baseline, config)
    hi = chosen.ci[1]
    return replace(
        design,
        chosen=replace(chosen, verdict=verdict),
        verdict=verdict,
        decided=rule != UNDECIDED,
        decided_by=rule,
        rules_out=hi if math.isfinite(hi) else None,
    )


def decided_in_cycle(comparison: MeasurementComparison, config: GateConfig) -> str | None:
    """verdict_rule = bounded: the in-cycle stop of a wallclock comparison (as the verdict will see it):
    ``decisive_block`` as :func:`decided_by_ci`, else ``decided_pass`` / ``decided_warn`` /
    ``decided_block`` once :func:`bounded_level` decides it, else None (keep measuring)."""
    if decided_by_ci(comparison) == "decisive_block":
        return "decisive_block"
    c = comparison
    verdict, rule = bounded_level(c.measurement, c.ratio, c.ci, c.baseline, config)
    return None if rule == UNDECIDED else f"decided_{verdict.lower()}"
