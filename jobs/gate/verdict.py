"""Pure verdicts: per query PASS / WARN / BLOCK with the reasons, the run's report, its JSON form (checked
against ``jobs/contracts/gate_report.schema.json``) and a short human table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN, GateConfig
from jobs.gate.drift_flags import GateDrift
from jobs.gate.stats import LatencyComparison

if TYPE_CHECKING:
    from jobs.gate.cycle import MeasurementComparison

SEVERITY = {PASS: 0, WARN: 1, INCONCLUSIVE: 2, BLOCK: 3}
CONTRACT = Path(__file__).resolve().parent.parent / "contracts" / "gate_report.schema.json"


@cache
def gate_report_contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text())


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.__getitem__, default=PASS)


@dataclass(frozen=True)
class SideStatements:
    """pg_stat_statements deltas of one query on one side over the measured rounds."""

    calls: int
    buffers_per_call: float  # shared_blks_hit + shared_blks_read
    rows_per_call: float
    mean_exec_ms: float


@dataclass(frozen=True)
class PlanComparison:
    """EXPLAIN (FORMAT JSON) with the first parameter set on each side."""

    baseline_shape_hash: str
    candidate_shape_hash: str
    changed: bool
    summary: str
    index_rename_only: bool = False
    """The shapes differ only in index names (a pure rename): reported, never failing."""


@dataclass(frozen=True)
class QueryResult:
    name: str
    sql: str
    weight: float
    verdict: str
    reasons: tuple[str, ...]
    latency: LatencyComparison | None
    settled_by: str | None  # "precise", "decisive", "immaterial" or None (a budget ran out first)
    baseline_statements: SideStatements | None = None
    candidate_statements: SideStatements | None = None
    statements_note: str | None = None
    plan: PlanComparison | None = None
    error: str | None = None
    drift: GateDrift | None = None
    """Informational: the drift scorer's flag of this query's per-execution latencies (jobs.gate.drift_flags);
    it never changes ``verdict``."""
    tail: MeasurementComparison | None = None
    """The tail check: mean latency of every measured call (nothing filtered); cycle.tail_verdict."""

    @property
    def buffers_ratio(self) -> float | None:
        b, c = self.baseline_statements, self.candidate_statements
        if b is None or c is None or b.buffers_per_call <= 0:
            return None
        return c.buffers_per_call / b.buffers_per_call


def _latency_level(
    metric: str,
    ratio: float,
    ci: tuple[float, float],
    increase_ms: float,
    warn: float,
    block: float,
    config: GateConfig,
) -> tuple[str, str | None]:
    """BLOCK: CI lower bound >= block ratio. WARN: estimate >= warn ratio and CI lower bound over
    warn_min_ci_lower. Either needs the absolute increase of at least min_latency_increase_ms."""
    lo, hi = ci
    text = f"{metric} ×{ratio:.3f} (CI {lo:.3f}–{hi:.3f}, +{increase_ms:.3f} ms)"
    if increase_ms < config.min_latency_increase_ms:
        return PASS, None
    if lo >= block:
        return BLOCK, f"{text}: CI lower bound ≥ block ratio {block:g}"
    if ratio >= warn and lo > config.warn_min_ci_lower:
        return WARN, f"{text}: ≥ warn ratio {warn:g}"
    return PASS, None


def server_ratio(baseline: SideStatements | None, candidate: SideStatements | None) -> float | None:
    """Candidate / baseline mean execution time per call from pg_stat_statements, when both exist."""
    if baseline is None or candidate is None or baseline.mean_exec_ms <= 0:
        return None
    return candidate.mean_exec_ms / baseline.mean_exec_ms


def judge_query(
    latency: LatencyComparison | None,
    baseline_statements: SideStatements | None,
    candidate_statements: SideStatements | None,
    plan: PlanComparison | None,
    error: str | None,
    config: GateConfig,
    tail: MeasurementComparison | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The query's verdict (worst of its metrics) and one reason per metric over a threshold."""
    found: list[tuple[str, str]] = []
    if error is not None:
        found.append((BLOCK, f"fails on the candidate: {error}"))
    timing: list[tuple[str, str]] = []
    if latency is not None:
        for metric, ratio, ci, base, cand, warn, block in (
            ("p50", latency.p50_ratio, latency.p50_ci, latency.baseline_p50_ms, latency.candidate_p50_ms,
             config.p50_warn_ratio, config.p50_block_ratio),
            ("p95", latency.p95_ratio, latency.p95_ci, latency.baseline_p95_ms, latency.candidate_p95_ms,
             config.p95_warn_ratio, config.p95_block_ratio),
        ):  # fmt: skip
            level, reason = _latency_level(metric, ratio, ci, cand - base, warn, block, config)
            if reason is not None:
                timing.append((level, reason))
    if tail is not None and tail.verdict != PASS:
        timing.append((tail.verdict, (
            f"mean of every call ×{tail.ratio:.3f} (CI {tail.ci[0]:.3f}–{tail.ci[1]:.3f}, "
            f"{tail.baseline:.3f} → {tail.candidate:.3f} ms, nothing filtered) ≥ tail_mean_ratio "
            f"{config.tail_mean_ratio:g}: a heavier tail"
        )))  # fmt: skip
    b, c = baseline_statements, candidate_statements
    server = server_ratio(b, c)
    if server is not None and server < config.server_confirm_ratio:
        timing = [(PASS, f"{reason}; not confirmed by the server's execution time ×{server:.3f}")
                  for _, reason in timing]  # fmt: skip
    found.extend(timing)
    if b is not None and c is not None and b.calls > 0 and c.calls > 0:
        increase = c.buffers_per_call - b.buffers_per_call
        ratio = c.buffers_per_call / b.buffers_per_call if b.buffers_per_call > 0 else float("inf")
        text = f"shared buffers/call {b.buffers_per_call:,.1f} → {c.buffers_per_call:,.1f}"
        if increase >= config.buffers_min_increase:
            if ratio >= config.buffers_block_ratio:
                found.append((BLOCK, f"{text} (×{ratio:.2f} ≥ {config.buffers_block_ratio:g})"))
            elif ratio >= config.buffers_warn_ratio:
                found.append((WARN, f"{text} (×{ratio:.2f} ≥ {config.buffers_warn_ratio:g})"))
        scale = max(abs(b.rows_per_call), 1.0)
        if abs(c.rows_per_call - b.rows_per_call) / scale > config.rows_change_warn:
            found.append(
                (WARN, f"rows/call {b.rows_per_call:,.2f} → {c.rows_per_call:,.2f}: the results differ")
            )
    if plan is not None and plan.index_rename_only:
        found.append((PASS, f"the plan differs only in index names: {plan.summary}"))
    elif plan is not None and plan.changed and config.plan_change_warns:
        found.append((WARN, plan.summary))
    verdict = worst([level for level, _ in found])
    ordered = sorted(found, key=lambda item: -SEVERITY[item[0]])
    return verdict, tuple(f"{level}: {reason}" for level, reason in ordered)


@dataclass(frozen=True)
class Termination:
    reason: str  # all_settled | max_rounds | max_seconds | all_failed
    rounds: int
    measure_seconds: float
    settled: tuple[str, ...]
    unsettled: tuple[str, ...]


@dataclass(frozen=True)
class GateReport:
    verdict: str
    queries: tuple[QueryResult, ...]
    termination: Termination
    config: GateConfig
    baseline: str  # redacted DSN
    candidate: str
    workload: str
    started_at: str
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        """CI convention: 0 PASS, 1 WARN (0 when config.fail_on_warn is off), 2 BLOCK, 4 INCONCLUSIVE (the
        budget ran out with a query undecided)."""
        if self.verdict == BLOCK:
            return 2
        if self.verdict == INCONCLUSIVE:
            return 4
        if self.verdict == WARN:
            return 1 if self.config.fail_on_warn else 0
        return 0

    def to_dict(self) -> dict[str, Any]:
        """The report as the contract describes it (validated)."""
        payload = {
            "kind": "gate_report",
            "schema_version": 1,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "workload": self.workload,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 3),
            "termination": {
                "reason": self.termination.reason,
                "rounds": self.termination.rounds,
                "measure_seconds": round(self.termination.measure_seconds, 3),
                "settled": list(self.termination.settled),
                "unsettled": list(self.termination.unsettled),
            },
            "config": self.config.to_dict(),
            "notes": list(self.notes),
            "queries": [_query_dict(q) for q in self.queries],
        }
        jsonschema.validate(payload, gate_report_contract())
        return payload

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _side_dict(side: SideStatements | None) -> dict[str, Any] | None:
    if side is None:
        return None
    return {
        "calls": side.calls,
        "buffers_per_call": side.buffers_per_call,
        "rows_per_call": side.rows_per_call,
        "mean_exec_ms": side.mean_exec_ms,
    }


def _query_dict(q: QueryResult) -> dict[str, Any]:
    latency = None
    if q.latency is not None:
        lat = q.latency
        latency = {
            "samples": {"baseline": lat.n_baseline, "candidate": lat.n_candidate},
            "outliers_dropped": {"baseline": lat.dropped_baseline, "candidate": lat.dropped_candidate},
            "baseline_p50_ms": lat.baseline_p50_ms,
            "candidate_p50_ms": lat.candidate_p50_ms,
            "p50_ratio": lat.p50_ratio,
            "p50_ci": list(lat.p50_ci),
            "baseline_p95_ms": lat.baseline_p95_ms,
            "candidate_p95_ms": lat.candidate_p95_ms,
            "p95_ratio": lat.p95_ratio,
            "p95_ci": list(lat.p95_ci),
            "mann_whitney_p": lat.p_value,
        }
    plan = None
    if q.plan is not None:
        plan = {
            "baseline_shape_hash": q.plan.baseline_shape_hash,
            "candidate_shape_hash": q.plan.candidate_shape_hash,
            "changed": q.plan.changed,
            "summary": q.plan.summary,
            "index_rename_only": q.plan.index_rename_only,
        }
    return {
        "name": q.name,
        "sql": q.sql,
        "weight": q.weight,
        "verdict": q.verdict,
        "reasons": list(q.reasons),
        "settled_by": q.settled_by,
        "latency": latency,
        "statements": {
            "baseline": _side_dict(q.baseline_statements),
            "candidate": _side_dict(q.candidate_statements),
            "buffers_ratio": q.buffers_ratio,
            "note": q.statements_note,
        },
        "plan": plan,
        "error": q.error,
        "drift": None if q.drift is None else q.drift.to_dict(),
        "tail": None
        if q.tail is None
        else {
            "baseline_mean_ms": q.tail.baseline,
            "candidate_mean_ms": q.tail.candidate,
            "ratio": q.tail.ratio,
            "ci": list(q.tail.ci),
            "verdict": q.tail.verdict,
        },
    }


def _cell(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def drift_line(drift: GateDrift) -> str:
    """``drift (informational, not in the verdict): WARN insufficient_samples, JS 0.120, PSI 0.300, 150 vs
    150 calls``."""
    return (
        f"drift (informational, not in the verdict): {drift.flag} {drift.reason}, "
        f"JS {_cell(drift.js, '.3f')}, PSI {_cell(drift.psi, '.3f')}, "
        f"{drift.n_baseline} vs {drift.n_candidate} calls (latency)"
    )


def render_gate_report(report: GateReport) -> str:
    """A short plain-text table: one line per query, then the reasons and how the run ended."""
    header = (
        f"{'query':<26} {'verdict':<7} {'p50 base→cand ms':>20} {'p50 ratio (CI)':>24} "
        f"{'p95 ×':>7} {'buf ×':>6} {'settled':>10} {'drift':>6}"
    )
    lines = [header, "-" * len(header)]
    for q in report.queries:
        lat = q.latency
        p50 = "–" if lat is None else f"{lat.baseline_p50_ms:.3f} → {lat.candidate_p50_ms:.3f}"
        ratio = "–" if lat is None else f"{lat.p50_ratio:.3f} ({lat.p50_ci[0]:.3f}–{lat.p50_ci[1]:.3f})"
        p95 = "–" if lat is None else f"{lat.p95_ratio:.3f}"
        lines.append(
            f"{q.name[:26]:<26} {q.verdict:<7} {p50:>20} {ratio:>24} {p95:>7} "
            f"{_cell(q.buffers_ratio, '.2f'):>6} {q.settled_by or 'no':>10} "
            f"{q.drift.flag if q.drift else '–':>6}"
        )
    for q in report.queries:
        lines.extend(f"  {q.name}: {reason}" for reason in q.reasons)
        if q.drift is not None:
            lines.append(f"  {q.name}: {drift_line(q.drift)}")
    t = report.termination
    lines.append(
        f"Verdict {report.verdict} (exit {report.exit_code}); stopped: {t.reason} after {t.rounds} rounds, "
        f"{t.measure_seconds:.1f} s measuring, {report.seconds:.1f} s in all"
        + (f"; unsettled: {', '.join(t.unsettled)}" if t.unsettled else "")
    )
    lines.extend(f"Note: {note}" for note in report.notes)
    return "\n".join(lines)
