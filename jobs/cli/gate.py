"""`radar gate`: a workload or a scenario suite on a baseline and a candidate database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

from jobs.cli.common import escaped, say, settings_of, show_rows, status, write_report_file
from jobs.lake.storage import lake_path


def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0 PASS, 1 WARN (0 with --no-fail-on-warn), 2 BLOCK, 3 the gate could not run, 4 INCONCLUSIVE
    (scenarios: the budget ran out before the verdict was decided)."""
    from jobs.gate.runner import GateError, run_gate
    from jobs.gate.verdict import render_gate_report
    from jobs.gate.workload import WorkloadError

    settings = settings_of(args)
    if args.scenarios is not None:
        return _gate_scenarios(args, settings)
    if args.workload is None:
        say(args, "[red]gate could not run:[/red] give --workload FILE.toml or --scenarios FILE|builtin")
        return 3
    try:
        with status("measuring baseline and candidate (interleaved rounds)"):
            report = run_gate(
                args.baseline, args.candidate, Path(args.workload), settings.gate, settings.drift.score
            )
    except (GateError, WorkloadError) as exc:
        say(args, f"[red]gate could not run:[/red] {escaped(str(exc))}")
        return 3
    if args.format == "json":
        sys.stdout.write(report.to_json() + "\n")  # the gate_report.schema.json contract, one object
    elif args.format == "csv":
        show_rows(args, gate_query_rows(report.to_dict()))
    else:
        print(render_gate_report(report))
    if args.json:
        write_report_file(Path(args.json), report.to_json())
    return report.exit_code


def _gate_scenarios(args: argparse.Namespace, settings: Any) -> int:
    """`radar gate --scenarios`: the scenario engine (cycles, per-target termination, calibration)."""
    import polars as pl

    from jobs.gate.runner import GateError
    from jobs.gate.scenario import ScenarioError, builtin_suite, load_scenarios
    from jobs.gate.suite import run_scenario_gate
    from jobs.gate.suite_report import (
        render_suite_report,
        scenario_rows,
        suite_report_json,
        write_gate_results,
    )
    from jobs.gate.workload import WorkloadError

    try:
        if args.scenarios == "builtin" or args.scenarios.startswith("builtin:"):
            names = [n for n in args.scenarios.partition(":")[2].split(",") if n] or None
            suite = builtin_suite(names)
        else:
            suite = load_scenarios(Path(args.scenarios))
        with status("measuring baseline and candidate (scenario cycles)"):
            report = run_scenario_gate(
                args.baseline,
                args.candidate,
                suite,
                settings.gate,
                settings.drift.score,
                args.calibration_dsn,
            )
    except (GateError, ScenarioError, WorkloadError) as exc:
        say(args, f"[red]gate could not run:[/red] {escaped(str(exc))}")
        return 3
    text = suite_report_json(report)
    if args.format == "json":
        sys.stdout.write(text + "\n")  # the gate_suite_report.schema.json contract, one object
    elif args.format == "csv":
        show_rows(args, pl.DataFrame(scenario_rows(report), infer_schema_length=None))
    else:
        print(render_suite_report(report))
    if args.json:
        write_report_file(Path(args.json), text)
    if args.lake_write:
        root = lake_path(args.lake or settings.lake.root)
        written = write_gate_results(root, report)
        say(args, f"gate results written to {escaped(str(written))}")
    return report.exit_code


def gate_query_rows(report: dict[str, Any]) -> pl.DataFrame:
    """One flat row per gate query (the CSV of `radar gate`): verdict, latency and statement figures."""
    import polars as pl

    rows = []
    for q in report["queries"]:
        latency = q.get("latency") or {}
        statements = q.get("statements") or {}
        plan = q.get("plan") or {}
        rows.append(
            {
                "verdict_of_run": report["verdict"],
                "name": q["name"],
                "verdict": q["verdict"],
                "baseline_p50_ms": latency.get("baseline_p50_ms"),
                "candidate_p50_ms": latency.get("candidate_p50_ms"),
                "p50_ratio": latency.get("p50_ratio"),
                "p50_ci_low": (latency.get("p50_ci") or [None, None])[0],
                "p50_ci_high": (latency.get("p50_ci") or [None, None])[1],
                "p95_ratio": latency.get("p95_ratio"),
                "mann_whitney_p": latency.get("mann_whitney_p"),
                "buffers_ratio": statements.get("buffers_ratio"),
                "plan_changed": plan.get("changed"),
                "drift_flag": (q.get("drift") or {}).get("flag"),
                "drift_reason": (q.get("drift") or {}).get("reason"),
                "drift_js": (q.get("drift") or {}).get("js"),
                "drift_psi": (q.get("drift") or {}).get("psi"),
                "settled_by": q.get("settled_by"),
                "reasons": "; ".join(q.get("reasons") or []),
                "error": q.get("error"),
                "sql": q["sql"],
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)
