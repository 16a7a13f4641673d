"""Judge a stored gate run again, without a server (``radar gate --replay``).

A scenario run's JSON report keeps, per scenario and cycle, what the cycle measured (``raw``: every
execution's time per role, the pg_stat_statements deltas per execution, the memory readings) beside the
judgement. Replaying rebuilds each cycle's comparisons from ``raw`` with another configuration (thresholds,
verdict rule, selection, aggregation, filter, seed of the bootstrap) and judges the scenarios again with the
same code the live run uses (:func:`jobs.gate.suite.cycle_comparisons`,
:func:`jobs.gate.suite.judge_scenario`), so a BLOCK can be re-examined, and its verdict under a different
rule shown, from the file or the lake alone.

What a replay cannot change: which measurements were taken (their number was decided by the live run's stop
rules), the plans (EXPLAIN on the servers) and, with ``aa_timing = before``, the A/A asymmetry (its cycles'
samples are not stored; the stored asymmetry is reused). The probe calibration is estimated again from its
stored timings.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from jobs.drift.config import DriftScoreConfig
from jobs.gate.config import GateConfig
from jobs.gate.cycle import TAIL, WALLCLOCK
from jobs.gate.drift_flags import gate_drift, gate_query_hash
from jobs.gate.measure import ServerFacts, StatementCounters
from jobs.gate.scenario import Scenario
from jobs.gate.selection import Asymmetry, estimate_asymmetry, probe_cycles
from jobs.gate.suite import (
    NOT_RUN,
    CalibrationReport,
    CycleRaw,
    PlanChange,
    ScenarioCycle,
    ScenarioResult,
    SuiteReport,
    cycle_comparisons,
    judge_scenario,
    run_verdict,
)


class ReplayError(ValueError):
    """The stored run cannot be replayed; the message names the file and the field."""


def load_report(path: Path) -> dict[str, Any]:
    """A gate report (``radar gate --json FILE`` or the lake's ``gate_runs``) read as JSON."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read the stored run: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict) or document.get("kind") != "gate_suite_report":
        raise ReplayError(f"{path}: not a scenario gate report (kind must be gate_suite_report)")
    return document


def stored_config(document: dict[str, Any], where: str) -> GateConfig:
    """The configuration the stored run was measured with (unknown keys of other versions ignored)."""
    raw = document.get("config")
    if not isinstance(raw, dict):
        raise ReplayError(f"{where}: config: missing")
    known = {f.name for f in fields(GateConfig)}
    values = {k: v for k, v in raw.items() if k in known}
    if "termination_rules" in values:
        values["termination_rules"] = tuple(values["termination_rules"])
    try:
        return GateConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ReplayError(f"{where}: config: {exc}") from None


def _counters(value: Any) -> StatementCounters | None:
    if value is None:
        return None
    return StatementCounters(**{f.name: value[f.name] for f in fields(StatementCounters)})


def _raw(value: Any, where: str) -> CycleRaw:
    if not isinstance(value, dict):
        raise ReplayError(f"{where}: raw: missing (a report written before raw measurements were kept)")
    try:
        return CycleRaw(
            samples={role: tuple(float(v) for v in values) for role, values in value["samples"].items()},
            counters={role: _counters(c) for role, c in value["counters"].items()},
            memory={role: tuple(tuple(r) for r in readings) for role, readings in value["memory"].items()},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ReplayError(f"{where}: raw: malformed ({type(exc).__name__}: {exc})") from None


def _asymmetry(value: Any) -> Asymmetry | None:
    if value is None:
        return None
    ratio = float(value["ratio"])
    lo, hi = (float(x) for x in value["ci"])
    half = (math.log(hi) - math.log(lo)) / 2.0 if lo > 0 and hi > 0 else 0.0
    return Asymmetry(
        value["method"], ratio, (lo, hi), half, int(value["cycles"]), bool(value["reliable"]), value["note"]
    )


def _facts(value: dict[str, Any]) -> ServerFacts:
    return ServerFacts(
        role=value["role"],
        version=value["version"],
        version_num=int(value["version_num"]),
        system_identifier=value["system_identifier"],
        address=value["address"],
        settings=tuple(sorted((str(k), str(v)) for k, v in value["settings"].items())),
        statements_note=value["statements_note"],
        track_planning=bool(value["track_planning"]),
        memory_contexts=bool(value["memory_contexts"]),
        local_proc=bool(value["local_proc"]),
    )


def replay_report(
    document: dict[str, Any],
    config: GateConfig,
    label: str,
    drift_config: DriftScoreConfig | None = None,
) -> SuiteReport:
    """The stored run ``document`` judged again under ``config``; ``label`` names it in errors and in the
    report's ``replay_of``."""
    cal = document.get("calibration") or {}
    probe: Asymmetry | None = None
    calibration = CalibrationReport(
        cal.get("requested", config.calibration), cal.get("mode", "off"), None, note=cal.get("note", "")
    )
    if cal.get("mode") == "probe" and cal.get("baseline_seconds"):
        probe = estimate_asymmetry(
            probe_cycles(cal["baseline_seconds"], cal["candidate_seconds"]), "probe", config
        )
        calibration = replace(
            calibration,
            asymmetry=probe,
            baseline_seconds=tuple(cal["baseline_seconds"]),
            candidate_seconds=tuple(cal["candidate_seconds"]),
            note=f"probe ×{probe.ratio:.3f} (CI {probe.ci[0]:.3f}–{probe.ci[1]:.3f}), estimated again",
        )
    results: list[ScenarioResult] = []
    timings: dict[str, tuple[list[float], list[float]]] = {}
    for index, stored in enumerate(document.get("scenarios") or []):
        name = stored.get("name", f"#{index + 1}")
        where = f"{label}: scenario {name!r}"
        if stored.get("error") is not None or stored.get("verdict") == NOT_RUN or not stored.get("cycles"):
            results.append(
                ScenarioResult(
                    name,
                    stored["verdict"],
                    reasons=tuple(stored.get("reasons") or ()),
                    error=stored.get("error"),
                    notes=(*(stored.get("notes") or ()), "replayed as stored: nothing measured to judge"),
                )
            )
            continue
        cycles = []
        for c in stored["cycles"]:
            raw = _raw(c.get("raw"), f"{where} cycle {c.get('cycle')}")
            k = int(c["cycle"])
            comparisons, calib, corrected = cycle_comparisons(raw, config, k)
            cycles.append(
                ScenarioCycle(
                    k,
                    c["first"],
                    dict(c["measurements"]),
                    dict(c["stopped_by"]),
                    comparisons,
                    bool(c["complete"]),
                    calib,
                    corrected,
                    raw,
                )
            )
            got = timings.setdefault(name, ([], []))
            got[0].extend(raw.samples.get("baseline", ()))
            got[1].extend(raw.samples.get("candidate", ()))
        plans = tuple(
            PlanChange(
                int(p["statement"]),
                p["baseline_shape_hash"],
                p["candidate_shape_hash"],
                bool(p["changed"]),
                bool(p["index_rename_only"]),
                p["summary"],
            )
            for p in stored.get("plans") or []
        )
        asymmetries: dict[str, Asymmetry] = {}
        if probe is not None:
            asymmetries = dict.fromkeys((WALLCLOCK, TAIL), probe)
        elif cal.get("mode") == "aa" and not cycles[0].calibration:  # aa_timing = before: as stored
            for key, measurement in (("asymmetry", WALLCLOCK), ("tail_asymmetry", TAIL)):
                stored_asymmetry = _asymmetry(stored.get(key))
                if stored_asymmetry is not None:
                    asymmetries[measurement] = stored_asymmetry
        scenario = Scenario(name=name, source=str(document.get("source", label)))
        results.append(judge_scenario(scenario, cycles, plans, asymmetries, config))
    # The live run hashed each scenario's SQL; the report keeps that hash with its drift flag.
    stored_hashes = {
        s.get("name"): (s.get("drift") or {}).get("query_hash") for s in document.get("scenarios") or []
    }
    hashes = {name: stored_hashes.get(name) or gate_query_hash(name) for name in timings}
    drift = gate_drift(timings, hashes, drift_config or DriftScoreConfig())
    results = [replace(r, drift=drift.get(r.name)) for r in results]
    stop_reason = str(document.get("stop_reason", "complete"))
    servers = document.get("servers") or {}
    try:
        facts = (_facts(servers["baseline"]), _facts(servers["candidate"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayError(f"{label}: servers: malformed ({type(exc).__name__}: {exc})") from None
    return SuiteReport(
        verdict=run_verdict(results, stop_reason, config),
        scenarios=tuple(results),
        calibration=calibration,
        servers=facts,
        config=config,
        baseline=str(document.get("baseline", "")),
        candidate=str(document.get("candidate", "")),
        source=str(document.get("source", label)),
        started_at=str(document.get("started_at", "")),
        seconds=0.0,
        measure_seconds=float(document.get("measure_seconds", 0.0)),
        stop_reason=stop_reason,
        notes=(*(document.get("notes") or ()), f"replayed from {label}: no server was measured"),
        replay_of=label,
    )
