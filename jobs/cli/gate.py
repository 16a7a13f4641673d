"""`radar gate`: a scenario suite (a scenario file, a workload file or the built-in suite) on a baseline and a
candidate database, or a stored run judged again (``--replay``). One engine: jobs/gate/suite.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jobs.cli.common import escaped, say, settings_of, show_rows, status, write_report_file
from jobs.lake.storage import lake_path

EXIT_GATE_COULD_NOT_RUN = 3
"""An unreachable database, a scenario that fails on the baseline or crashes, a file that does not load, a
stored run that cannot be replayed: no verdict."""


class GateUsageError(ValueError):
    """A flag combination `radar gate` cannot honour; main() exits EXIT_GATE_USAGE with the message."""


def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0 PASS (or WARN with --no-fail-on-warn), 1 WARN, 2 BLOCK, 4 INCONCLUSIVE; 3 the gate could not
    run; 64 a bad flag or config (main maps config errors of this command to it); 70 a bug."""
    settings = settings_of(args)
    if args.replay is not None:
        return _gate_replay(args, settings)
    missing = [
        flag for flag, value in (("--baseline", args.baseline), ("--candidate", args.candidate)) if not value
    ]
    if missing:
        raise GateUsageError(f"radar gate needs {' and '.join(missing)} (or --replay RUN)")
    if args.scenarios is None and args.workload is None:
        raise GateUsageError("radar gate needs --scenarios FILE|builtin[:names] or --workload FILE.toml")
    return _gate_measure(args, settings)


def _suite(args: argparse.Namespace) -> Any:
    from jobs.gate.scenario import builtin_suite, load_scenarios

    if args.workload is not None:
        if Path(args.workload).suffix != ".toml":
            raise GateUsageError(f"--workload {args.workload}: a workload file is .toml (use --scenarios)")
        return load_scenarios(Path(args.workload))
    if args.scenarios == "builtin" or args.scenarios.startswith("builtin:"):
        names = [n for n in args.scenarios.partition(":")[2].split(",") if n] or None
        return builtin_suite(names)
    return load_scenarios(Path(args.scenarios))


def _gate_measure(args: argparse.Namespace, settings: Any) -> int:
    from jobs.gate.config import GateError
    from jobs.gate.scenario import ScenarioError
    from jobs.gate.suite import run_scenario_gate
    from jobs.gate.workload import WorkloadError

    try:
        suite = _suite(args)
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
        return EXIT_GATE_COULD_NOT_RUN
    return _publish(args, settings, report)


def _gate_replay(args: argparse.Namespace, settings: Any) -> int:
    """`radar gate --replay RUN`: a report file (--json) or a run_id of the lake's gate_runs, judged again
    with the stored configuration and the flags given on this command line."""
    from jobs.gate.replay import ReplayError, load_report, replay_report, stored_config
    from jobs.gate.suite_report import stored_run

    measuring = [
        flag
        for flag, value in (
            ("--baseline", args.baseline), ("--candidate", args.candidate), ("--scenarios", args.scenarios),
            ("--workload", args.workload), ("--calibration-dsn", args.calibration_dsn),
        )
        if value
    ]  # fmt: skip
    if args.lake_write:
        measuring.append("--lake-write")
    if measuring:
        raise GateUsageError(f"--replay judges a stored run without a server: drop {', '.join(measuring)}")
    path = Path(args.replay)
    try:
        if path.is_file():
            document, label = load_report(path), str(path)
        else:
            root = lake_path(args.lake or settings.lake.root)
            found = None if isinstance(root, Path) and not root.is_dir() else stored_run(root, args.replay)
            if found is None:
                raise ReplayError(
                    f"--replay {args.replay}: neither a report file nor a run_id in {root}/gate_runs"
                )
            document, label = found, f"{root}/gate_runs run {args.replay}"
        config = _replay_config(args, stored_config(document, label), settings)
        try:
            report = replay_report(document, config, label, settings.drift.score)
        except (KeyError, TypeError, IndexError, AttributeError) as exc:  # a hand-edited or foreign file
            why = f"{type(exc).__name__}: {exc}"
            raise ReplayError(f"{label}: not a report radar can replay ({why})") from None
    except ReplayError as exc:
        say(args, f"[red]gate could not replay:[/red] {escaped(str(exc))}")
        return EXIT_GATE_COULD_NOT_RUN
    return _publish(args, settings, report)


def _replay_config(args: argparse.Namespace, stored: Any, settings: Any) -> Any:
    """The stored run's configuration with the [gate] keys this command line sets (flags and --set), as
    the loader read them: a replay changes what the user asks to change, not every default of today's
    config file."""
    from dataclasses import fields, replace

    from jobs.cli.common import command_line_overrides

    names = {f.name for f in fields(stored)}
    keys = {o.key.partition(".")[2] for o in command_line_overrides(args) if o.key.startswith("gate.")}
    changed = {key: getattr(settings.gate, key) for key in keys if key in names}
    try:
        return replace(stored, **changed)
    except (TypeError, ValueError) as exc:
        raise GateUsageError(f"--replay: {exc}") from None


def _publish(args: argparse.Namespace, settings: Any, report: Any) -> int:
    import polars as pl

    from jobs.gate.suite_report import (
        render_suite_report,
        run_id_of,
        scenario_rows,
        suite_report_json,
        write_gate_results,
    )

    for warning in report.warnings:
        sys.stderr.write(f"radar gate: note: {warning}\n")  # stderr whatever the format: a CI log shows it
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
        say(args, f"gate results written to {escaped(str(written))} (run_id {run_id_of(report)})")
    return int(report.exit_code)
