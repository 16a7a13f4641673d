"""Multi-cycle selection and calibration against asymmetric servers: pure arithmetic, no database.

A gate whose baseline and candidate live on two servers cannot tell, inside one run, a persistent side
difference (one server is 15% slower whatever it runs) from a regression. Two guards, as in the design:

- **Cycles.** The suite runs K times; the side that goes first alternates in an ABBA pattern
  (:func:`cycle_order`), and one cycle's report per scenario is selected: the median or the best
  (:func:`select_cycle`).
- **Calibration.** The baseline database measured against itself on both servers (A/A), or a fixed
  CPU/IO probe timed on each server, estimates the side asymmetry ``server_cand / server_base``
  (:func:`estimate_asymmetry`); the verdict is taken on ``observed / asymmetry``
  (:func:`correct_ratio`, :func:`correct_for_asymmetry`). An asymmetry whose CI is too wide is reported
  and not applied.

Ratios are candidate / baseline (> 1 = candidate slower), as everywhere in the gate. Same inputs, same
outputs: nothing here draws random numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from scipy import stats

from jobs.gate.config import GateConfig

BASELINE, CANDIDATE = "baseline", "candidate"
Side = Literal["baseline", "candidate"]
REGRESSED_VERDICTS = frozenset({"WARN", "BLOCK"})  # jobs.gate.verdict's levels over a threshold

Judge = Callable[[float, tuple[float, float]], str]
"""(ratio, CI) -> "PASS" / "WARN" / "BLOCK": how a corrected cycle is judged again (the runner passes the
verdict rules of jobs.gate.verdict)."""


# ---------------------------------------------------------------------------------------------------------
# Cycle order
# ---------------------------------------------------------------------------------------------------------


def baseline_first(cycle: int, order: str = "abba") -> bool:
    """Whether cycle ``cycle`` (0-based) measures the baseline before the candidate.

    ``abba``: the baseline goes first when ``cycle % 4`` is 0 or 3, so cycles run AB, BA, BA, AB, AB, BA,
    BA, AB, ... (measurement slots A B B A B A A B: the Thue-Morse order). Every two cycles each side goes
    first once and the sides' slots have the same sum (a first-side advantage and a linear drift of the
    host, e.g. a neighbour's load ramping up, cancel at even K); every four cycles the sums of squared
    slots are equal too (a quadratic drift cancels). ``alternate``: AB, BA, AB, BA, ... (first side and
    linear drift, not quadratic). ``baseline_first``: AB every cycle (no swap, for comparison).
    """
    if cycle < 0:
        raise ValueError(f"cycle must be >= 0, got {cycle}")
    if order == "abba":
        return cycle % 4 in (0, 3)
    if order == "alternate":
        return cycle % 2 == 0
    if order == "baseline_first":
        return True
    raise ValueError(f"cycle order must be abba, alternate or baseline_first, got {order!r}")


def cycle_order(cycles: int, order: str = "abba") -> tuple[tuple[Side, Side], ...]:
    """The sides in measuring order for each of ``cycles`` cycles (see :func:`baseline_first`).

    For odd K the last cycle cannot be paired, so one side goes first once more than the other: with
    ``abba`` the baseline when K % 4 == 1 (the last cycle is AB), the candidate when K % 4 == 3 (BA);
    with ``alternate`` always the baseline.
    """
    if cycles < 1:
        raise ValueError(f"cycles must be >= 1, got {cycles}")
    return tuple(
        (BASELINE, CANDIDATE) if baseline_first(i, order) else (CANDIDATE, BASELINE) for i in range(cycles)
    )


# ---------------------------------------------------------------------------------------------------------
# Per-cycle results and the selection
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CycleResult:
    """One cycle's comparison of one scenario's measurement: the ratio estimate, its CI and the verdict."""

    cycle: int
    """0-based cycle index (the tie-break: the earlier cycle wins)."""
    ratio: float
    """Candidate / baseline estimate (e.g. the p50 ratio of the cycle)."""
    ci: tuple[float, float]
    """Its confidence interval (low, high) on the ratio scale; (ratio, ratio) when exact."""
    verdict: str | None = None
    """PASS / WARN / BLOCK of this cycle (WARN and BLOCK count as regressed); None: not judged (a
    calibration or probe cycle, or a corrected cycle without a judge)."""

    def __post_init__(self) -> None:
        lo, hi = self.ci
        if not (self.ratio > 0 and math.isfinite(self.ratio)):
            raise ValueError(f"cycle {self.cycle}: ratio must be positive and finite, got {self.ratio}")
        if not 0 < lo <= self.ratio <= hi or not math.isfinite(hi):
            raise ValueError(f"cycle {self.cycle}: need 0 < CI low <= ratio <= CI high, got {self.ci}")

    @property
    def regressed(self) -> bool:
        return self.verdict in REGRESSED_VERDICTS


@dataclass(frozen=True)
class CycleSelection:
    """The cycle whose report stands for the scenario, and what the others said."""

    rule: str
    """median | best"""
    chosen: CycleResult
    cycles: tuple[CycleResult, ...]
    """Every cycle, by cycle index."""
    note: str

    @property
    def regressed_cycles(self) -> int:
        return sum(c.regressed for c in self.cycles)

    @property
    def regressed_in_every_cycle(self) -> bool:
        """The best rule's scenario verdict: regressed only if every cycle regressed."""
        return self.regressed_cycles == len(self.cycles)


def _by_ratio(cycles: Sequence[CycleResult]) -> list[CycleResult]:
    """Ascending ratio; equal ratios by cycle index (deterministic ties)."""
    if not cycles:
        raise ValueError("need at least one cycle to select from")
    indexes = [c.cycle for c in cycles]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"cycle indexes must be distinct, got {sorted(indexes)}")
    return sorted(cycles, key=lambda c: (c.ratio, c.cycle))


def select_median(cycles: Sequence[CycleResult]) -> CycleSelection:
    """The cycle at position ``(K - 1) // 2`` of the cycles sorted by (ratio, cycle index): the median
    for odd K, the *lower* middle for even K (as the design's median selector: a real report, never an
    average of two, and on the side favourable to the candidate). K = 1: that cycle."""
    ordered = _by_ratio(cycles)
    chosen = ordered[(len(ordered) - 1) // 2]
    note = f"median of {len(ordered)} cycles by ratio" + (" (lower middle)" if len(ordered) % 2 == 0 else "")
    return CycleSelection("median", chosen, tuple(sorted(cycles, key=lambda c: c.cycle)), note)


def select_best(cycles: Sequence[CycleResult]) -> CycleSelection:
    """The design's best selector: walk the cycles by ascending (ratio, cycle index) and take the first
    that did not regress (verdict not WARN/BLOCK); when every cycle regressed, the lowest-ratio one (and
    ``regressed_in_every_cycle`` is then true: the only case the scenario counts as regressed)."""
    ordered = _by_ratio(cycles)
    clean = [c for c in ordered if not c.regressed]
    chosen = clean[0] if clean else ordered[0]
    by_index = tuple(sorted(cycles, key=lambda c: c.cycle))
    if clean:
        regressed = len(ordered) - len(clean)
        note = f"lowest-ratio cycle without a regression ({regressed} of {len(ordered)} regressed)"
    else:
        note = f"every one of {len(ordered)} cycles regressed: the lowest-ratio one"
    return CycleSelection("best", chosen, by_index, note)


def select_cycle(cycles: Sequence[CycleResult], rule: str) -> CycleSelection:
    if rule == "median":
        return select_median(cycles)
    if rule == "best":
        return select_best(cycles)
    raise ValueError(f"selection must be median or best, got {rule!r}")


# ---------------------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Asymmetry:
    """How much slower the candidate's server runs the same work: server_cand / server_base."""

    method: str
    """aa (baseline database against itself on both servers) | probe (a fixed CPU/IO probe on each)"""
    ratio: float
    """Geometric mean of the calibration cycles' ratios."""
    ci: tuple[float, float]
    log_half_width: float
    """Half the CI width on the log scale (the CI is ratio × exp(∓ this))."""
    cycles: int
    reliable: bool
    """False: the CI is too wide (or the spread is unknown); the correction is then not applied."""
    note: str


def _log_se_from_ci(ci: tuple[float, float], confidence: float) -> float:
    """A symmetric-normal reading of a CI on the log scale: (log hi − log lo) / (2 z)."""
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return (math.log(ci[1]) - math.log(ci[0])) / (2.0 * z)


def estimate_asymmetry(calibration: Sequence[CycleResult], method: str, config: GateConfig) -> Asymmetry:
    """The side asymmetry from n calibration cycles (each a ratio server_cand / server_base and its CI).

    On the log scale, with ``l_i = log ratio_i`` and ``se_i`` read from cycle i's CI
    (:func:`_log_se_from_ci`; 0 for a probe cycle without one):

    - estimate ``log a = mean(l_i)`` (the geometric mean of the ratios);
    - variance of that mean ``v = max(s² / n, mean(se_i²) / n)``, where ``s²`` is the sample variance
      (ddof = 1) of the ``l_i`` (0 when n = 1): the cycles' spread catches what each cycle's CI misses
      (the host changing between cycles), each cycle's CI what a lucky small spread hides;
    - half-width ``h = q · sqrt(v)``, q the Student t quantile with n − 1 degrees of freedom at
      ``config.confidence`` (the normal quantile when n = 1); CI = ``a · exp(∓h)``.

    Reliable iff the relative half-width ``(hi − lo) / 2 / a`` is at most
    ``config.calibration_max_half_width`` and the spread is known (not one cycle without a CI).
    """
    if not calibration:
        raise ValueError(f"{method} calibration: no cycles measured")
    n = len(calibration)
    logs = [math.log(c.ratio) for c in calibration]
    within = [_log_se_from_ci(c.ci, config.confidence) ** 2 for c in calibration]
    mean = sum(logs) / n
    between = sum((x - mean) ** 2 for x in logs) / (n - 1) if n >= 2 else 0.0
    variance = max(between / n, sum(within) / n / n)
    tail = 0.5 + config.confidence / 2.0
    q = float(stats.t.ppf(tail, n - 1)) if n >= 2 else float(stats.norm.ppf(tail))
    half = q * math.sqrt(variance)
    model = ""
    if method == "probe" and config.probe_model_uncertainty > 0:
        # The probe is not the scenario: how far its asymmetry may be from a scenario's own is added.
        half = math.hypot(half, math.log1p(config.probe_model_uncertainty))
        model = f", with the probe's model uncertainty x{1 + config.probe_model_uncertainty:g}"
    ratio = math.exp(mean)
    ci = (ratio * math.exp(-half), ratio * math.exp(half))
    relative = (ci[1] - ci[0]) / 2.0 / ratio
    limit = config.calibration_max_half_width
    if n == 1 and within[0] == 0.0:
        reliable, note = False, "one calibration cycle without a CI: its spread is unknown"
    elif relative > limit:
        reliable, note = False, f"CI half-width ±{relative:.1%} over the limit ±{limit:.1%}"
    else:
        reliable, note = True, f"CI half-width ±{relative:.1%} within ±{limit:.1%}"
    return Asymmetry(method, ratio, ci, half, n, reliable, f"{method} over {n} cycles{model}: {note}")


def probe_cycles(
    baseline_seconds: Sequence[float], candidate_seconds: Sequence[float]
) -> tuple[CycleResult, ...]:
    """Calibration cycles from a fixed probe timed once per cycle on each server: ratio_i = cand_i / base_i
    with no CI of its own (the spread between cycles is the uncertainty)."""
    if len(baseline_seconds) != len(candidate_seconds):
        raise ValueError(
            f"probe: {len(baseline_seconds)} baseline timings but {len(candidate_seconds)} candidate"
        )
    out = []
    for i, (b, c) in enumerate(zip(baseline_seconds, candidate_seconds, strict=True)):
        if not (b > 0 and c > 0):
            raise ValueError(f"probe cycle {i}: timings must be positive, got {b} and {c}")
        out.append(CycleResult(i, c / b, (c / b, c / b)))
    return tuple(out)


@dataclass(frozen=True)
class CorrectedRatio:
    """What the report shows of a calibrated comparison: raw and corrected ratio, and why."""

    raw_ratio: float
    raw_ci: tuple[float, float]
    asymmetry: Asymmetry | None
    """None: calibration off."""
    ratio: float
    """The ratio the verdict is taken on: raw / asymmetry when applied, else the raw ratio."""
    ci: tuple[float, float]
    applied: bool
    reason: str


def correct_ratio(
    raw_ratio: float, raw_ci: tuple[float, float], asymmetry: Asymmetry | None
) -> CorrectedRatio:
    """``raw / a``; its CI combines both uncertainties on the log scale, each side of the CI separately
    (the raw CI may be asymmetric, as a bootstrap's is): with ``d_lo = log raw − log raw_lo``,
    ``d_hi = log raw_hi − log raw`` and the asymmetry's log half-width ``h``, the CI is
    ``(raw/a) · exp(−sqrt(d_lo² + h²))`` to ``(raw/a) · exp(sqrt(d_hi² + h²))`` (variances of independent
    log ratios add). Not applied (raw ratio and CI kept) when calibration is off or unreliable."""
    if asymmetry is None:
        return CorrectedRatio(raw_ratio, raw_ci, None, raw_ratio, raw_ci, False, "calibration off")
    if not asymmetry.reliable:
        return CorrectedRatio(
            raw_ratio,
            raw_ci,
            asymmetry,
            raw_ratio,
            raw_ci,
            False,
            f"not applied: unreliable ({asymmetry.note})",
        )
    ratio = raw_ratio / asymmetry.ratio
    d_lo = math.log(raw_ratio) - math.log(raw_ci[0])
    d_hi = math.log(raw_ci[1]) - math.log(raw_ratio)
    h = asymmetry.log_half_width
    ci = (ratio * math.exp(-math.hypot(d_lo, h)), ratio * math.exp(math.hypot(d_hi, h)))
    reason = f"applied: ×{raw_ratio:.3f} / asymmetry ×{asymmetry.ratio:.3f} = ×{ratio:.3f} ({asymmetry.note})"
    return CorrectedRatio(raw_ratio, raw_ci, asymmetry, ratio, ci, True, reason)


def correct_cycle(cycle: CycleResult, asymmetry: Asymmetry | None, judge: Judge | None) -> CycleResult:
    """The cycle with its ratio and CI corrected (:func:`correct_ratio`) and judged again by ``judge``
    (without one the corrected cycle's verdict is None: a raw verdict would no longer match its ratio).
    Unchanged when the correction is not applied."""
    corrected = correct_ratio(cycle.ratio, cycle.ci, asymmetry)
    if not corrected.applied:
        return cycle
    verdict = judge(corrected.ratio, corrected.ci) if judge is not None else None
    return replace(cycle, ratio=corrected.ratio, ci=corrected.ci, verdict=verdict)


@dataclass(frozen=True)
class CalibratedSelection:
    """One scenario's measurement over K cycles, calibrated: the report's row."""

    selection: CycleSelection
    """The selection over the corrected cycles (the raw ones when the correction is not applied)."""
    correction: CorrectedRatio
    """The chosen cycle's raw and corrected ratio, the asymmetry and whether it was applied."""


def correct_for_asymmetry(
    observed: Sequence[CycleResult],
    calibration: Sequence[CycleResult] | None,
    config: GateConfig,
    judge: Judge | None = None,
) -> CalibratedSelection:
    """K observed cycles of one scenario and the calibration cycles (None or ``config.calibration ==
    "off"``: no calibration) -> every cycle corrected by the asymmetry (:func:`correct_cycle`), the cycle
    selected by ``config.selection`` over the corrected cycles, and the chosen cycle's raw and corrected
    ratio. Dividing every cycle by one asymmetry keeps their order, so median and best pick the same
    cycle as they would on the raw ratios; only the verdicts (through ``judge``) change."""
    asymmetry = None
    if config.calibration != "off" and calibration is not None:
        asymmetry = estimate_asymmetry(calibration, config.calibration, config)
    corrected = [correct_cycle(c, asymmetry, judge) for c in observed]
    selection = select_cycle(corrected, config.selection)
    raw = next(c for c in observed if c.cycle == selection.chosen.cycle)
    return CalibratedSelection(selection, correct_ratio(raw.ratio, raw.ci, asymmetry))
