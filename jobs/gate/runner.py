"""The I/O edge of the gate: connect to both databases, EXPLAIN, warm up, run interleaved randomized rounds
until the statistics say stop, read pg_stat_statements deltas, and hand everything to the pure verdict.

Interleaving: every call is made on both sides with the same parameters, in a random (seeded) side order,
and the queries' order is shuffled each round, so drift of the machine (another process, a checkpoint,
CPU frequency) hits baseline and candidate alike.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import RawCursor

from jobs.drift.config import DriftScoreConfig
from jobs.gate.config import BLOCK, INCONCLUSIVE, GateConfig
from jobs.gate.cycle import MeasurementComparison, tail_verdict
from jobs.gate.drift_flags import gate_drift, gate_query_hash
from jobs.gate.stats import (
    ALL_FAILED,
    MAX_ROUNDS,
    MAX_SECONDS,
    LatencyComparison,
    compare_latencies,
    decide_termination,
    settle_reason,
)
from jobs.gate.verdict import (
    GateReport,
    PlanComparison,
    QueryResult,
    SideStatements,
    Termination,
    judge_query,
    worst,
)
from jobs.gate.workload import GateQuery, GateWorkload, load_workload
from jobs.plans.diff import diff_plans
from jobs.plans.shape import PlanFormatError, plan_root, plan_shape_hash
from jobs.redaction import redact_dsn, scrub
from jobs.sqlfiles import load_sql

BASELINE, CANDIDATE = "baseline", "candidate"
Conn = psycopg.Connection[Any]


class GateError(RuntimeError):
    """The gate could not measure (a database unreachable, the workload failing on the baseline)."""


@dataclass
class _Side:
    role: str
    dsn: str
    conn: Conn
    config: GateConfig
    explains: dict[str, Any] = field(default_factory=dict)
    queryids: dict[str, int] = field(default_factory=dict)
    pgss_note: str | None = None

    def error(self, exc: BaseException) -> str:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return scrub(first, self.dsn)


def _open(role: str, dsn: str, config: GateConfig) -> Conn:
    try:
        return psycopg.connect(
            dsn,
            autocommit=True,
            cursor_factory=RawCursor,  # $1 placeholders, sent as typed server-side parameters
            connect_timeout=config.connect_timeout_s,
            application_name=f"pg-regression-radar gate ({role})",
            options=f"-c statement_timeout={int(config.statement_timeout_ms)}",
            prepare_threshold=None,  # every call parsed and planned with its parameters: like the EXPLAIN
        )
    except psycopg.Error as exc:
        message = scrub(str(exc).strip(), dsn)
        raise GateError(f"{role}: cannot connect to {redact_dsn(dsn)}: {message}") from None


def _connect(role: str, dsn: str, config: GateConfig) -> _Side:
    return _Side(role, dsn, _open(role, dsn, config), config)


def _reconnect(side: _Side) -> None:
    side.conn.close()
    side.conn = _open(side.role, side.dsn, side.config)


def _timed_call(conn: Conn, sql: str, params: tuple[object, ...]) -> int:
    """Client-side latency of one call in ns: send, execute, fetch every row."""
    started = time.perf_counter_ns()
    cursor = conn.execute(sql, params)
    if cursor.description is not None:
        cursor.fetchall()
    return time.perf_counter_ns() - started


def _explain(side: _Side, query: GateQuery, params: tuple[object, ...]) -> None:
    text = load_sql("gate_explain").rstrip() + "\n" + query.sql
    row = side.conn.execute(text, params).fetchone()
    document = row[0] if row else None
    if isinstance(document, str):
        document = json.loads(document)
    side.explains[query.name] = document
    top = document[0] if isinstance(document, list) and document else {}
    if isinstance(top, dict) and top.get("Query Identifier") is not None:
        side.queryids[query.name] = int(top["Query Identifier"])


def _statements_available(side: _Side) -> None:
    """Set ``pgss_note`` when pg_stat_statements cannot give per-call buffers and rows on this side."""
    try:
        extversion, track, compute = side.conn.execute(load_sql("gate_statements_available")).fetchone()
    except psycopg.Error as exc:
        side.pgss_note = f"pg_stat_statements unreadable on the {side.role}: {side.error(exc)}"
        return
    if extversion is None:
        side.pgss_note = f"pg_stat_statements is not installed on the {side.role}"
    elif track in (None, "none"):
        side.pgss_note = (
            f"pg_stat_statements.track is {track or 'unset (library not loaded)'} on the {side.role}"
        )
    elif compute == "off":
        side.pgss_note = f"compute_query_id is off on the {side.role}"


def _read_statements(side: _Side) -> dict[int, tuple[int, int, int, float]] | None:
    if side.pgss_note is not None or not side.queryids:
        return None
    try:
        rows = side.conn.execute(load_sql("gate_statements"), (list(side.queryids.values()),)).fetchall()
    except psycopg.Error as exc:
        side.pgss_note = f"pg_stat_statements unreadable on the {side.role}: {side.error(exc)}"
        return None
    return {int(r[0]): (int(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows}


def _statement_deltas(
    side: _Side, name: str, before: dict[int, Any] | None, after: dict[int, Any] | None
) -> tuple[SideStatements | None, str | None]:
    if before is None or after is None:
        return None, side.pgss_note or f"pg_stat_statements not read on the {side.role}"
    queryid = side.queryids.get(name)
    if queryid is None:
        return None, f"no query identifier from EXPLAIN VERBOSE on the {side.role}"
    start = before.get(queryid, (0, 0, 0, 0.0))
    end = after.get(queryid)
    if end is None:
        return None, f"the statement is not in pg_stat_statements on the {side.role} (evicted?)"
    calls, blocks, rows, exec_ms = (e - s for e, s in zip(end, start, strict=True))
    if calls <= 0:
        return None, f"pg_stat_statements counted no calls on the {side.role}"
    return SideStatements(int(calls), blocks / calls, rows / calls, exec_ms / calls), None


def _plan_comparison(base_doc: Any, cand_doc: Any) -> PlanComparison | None:
    try:
        base, cand = plan_root(base_doc), plan_root(cand_doc)
    except PlanFormatError:
        return None
    b_hash, c_hash = plan_shape_hash(base), plan_shape_hash(cand)
    renamed = b_hash != c_hash and plan_shape_hash(base, ignore=INDEX_NAME) == plan_shape_hash(
        cand, ignore=INDEX_NAME
    )
    summary = diff_plans(base_doc, cand_doc).summary
    return PlanComparison(b_hash, c_hash, b_hash != c_hash, summary, index_rename_only=renamed)


INDEX_NAME = ("Index Name",)


def _tail(samples: Rounds, name: str, config: GateConfig) -> MeasurementComparison | None:
    """The tail check on every measured call of the query, nothing filtered."""
    base = [ns / 1e6 for one in samples[name][BASELINE] for ns in one]
    cand = [ns / 1e6 for one in samples[name][CANDIDATE] for ns in one]
    if len(base) < 2 or len(cand) < 2:
        return None
    return tail_verdict(base, cand, config)


Rounds = dict[str, dict[str, list[list[int]]]]  # query -> side -> rounds -> call latencies (ns)


def _compare(samples: Rounds, name: str, config: GateConfig) -> LatencyComparison | None:
    """Compare one query's rounds (rounds cut short by a candidate failure keep what they have)."""
    pairs = [(b, c) for b, c in zip(samples[name][BASELINE], samples[name][CANDIDATE], strict=True) if b]
    if sum(len(b) for b, _ in pairs) < 2:
        return None
    base = [np.asarray(b, dtype=float) / 1e6 for b, _ in pairs]
    cand = [np.asarray(c, dtype=float) / 1e6 for _, c in pairs]
    return compare_latencies(base, cand, config)


def per_execution_ms(samples: Rounds) -> dict[str, tuple[list[float], list[float]]]:
    """Per query: every measured call's client latency in ms, (baseline, candidate), rounds flattened (the
    drift scorer's samples: no outlier is dropped, the scorer winsorizes the candidate itself)."""
    return {
        name: tuple(  # type: ignore[misc]
            [ns / 1e6 for one_round in sides[side] for ns in one_round] for side in (BASELINE, CANDIDATE)
        )
        for name, sides in samples.items()
    }


def run_gate(
    baseline_dsn: str,
    candidate_dsn: str,
    workload_path: Path | str,
    config: GateConfig | None = None,
    drift_config: DriftScoreConfig | None = None,
) -> GateReport:
    """Measure the workload file on both databases and return the report (see GateReport.exit_code).
    ``drift_config`` ([drift.score]): the scorer that gives each query its informational drift flag."""
    return run_gate_workload(baseline_dsn, candidate_dsn, load_workload(workload_path), config, drift_config)


def run_gate_workload(
    baseline_dsn: str,
    candidate_dsn: str,
    workload: GateWorkload,
    config: GateConfig | None = None,
    drift_config: DriftScoreConfig | None = None,
) -> GateReport:
    """``run_gate`` for an already parsed workload."""
    config = config or GateConfig()
    started_at = datetime.now(UTC)
    t0 = time.perf_counter()
    rng = random.Random(config.seed)
    base = _connect(BASELINE, baseline_dsn, config)
    try:
        cand = _connect(CANDIDATE, candidate_dsn, config)
    except GateError:
        base.conn.close()
        raise
    try:
        return _measure(base, cand, workload, config, rng, started_at, t0, drift_config or DriftScoreConfig())
    finally:
        base.conn.close()
        cand.conn.close()


def _run_on(side: _Side, query: GateQuery, params: tuple[object, ...], failed: dict[str, str]) -> int | None:
    """One call; a baseline failure stops the gate, a candidate failure marks the query failed."""
    try:
        return _timed_call(side.conn, query.sql, params)
    except psycopg.Error as exc:
        if side.role == BASELINE:
            raise GateError(f"query {query.name!r} fails on the baseline: {side.error(exc)}") from None
        failed.setdefault(query.name, side.error(exc))
        return None


def _measure(
    base: _Side,
    cand: _Side,
    workload: GateWorkload,
    config: GateConfig,
    rng: random.Random,
    started_at: datetime,
    t0: float,
    drift_config: DriftScoreConfig,
) -> GateReport:
    failed: dict[str, str] = {}
    sides = (base, cand)
    # Plans with the first parameter set (the same on both sides).
    for query in workload.queries:
        params = query.draw(rng)
        for side in sides:
            try:
                _explain(side, query, params)
            except psycopg.Error as exc:
                if side.role == BASELINE:
                    raise GateError(
                        f"query {query.name!r}: EXPLAIN fails on the baseline: {side.error(exc)}"
                    ) from None
                failed.setdefault(query.name, side.error(exc))
    # Warm-up (discarded): shared buffers, the backends' catalog caches.
    for query in workload.queries:
        for _ in range(config.warmup_calls):
            params = query.draw(rng)
            for side in sides:
                if query.name not in failed:
                    _run_on(side, query, params, failed)
    for side in sides:
        _statements_available(side)
    before = {side.role: _read_statements(side) for side in sides}

    per_round = workload.calls_per_round(config.calls_per_round)
    samples: Rounds = {q.name: {BASELINE: [], CANDIDATE: []} for q in workload.queries}
    comparisons: dict[str, LatencyComparison | None] = {}
    rounds, next_check = 0, config.min_rounds
    measure_start = time.perf_counter()
    while True:
        active = [q for q in workload.queries if q.name not in failed]
        if rounds > 0 and rounds % config.reconnect_every_rounds == 0:
            for side in sides:
                _reconnect(side)
            for query in active:
                for _ in range(config.reconnect_warmup_calls):
                    params = query.draw(rng)
                    for side in sides:
                        _run_on(side, query, params, failed)
        order = [q for q in active if q.name not in failed]
        rng.shuffle(order)
        for query in order:
            per_side: dict[str, list[int]] = {BASELINE: [], CANDIDATE: []}
            for _ in range(per_round[query.name]):
                params = query.draw(rng)
                pair = (base, cand) if rng.random() < 0.5 else (cand, base)
                got = {side.role: _run_on(side, query, params, failed) for side in pair}
                if query.name in failed:
                    break
                per_side[BASELINE].append(got[BASELINE])  # type: ignore[arg-type]
                per_side[CANDIDATE].append(got[CANDIDATE])  # type: ignore[arg-type]
            samples[query.name][BASELINE].append(per_side[BASELINE])
            samples[query.name][CANDIDATE].append(per_side[CANDIDATE])
        rounds += 1
        elapsed = time.perf_counter() - measure_start
        active = [q for q in workload.queries if q.name not in failed]
        budget_spent = rounds >= config.max_rounds or elapsed >= config.max_seconds
        if not active:
            comparisons = {}
            break
        if rounds >= next_check or budget_spent:
            comparisons = {q.name: _compare(samples, q.name, config) for q in active}
            decision = decide_termination(comparisons, rounds, elapsed, config)
            if decision.stop:
                break
            # Re-check after the sample has grown by recheck_growth (a group-sequential schedule).
            next_check = max(rounds + 1, int(np.ceil(rounds * (1.0 + config.recheck_growth))))
    measure_seconds = time.perf_counter() - measure_start
    after = {side.role: _read_statements(side) for side in sides}
    decision = decide_termination(comparisons, rounds, measure_seconds, config)
    if not comparisons:
        reason = ALL_FAILED
    else:
        reason = decision.reason or (MAX_ROUNDS if rounds >= config.max_rounds else MAX_SECONDS)

    drift = gate_drift(
        per_execution_ms(samples), {q.name: gate_query_hash(q.sql) for q in workload.queries}, drift_config
    )
    results = []
    notes = sorted({s.pgss_note for s in sides if s.pgss_note})
    for query in workload.queries:
        b_stats, b_note = _statement_deltas(base, query.name, before[BASELINE], after[BASELINE])
        c_stats, c_note = _statement_deltas(cand, query.name, before[CANDIDATE], after[CANDIDATE])
        latency = comparisons.get(query.name)
        if query.name in failed and latency is None:
            latency = _compare(samples, query.name, config)
        plan = None
        if query.name in base.explains and query.name in cand.explains:
            plan = _plan_comparison(base.explains[query.name], cand.explains[query.name])
        error = failed.get(query.name)
        tail = _tail(samples, query.name, config)
        verdict, reasons = judge_query(latency, b_stats, c_stats, plan, error, config, tail)
        settled_by = None if latency is None else settle_reason(latency, config)
        if latency is not None and settled_by is None and error is None and verdict != BLOCK:
            # The budget ran out with this query's CI straddling a threshold: neither PASS nor WARN is
            # known (a decided BLOCK stands).
            verdict = INCONCLUSIVE
            reasons = (
                f"INCONCLUSIVE: undecided when the budget ran out (p50 ×{latency.p50_ratio:.3f}, CI "
                f"{latency.p50_ci[0]:.3f}–{latency.p50_ci[1]:.3f})",
                *reasons,
            )
        results.append(
            QueryResult(
                name=query.name,
                sql=query.sql,
                weight=query.weight,
                verdict=verdict,
                reasons=reasons,
                latency=latency,
                settled_by=settled_by,
                baseline_statements=b_stats,
                candidate_statements=c_stats,
                statements_note=b_note or c_note,
                plan=plan,
                error=error,
                drift=drift.get(query.name),
                tail=tail,
            )
        )
    return GateReport(
        verdict=worst([r.verdict for r in results]),
        queries=tuple(results),
        termination=Termination(reason, rounds, measure_seconds, decision.settled, decision.unsettled),
        config=config,
        baseline=redact_dsn(base.dsn),
        candidate=redact_dsn(cand.dsn),
        workload=workload.source,
        started_at=started_at.isoformat(),
        seconds=time.perf_counter() - t0,
        notes=tuple(notes),
    )
