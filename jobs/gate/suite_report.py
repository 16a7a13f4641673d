"""The scenario gate's report forms: one flat row per scenario and measurement (the CI table, the CSV and
the lake's ``gate_results``), the JSON object of ``jobs/contracts/gate_suite_report.schema.json`` and a
plain-text table for a CI log."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl

from jobs.gate.measure import ServerFacts
from jobs.gate.suite import CycleRaw, ScenarioResult, SuiteReport

CONTRACT = Path(__file__).resolve().parent.parent / "contracts" / "gate_suite_report.schema.json"
KIND_LABEL = {
    "strong_regression": "strong",
    "regression": "regression",
    "improvement": "improvement",
    "unchanged": "",
}


@cache
def gate_suite_contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text())


def _num(x: float) -> float | None:
    return None if x != x or x in (float("inf"), float("-inf")) else float(x)  # NaN / inf -> null


def scenario_rows(report: SuiteReport) -> list[dict[str, Any]]:
    """One row per scenario and selected measurement (a scenario without measurements gets one row)."""
    rows = []
    for s in report.scenarios:
        base = {"scenario": s.name, "scenario_verdict": s.verdict}
        if not s.selected:
            rows.append(
                {
                    **base,
                    "measurement": None,
                    "unit": None,
                    "baseline": None,
                    "candidate": None,
                    "threshold": None,
                    "ratio": None,
                    "ci_low": None,
                    "ci_high": None,
                    "raw_ratio": None,
                    "kind": None,
                    "verdict": s.verdict,
                    "cycles": len(s.cycles),
                    "regressed_cycles": 0,
                    "chosen_cycle": None,
                    "measurements_baseline": None,
                    "measurements_candidate": None,
                    "stopped_by_baseline": None,
                    "stopped_by_candidate": None,
                    "correction": None,
                    "decided": None,
                    "decided_by": None,
                    "rules_out": None,
                }
            )
            continue
        for m in s.selected:
            ch = m.chosen
            cycle = s.cycles[m.chosen_cycle]
            rows.append(
                {
                    **base,
                    "measurement": m.measurement,
                    "unit": ch.unit,
                    "baseline": _num(ch.baseline),
                    "candidate": _num(ch.candidate),
                    "threshold": ch.threshold,
                    "ratio": _num(ch.ratio),
                    "ci_low": _num(ch.ci[0]),
                    "ci_high": _num(ch.ci[1]),
                    "raw_ratio": _num(m.raw_ratio),
                    "kind": ch.kind,
                    "verdict": m.verdict,
                    "cycles": len(m.cycles),
                    "regressed_cycles": m.regressed_cycles,
                    "chosen_cycle": m.chosen_cycle,
                    "measurements_baseline": cycle.measurements.get("baseline"),
                    "measurements_candidate": cycle.measurements.get("candidate"),
                    "stopped_by_baseline": cycle.stopped_by.get("baseline"),
                    "stopped_by_candidate": cycle.stopped_by.get("candidate"),
                    "correction": m.correction,
                    "decided": m.decided,
                    "decided_by": m.decided_by or "design_selection",
                    "rules_out": _num(m.rules_out) if m.rules_out is not None else None,
                }
            )
    return rows


def _facts(f: ServerFacts) -> dict[str, Any]:
    return {
        "role": f.role,
        "version": f.version,
        "version_num": f.version_num,
        "system_identifier": f.system_identifier,
        "address": f.address,
        "settings": dict(f.settings),
        "statements_note": f.statements_note,
        "track_planning": f.track_planning,
        "memory_contexts": f.memory_contexts,
        "local_proc": f.local_proc,
    }


def _scenario(s: ScenarioResult) -> dict[str, Any]:
    return {
        "name": s.name,
        "verdict": s.verdict,
        "reasons": list(s.reasons),
        "notes": list(s.notes),
        "error": s.error,
        "plans": [
            {
                "statement": p.statement,
                "baseline_shape_hash": p.baseline_shape_hash,
                "candidate_shape_hash": p.candidate_shape_hash,
                "changed": p.changed,
                "index_rename_only": p.index_rename_only,
                "summary": p.summary,
            }
            for p in s.plans
        ],
        "cycles": [
            {
                "cycle": c.cycle,
                "first": c.first,
                "complete": c.complete,
                "measurements": c.measurements,
                "stopped_by": c.stopped_by,
                "comparisons": {
                    name: {
                        "baseline": _num(x.baseline),
                        "candidate": _num(x.candidate),
                        "ratio": _num(x.ratio),
                        "ci": [_num(x.ci[0]), _num(x.ci[1])],
                        "kind": x.kind,
                        "verdict": x.verdict,
                        "aggregation": x.aggregation,
                    }
                    for name, x in c.comparisons.items()
                },
                "raw": None if c.raw is None else raw_dict(c.raw),
            }
            for c in s.cycles
        ],
        "asymmetry": None if s.asymmetry is None else _asymmetry(s.asymmetry),
        "tail_asymmetry": None if s.tail_asymmetry is None else _asymmetry(s.tail_asymmetry),
        "drift": None if s.drift is None else s.drift.to_dict(),
    }


def raw_dict(raw: CycleRaw) -> dict[str, Any]:
    """A cycle's raw measurements as JSON (read back by :func:`jobs.gate.replay.raw_from_dict`)."""
    return {
        "samples": {role: [float(v) for v in values] for role, values in raw.samples.items()},
        "counters": {role: None if c is None else asdict(c) for role, c in raw.counters.items()},
        "memory": {role: [list(r) for r in readings] for role, readings in raw.memory.items()},
    }


def _asymmetry(a: Any) -> dict[str, Any]:
    return {
        "method": a.method,
        "ratio": a.ratio,
        "ci": list(a.ci),
        "cycles": a.cycles,
        "reliable": a.reliable,
        "note": a.note,
    }


def suite_report_dict(report: SuiteReport) -> dict[str, Any]:
    """The report as the contract describes it (validated)."""
    cal = report.calibration
    payload = {
        "kind": "gate_suite_report",
        "schema_version": 1,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "baseline": report.baseline,
        "candidate": report.candidate,
        "source": report.source,
        "started_at": report.started_at,
        "seconds": round(report.seconds, 3),
        "measure_seconds": round(report.measure_seconds, 3),
        "stop_reason": report.stop_reason,
        "verdict_rule": report.config.verdict_rule,
        "replay_of": report.replay_of,
        "servers": {"baseline": _facts(report.servers[0]), "candidate": _facts(report.servers[1])},
        "calibration": {
            "requested": cal.requested,
            "mode": cal.mode,
            "asymmetry": None if cal.asymmetry is None else _asymmetry(cal.asymmetry),
            "baseline_seconds": list(cal.baseline_seconds),
            "candidate_seconds": list(cal.candidate_seconds),
            "note": cal.note,
        },
        "config": report.config.to_dict(),
        "notes": list(report.notes),
        "rows": scenario_rows(report),
        "scenarios": [_scenario(s) for s in report.scenarios],
    }
    payload["config"]["termination_rules"] = list(report.config.termination_rules)
    jsonschema.validate(payload, gate_suite_contract())
    return payload


def suite_report_json(report: SuiteReport) -> str:
    return json.dumps(suite_report_dict(report), indent=2, sort_keys=True)


def _value(x: float | None, unit: str | None) -> str:
    if x is None:
        return "–"
    if unit == "bytes":
        return f"{x / 1_048_576:,.2f} MiB"
    if unit == "ms":
        return f"{x:,.3f} ms"
    return f"{x:,.1f}"


def render_suite_report(report: SuiteReport) -> str:
    """The CI log's table: per scenario and measurement this (candidate), other (baseline), threshold,
    ratio and CI, the kind, the verdict, measurements taken and the rule that stopped them."""
    header = (
        f"{'scenario':<18} {'measurement':<14} {'this':>14} {'other':>14} {'thr':>5} "
        f"{'ratio (CI)':>24} {'kind':<11} {'verdict':<7} {'n b/c':>7} {'stopped by':<30}"
    )
    lines = [header, "-" * len(header)]
    for row in scenario_rows(report):
        ratio = (
            "–" if row["ratio"] is None else f"{row['ratio']:.3f} ({row['ci_low']:.3f}–{row['ci_high']:.3f})"
        )
        n = (
            "–"
            if row["measurements_baseline"] is None
            else (f"{row['measurements_baseline']}/{row['measurements_candidate']}")
        )
        stopped = (
            "–"
            if row["stopped_by_baseline"] is None
            else (f"{row['stopped_by_baseline']}/{row['stopped_by_candidate']}")
        )
        thr = "–" if row["threshold"] is None else f"{row['threshold']:.0%}"
        this, other = _value(row["candidate"], row["unit"]), _value(row["baseline"], row["unit"])
        kind = KIND_LABEL.get(row["kind"] or "", "")
        lines.append(
            f"{row['scenario'][:18]:<18} {(row['measurement'] or '–')[:14]:<14} {this:>14} {other:>14} "
            f"{thr:>5} {ratio:>24} {kind:<11} {row['verdict']:<7} {n:>7} {stopped[:30]:<30}"
        )
    for s in report.scenarios:
        lines.extend(f"  {s.name}: {r}" for r in s.reasons)
        lines.extend(f"  {s.name}: note: {n}" for n in s.notes)
    cal = report.calibration
    lines.append(f"Calibration ({cal.requested} -> {cal.mode}): {cal.note}")
    for f in report.servers:
        settings = ", ".join(f"{k}={v}" for k, v in f.settings)
        lines.append(f"Server {f.role}: {f.version.split(' on ')[0]} at {f.address}; {settings}")
    lines.append(
        f"Verdict {report.verdict} (exit {report.exit_code}); {report.stop_reason} after "
        f"{report.measure_seconds:.1f} s measuring, {report.seconds:.1f} s in all"
    )
    lines.extend(f"Note: {n}" for n in report.notes)
    return "\n".join(lines)


def gate_results_frame(report: SuiteReport) -> pl.DataFrame:
    """The lake's ``gate_results`` rows of one run (jobs/schemas/analysed.py GATE_RESULTS)."""
    from jobs.schemas.analysed import GATE_RESULTS

    started = datetime.fromisoformat(report.started_at).astimezone(UTC)
    rows = [
        {
            "run_started_at": started,
            "source": report.source,
            "baseline": report.baseline,
            "candidate": report.candidate,
            "baseline_version": report.servers[0].version_num,
            "candidate_version": report.servers[1].version_num,
            "run_verdict": report.verdict,
            "scenario": r["scenario"],
            "scenario_verdict": r["scenario_verdict"],
            "measurement": r["measurement"] or "",
            "unit": r["unit"],
            "baseline_value": r["baseline"],
            "candidate_value": r["candidate"],
            "threshold": r["threshold"],
            "ratio": r["ratio"],
            "ci_low": r["ci_low"],
            "ci_high": r["ci_high"],
            "raw_ratio": r["raw_ratio"],
            "kind": r["kind"],
            "verdict": r["verdict"],
            "cycles": r["cycles"],
            "regressed_cycles": r["regressed_cycles"],
            "measurements_baseline": r["measurements_baseline"],
            "measurements_candidate": r["measurements_candidate"],
            "stopped_by_baseline": r["stopped_by_baseline"],
            "stopped_by_candidate": r["stopped_by_candidate"],
            "calibration_mode": report.calibration.mode,
            "correction": r["correction"],
        }
        for r in scenario_rows(report)
    ]
    return pl.DataFrame(rows, schema=GATE_RESULTS.polars_schema)


def run_id_of(report: SuiteReport) -> str:
    """The run's id in the lake: its start as a sortable stem (``radar gate --replay RUN_ID``)."""
    from jobs.lake.io import stem_for

    return stem_for(datetime.fromisoformat(report.started_at).astimezone(UTC))


def write_gate_results(root: Path, report: SuiteReport) -> Path:
    """One Parquet file per run under gate_results/date=YYYY-MM-DD (the rows) and one under gate_runs (the
    whole report with its raw measurements), atomic each; earlier runs untouched. Returns the rows' file."""
    from jobs.lake.io import write_table
    from jobs.schemas.analysed import GATE_RUNS

    started = datetime.fromisoformat(report.started_at).astimezone(UTC)
    partition = {"date": started.date().isoformat()}
    stem = run_id_of(report)
    run = pl.DataFrame(
        [
            {
                "run_id": stem,
                "run_started_at": started,
                "source": report.source,
                "run_verdict": report.verdict,
                "verdict_rule": report.config.verdict_rule,
                "report_json": suite_report_json(report),
            }
        ],
        schema=GATE_RUNS.polars_schema,
    )
    write_table(root, "gate_runs", run, partition, stem)
    return write_table(root, "gate_results", gate_results_frame(report), partition, stem)


def stored_run(root: Path, run_id: str) -> dict[str, Any] | None:
    """The report JSON of run ``run_id`` from the lake's gate_runs, or None when there is no such run."""
    from jobs.lake.io import read_table

    runs = read_table(root, "gate_runs")
    if runs.is_empty():
        return None
    found = runs.filter(pl.col("run_id") == run_id)
    if found.is_empty():
        return None
    return json.loads(found["report_json"][0])
