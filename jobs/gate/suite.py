"""The scenario gate: run a suite of scenarios on a baseline and a candidate database in K cycles (ABBA),
each target measured until its termination rule fires, calibrated against the two servers' asymmetry,
and judged per measurement (:mod:`jobs.gate.cycle`). The I/O is :class:`jobs.gate.measure.TargetSession`;
everything here is the schedule.

Order of work: the calibration first (it corrects every wallclock verdict), then scenario by scenario its
K cycles back to back, so a scenario BLOCKed in enough cycles stops the run at once
(``stop_when_decided``) instead of waiting for the unaffected ones. Inside a cycle, measurement i runs on
both targets one after the other (the cycle's order first), with the same parameters, so a drift of the
machine hits both alike; the A/B order flips between cycles (ABBA) so a side that is systematically
measured second does not pay for it.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from jobs.drift.config import DriftScoreConfig
from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN, GateConfig
from jobs.gate.cycle import (
    TAIL,
    WALLCLOCK,
    MeasurementComparison,
    SelectedMeasurement,
    blocks_needed,
    compare_samples,
    compare_values,
    corrected_for_stop,
    corrected_verdict,
    decided_by_ci,
    select_interleaved,
    select_measurement,
    tail_verdict,
)
from jobs.gate.drift_flags import GateDrift, gate_drift, gate_query_hash
from jobs.gate.measure import CandidateFailure, MemoryReading, ServerFacts, StatementCounters, TargetSession
from jobs.gate.rules import first_rule_to_fire
from jobs.gate.runner import GateError
from jobs.gate.scenario import Scenario, ScenarioSuite
from jobs.gate.selection import Asymmetry, CycleResult, cycle_order, estimate_asymmetry, probe_cycles
from jobs.gate.verdict import SEVERITY, worst
from jobs.plans.diff import diff_plans
from jobs.plans.shape import PlanFormatError, plan_root, plan_shape_hash
from jobs.redaction import redact_dsn

BASELINE, CANDIDATE, CALIBRATION = "baseline", "candidate", "calibration"
NOT_RUN = "NOT_RUN"
# Why the run ended.
COMPLETE, DECIDED, BUDGET = "complete", "decided", "budget"


@dataclass(frozen=True)
class PlanChange:
    """One measured statement's plan on both sides (EXPLAIN with the first parameter set)."""

    statement: int
    baseline_shape_hash: str
    candidate_shape_hash: str
    changed: bool
    index_rename_only: bool
    """The shapes differ only in index names: reported, never failing."""
    summary: str


@dataclass(frozen=True)
class ScenarioCycle:
    """One cycle of one scenario: who went first, how many measurements each target took, which rule
    stopped it, and every measurement's comparison."""

    cycle: int
    first: str
    measurements: dict[str, int]
    stopped_by: dict[str, str]
    comparisons: dict[str, MeasurementComparison]
    complete: bool = True
    """False: the budget ran out inside this cycle."""
    calibration: dict[str, MeasurementComparison] = field(default_factory=dict)
    """Interleaved A/A (aa_timing = interleaved): the baseline's copy on the candidate's server against the
    baseline, measured in this cycle (wallclock and its tail row): the cycle's own asymmetry."""
    corrected: dict[str, MeasurementComparison] = field(default_factory=dict)
    """Interleaved A/A: the candidate against the baseline's copy on its own server, in this cycle: the
    asymmetry-corrected comparison ((C / B) / (A' / B) = C / A' for the same aggregate)."""

    def judged(self, measurement: str) -> MeasurementComparison:
        """The comparison the verdict is taken on: the corrected one where the cycle has it."""
        return self.corrected.get(measurement) or self.comparisons[measurement]


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    verdict: str
    """PASS | WARN | BLOCK | INCONCLUSIVE | NOT_RUN (the run was decided or out of budget before it)"""
    selected: tuple[SelectedMeasurement, ...] = ()
    cycles: tuple[ScenarioCycle, ...] = ()
    plans: tuple[PlanChange, ...] = ()
    reasons: tuple[str, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    drift: GateDrift | None = None
    asymmetry: Asymmetry | None = None
    """The wallclock asymmetry this scenario was corrected by: its own A/A one (calibration = aa) or the
    run's probe."""
    tail_asymmetry: Asymmetry | None = None
    """The asymmetry its tail row (wallclock_mean) was corrected by: with aa, the A/A cycles' own mean
    ratio (a contended server inflates the mean more than the median); with the probe, the probe's."""


@dataclass(frozen=True)
class CalibrationReport:
    requested: str
    mode: str
    """off | probe | aa: what ran (auto resolved by whether the targets share a server)."""
    asymmetry: Asymmetry | None
    baseline_seconds: tuple[float, ...] = ()
    candidate_seconds: tuple[float, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class SuiteReport:
    verdict: str
    scenarios: tuple[ScenarioResult, ...]
    calibration: CalibrationReport
    servers: tuple[ServerFacts, ServerFacts]
    config: GateConfig
    baseline: str
    candidate: str
    source: str
    started_at: str
    seconds: float
    measure_seconds: float
    stop_reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 WARN (0 with fail_on_warn off), 2 BLOCK, 4 INCONCLUSIVE (3: the gate could not run)."""
        return {PASS: 0, WARN: 1 if self.config.fail_on_warn else 0, BLOCK: 2, INCONCLUSIVE: 4}[self.verdict]


def run_scenario_gate(
    baseline_dsn: str,
    candidate_dsn: str,
    suite: ScenarioSuite,
    config: GateConfig | None = None,
    drift_config: DriftScoreConfig | None = None,
    calibration_dsn: str | None = None,
) -> SuiteReport:
    """Measure ``suite`` on both databases; ``calibration_dsn`` is a copy of the baseline database on the
    candidate's server (needed by calibration = aa)."""
    config = config or GateConfig()
    if config.calibration == "aa" and not calibration_dsn:
        raise GateError(
            "calibration = aa needs --calibration-dsn: a copy of the baseline on the candidate's server"
        )
    started_at = datetime.now(UTC)
    t0 = time.perf_counter()
    sessions: list[TargetSession] = []
    try:
        base = TargetSession(BASELINE, baseline_dsn, config)
        sessions.append(base)
        cand = TargetSession(CANDIDATE, candidate_dsn, config)
        sessions.append(cand)
        calib = None
        if config.calibration in ("aa", "auto") and calibration_dsn:
            calib = TargetSession(CALIBRATION, calibration_dsn, config)
            sessions.append(calib)
        run = _Run(suite, config, base, cand, calib, t0)
        scenarios = run.measure()
        verdict = max(
            (s.verdict for s in scenarios if s.verdict != NOT_RUN), key=SEVERITY.__getitem__, default=PASS
        )
        if run.stop_reason == BUDGET and verdict != BLOCK:
            verdict = INCONCLUSIVE
        drift = gate_drift(
            run.timings,
            {s.name: gate_query_hash(" ; ".join(st.sql for st in s.benchmark)) for s in suite.scenarios},
            drift_config or DriftScoreConfig(),
        )
        scenarios = [replace(s, drift=drift.get(s.name)) for s in scenarios]
        return SuiteReport(
            verdict=verdict,
            scenarios=tuple(scenarios),
            calibration=run.calibration,
            servers=(run.facts[BASELINE], run.facts[CANDIDATE]),
            config=config,
            baseline=redact_dsn(baseline_dsn),
            candidate=redact_dsn(candidate_dsn),
            source=suite.source,
            started_at=started_at.isoformat(),
            seconds=time.perf_counter() - t0,
            measure_seconds=run.measure_seconds,
            stop_reason=run.stop_reason,
            notes=tuple(run.notes),
        )
    finally:
        for session in sessions:
            session.close()


class _Run:
    """The state of one gate run (sessions, seeded RNG, budget, timings for the drift scorer)."""

    def __init__(
        self,
        suite: ScenarioSuite,
        config: GateConfig,
        base: TargetSession,
        cand: TargetSession,
        calib: TargetSession | None,
        t0: float,
    ) -> None:
        self.suite, self.config = suite, config
        self.sides = {BASELINE: base, CANDIDATE: cand}
        self.calib = calib
        self.rng = random.Random(config.seed)
        self.t0 = t0
        self.measure_start = 0.0
        self.measure_seconds = 0.0
        self.stop_reason = COMPLETE
        self.notes: list[str] = []
        self.timings: dict[str, tuple[list[float], list[float]]] = {}
        self.facts: dict[str, ServerFacts] = {role: s.facts() for role, s in self.sides.items()}
        self.calibration = CalibrationReport(config.calibration, "off", None)
        for facts in self.facts.values():
            if facts.statements_note:
                self.notes.append(facts.statements_note)

    # -- budget ---------------------------------------------------------------------------------------
    def spent(self) -> bool:
        return time.perf_counter() - self.measure_start >= self.config.suite_max_seconds

    # -- the run --------------------------------------------------------------------------------------
    def measure(self) -> list[ScenarioResult]:
        base, cand = self.sides[BASELINE], self.sides[CANDIDATE]
        base.run_shared(self.suite)
        shared_error = None
        try:
            cand.run_shared(self.suite)
        except CandidateFailure as exc:
            shared_error = f"the shared section fails on the candidate: {exc}"
        if self.calib is not None:
            self.calib.run_shared(self.suite)
        self.measure_start = time.perf_counter()
        if shared_error is None:
            self.calibration = self._calibrate()
        results: list[ScenarioResult] = []
        decided = False
        for scenario in self.suite.scenarios:
            if shared_error is not None:
                results.append(
                    ScenarioResult(
                        scenario.name, BLOCK, reasons=(f"BLOCK: {shared_error}",), error=shared_error
                    )
                )
                continue
            if decided and self.config.stop_when_decided:
                results.append(
                    ScenarioResult(
                        scenario.name, NOT_RUN, notes=("not measured: the run was already decided (BLOCK)",)
                    )
                )
                continue
            if self.spent():
                self.stop_reason = BUDGET
                results.append(
                    ScenarioResult(
                        scenario.name,
                        INCONCLUSIVE,
                        notes=("not measured: the budget (suite_max_seconds) was spent",),
                    )
                )
                continue
            result = self._scenario(scenario)
            results.append(result)
            if result.verdict == BLOCK and self.config.stop_when_decided:
                decided = True
        if decided and self.stop_reason != BUDGET:
            self.stop_reason = DECIDED
        self.measure_seconds = time.perf_counter() - self.measure_start
        return results

    # -- calibration ----------------------------------------------------------------------------------
    def _calibrate(self) -> CalibrationReport:
        config = self.config
        requested = config.calibration
        mode = requested
        base_facts, cand_facts = self.facts[BASELINE], self.facts[CANDIDATE]
        if requested == "auto":  # one server: nothing to calibrate; a calibration copy given: aa
            if base_facts.same_server(cand_facts):
                mode = "off"
            else:
                mode = "aa" if self.calib is not None else "probe"
        if mode == "off":
            why = "one server" if requested == "auto" else "calibration off"
            return CalibrationReport(requested, "off", None, note=f"not calibrated ({why})")
        if mode == "aa":
            return CalibrationReport(
                requested,
                "aa",
                None,
                note="per scenario: the baseline against its copy on the candidate's server",
            )
        base, cand = self.sides[BASELINE], self.sides[CANDIDATE]
        b_times: list[float] = []
        c_times: list[float] = []
        for first, _ in cycle_order(config.calibration_cycles, config.cycle_order):
            order = (base, cand) if first == BASELINE else (cand, base)
            got: dict[str, list[float]] = {BASELINE: [], CANDIDATE: []}
            for _ in range(config.calibration_probe_repeats):
                for session in order:
                    got[session.role].append(session.probe())
            b_times.append(min(got[BASELINE]))
            c_times.append(min(got[CANDIDATE]))
        asymmetry = estimate_asymmetry(probe_cycles(b_times, c_times), "probe", config)
        note = (
            f"probe ×{asymmetry.ratio:.3f} (CI {asymmetry.ci[0]:.3f}–{asymmetry.ci[1]:.3f}): the candidate's "
            f"server runs the probe {'slower' if asymmetry.ratio > 1 else 'faster'}; "
            + _applied(asymmetry, config)
        )
        return CalibrationReport(requested, "probe", asymmetry, tuple(b_times), tuple(c_times), note)

    # -- one scenario ---------------------------------------------------------------------------------
    def _scenario(self, scenario: Scenario) -> ScenarioResult:
        config = self.config
        base, cand = self.sides[BASELINE], self.sides[CANDIDATE]
        params = scenario.draw(self.rng)
        base.start_scenario(scenario, params)
        try:
            cand.start_scenario(scenario, params)
        except CandidateFailure as exc:
            base.end_scenario(scenario)
            return _failed(scenario, str(exc))
        notes: list[str] = []
        asymmetries: dict[str, Asymmetry] = {}
        if self.calibration.asymmetry is not None:
            asymmetries = dict.fromkeys((WALLCLOCK, TAIL), self.calibration.asymmetry)
        aa = self.calib is not None and self.calibration.mode == "aa"
        interleaved = aa and config.aa_timing == "interleaved"
        calib = self.calib if interleaved else None
        try:
            if calib is not None:
                calib.start_scenario(scenario, params)
            elif aa:
                asymmetries = self._aa_asymmetries(scenario, params)
                for measurement, asymmetry in asymmetries.items():
                    notes.append(
                        f"A/A asymmetry of {measurement} ×{asymmetry.ratio:.3f} (CI {asymmetry.ci[0]:.3f}–"
                        f"{asymmetry.ci[1]:.3f}) {_applied(asymmetry, config, measurement)}"
                    )
            plans = _plan_changes(base.plans.get(scenario.name, []), cand.plans.get(scenario.name, []))
            cycles: list[ScenarioCycle] = []
            needed = blocks_needed(config.cycles, config.selection)
            for k, (first, _) in enumerate(cycle_order(config.cycles, config.cycle_order)):
                if self.spent():
                    self.stop_reason = BUDGET
                    break
                cycle = self._cycle(
                    scenario,
                    k,
                    first,
                    (base, cand),
                    record=True,
                    asymmetry=None if interleaved else asymmetries.get(WALLCLOCK),
                    calib=calib,
                )
                cycles.append(cycle)
                if not cycle.complete:
                    self.stop_reason = BUDGET
                    break
                applied = {} if interleaved else asymmetries  # interleaved: corrected inside each cycle
                blocked = max(
                    (
                        sum(
                            corrected_verdict(c.judged(m), applied.get(m), config) == BLOCK
                            for c in cycles
                            if m in c.comparisons
                        )
                        for m in cycle.comparisons
                    ),
                    default=0,
                )
                if config.stop_when_decided and blocked >= needed:
                    notes.append(f"stopped after {len(cycles)} of {config.cycles} cycles: BLOCK decided")
                    break
        except CandidateFailure as exc:
            return _failed(scenario, str(exc))
        finally:
            base.end_scenario(scenario)
            cand.end_scenario(scenario)
            if calib is not None:
                calib.end_scenario(scenario)
        if interleaved:
            # reported only: each cycle was already judged on its own corrected comparison
            asymmetries = _asymmetries([(c.cycle, c.calibration) for c in cycles], config)
            for measurement, asymmetry in asymmetries.items():
                notes.append(
                    f"A/A asymmetry of {measurement} ×{asymmetry.ratio:.3f} (CI {asymmetry.ci[0]:.3f}–"
                    f"{asymmetry.ci[1]:.3f}), measured inside each cycle; each cycle judged as the candidate "
                    "against the baseline's copy on its own server"
                )
        return _judge(scenario, cycles, plans, asymmetries, config, notes)

    def _aa_asymmetries(self, scenario: Scenario, params: tuple[object, ...]) -> dict[str, Asymmetry]:
        """calibration = aa: the baseline against its copy on the candidate's server, calibration_cycles
        cycles of the same scenario. Each corrected statistic gets the asymmetry of the same statistic:
        the wallclock aggregate (p50 by default) from the cycles' wallclock ratios, the tail row from their
        mean ratios. A CPU neighbour inflates the mean more than the median (its stalls are a tail), so
        one asymmetry for both would leave the identical copy's mean ×1.5 "slower" (seen on this host)."""
        assert self.calib is not None
        base = self.sides[BASELINE]
        self.calib.start_scenario(scenario, params)
        try:
            cycles = [
                self._cycle(scenario, k, first, (base, self.calib), record=False, ci_stop=False)
                for k, (first, _) in enumerate(
                    cycle_order(self.config.calibration_cycles, self.config.cycle_order)
                )
            ]
        finally:
            self.calib.end_scenario(scenario)
        return _asymmetries([(c.cycle, c.comparisons) for c in cycles], self.config)

    def _cycle(
        self,
        scenario: Scenario,
        k: int,
        first: str,
        pair: tuple[TargetSession, TargetSession],
        record: bool,
        ci_stop: bool = True,
        asymmetry: Asymmetry | None = None,
        calib: TargetSession | None = None,
    ) -> ScenarioCycle:
        """Measure one cycle: warm-up, interleaved measurements until each target's rule fires or the CI
        decides (``ci_stop``; off for calibration cycles, whose spread is what they measure), then the
        counters and the memory readings.

        With ``calib`` (interleaved A/A) every measurement also runs on the baseline's copy on the
        candidate's server: AB cycles in the order baseline, candidate, copy; BA cycles copy, candidate,
        baseline (every pair swaps between the two), and the CI stop judges the candidate against the
        copy."""
        config = self.config
        base, other = pair
        if calib is None:
            order: tuple[TargetSession, ...] = (base, other) if first == BASELINE else (other, base)
        else:
            order = (base, other, calib) if first == BASELINE else (calib, other, base)
        roles = {id(base): BASELINE, id(other): CANDIDATE}
        if calib is not None:
            roles[id(calib)] = CALIBRATION
        warmup = (
            max(1, config.warmup_calls // max(scenario.repeat, 1))
            if k == 0
            else config.reconnect_warmup_calls
        )
        for _ in range(warmup):
            params = scenario.draw(self.rng)
            for session in order:
                session.before(scenario, params)
                session.execute(scenario, params)
        executions = {BASELINE: warmup, CANDIDATE: warmup, CALIBRATION: warmup}
        before = {roles[id(s)]: s.counters(scenario) for s in (base, other)}
        samples: dict[str, list[float]] = {roles[id(s)]: [] for s in order}
        stopped: dict[str, str] = {}
        complete = True
        while len(stopped) < len(samples):
            if self.spent():
                complete = False
                break
            params = scenario.draw(self.rng)
            index = min(len(v) for v in samples.values())
            fresh = index > 0 and index % config.reconnect_every_rounds == 0
            for session in order:
                role = roles[id(session)]
                if role in stopped:
                    continue
                if fresh:
                    # A fresh backend every reconnect_every_rounds measurements, warmed: a backend the
                    # scheduler keeps on a contended core stays slow while it lives, and that reads as a
                    # side difference (on a busy 2-core host, identical databases measured x1.37).
                    session.reconnect()
                    for _ in range(config.reconnect_warmup_calls):
                        session.before(scenario, params)
                        session.execute(scenario, params)
                        executions[role] += 1
                session.before(scenario, params)
                ns = session.execute(scenario, params)
                executions[role] += 1
                samples[role].append(ns / 1e6 / scenario.repeat)
            for role in samples:
                if role not in stopped:
                    rule = first_rule_to_fire(np.asarray(samples[role]), config)
                    if rule is not None:
                        stopped[role] = rule.name
            n = min(len(v) for v in samples.values())
            if ci_stop and len(stopped) < len(samples) and n >= config.min_measurements:
                try:
                    if calib is not None:  # the candidate against the copy on its own server
                        observed = compare_samples(
                            WALLCLOCK, samples[CALIBRATION], samples[CANDIDATE], config, salt=k
                        )
                    else:
                        observed = corrected_for_stop(
                            compare_samples(WALLCLOCK, samples[BASELINE], samples[CANDIDATE], config, salt=k),
                            asymmetry,
                            config,
                        )
                    decided = decided_by_ci(observed)
                except ValueError:
                    decided = None
                if decided is not None:
                    for role in samples:
                        stopped.setdefault(role, decided)
        after = {roles[id(s)]: s.counters(scenario) for s in (base, other)}
        memory: dict[str, list[MemoryReading]] = {BASELINE: [], CANDIDATE: []}
        for _ in range(config.memory_executions):
            params = scenario.draw(self.rng)
            for session in order:
                if session is calib:
                    continue
                session.before(scenario, params)
                memory[roles[id(session)]].append(session.memory_execution(scenario, params))
        comparisons = _comparisons(samples, before, after, executions, memory, scenario, config, k)
        calibration, corrected = (
            _interleaved_comparisons(samples, config, k) if calib is not None else ({}, {})
        )
        if record:
            got = self.timings.setdefault(scenario.name, ([], []))
            got[0].extend(samples[BASELINE])
            got[1].extend(samples[CANDIDATE])
        return ScenarioCycle(
            k,
            first,
            {r: len(v) for r, v in samples.items()},
            stopped,
            comparisons,
            complete,
            calibration,
            corrected,
        )


def _applied(asymmetry: Asymmetry, config: GateConfig, measurement: str = WALLCLOCK) -> str:
    if asymmetry.reliable:
        return f"applied to {measurement}"
    if config.calibration_unreliable == "carry":
        return f"applied to {measurement} with its uncertainty ({asymmetry.note})"
    return f"NOT applied: {asymmetry.note}"


def _interleaved_comparisons(
    samples: dict[str, list[float]], config: GateConfig, k: int
) -> tuple[dict[str, MeasurementComparison], dict[str, MeasurementComparison]]:
    """One interleaved cycle's asymmetry (the copy against the baseline) and corrected comparison (the
    candidate against the copy), for wallclock and its tail row; a side with < 2 samples gives neither."""
    b, c, a = samples[BASELINE], samples[CANDIDATE], samples[CALIBRATION]
    calibration: dict[str, MeasurementComparison] = {}
    corrected: dict[str, MeasurementComparison] = {}
    if min(len(b), len(c), len(a)) < 2:
        return calibration, corrected
    with contextlib.suppress(ValueError):
        calibration[WALLCLOCK] = compare_samples(WALLCLOCK, b, a, config, salt=k + 104729)
        corrected[WALLCLOCK] = compare_samples(WALLCLOCK, a, c, config, salt=k + 130363)
    calibration[TAIL] = tail_verdict(b, a, config, salt=k + 104729)
    corrected[TAIL] = tail_verdict(a, c, config, salt=k + 130363)
    return calibration, corrected


def _asymmetries(
    per_cycle: Sequence[tuple[int, dict[str, MeasurementComparison]]], config: GateConfig
) -> dict[str, Asymmetry]:
    """The A/A asymmetry of wallclock and of its tail row, each from that statistic's own copy / baseline
    comparisons over the calibration cycles (``(cycle index, comparisons)``; a cycle without one is left
    out). A CPU neighbour inflates the mean more than the median, so the two are estimated apart."""
    out = {}
    for measurement in (WALLCLOCK, TAIL):
        got = [
            CycleResult(k, comparisons[measurement].ratio, comparisons[measurement].ci)
            for k, comparisons in per_cycle
            if measurement in comparisons
        ]
        if got:
            out[measurement] = estimate_asymmetry(got, "aa", config)
    return out


def _per_execution(
    before: StatementCounters | None, after: StatementCounters | None, executions: int, repeat: int
) -> StatementCounters | None:
    if before is None or after is None or executions <= 0:
        return None
    delta = after.minus(before)
    n = executions * max(repeat, 1)
    return replace(
        delta,
        shared_blocks=delta.shared_blocks / n,
        shared_blocks_read=delta.shared_blocks_read / n,
        temp_blocks_written=delta.temp_blocks_written / n,
        wal_bytes=delta.wal_bytes / n,
        plan_ms=delta.plan_ms / max(delta.plans, 1),
        exec_ms=delta.exec_ms / n,
    )


def _memory_value(readings: Sequence[MemoryReading], attr: str, how: str) -> float | None:
    values = [getattr(r, attr) for r in readings if getattr(r, attr) is not None]
    if not values:
        return None
    return float({"minimum": min, "maximum": max}.get(how, lambda v: sum(v) / len(v))(values))


def _comparisons(
    samples: dict[str, list[float]],
    before: dict[str, StatementCounters | None],
    after: dict[str, StatementCounters | None],
    executions: dict[str, int],
    memory: dict[str, list[MemoryReading]],
    scenario: Scenario,
    config: GateConfig,
    k: int,
) -> dict[str, MeasurementComparison]:
    out: dict[str, MeasurementComparison] = {}
    b, c = samples[BASELINE], samples[CANDIDATE]
    if len(b) >= 2 and len(c) >= 2:
        with contextlib.suppress(ValueError):
            out[WALLCLOCK] = compare_samples(WALLCLOCK, b, c, config, salt=k)
        out[TAIL] = tail_verdict(b, c, config, salt=k)
    pb = _per_execution(before[BASELINE], after[BASELINE], executions[BASELINE], scenario.repeat)
    pc = _per_execution(before[CANDIDATE], after[CANDIDATE], executions[CANDIDATE], scenario.repeat)
    if pb is not None and pc is not None:
        out["temp_blocks"] = compare_values(
            "temp_blocks", pb.temp_blocks_written, pc.temp_blocks_written, config
        )
        out["shared_blocks"] = compare_values("shared_blocks", pb.shared_blocks, pc.shared_blocks, config)
        out["wal_bytes"] = compare_values("wal_bytes", pb.wal_bytes, pc.wal_bytes, config)
        if pb.plans > 0 and pc.plans > 0:
            out["planning"] = compare_values("planning", pb.plan_ms, pc.plan_ms, config)
    for name, attr in (("memory", "context_bytes"), ("rss", "rss_bytes")):
        vb = _memory_value(memory[BASELINE], attr, config.memory_aggregation)
        vc = _memory_value(memory[CANDIDATE], attr, config.memory_aggregation)
        if vb is not None and vc is not None:
            out[name] = compare_values(name, vb, vc, config, how=config.memory_aggregation)
    return out


def _plan_changes(base_docs: Sequence[Any], cand_docs: Sequence[Any]) -> tuple[PlanChange, ...]:
    out = []
    for i, (b_doc, c_doc) in enumerate(zip(base_docs, cand_docs, strict=False)):
        try:
            b_root, c_root = plan_root(b_doc), plan_root(c_doc)
        except PlanFormatError:
            continue
        b_hash, c_hash = plan_shape_hash(b_root), plan_shape_hash(c_root)
        changed = b_hash != c_hash
        renamed = changed and plan_shape_hash(b_root, ignore=("Index Name",)) == plan_shape_hash(
            c_root, ignore=("Index Name",)
        )
        summary = diff_plans(b_doc, c_doc).summary if changed else "same plan"
        out.append(PlanChange(i, b_hash, c_hash, changed, renamed, summary))
    return tuple(out)


def _failed(scenario: Scenario, error: str) -> ScenarioResult:
    return ScenarioResult(
        scenario.name, BLOCK, reasons=(f"BLOCK: fails on the candidate: {error}",), error=error
    )


def _reason(s: SelectedMeasurement) -> str:
    ch = s.chosen
    strong = f" (strong at {2 * ch.threshold:.0%})" if s.verdict == BLOCK else ""
    return (
        f"{s.measurement} ×{ch.ratio:.3f} (CI {ch.ci[0]:.3f}–{ch.ci[1]:.3f}; "
        f"{ch.baseline:,.4g} → {ch.candidate:,.4g} {ch.unit}) over threshold {ch.threshold:.0%}{strong}; "
        f"{s.regressed_cycles} of {len(s.cycles)} cycles regressed"
    )


def _judge(
    scenario: Scenario,
    cycles: list[ScenarioCycle],
    plans: tuple[PlanChange, ...],
    asymmetries: dict[str, Asymmetry],
    config: GateConfig,
    notes: list[str],
) -> ScenarioResult:
    """Select each measurement over the cycles (wallclock and its tail row each corrected by its own
    asymmetry), then the scenario's verdict and reasons."""
    if not cycles:
        return ScenarioResult(scenario.name, INCONCLUSIVE, plans=plans, notes=(*notes, "no cycle measured"))
    names = [m for m in cycles[0].comparisons if all(m in c.comparisons for c in cycles)]
    selected = tuple(
        select_interleaved(
            m,
            [c.comparisons[m] for c in cycles],
            [c.corrected[m] for c in cycles],
            [c.calibration[m] for c in cycles],
            config,
        )
        if all(m in c.corrected and m in c.calibration for c in cycles)
        else select_measurement(m, [c.comparisons[m] for c in cycles], asymmetries.get(m), config)
        for m in names
    )
    found: list[tuple[str, str]] = []
    for s in selected:
        if s.verdict in (WARN, BLOCK):
            found.append((s.verdict, _reason(s)))
        elif s.chosen.kind == "improvement":
            notes.append(f"improvement: {s.measurement} ×{s.chosen.ratio:.3f}")
    for plan in plans:
        if plan.index_rename_only:
            notes.append(f"statement {plan.statement + 1}: plan differs only in index names ({plan.summary})")
        elif plan.changed and config.plan_change_warns:
            found.append((WARN, f"plan of statement {plan.statement + 1} changed: {plan.summary}"))
    verdict = worst([v for v, _ in found])
    if verdict != BLOCK and not all(c.complete for c in cycles):
        verdict = INCONCLUSIVE
        notes.append("the budget ran out inside a cycle")
    reasons = tuple(f"{v}: {r}" for v, r in sorted(found, key=lambda item: -SEVERITY[item[0]]))
    return ScenarioResult(
        scenario.name,
        verdict,
        selected,
        tuple(cycles),
        plans,
        reasons,
        notes=tuple(notes),
        asymmetry=asymmetries.get(WALLCLOCK),
        tail_asymmetry=asymmetries.get(TAIL),
    )
