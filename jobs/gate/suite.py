"""The scenario gate: run a suite of scenarios on a baseline and a candidate database in K cycles (ABBA),
calibrated against the two servers' asymmetry, and judged per measurement (:mod:`jobs.gate.cycle`), every
verdict bounded by its confidence unless ``verdict_rule = design``. The I/O is
:class:`jobs.gate.measure.TargetSession`; everything here is the schedule.

Order of work: the calibration first (it corrects every wallclock verdict), then suite cycles: each cycle
runs every scenario once, the suite's order reversed every other cycle, so one slow stretch of the host
lands on one cycle of several scenarios rather than on every cycle of one; after the configured cycles,
extra cycles of the scenarios still undecided (up to ``max_cycles``). A scenario whose BLOCK is decided
stops the run (``stop_when_decided``). Inside a cycle, measurement i runs on every target one after the
other with the same parameters, so a drift of the machine hits them alike; the first side flips between
cycles (ABBA) and the targets that would keep their places swap every other measurement.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from jobs.drift.config import DriftScoreConfig
from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN, GateConfig, GateError
from jobs.gate.cycle import (
    TAIL,
    WALLCLOCK,
    MeasurementComparison,
    SelectedMeasurement,
    blocks_needed,
    compare_readings,
    compare_samples,
    compare_values,
    corrected_for_stop,
    corrected_verdict,
    decided_by_ci,
    decided_in_cycle,
    judge_selected,
    select_interleaved,
    select_measurement,
    tail_verdict,
)
from jobs.gate.drift_flags import GateDrift, gate_drift, gate_query_hash
from jobs.gate.measure import CandidateFailure, MemoryReading, ServerFacts, StatementCounters, TargetSession
from jobs.gate.rules import RUN_AT_MOST, first_rule_to_fire
from jobs.gate.scenario import Scenario, ScenarioSuite
from jobs.gate.selection import (
    Asymmetry,
    CycleResult,
    baseline_first,
    cycle_order,
    estimate_asymmetry,
    probe_cycles,
)
from jobs.gate.verdict import SEVERITY, worst
from jobs.plans.diff import diff_plans
from jobs.plans.shape import PlanFormatError, plan_root, plan_shape_hash
from jobs.redaction import redact_dsn

BASELINE, CANDIDATE, CALIBRATION = "baseline", "candidate", "calibration"
NOT_RUN = "NOT_RUN"
# Why the run ended.
COMPLETE, DECIDED, BUDGET = "complete", "decided", "budget"
TWO_SERVERS_UNCALIBRATED = (
    "baseline and candidate are on two servers and no calibration applies: a difference between the servers "
    "reads as the candidate's (give --calibration-dsn, a copy of the baseline on the candidate's server, "
    "or calibration = probe)"
)


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
class CycleRaw:
    """What one cycle of one scenario measured, before any judgement: enough to judge it again without a
    server (``radar gate --replay``)."""

    samples: dict[str, tuple[float, ...]]
    """Per role (baseline, candidate, calibration): ms of the measured part per execution, in order."""
    counters: dict[str, StatementCounters | None]
    """Per role: pg_stat_statements deltas per execution over the cycle (None: not readable)."""
    memory: dict[str, tuple[tuple[float | None, ...], ...]]
    """Per role: the memory readings, (memory-context growth, the backend's private memory growth, its
    parallel workers' private memory) bytes each."""


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
    raw: CycleRaw | None = None
    """What the cycle measured (the comparisons above are judged from it)."""

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
    replay_of: str | None = None
    """``radar gate --replay``: the stored run judged again (nothing was measured)."""
    warnings: tuple[str, ...] = ()
    """The notes a CI log must show (two servers uncalibrated, an unreliable calibration): also in notes."""

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
        verdict = run_verdict(scenarios, run.stop_reason, config)
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
            warnings=tuple(run.warnings),
        )
    finally:
        for session in sessions:
            session.close()


@dataclass
class _ScenarioState:
    """One scenario across the run's suite cycles: what it measured so far and how it failed, if it did."""

    scenario: Scenario
    cycles: list[ScenarioCycle] = field(default_factory=list)
    plans: tuple[PlanChange, ...] = ()
    asymmetries: dict[str, Asymmetry] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: ScenarioResult | None = None
    visited: bool = False


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
        self.measure_start = t0
        self.measure_seconds = 0.0
        self.stop_reason = COMPLETE
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.timings: dict[str, tuple[list[float], list[float]]] = {}
        self.facts: dict[str, ServerFacts] = {role: s.facts() for role, s in self.sides.items()}
        self.calibration = CalibrationReport(config.calibration, "off", None)
        for facts in self.facts.values():
            if facts.statements_note:
                self.notes.append(facts.statements_note)

    def warn(self, text: str) -> None:
        """A note the operator must see in the CI log too (the CLI prints warnings on stderr)."""
        self.notes.append(text)
        self.warnings.append(text)

    # -- budget ---------------------------------------------------------------------------------------
    def spent(self) -> bool:
        """The whole run's budget (from its start: connections, shared sections, calibration, cycles)."""
        return time.perf_counter() - self.t0 >= self.config.suite_max_seconds

    @property
    def bounded(self) -> bool:
        return self.config.verdict_rule == "bounded"

    # -- the run --------------------------------------------------------------------------------------
    def measure(self) -> list[ScenarioResult]:
        """Shared sections, the calibration, then suite cycles: every cycle runs each scenario once (the
        suite's order reversed every other cycle, so no scenario always runs right after the same one), the
        configured cycles first, then (verdict_rule = bounded) extra cycles of the still undecided
        scenarios up to max_cycles, until the budget is spent or a BLOCK decides the run."""
        config = self.config
        base, cand = self.sides[BASELINE], self.sides[CANDIDATE]
        base.run_shared(self.suite)
        shared_error = None
        try:
            cand.run_shared(self.suite)
        except CandidateFailure as exc:
            shared_error = f"the shared section fails on the candidate: {exc}"
        if shared_error is not None:
            return [
                ScenarioResult(s.name, BLOCK, reasons=(f"BLOCK: {shared_error}",), error=shared_error)
                for s in self.suite.scenarios
            ]
        if self.calib is not None:
            self.calib.run_shared(self.suite)
        self.measure_start = time.perf_counter()
        self.calibration = self._calibrate()
        states = [_ScenarioState(s) for s in self.suite.scenarios]
        last = max(config.cycles, config.max_cycles) if self.bounded else config.cycles
        decided = False
        for k in range(last):
            todo = [st for st in states if self._wants_cycle(st, k)]
            if not todo:
                break
            if k % 2 == 1:
                todo.reverse()
            for st in todo:
                if self.spent():
                    self.stop_reason = BUDGET
                    break
                self._scenario_cycle(st, k)
                if self.spent():
                    self.stop_reason = BUDGET
                    break
                if config.stop_when_decided and self._blocked(st):
                    decided = True
                    st.notes.append(f"the run stopped after cycle {k + 1}: BLOCK decided")
                    break
            if decided or self.stop_reason == BUDGET:
                break
        if decided and self.stop_reason != BUDGET:
            self.stop_reason = DECIDED
        self.measure_seconds = time.perf_counter() - self.measure_start
        return [self._result(st, decided) for st in states]

    def _wants_cycle(self, st: _ScenarioState, k: int) -> bool:
        if st.failed is not None:
            return False
        if k < self.config.cycles:
            return True
        return self.bounded and self._judged(st).verdict == INCONCLUSIVE

    def _judged(self, st: _ScenarioState) -> ScenarioResult:
        return _judge(st.scenario, st.cycles, st.plans, st.asymmetries, self.config, list(st.notes))

    def _blocked(self, st: _ScenarioState) -> bool:
        """The scenario's BLOCK is decided, so the run's verdict is. bounded: its judgement over at least two
        cycles (one slow stretch cannot decide it alone; one cycle when only one is configured) is BLOCK.
        design: enough cycles BLOCKed for the selection rule (:func:`blocks_needed`)."""
        if st.failed is not None:
            return st.failed.verdict == BLOCK
        cycles = [c for c in st.cycles if c.complete]
        if not cycles:
            return False
        if self.bounded:
            return len(cycles) >= min(self.config.cycles, 2) and self._judged(st).verdict == BLOCK
        applied = {} if cycles[0].corrected else st.asymmetries
        needed = blocks_needed(self.config.cycles, self.config.selection)
        blocked = max(
            (
                sum(
                    corrected_verdict(c.judged(m), applied.get(m), self.config) == BLOCK
                    for c in cycles
                    if m in c.comparisons
                )
                for m in cycles[-1].comparisons
            ),
            default=0,
        )
        return blocked >= needed

    def _result(self, st: _ScenarioState, decided: bool) -> ScenarioResult:
        if st.failed is not None:
            return st.failed
        if not st.cycles:
            if decided:
                return ScenarioResult(
                    st.scenario.name, NOT_RUN, notes=("not measured: the run was already decided (BLOCK)",)
                )
            return ScenarioResult(
                st.scenario.name,
                INCONCLUSIVE,
                notes=("not measured: the budget (suite_max_seconds) was spent",),
            )
        return judge_scenario(st.scenario, st.cycles, st.plans, st.asymmetries, self.config, st.notes)

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
            if not base_facts.same_server(cand_facts):
                self.warn(TWO_SERVERS_UNCALIBRATED)
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
        if not asymmetry.reliable:
            self.warn(
                f"the probe calibration is unreliable ({asymmetry.note}): "
                + (
                    "its uncertainty is carried into every wallclock CI, so a verdict it cannot support is "
                    "INCONCLUSIVE; give --calibration-dsn (a copy of the baseline on the candidate's server) "
                    "for a calibration measured beside each scenario"
                    if config.calibration_unreliable == "carry"
                    else "not applied (calibration_unreliable = ignore): the servers' difference is judged "
                    "as the candidate's"
                )
            )
        return CalibrationReport(requested, "probe", asymmetry, tuple(b_times), tuple(c_times), note)

    # -- one scenario in one suite cycle ------------------------------------------------------------------
    def _scenario_cycle(self, st: _ScenarioState, k: int) -> None:
        """Cycle ``k`` of one scenario: its settings (init the first time), EXPLAIN (plans kept from the
        first visit), with aa_timing = before its A/A cycles on the first visit, then the cycle."""
        config = self.config
        scenario = st.scenario
        base, cand = self.sides[BASELINE], self.sides[CANDIDATE]
        first = BASELINE if baseline_first(k, config.cycle_order) else CANDIDATE
        params = scenario.draw(self.rng)
        base.start_scenario(scenario, params)
        try:
            cand.start_scenario(scenario, params)
        except CandidateFailure as exc:
            base.end_scenario(scenario)
            st.failed = _failed(scenario, str(exc))
            return
        aa = self.calib is not None and self.calibration.mode == "aa"
        interleaved = aa and config.aa_timing == "interleaved"
        calib = self.calib if interleaved else None
        try:
            if not st.visited:
                st.visited = True
                st.plans = _plan_changes(base.plans.get(scenario.name, []), cand.plans.get(scenario.name, []))
                if self.calibration.asymmetry is not None:
                    st.asymmetries = dict.fromkeys((WALLCLOCK, TAIL), self.calibration.asymmetry)
                elif aa and not interleaved:
                    st.asymmetries = self._aa_asymmetries(scenario, params)
                    for measurement, a in st.asymmetries.items():
                        st.notes.append(
                            f"A/A asymmetry of {measurement} ×{a.ratio:.3f} (CI {a.ci[0]:.3f}–{a.ci[1]:.3f}) "
                            f"{_applied(a, config, measurement)}"
                        )
            if calib is not None:
                calib.start_scenario(scenario, params)
            cycle = self._cycle(
                scenario,
                k,
                first,
                (base, cand),
                record=True,
                asymmetry=None if interleaved else st.asymmetries.get(WALLCLOCK),
                calib=calib,
            )
            if cycle.complete or min(cycle.measurements.values(), default=0) >= config.min_measurements:
                st.cycles.append(cycle)
        except CandidateFailure as exc:
            st.failed = _failed(scenario, str(exc))
        finally:
            base.end_scenario(scenario)
            cand.end_scenario(scenario)
            if calib is not None:
                calib.end_scenario(scenario)

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
        copy. With ``alternate_within_cycle`` every odd measurement swaps the two targets that would
        otherwise keep their places: the two sides (without a copy), or the candidate and the copy (with
        one), so no target always runs right after the same one."""
        config = self.config
        base, other = pair
        if calib is None:
            order: tuple[TargetSession, ...] = (base, other) if first == BASELINE else (other, base)
        else:
            order = (base, other, calib) if first == BASELINE else (calib, other, base)
        if calib is None:
            swapped = order[::-1]
        else:  # the candidate and the copy trade places; the baseline keeps the cycle's
            swapped = (base, calib, other) if first == BASELINE else (other, calib, base)
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
        # Counted from here on, as the counters are: the warm-up executions are in neither.
        executions = {BASELINE: 0, CANDIDATE: 0, CALIBRATION: 0}
        before = {roles[id(s)]: s.counters(scenario) for s in (base, other)}
        samples: dict[str, list[float]] = {roles[id(s)]: [] for s in order}
        stopped: dict[str, str] = {}
        fired: dict[str, str] = {}
        next_look = 0
        complete = True
        while len(stopped) < len(samples):
            if self.spent():
                complete = False
                break
            params = scenario.draw(self.rng)
            index = min(len(v) for v in samples.values())
            fresh = index > 0 and index % config.reconnect_every_rounds == 0
            for session in swapped if (config.alternate_within_cycle and index % 2 == 1) else order:
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
                if role not in stopped and role not in fired:
                    rule = first_rule_to_fire(np.asarray(samples[role]), config)
                    if rule is not None:
                        fired[role] = rule.name
                        if not self.bounded:
                            stopped[role] = rule.name  # design: a target stops when its rule fires
                if self.bounded and role not in stopped and len(samples[role]) >= config.max_measurements:
                    stopped[role] = RUN_AT_MOST
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
                except ValueError:
                    observed = None
                decided = None if observed is None else decided_by_ci(observed)
                if self.bounded and observed is not None and decided != "decisive_block":
                    # bounded: besides a decisive BLOCK, the cycle ends once every target's design rule
                    # fired and the comparison is decided, looked at on a growing schedule (each look
                    # after recheck_growth more measurements: fewer looks, less optional-stopping bias)
                    decided = None
                    if len(fired) == len(samples) and n >= next_look:
                        next_look = max(n + 1, math.ceil(n * (1.0 + config.recheck_growth)))
                        decided = decided_in_cycle(observed, config)
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
        raw = CycleRaw(
            samples={role: tuple(values) for role, values in samples.items()},
            counters={
                role: _per_execution(before[role], after[role], executions[role], scenario.repeat)
                for role in (BASELINE, CANDIDATE)
            },
            memory={
                role: tuple((r.context_bytes, r.rss_bytes, r.worker_bytes) for r in readings)
                for role, readings in memory.items()
            },
        )
        comparisons, calibration, corrected = cycle_comparisons(raw, config, k)
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
            raw,
        )


def judge_scenario(
    scenario: Scenario,
    cycles: list[ScenarioCycle],
    plans: tuple[PlanChange, ...],
    asymmetries: dict[str, Asymmetry],
    config: GateConfig,
    notes: Sequence[str] = (),
) -> ScenarioResult:
    """A measured scenario's result from its cycles (pure: ``radar gate --replay`` calls it on stored
    cycles). Cycles with the interleaved copy are judged on their own corrected comparisons and report
    the asymmetry measured inside them; otherwise ``asymmetries`` (the probe's or the A/A cycles') apply."""
    notes = list(notes)
    if cycles and cycles[0].calibration:
        measured = _asymmetries([(c.cycle, c.calibration) for c in cycles], config)
        for measurement, asymmetry in measured.items():
            notes.append(
                f"A/A asymmetry of {measurement} ×{asymmetry.ratio:.3f} (CI {asymmetry.ci[0]:.3f}–"
                f"{asymmetry.ci[1]:.3f}), measured inside each cycle; each cycle judged as the candidate "
                "against the baseline's copy on its own server"
            )
        result = _judge(scenario, cycles, plans, {}, config, notes)
        return replace(result, asymmetry=measured.get(WALLCLOCK), tail_asymmetry=measured.get(TAIL))
    return _judge(scenario, cycles, plans, asymmetries, config, notes)


def run_verdict(scenarios: Sequence[ScenarioResult], stop_reason: str, config: GateConfig) -> str:
    """The run's verdict: the worst scenario's (NOT_RUN ones aside). With verdict_rule = design a spent
    budget makes anything short of BLOCK INCONCLUSIVE; bounded: every scenario's verdict is already bounded
    by its data (one never measured is INCONCLUSIVE)."""
    verdict = max(
        (s.verdict for s in scenarios if s.verdict != NOT_RUN), key=SEVERITY.__getitem__, default=PASS
    )
    if config.verdict_rule == "design" and stop_reason == BUDGET and verdict != BLOCK:
        return INCONCLUSIVE
    return verdict


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


def _readings(readings: Sequence[Sequence[float | None]], index: int) -> list[float]:
    """One kind of memory reading of a side (reports written before worker memory have 2-tuples)."""
    return [float(r[index]) for r in readings if len(r) > index and r[index] is not None]


def cycle_comparisons(
    raw: CycleRaw, config: GateConfig, k: int
) -> tuple[
    dict[str, MeasurementComparison], dict[str, MeasurementComparison], dict[str, MeasurementComparison]
]:
    """One cycle judged from what it measured (pure: a stored run is judged again the same way): every
    measurement's comparison, and with the interleaved copy its asymmetry and corrected comparisons."""
    out: dict[str, MeasurementComparison] = {}
    b, c = raw.samples[BASELINE], raw.samples[CANDIDATE]
    if len(b) >= 2 and len(c) >= 2:
        with contextlib.suppress(ValueError):
            out[WALLCLOCK] = compare_samples(WALLCLOCK, b, c, config, salt=k)
        out[TAIL] = tail_verdict(b, c, config, salt=k)
    pb, pc = raw.counters.get(BASELINE), raw.counters.get(CANDIDATE)
    if pb is not None and pc is not None:
        out["temp_blocks"] = compare_values(
            "temp_blocks", pb.temp_blocks_written, pc.temp_blocks_written, config
        )
        out["shared_blocks"] = compare_values("shared_blocks", pb.shared_blocks, pc.shared_blocks, config)
        out["wal_bytes"] = compare_values("wal_bytes", pb.wal_bytes, pc.wal_bytes, config)
        if pb.plans > 0 and pc.plans > 0:
            out["planning"] = compare_values("planning", pb.plan_ms, pc.plan_ms, config)
    for name, index in (("memory", 0), ("rss", 1), ("worker_rss", 2)):
        vb = _readings(raw.memory.get(BASELINE, ()), index)
        vc = _readings(raw.memory.get(CANDIDATE, ()), index)
        if vb and vc:
            out[name] = compare_readings(name, vb, vc, config, config.memory_aggregation)
    if CALIBRATION in raw.samples:
        calibration, corrected = _interleaved_comparisons(
            {role: list(v) for role, v in raw.samples.items()}, config, k
        )
    else:
        calibration, corrected = {}, {}
    return out, calibration, corrected


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
    over = "under" if ch.ratio < 1.0 + ch.threshold else "over"
    text = (
        f"{s.measurement} ×{ch.ratio:.3f} (CI {ch.ci[0]:.3f}–{ch.ci[1]:.3f}; "
        f"{ch.baseline:,.4g} → {ch.candidate:,.4g} {ch.unit}) {over} threshold {ch.threshold:.0%}{strong}; "
        f"{s.regressed_cycles} of {len(s.cycles)} cycles regressed"
    )
    if not s.decided:
        bound = "no bound" if s.rules_out is None else f"×{s.rules_out:.3f}"
        text += (
            f"; undecided: the data cannot rule out a regression up to {bound} (PASS needs the CI's upper "
            f"bound under ×{1.0 + ch.threshold:.3f})"
        )
    return text


def _judge(
    scenario: Scenario,
    cycles: list[ScenarioCycle],
    plans: tuple[PlanChange, ...],
    asymmetries: dict[str, Asymmetry],
    config: GateConfig,
    notes: list[str],
) -> ScenarioResult:
    """Each measurement over the cycles (wallclock and its tail row each corrected by its own asymmetry):
    the design's selection, and with verdict_rule = bounded the verdict bounded by the combined CI; then
    the scenario's verdict and reasons."""
    if not cycles:
        return ScenarioResult(scenario.name, INCONCLUSIVE, plans=plans, notes=(*notes, "no cycle measured"))
    bounded = config.verdict_rule == "bounded"
    names = [m for m in cycles[0].comparisons if all(m in c.comparisons for c in cycles)]
    selected = []
    for m in names:
        interleaved = all(m in c.corrected and m in c.calibration for c in cycles)
        if interleaved:
            design = select_interleaved(
                m,
                [c.comparisons[m] for c in cycles],
                [c.corrected[m] for c in cycles],
                [c.calibration[m] for c in cycles],
                config,
            )
        else:
            design = select_measurement(m, [c.comparisons[m] for c in cycles], asymmetries.get(m), config)
        selected.append(judge_selected(design, config) if bounded else design)
    found: list[tuple[str, str]] = []
    for s in selected:
        if s.measurement == TAIL and s.verdict == INCONCLUSIVE:
            # The tail row is an alarm beside the wallclock aggregate, not one of the design's measurements:
            # the mean of every execution is as noisy as the host's stalls (on a contended server its CI
            # stayed ±40% after 7 cycles while the median's was ±3%), so an undecided tail is said, and
            # only a decided WARN or BLOCK of it counts.
            notes.append(f"tail not decided: {_reason(s)}")
        elif s.verdict in (WARN, BLOCK, INCONCLUSIVE):
            found.append((s.verdict, _reason(s)))
        elif s.chosen.kind == "improvement":
            notes.append(f"improvement: {s.measurement} ×{s.chosen.ratio:.3f}")
    for plan in plans:
        if plan.index_rename_only:
            notes.append(f"statement {plan.statement + 1}: plan differs only in index names ({plan.summary})")
        elif plan.changed and config.plan_change_warns:
            found.append((WARN, f"plan of statement {plan.statement + 1} changed: {plan.summary}"))
    verdict = worst([v for v, _ in found])
    if not all(c.complete for c in cycles):
        notes.append("the budget ran out inside a cycle")
        if not bounded and verdict != BLOCK:
            verdict = INCONCLUSIVE
    if bounded and len(cycles) < config.cycles:
        notes.append(f"{len(cycles)} of {config.cycles} cycles measured")
    reasons = tuple(f"{v}: {r}" for v, r in sorted(found, key=lambda item: -SEVERITY[item[0]]))
    return ScenarioResult(
        scenario.name,
        verdict,
        tuple(selected),
        tuple(cycles),
        plans,
        reasons,
        notes=tuple(notes),
        asymmetry=asymmetries.get(WALLCLOCK),
        tail_asymmetry=asymmetries.get(TAIL),
    )
