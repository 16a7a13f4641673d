"""`radar`: the command line. Thin: each command parses, calls jobs/, and prints rows as a table, JSON or CSV.

Start-up is kept small: this module imports only the standard library at its top; each command imports
what it needs (polars, rich, psycopg, ...) when it runs, so `radar --help` answers without them.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from jobs.config import FleetConfig
    from jobs.lake import LakeConfig
from jobs.storage import LakePath, lake_path

DEFAULT_LAKE = Path("data/lake")
DEFAULT_FLEET_FILE = Path("data/fleet.toml")
DEFAULT_EMBEDDED_ROOT = Path(tempfile.gettempdir()) / "pg-regression-radar" / "fleet"
EXIT_LOCKED = 75  # EX_TEMPFAIL: another run holds a lake lock; try again later
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in radar (an exception nothing expected); never a verdict's code
EXIT_SERVER_UNREADABLE = 3  # setup-sql --dsn: like the gate's "could not run" (an unreachable database)
TABLE_MAX_ROWS = 40
"""Rows a table shows by default (`--max-rows`); JSON and CSV print every row unless --max-rows is given."""
SQL_CELL_WIDTH = 40
"""Characters of a `radar sql` table cell before it is cut with an ellipsis (`--max-width`)."""


class _LazyConsole:
    """The rich Console, created on first use (importing rich costs start-up time `--help` need not pay)."""

    def __init__(self, stderr: bool = False) -> None:
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_console", None)
        object.__setattr__(self, "_replaced", {})

    def _real(self) -> Any:
        if self._console is None:
            from rich.console import Console

            # Wide enough for the regression tables when output is not a terminal (make demo, CI logs).
            stream = sys.stderr if self._stderr else sys.stdout
            object.__setattr__(
                self, "_console", Console(stderr=self._stderr, width=None if stream.isatty() else 180)
            )
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        real = self._real()
        self._replaced.setdefault(name, getattr(real, name))
        setattr(real, name, value)

    def __delattr__(self, name: str) -> None:
        """Undo a set (what monkeypatch's undo does): the value before the first set comes back."""
        if name in self._replaced:
            setattr(self._real(), name, self._replaced.pop(name))
        else:
            delattr(self._real(), name)


console: Any = _LazyConsole()
"""stdout: tables and the human messages of the table format."""
err_console: Any = _LazyConsole(stderr=True)
"""stderr: every message of the JSON and CSV formats (stdout carries only the rows there)."""


def status(text: str) -> Any:
    """A spinner on stderr while a long step runs, only on a terminal (no rich import for cron or pipes)."""
    if not sys.stderr.isatty():
        import contextlib

        return contextlib.nullcontext()
    return err_console.status(text)


def _machine(args: argparse.Namespace) -> bool:
    return getattr(args, "format", "table") in ("json", "csv")


_STYLE_TAG = re.compile(r"(?<!\\)\[/?(?:red|yellow|dim|bold|green)?\]")


def say(args: argparse.Namespace, text: str, *, markup: bool = True) -> None:
    """A message for people: on stdout with the table format (rich), as plain lines on stderr with JSON or
    CSV (no styles, no rich import: a script's start-up stays small)."""
    if not _machine(args):
        console.print(text, markup=markup, highlight=False, soft_wrap=True)
        return
    if markup:
        text = _STYLE_TAG.sub("", text).replace("\\[", "[")
    sys.stderr.write(text + "\n")


def show_rows(
    args: argparse.Namespace,
    frame: pl.DataFrame,
    title: str | None = None,
    *,
    columns: list[str] | None = None,
) -> int:
    """The frame in --format (jobs.publish.output: the documented JSON/CSV shape); returns rows shown.

    ``columns``: a narrower selection for the table only (JSON and CSV always carry every column)."""
    from jobs.publish.output import write_frame

    fmt = getattr(args, "format", "table")
    max_rows = getattr(args, "max_rows", None)
    if fmt == "table":
        max_rows = TABLE_MAX_ROWS if max_rows is None else max_rows
        if columns is not None:
            frame = frame.select([c for c in columns if c in frame.columns])
    return write_frame(
        frame,
        fmt,
        stdout=sys.stdout,
        stderr=sys.stderr,
        title=title,
        max_rows=max_rows,
        console=console,
    )


def render(frame: pl.DataFrame, title: str | None = None, max_rows: int = TABLE_MAX_ROWS) -> None:
    """A rich table on stdout (at most ``max_rows`` rows, and a line saying how many were left out)."""
    from jobs.publish.output import write_frame

    write_frame(
        frame, "table", stdout=sys.stdout, stderr=sys.stderr, title=title, max_rows=max_rows, console=console
    )


DEFAULT_DAGSTER_HOME = Path(".dagster_home")
"""The Dagster instance folder `make dev` runs with (DAGSTER_HOME=$(CURDIR)/.dagster_home): the CLI reports
to it when DAGSTER_HOME is unset, so `radar` in cron and the Dagster UI of the same checkout share one set
of run records (issue 21: the UI said "Never materialized" while the CLI had collected for days)."""


def dagster_home() -> Path | None:
    """Where the CLI's runs are recorded for Dagster: DAGSTER_HOME, else ./.dagster_home when it exists
    (created by `make dev`), else nowhere."""
    import os

    named = os.environ.get("DAGSTER_HOME", "").strip()
    if named:
        return Path(named)
    return DEFAULT_DAGSTER_HOME.resolve() if DEFAULT_DAGSTER_HOME.is_dir() else None


def tell_dagster(
    args: argparse.Namespace, assets: list[str], metadata: dict[str, Any], days: list[str] | None = None
) -> None:
    """Record what this run wrote as runless materializations in the Dagster instance of ``dagster_home()``,
    so the UI does not say "Never materialized" about data the CLI collected (orchestration/cli_events.py,
    imported only here). No instance: nothing. Any failure: one warning line; the command's outcome
    stands."""
    from datetime import UTC, datetime

    home = dagster_home()
    if home is None:
        return
    try:
        from orchestration.cli_events import report_cli_materializations

        today = datetime.now(UTC).date().isoformat()
        report_cli_materializations(assets, lake_root(args), metadata, days=days or [today], home=home)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        say(args, f"[yellow]warning:[/yellow] not recorded in Dagster ({home}): {_escape(first_line)}")


# ---------------------------------------------------------------------------------------------------------
# Settings, fleet, lake


def _flag_overrides(args: argparse.Namespace) -> list[Any]:
    """Overrides of the flags that are not design flags (jobs.config.flags): each names its flag."""
    from jobs.config import Override

    pairs = (
        ("lake", "lake.root", str),
        ("lock_wait_s", "lake.lock_wait_s", float),
        ("analysis_retention_days", "lake.analysis_retention_days", int),
        ("inbox", "deploys.inbox", str),
        ("max_file_bytes", "deploys.max_file_bytes", int),
        ("max_events_per_file", "deploys.max_events_per_file", int),
        ("max_seconds", "gate.max_seconds", float),
        ("suite_max_seconds", "gate.suite_max_seconds", float),
        ("seed", "gate.seed", int),
        ("sample_filter", "gate.sample_filter", str),
        ("aggregation", "gate.aggregation", str),
        ("cycles", "gate.cycles", int),
        ("calibration", "gate.calibration", str),
        ("aa_timing", "gate.aa_timing", str),
        ("selection", "gate.selection", str),
        ("out", "report.out", str),
        ("current_window", "drift.samples.current_window", str),
        ("profile", "drift.score.profile", str),
    )
    found = []
    for dest, key, kind in pairs:
        value = getattr(args, dest, None)
        if value is not None:
            found.append(Override(key, kind(value), f"flag --{dest.replace('_', '-')}"))
    if getattr(args, "allow_unknown_instance", False):
        found.append(Override("deploys.allow_unknown_instance", True, "flag --allow-unknown-instance"))
    if getattr(args, "no_fail_on_warn", False):
        found.append(Override("gate.fail_on_warn", False, "flag --no-fail-on-warn"))
    for item in getattr(args, "threshold", None) or []:
        name, _, value = item.partition("=")
        key = f"gate.{name.strip()}_threshold"
        try:
            number = float(value)
        except ValueError:
            raise SystemExit(
                f"radar gate: --threshold {item!r}: expected NAME=RATIO, e.g. wallclock=0.10"
            ) from None
        found.append(Override(key, number, f"flag --threshold {item}"))
    if args.command == "alerts":
        for dest, key in (
            ("file", "alerts.file"),
            ("dead_letter_file", "alerts.dead_letter_file"),
            ("webhook", "alerts.webhook_url"),
        ):
            if getattr(args, dest, None) is not None:
                found.append(Override(key, getattr(args, dest), f"flag --{dest.replace('_', '-')}"))
        if args.no_resolved:
            found.append(Override("alerts.send_resolved", False, "flag --no-resolved"))
    return found


def loaded_settings(args: argparse.Namespace) -> Any:
    """jobs.config.LoadedSettings: defaults < --config file (or RADAR_CONFIG, or data/radar.toml) < env
    RADAR_<SECTION>__<KEY> < flags. Loaded once per run."""
    cached = getattr(args, "_loaded_settings", None)
    if cached is None:
        from jobs.config import load_settings
        from jobs.config.flags import overrides_from_args
        from jobs.config.loader import setting_override

        assignments = [*(getattr(args, "set_before", None) or []), *(getattr(args, "set_after", None) or [])]
        cached = load_settings(
            getattr(args, "config", None),
            overrides=[
                *overrides_from_args(args),
                *_flag_overrides(args),
                *(setting_override(a) for a in assignments),
            ],
        )
        args._loaded_settings = cached
    return cached


def settings_of(args: argparse.Namespace) -> Any:
    """jobs.config.RadarSettings of this run (see loaded_settings)."""
    return loaded_settings(args).settings


def lake_root(args: argparse.Namespace) -> LakePath:
    """The lake ``--lake`` (or ``[lake] root``) names: a folder, ``file://``, ``s3://``, ``gs://`` or ``az://``."""
    try:
        return lake_path(args.lake)
    except ValueError as exc:
        raise SystemExit(f"radar: --lake: {exc}") from None


def lake_config(args: argparse.Namespace) -> LakeConfig:
    """[lake] (lock wait, retention, temp files) with --lock-wait-s applied."""
    return settings_of(args).lake_config()


def _scrubbing(fleet: FleetConfig) -> FleetConfig:
    """Register the fleet's DSNs with the log scrubber, so no log record shows a secret of theirs."""
    from jobs.redaction import install_log_scrubber

    install_log_scrubber(*fleet.dsns())
    return fleet


def find_fleet(args: argparse.Namespace) -> FleetConfig | None:
    """--fleet-file (must exist), --embedded (the fleet of `radar fleet up`, must run), else
    data/fleet.toml if it exists; None when there is none of them.

    Nothing falls back silently: a mistyped --fleet-file is an error, and the embedded fleet is used only
    when --embedded asks for it, never because data/fleet.toml is missing.
    """
    from jobs.config import ConfigError, FleetConfig

    if args.fleet_file is not None and args.embedded:
        raise ConfigError("give either --fleet-file or --embedded, not both")
    if args.fleet_file is not None:
        if not Path(args.fleet_file).is_file():
            raise ConfigError(f"fleet file not found: {args.fleet_file} (given with --fleet-file)")
        return _scrubbing(FleetConfig.load(Path(args.fleet_file)))
    if args.embedded:
        from jobs.fleet import EmbeddedFleet

        embedded = EmbeddedFleet.load(Path(args.embedded_root))
        if embedded is None:
            raise ConfigError(
                f"--embedded: no embedded fleet at {args.embedded_root} (start one with `radar fleet up`)"
            )
        return _scrubbing(FleetConfig.from_embedded(embedded))
    if DEFAULT_FLEET_FILE.exists():
        return _scrubbing(FleetConfig.load(DEFAULT_FLEET_FILE))
    return None


NO_FLEET_HINT = (
    f"{DEFAULT_FLEET_FILE} does not exist (copy data/fleet.example.toml to it, give --fleet-file PATH, "
    "or --embedded for the fleet of `radar fleet up`)"
)


def load_fleet(args: argparse.Namespace) -> FleetConfig:
    """The fleet of find_fleet; a ConfigError (exit 2) when there is none."""
    from dataclasses import replace

    from jobs.config import ConfigError

    fleet = find_fleet(args)
    if fleet is None:
        raise ConfigError(f"no fleet: {NO_FLEET_HINT}")
    # The fleet file's [collector], with every key the config file, environment or a flag sets on top.
    return replace(fleet, collector=loaded_settings(args).collector_for(fleet))


def _iso_date(text: str) -> Any:
    from datetime import date

    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _positive_rows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} rows: give 0 (every row) or more")
    return value


def print_lake_incidents(mark: int, args: argparse.Namespace) -> None:
    """One warning line per lake file this run quarantined or skipped (jobs.lake.LakeIncident)."""
    if "jobs.lake" not in sys.modules:  # the command never read the lake: nothing can have happened
        return
    from jobs.lake import incidents_since

    for incident in incidents_since(mark):
        say(args, f"warning: {incident.message()}", markup=False)


# ---------------------------------------------------------------------------------------------------------
# Commands


def cmd_fleet(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.fleet import EmbeddedFleet

    root = Path(args.embedded_root)
    if args.action == "up":
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        sampler = settings_of(args).plans.auto_explain.sampler if args.sampler else None
        with status(f"starting {len(names)} PostgreSQL 18 servers under {root}"):
            fleet = EmbeddedFleet.create(root, names, sampler=sampler)
        (root / "fleet.toml").write_text(fleet.fleet_config_toml())
        render(pl.DataFrame(fleet.status()), "embedded fleet")
        console.print(
            f"fleet file: {root / 'fleet.toml'}  (use it with `radar --embedded snapshot`, or "
            f"--fleet-file {root / 'fleet.toml'})"
        )
        return 0
    fleet = EmbeddedFleet.load(root)
    if fleet is None:
        console.print(f"no embedded fleet at {root}")
        return 0 if args.action != "status" else 1
    if args.action == "down":
        fleet.destroy() if args.destroy else fleet.stop()
        console.print("stopped" + (" and deleted" if args.destroy else ""))
        return 0
    render(pl.DataFrame(fleet.status()), "embedded fleet")
    return 0


SNAPSHOT_COLUMNS = (
    "instance",
    "status",
    "health",
    "statements",
    "new_texts",
    "explain_dropped",
    "own_dropped",
    "hidden_rows",
    "bytes",
    "server_ms",
    "reason",
)
PLAN_COLUMNS = ("plans_captured", "auto_explain_records", "plan_error")


def cmd_snapshot(args: argparse.Namespace) -> int:
    """One collection cycle: the snapshot, then (when asked) plans and auto_explain records for it."""
    import polars as pl

    from jobs.redaction import scrub

    fleet = load_fleet(args)
    plans = settings_of(args).plans
    on_collect = fleet.collector.samples_on_collect
    table_stats_problems: dict[str, list[str]] = {}
    with status(f"snapshotting {len(fleet.instances)} instances"):
        if plans.capture_plans or plans.ingest_auto_explain or on_collect:  # only then the cycle's imports
            from jobs.collect.cycle import run_cycle

            outcome = run_cycle(fleet, lake_root(args), settings_of(args).cycle_config(fleet.collector))
            result = outcome.snapshot
        else:
            from jobs.collect.collector import snapshot_fleet

            result, outcome = snapshot_fleet(fleet, lake_root(args)), None
            from jobs.collect.table_stats import table_stats_after_snapshot  # run_cycle does this itself

            stats = table_stats_after_snapshot(fleet, lake_root(args), result)
            table_stats_problems = {s.instance: s.problems for s in stats if s.problems}
    if outcome is not None:
        table_stats_problems = outcome.table_stats_problems
    rows = result.summary_rows()
    plans_on = outcome is not None and (plans.capture_plans or plans.ingest_auto_explain)
    if plans_on:
        for row in rows:
            name = row["instance"]
            row["plans_captured"] = outcome.plans_captured.get(name) if plans.capture_plans else None
            row["auto_explain_records"] = (
                outcome.auto_explain_records.get(name) if plans.ingest_auto_explain else None
            )
            row["plan_error"] = outcome.plan_errors.get(name)
    columns = [*SNAPSHOT_COLUMNS, *(PLAN_COLUMNS if plans_on else ())]
    frame = pl.DataFrame([{c: row.get(c) for c in columns} for row in rows], infer_schema_length=None)
    table_columns = [c for c in columns if c not in ("reason", "plan_error")]
    show_rows(args, frame, "snapshot", columns=table_columns)
    for label, failed in (
        ("[red]failed[/red]", result.failed),
        ("[yellow]degraded[/yellow]", result.degraded),
    ):
        for row in failed:
            say(args, f"{label} {row.instance}: {_escape(row.reason)}")
    for problems in table_stats_problems.values():
        for problem in problems:
            say(args, f"[yellow]table stats[/yellow] {_escape(scrub(problem, *fleet.dsns()))}")
    if outcome is not None:
        for error in outcome.plan_errors.values():
            say(args, f"[yellow]plans[/yellow] {_escape(scrub(error, *fleet.dsns()))}")
        if outcome.samples is not None:
            say(
                args,
                f"samples appended ([collector] samples_on_collect): {outcome.samples.sample_rows} rows "
                f"from {outcome.samples.snapshot_rows} snapshot rows",
            )
        if outcome.samples_error is not None:
            say(args, f"[yellow]samples[/yellow] {_escape(scrub(outcome.samples_error, *fleet.dsns()))}")
        if plans.ingest_auto_explain and not any(i.log_dir for i in fleet.instances):
            say(
                args,
                "[yellow]--auto-explain[/yellow]: no instance has a log_dir in the fleet file: nothing read",
            )
    if result.ok:
        assets = [
            "statement_snapshots",
            *(["plan_snapshots"] if plans_on else []),
            *(["query_samples"] if outcome is not None and outcome.samples is not None else []),
        ]
        metadata = {
            "instances_ok": len(result.ok),
            "instances_failed": len(result.failed),
            "statement_rows": sum(r.statement_rows for r in result.results),
        }
        tell_dagster(args, assets, metadata)
    return snapshot_exit_code(len(result.ok), len(result.failed))


_MARKUP_LIKE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def _escape(text: str) -> str:
    """rich.markup.escape without importing rich: ``text`` printed as it is, never read as markup."""
    escaped = _MARKUP_LIKE.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    return escaped + "\\" if escaped.endswith("\\") and not escaped.endswith("\\\\") else escaped


def snapshot_exit_code(ok: int, failed: int) -> int:
    if failed == 0:
        return 0
    return 3 if ok == 0 else 1


def cmd_deploy(args: argparse.Namespace) -> int:
    from jobs.collect.deploys import ingest_deploy_files, mark_deploy
    from jobs.config import ConfigError

    settings = settings_of(args)
    config = settings.deploy_inbox_config()
    # Instance names are checked against the fleet. No fleet: refused unless --allow-unknown-instance
    # (a deploy to a typo'd instance would attribute nothing and say nothing).
    fleet = find_fleet(args)
    known = None if fleet is None else fleet.instance_names
    if known is None:
        if config.allow_unknown_instance:
            say(args, "[dim]no fleet: instance names are not checked (--allow-unknown-instance)[/dim]")
        elif args.action == "mark" and not args.fleet:
            raise ConfigError(
                f"deploy mark --instance {', '.join(args.instance)}: no fleet to check the name against: "
                f"{NO_FLEET_HINT}; or record it unchecked with --allow-unknown-instance"
            )
        else:
            known = ()
            if args.action == "ingest":
                say(args, f"no fleet ({NO_FLEET_HINT}): deploys naming an instance are refused", markup=False)
    if args.action == "mark":
        import polars as pl

        events = mark_deploy(
            lake_root(args),
            version=args.version,
            instances=args.instance or None,
            fleet=args.fleet,
            at=args.at,
            known_instances=known,
            config=config,
        )
        show_rows(args, pl.DataFrame([e.as_row() for e in events]), "deploy recorded")
        return 0
    report = ingest_deploy_files(Path(settings.deploys.inbox), lake_root(args), config, known)
    say(args, f"{len(report.processed)} files processed, {len(report.events)} deploys recorded")
    for path, why in report.rejected.items():
        say(args, f"[red]rejected[/red] {_escape(str(path))}: {_escape(why)}")
    for path, why in report.failed.items():
        say(args, f"[red]not recorded[/red] {_escape(str(path))}: {_escape(why)}")
    return 1 if report.rejected or report.failed else 0


def cmd_samples(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from jobs.samples import run_samples_job

    if (args.date_from or args.date_to) and not args.rebuild:
        raise ValueError("radar samples: --from/--to choose the days of a rebuild; add --rebuild")
    dates = None
    if args.date_from or args.date_to:
        dates = (args.date_from or args.date_to, args.date_to or args.date_from)
        if dates[0] > dates[1]:
            raise ValueError(f"radar samples: --from {dates[0]} is after --to {dates[1]}")
    settings = settings_of(args)
    report = run_samples_job(
        lake_root(args),
        settings.samples,
        lake_config=settings.lake_config(),
        dates=dates,
        mode="rebuild" if args.rebuild else "append",
    )
    console.print(
        f"{report.snapshot_rows} snapshot rows → {report.sample_rows} samples "
        f"({report.instances} instances, {report.seconds:.2f} s)"
    )
    if report.rebuilt_for_settings:
        console.print(
            "rebuilt, not appended (built with other [samples] settings before): "
            + ", ".join(report.rebuilt_for_settings),
            markup=False,
        )
    if report.dropped_counts.height:
        render(report.dropped_counts, "dropped intervals")
    days = None
    if dates is not None:
        span = (dates[1] - dates[0]).days
        days = [(dates[0] + timedelta(days=i)).isoformat() for i in range(span + 1)]
    metadata = {"snapshot_rows": report.snapshot_rows, "sample_rows": report.sample_rows}
    tell_dagster(args, ["query_samples"], metadata, days)
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs import lake
    from jobs.analysis import DETECTION_ASSETS, print_detection, run_detection
    from jobs.detect.findings import OPEN
    from jobs.publish.drift import DRIFT_FLAG_COLUMNS, with_drift_flags
    from jobs.schemas import EXECUTION_DRIFT, FINDING_STATES

    config = settings_of(args).detection_config(incremental=not args.full)
    if args.shard is not None:  # one shard's pass of a sharded detection (jobs.detect.sharded)
        return detect_shard(args, config)
    outcome = run_detection(lake_root(args), config)
    drift = lake.read_table(lake_root(args), EXECUTION_DRIFT)  # each finding's per-execution drift flags
    if args.format == "table":
        print_detection(outcome, console, show_all=args.all, drift=drift)
    else:
        shown = with_drift_flags(outcome.shown_findings.sort("onset", "finding_id"), drift)
        show_rows(args, shown.select(*FINDING_STATES.columns_of(shown), *DRIFT_FLAG_COLUMNS))
    open_findings = outcome.findings.filter(pl.col("status") == OPEN).height
    tell_dagster(args, list(DETECTION_ASSETS), {"open_findings": open_findings})
    if args.fail_on_detect and open_findings:
        say(args, f"{open_findings} open findings (--fail-on-detect: exit 1)")
        return 1
    return 0


def shard_flag(value: str) -> tuple[int, int]:
    """``--shard K/N``: shard K (0-based) of N."""
    shard, _, count = value.partition("/")
    if not (shard.isdigit() and count.isdigit() and 0 <= int(shard) < int(count)):
        raise argparse.ArgumentTypeError(f"--shard takes K/N with 0 <= K < N (e.g. 2/8), not {value!r}")
    return int(shard), int(count)


def detect_shard(args: argparse.Namespace, config: Any) -> int:
    """``radar detect --shard K/N``: phase 1 (``--phase candidates``) or phase 2 (the default) of shard K's
    pass; phase 2 after every shard's phase 1 (any order within a phase). Not recorded in Dagster."""
    import polars as pl

    from jobs.analysis import print_detection
    from jobs.detect.findings import OPEN
    from jobs.detect.sharded import record_shard_candidates, run_shard_detection
    from jobs.schemas import FINDING_STATES

    shard, count = args.shard
    if args.phase == "candidates":
        recorded = record_shard_candidates(lake_root(args), config, shard, count)
        row = {"shard": recorded.shard, "instances": recorded.instances, **recorded.candidates}
        if args.format == "table":
            console.print(
                f"{recorded.shard} of {count}: {recorded.instances} instances, candidate steps "
                + ", ".join(f"{family} {n}" for family, n in recorded.candidates.items())
            )
        else:
            show_rows(args, pl.DataFrame([row]))
        return 0
    result = run_shard_detection(lake_root(args), config, shard, count)
    if result.candidates.missing:
        say(
            args,
            f"[yellow]warning:[/yellow] no recorded candidates of {', '.join(result.candidates.missing)} "
            "(run their --phase candidates first): the false discovery rate covers the others only",
        )
    outcome = result.outcome
    if args.format == "table":
        print_detection(outcome, console, show_all=args.all)
    else:
        shown = outcome.shown_findings.sort("onset", "finding_id")
        show_rows(args, shown.select(*FINDING_STATES.columns_of(shown)))
    open_findings = outcome.findings.filter(pl.col("status") == OPEN).height
    if args.fail_on_detect and open_findings:
        say(args, f"{open_findings} open findings (--fail-on-detect: exit 1)")
        return 1
    return 0


def cmd_alerts(args: argparse.Namespace) -> int:
    """Send each sink of [alerts] every finding alert it has not had; exit codes: EXIT_CODES["alerts"]."""
    import json

    from jobs.alerts import send_alerts

    settings = settings_of(args)
    alerts = settings.alerts
    report = send_alerts(
        lake_root(args),
        alerts,
        retry_dead_letters=args.retry_dead_letters,
        lake_config=lake_config(args),
        cutoffs=settings.report.evidence_cutoffs(),
    )
    if not report.sinks:
        console.print(
            "[red]no alert sink[/red]: [alerts] file is empty and no webhook URL is set "
            f"(env {alerts.slack_webhook_env} / {alerts.webhook_env})"
        )
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(report.as_json(), indent=2, default=str) + "\n")
        return 0 if report.ok else 1
    for payload in report.sent:
        to = ", ".join(s.name for s in report.sinks if payload["alert_id"] in s.delivered)
        query = " ".join(payload["query"].split())[:80]
        what = f"drift {payload['metric']} " if payload.get("kind") == "execution_drift" else ""
        console.print(
            f"alerted {what}({payload['state']}): {payload['instance']}: {query} → {to}", markup=False
        )
    for sink in report.sinks:
        for letter in sink.dead_lettered:
            console.print(
                f"[red]dead letter[/red] {_escape(sink.name)}: alert {letter.alert_id} (finding "
                f"{letter.finding_id}, {letter.state}) after {letter.attempts} attempt(s): "
                f"{_escape(letter.reason)}"
            )
        if sink.deferred:
            console.print(
                f"[yellow]{_escape(sink.name)}[/yellow]: {sink.deferred} alert(s) deferred to the next run "
                f"({_escape(sink.stopped)})"
            )
    for note in report.notes:
        console.print(f"warning: {note}", markup=False)
    if report.dead_lettered and alerts.dead_letter_file:
        console.print(
            f"dead letters: {alerts.dead_letter_file} and the lake table alert_dead_letters", markup=False
        )
    if not report.pending:
        console.print("no new regression to alert")
    return 0 if report.ok else 1


def write_report_file(out: Path, text: str) -> None:
    """--json PATH: written whole or not at all (a temp file renamed over it), so CI never reads half."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    tmp.write_text(text)
    tmp.replace(out)


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
        say(args, f"[red]gate could not run:[/red] {_escape(str(exc))}")
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
        say(args, f"[red]gate could not run:[/red] {_escape(str(exc))}")
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
        say(args, f"gate results written to {_escape(str(written))}")
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


DRIFT_TABLE_COLUMNS = ["instance", "status", "reason", "query", "js", "psi"]


EXECUTION_DRIFT_TABLE_COLUMNS = [
    "instance",
    "query_hash",
    "metric",
    "flag",
    "reason",
    "n_baseline",
    "n_candidate",
    "js",
    "psi",
    "baseline_version",
]
EXIT_PAYLOAD_INVALID = 3
EXIT_NO_BASELINE = 4
DRIFT_FLAG_EXIT = {"PASS": 0, "WARN": 1, "BLOCK": 2}


def _drift_now(args: argparse.Namespace) -> Any:
    from jobs.collect.deploys import parse_timestamp

    return parse_timestamp(args.now, "--now") if args.now else None


def drift_anchor_samples(args: argparse.Namespace) -> int:
    """`radar drift anchor-samples`: anchor execution-sample baselines of a window under a new version."""
    import polars as pl

    from jobs.collect.deploys import parse_timestamp
    from jobs.drift.baselines import anchor_sample_baselines

    if not (args.version and args.start and args.end):
        say(args, "[red]radar drift anchor-samples needs --version, --start and --end[/red]")
        return EXIT_USAGE
    rows = anchor_sample_baselines(
        lake_root(args),
        version=args.version,
        start=parse_timestamp(args.start, "--start"),
        end=parse_timestamp(args.end, "--end"),
        instance=args.instance,
        config=settings_of(args).drift.samples,
        now=_drift_now(args),
    )
    shown = rows.select(
        "baseline_version",
        "instance",
        "query_hash",
        "metric",
        "n_window",
        pl.col("samples").list.len().cast(pl.Int64).alias("n_kept"),
        "window_start",
        "window_end",
        "created_at",
    )
    show_rows(args, shown, f"baselines anchored as {args.version}")
    say(
        args,
        f"baseline version {_escape(args.version)}: {rows.height} (instance, query, metric) pairs anchored",
    )
    return 0


def _say_checks(args: argparse.Namespace, checks: list[Any]) -> bool:
    """One line per check; True when every check passed."""
    for check in checks:
        style = "green" if check.passed else "yellow"
        verdict = "ok" if check.passed else "FAILED"
        say(args, f"[{style}]check {check.name} {verdict}:[/{style}] {_escape(check.description)}")
    return all(check.passed for check in checks)


def drift_score(args: argparse.Namespace) -> int:
    """`radar drift score`: the lake's current window against the anchored baselines (execution_drift)."""
    import polars as pl

    from jobs.drift.execution import (
        UNSCORED_REASONS,
        check_lake,
        flag_counts,
        run_execution_drift,
        worst_flag,
    )

    config = settings_of(args).drift
    drift = run_execution_drift(lake_root(args), config, _drift_now(args), args.version)
    shown = drift if args.all else drift.filter(pl.col("flag") != "PASS")
    if shown.height or args.format != "table":
        show_rows(args, shown, "execution drift", columns=EXECUTION_DRIFT_TABLE_COLUMNS)
    counts = "  ".join(f"{flag}: {n}" for flag, n in flag_counts(drift).items())
    unscored = ", ".join(f"{r}: {drift.filter(pl.col('reason') == r).height}" for r in UNSCORED_REASONS)
    say(args, f"{counts}  ({unscored})" if drift.height else "no pair: no execution sample and no baseline")
    if drift.height:
        _say_checks(args, check_lake(lake_root(args), config, drift["scored_at"][0]))
    worst = worst_flag(drift)
    return DRIFT_FLAG_EXIT[worst] if worst else 0


def drift_score_payload(args: argparse.Namespace) -> int:
    """`radar drift score --payload FILE`: one CI candidate against its anchored baseline; exit by flag."""
    import json

    import polars as pl

    from jobs.drift.baselines import load_sample_baselines
    from jobs.drift.contract import PayloadError, parse_payload, score_payload
    from jobs.publish.output import plain_rows

    source = "stdin" if args.payload == "-" else args.payload
    try:
        text = sys.stdin.read() if args.payload == "-" else Path(args.payload).read_text()
        payload = parse_payload(text)
    except (OSError, UnicodeDecodeError) as exc:
        say(args, f"[red]payload {_escape(source)} unreadable:[/red] {_escape(str(exc))}")
        return EXIT_PAYLOAD_INVALID
    except PayloadError as exc:
        say(args, f"[red]payload {_escape(source)} rejected:[/red] {_escape(str(exc))}")
        return EXIT_PAYLOAD_INVALID
    version, qh, metric = payload["baseline_version"], payload["query_hash"], payload["metric"]
    baselines = load_sample_baselines(lake_root(args)).filter(
        (pl.col("query_hash") == qh) & (pl.col("metric") == metric)
    )
    if args.instance:
        baselines = baselines.filter(pl.col("instance") == args.instance)
    chosen = baselines.filter(pl.col("baseline_version") == version)
    scope = f" on instance {args.instance}" if args.instance else ""
    if chosen.height == 0:
        known = sorted(set(baselines["baseline_version"].to_list()))
        say(
            args,
            f"[red]no anchored baseline[/red] of version {_escape(version)!r} for query_hash {qh}, metric "
            f"{metric}{scope} (versions anchored for it: {_escape(', '.join(known)) or 'none'}; anchor one "
            "with `radar drift anchor-samples`)",
        )
        return EXIT_NO_BASELINE
    if chosen.height > 1:
        instances = ", ".join(sorted(chosen["instance"].to_list()))
        say(
            args,
            f"[red]baseline {_escape(version)!r} of query_hash {qh}, {metric} is anchored on several "
            f"instances[/red] ({_escape(instances)}): give --instance",
        )
        return EXIT_NO_BASELINE
    baseline = chosen.row(0, named=True)
    score = score_payload(payload, baseline["samples"], settings_of(args).drift.score)
    result = {"instance": baseline["instance"], "baseline_version": version, **score}
    if args.format == "json":
        (row,) = plain_rows([result], list(result))
        sys.stdout.write(json.dumps(row) + "\n")  # one DriftScore object
    else:
        show_rows(args, pl.DataFrame([result]), "drift score")
    return DRIFT_FLAG_EXIT[score["flag"]]


def drift_checks_cmd(args: argparse.Namespace) -> int:
    """`radar drift checks`: the stale-baseline and degenerate-samples checks over the lake."""
    import polars as pl

    from jobs.drift.execution import check_lake

    checks = check_lake(lake_root(args), settings_of(args).drift, _drift_now(args))
    rows = pl.DataFrame(
        {
            "check": [c.name for c in checks],
            "passed": [c.passed for c in checks],
            "description": [c.description for c in checks],
        }
    )
    if args.format != "table":
        show_rows(args, rows)
        return 0 if all(c.passed for c in checks) else 1
    return 0 if _say_checks(args, checks) else 1


def cmd_drift(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.collect.deploys import parse_timestamp
    from jobs.drift import anchor_baseline, run_drift

    if args.action == "anchor-samples":
        return drift_anchor_samples(args)
    if args.action == "score":
        return drift_score_payload(args) if args.payload else drift_score(args)
    if args.action == "checks":
        return drift_checks_cmd(args)
    if args.action == "anchor":
        if not (args.start and args.end and args.label):
            say(args, "[red]radar drift anchor needs --start, --end and --label[/red]")
            return 2
        row = anchor_baseline(
            lake_root(args),
            start=parse_timestamp(args.start, "--start"),
            end=parse_timestamp(args.end, "--end"),
            instance=args.instance,
            fingerprint=args.fingerprint,
            label=args.label,
        )
        say(args, f"baseline anchored: {_escape(str(row))}")
        return 0
    drift = run_drift(lake_root(args), settings_of(args).drift)
    shown = drift if args.all else drift.filter(pl.col("status").is_in(["drift", "watch"]))
    if shown.height or args.format != "table":
        show_rows(args, shown, "latency drift", columns=DRIFT_TABLE_COLUMNS)
    counts = drift.group_by("status").len().sort("status")
    say(
        args,
        "  ".join(f"{row['status']}: {row['len']}" for row in counts.iter_rows(named=True)) or "no series",
    )
    if args.fail_on_drift and drift.filter(pl.col("status") == "drift").height:
        return 1
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from jobs.compaction import ExpiredPartition, compact_lake

    expired: list[ExpiredPartition] = []
    done = compact_lake(
        lake_root(args), min_age_days=args.min_age_days, config=lake_config(args), expired=expired
    )
    for gone in expired:
        console.print(
            f"{gone.table}/{gone.partition}: expired ({gone.files} files past the analysis retention)"
        )
    for part in done:
        console.print(f"{part.table}/{part.partition}: {part.files_before} files → 1 ({part.rows} rows)")
    console.print(f"{len(done)} partitions compacted")
    return 0


REPORT_TABLE_COLUMNS = [
    "instance",
    "query",
    "status",
    "onset",
    "before_mean_ms",
    "after_mean_ms",
    "deploy_version",
    "drift_latency",
]


def cmd_report(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from jobs import lake
    from jobs.detect.findings import latest_states
    from jobs.publish.drift import DRIFT_FLAG_COLUMNS, with_drift_flags
    from jobs.schemas import EXECUTION_DRIFT, FINDING_STATES
    from jobs.weekly import iso_week, weekly_summary, write_weekly_report

    settings = settings_of(args)
    week = args.week or iso_week(datetime.now(UTC))  # the week so far: what on-call asks about
    written = write_weekly_report(lake_root(args), week, Path(settings.report.out), settings.report_config())
    # The rows: the week's findings the report lists (weekly_summary, the same rule as the markdown).
    findings = latest_states(lake.read_table(lake_root(args), FINDING_STATES))
    runs, deploys = (
        lake.read_table(lake_root(args), "snapshot_runs"),
        lake.read_table(lake_root(args), "deploy_events"),
    )
    regressions = with_drift_flags(  # each query's latest per-execution drift flags, null when not scored
        weekly_summary(week, findings, runs, deploys).regressions,
        lake.read_table(lake_root(args), EXECUTION_DRIFT),
    )
    if regressions.height or args.format != "table":
        show_rows(
            args,
            regressions.select(*FINDING_STATES.columns_of(regressions), *DRIFT_FLAG_COLUMNS),
            f"regressions of {week}",
            columns=REPORT_TABLE_COLUMNS,
        )
    say(
        args, f"weekly report of {week}: {written.html} (open in a browser), {written.markdown}", markup=False
    )
    return 0


def cmd_views(args: argparse.Namespace) -> int:
    from jobs.duckdb_views import search_path_sql, view_statements

    # The views' file globs are relative to the lake root: this first line says where that is (edit it
    # when the lake is elsewhere; the view definitions stay the same).
    print(search_path_sql(lake_root(args)) + ";\n")
    for statement in view_statements(lake_root(args)):
        print(statement.rstrip(";") + ";\n")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """DuckDB's own Python values, not a polars frame: every DuckDB type prints (polars cannot take an
    INTERVAL through arrow). A table cuts each cell at --max-width and folds to vertical records when the
    result is wider than the terminal."""
    from jobs.duckdb_views import query_rows
    from jobs.publish.output import plain_rows, write_rows

    result = query_rows(lake_root(args), args.query)
    max_rows = args.max_rows
    if args.format == "table" and max_rows is None:
        max_rows = TABLE_MAX_ROWS
    rows = plain_rows((dict(zip(result.columns, row, strict=True)) for row in result.rows), result.columns)
    write_rows(
        result.columns,
        rows,
        args.format,
        stdout=sys.stdout,
        stderr=sys.stderr,
        max_rows=max_rows,
        console=console,
        cell_width=args.max_width,
    )
    return 0


PLANS_TABLE_COLUMNS = [
    "instance",
    "queryid",
    "source",
    "captured_at",
    "root_node",
    "total_cost",
    "plan_rows",
    "shape_hash",
    "change_summary",
]


def cmd_plans(args: argparse.Namespace) -> int:
    from jobs.plans.query_plans import last_change, read_query_plans

    settings = settings_of(args)
    found = read_query_plans(
        lake_root(args), args.query, instance=args.instance, source=args.source, config=settings.plans.diff
    )
    if found.matched.is_empty():
        say(
            args,
            f"no query matches {args.query!r} (a queryid, or a fragment of the query text)",
            markup=False,
        )
        if args.format != "table":
            show_rows(args, found.history)
        return 1
    if found.history.is_empty():
        say(
            args,
            f"{found.matched.height} queries match {args.query!r} but none has a plan snapshot "
            "(capture plans with `radar snapshot --capture-plans`, or read auto_explain logs with "
            "--auto-explain)",
            markup=False,
        )
        if args.format != "table":
            show_rows(args, found.history)
        return 1
    show_rows(args, found.history, f"plan history of {args.query}", columns=PLANS_TABLE_COLUMNS)
    if args.format == "table":
        change = last_change(found.history, settings.plans.diff)
        console.print(
            "last change: " + (change.summary if change else "none (one shape per source so far)"),
            markup=False,
            soft_wrap=True,
        )
        if found.regression_diffs.height:
            latest = found.regression_diffs.row(0, named=True)
            console.print(
                f"plan diff of the latest regression ({latest['instance']}, change at "
                f"{latest['detected_change_at']:%Y-%m-%d %H:%M:%S}): {latest['plan_diff_summary']}",
                markup=False,
                soft_wrap=True,
            )
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from jobs.publish.output import plain_rows, write_rows

    loaded = loaded_settings(args)
    if args.action == "show":
        # value: as the config file writes it (numbers, booleans, "30m" durations, lists); secrets masked.
        columns = ["key", "value", "source"]
        write_rows(
            columns,
            plain_rows(loaded.rows(), columns),
            args.format,
            stdout=sys.stdout,
            stderr=sys.stderr,
            title="effective configuration",
            console=console,
        )
        return 0
    fleet = find_fleet(args)  # a given --fleet-file must be valid too
    where = loaded.path if loaded.path is not None else "no config file: defaults"
    say(args, f"configuration valid ({where}, {len(loaded.rows())} settings)", markup=False)
    if fleet is None:
        say(args, f"no fleet: {NO_FLEET_HINT}", markup=False)
    else:
        say(
            args,
            f"fleet valid: {len(fleet.instances)} instances ({', '.join(fleet.instance_names)})",
            markup=False,
        )
        count = loaded.settings.schedules.shard_count
        if count > 1:  # which Dagster run (shard partition) collects each instance
            from jobs.collect.shards import fleet_shard, shard_key

            for shard in range(count):
                names = ", ".join(i.name for i in fleet_shard(fleet, shard, count).instances) or "(none)"
                say(args, f"{shard_key(shard)}: {names}", markup=False)
    return 0


def cmd_setup_sql(args: argparse.Namespace) -> int:
    """Print the SQL that creates the monitoring and explain roles and the EXPLAIN helper (psql-ready)."""
    from jobs.plans.setup_sql import (
        DEFAULT_SERVER_VERSION_NUM,
        SetupRoles,
        SetupServerError,
        extension_step,
        read_setup_facts,
        setup_script,
        setup_steps,
    )
    from jobs.redaction import redact_dsn

    roles = SetupRoles(monitor_role=args.monitor_role, explain_role=args.explain_role, helper=args.helper)
    roles.check()  # a bad name is a usage error before anything connects
    if args.dsn is None:
        version = args.server_version_num or DEFAULT_SERVER_VERSION_NUM
        sys.stdout.write(setup_script(setup_steps(version, args.database or ["postgres"], roles), version))
        return 0
    try:
        facts = read_setup_facts(args.dsn)
    except SetupServerError as exc:
        # stderr: stdout is the script, usually redirected to a file the user would not look at.
        sys.stderr.write(f"error: setup-sql could not read the server: {exc}\n")
        return EXIT_SERVER_UNREADABLE
    steps = setup_steps(facts.server_version_num, args.database or [facts.database], roles)
    if facts.pgss_version is None:
        steps.append(extension_step(facts.database))
    notes = facts.notes(redact_dsn(args.dsn))
    sys.stdout.write(setup_script(steps, facts.server_version_num, notes))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo import DemoConfig, run_demo

    config = DemoConfig(
        lake_root=lake_root(args),
        fleet_root=Path(args.embedded_root).parent / "demo-fleet",
        seconds=args.seconds,
        keep_fleet=args.keep,
    )
    return run_demo(config, console._real())


# ---------------------------------------------------------------------------------------------------------
# Parser

COMMON_EXIT_CODES = (
    "  2  usage or configuration error (bad flag, bad --config or fleet file, no fleet): nothing done\n"
    "  70 internal error (EX_SOFTWARE): a bug in radar, one line on stderr; RADAR_DEBUG=1 shows the\n"
    "     traceback. What earlier runs wrote to the lake is kept\n"
    "  75 another run holds a lake lock (EX_TEMPFAIL): try again later"
)


def _exit_codes(command: str, *lines: str) -> str:
    return (
        f"exit codes of `radar {command}`:\n"
        + "\n".join(f"  {line}" for line in lines)
        + "\n"
        + COMMON_EXIT_CODES
    )


SNAPSHOT_EXIT_CODES = _exit_codes(
    "snapshot",
    "0  every instance was read (degraded ones included: they are listed)",
    "1  some instances failed (each is listed with its reason; the others are in the lake)",
    "3  every instance failed",
    "   plan capture and auto_explain problems are listed as warnings and never change the code",
)
EXIT_CODES = {
    "fleet": _exit_codes("fleet", "0  done", "1  status: no embedded fleet runs at --embedded-root"),
    "snapshot": SNAPSHOT_EXIT_CODES,
    "deploy": _exit_codes(
        "deploy",
        "0  recorded (ingest: every file processed)",
        "1  ingest: some files were rejected or not recorded (each is listed)",
        "   mark: an instance the fleet does not know, or no fleet to check names against, exits 2",
    ),
    "samples": _exit_codes("samples", "0  samples appended (or rebuilt)"),
    "detect": _exit_codes(
        "detect",
        "0  detection ran (findings or not)",
        "1  --fail-on-detect and at least one finding is open after the run",
    ),
    "gate": _exit_codes(
        "gate",
        "0  PASS (or WARN with --no-fail-on-warn)",
        "1  WARN",
        "2  BLOCK (a bad flag or config file also exits 2: it prints no verdict)",
        "3  the gate could not run (unreachable database, bad workload or scenario file)",
        "4  INCONCLUSIVE (--scenarios: the budget ran out before the verdict was decided)",
    ),
    "drift": _exit_codes(
        "drift",
        "0  run: drift computed; anchor, anchor-samples: baseline anchored; score: the worst flag is PASS",
        "   (or there is no pair); score --payload: PASS; checks: every check passed",
        "1  run: --fail-on-drift and a series has status drift; score (--payload): the worst flag is WARN",
        "   (insufficient_samples and no_baseline rows are WARN); checks: a check failed",
        "2  score (--payload): BLOCK (a bad flag or config, an empty version or an empty window also",
        "   exit 2: they print no rows)",
        f"{EXIT_PAYLOAD_INVALID}  score --payload: the file is unreadable, not JSON, or breaks",
        "   drift_payload.schema.json (the message names the field)",
        f"{EXIT_NO_BASELINE}  score --payload: no anchored baseline of the payload's baseline_version for",
        "   its query_hash and metric (or one on several instances and no --instance)",
    ),
    "compact": _exit_codes("compact", "0  done"),
    "report": _exit_codes("report", "0  report written"),
    "views": _exit_codes("views", "0  done"),
    "sql": _exit_codes("sql", "0  rows printed (a failing query exits 2 with DuckDB's message)"),
    "plans": _exit_codes(
        "plans",
        "0  plan history printed",
        "1  no query matches, or the matched queries have no plan snapshot",
    ),
    "config": _exit_codes("config", "0  show: printed; check: the configuration (and fleet file) is valid"),
    "setup-sql": _exit_codes(
        "setup-sql",
        "0  printed",
        f"{EXIT_SERVER_UNREADABLE}  --dsn: the server cannot be reached or read (one line, no password)",
    ),
    "demo": _exit_codes("demo", "0  the demo found and explained its regression", "1  it did not"),
    "alerts": _exit_codes(
        "alerts",
        "0  every alert pending for a sink was delivered to it (or none was pending)",
        "1  some alert was dead-lettered (refused for good, or out of attempts) or deferred to the next",
        "   run (a sink that looked down was stopped); the output names the sink and why",
        "2  also: a webhook URL that is not http(s), or no sink at all",
        "75 another `radar alerts` run holds the alerts lock",
    ),
}
FORMAT_HELP = (
    "table (default), json (an array of objects, one per row; ISO-8601 UTC times) or csv; "
    "see jobs/publish/output.py and the README's 'Use from scripts'"
)


def _global_options(parser: argparse.ArgumentParser, *, in_subcommand: bool) -> None:
    """The options every command takes, before or after the command name.

    On a subcommand they default to SUPPRESS, so one given before the command is not reset by the
    subcommand's defaults."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if in_subcommand else value

    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--config",
        default=default(None),
        metavar="PATH",
        help="settings TOML; must exist when given (default: env RADAR_CONFIG, else data/radar.toml if "
        "present, else the built-in defaults; see `radar config show`)",
    )
    group.add_argument(
        "--lake", default=default(None), help=f"lake root (default: [lake] root, {DEFAULT_LAKE})"
    )
    group.add_argument(
        "--fleet-file",
        default=default(None),
        metavar="PATH",
        help=f"fleet TOML; must exist when given (default: {DEFAULT_FLEET_FILE}; missing is an error "
        "unless --embedded)",
    )
    group.add_argument(
        "--embedded",
        action="store_true",
        default=default(False),
        help="use the embedded fleet of `radar fleet up` (at --embedded-root) as the fleet",
    )
    group.add_argument(
        "--embedded-root",
        default=default(str(DEFAULT_EMBEDDED_ROOT)),
        help=f"embedded fleet folder (default: {DEFAULT_EMBEDDED_ROOT})",
    )
    group.add_argument(
        "--set",
        dest="set_after" if in_subcommand else "set_before",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="any setting of the config file, e.g. --set drift.samples.stale_block_share=0.1 (repeatable; "
        "the value read as in a RADAR_ variable; beats the file, the environment and the other flags)",
    )
    group.add_argument(
        "--lock-wait-s",
        type=float,
        default=default(None),
        help="wait at most this long for a lake lock held by another run (default: [lake] lock_wait_s, 10)",
    )


def _command(
    sub: Any, name: str, help_text: str, *, formats: bool = False, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand with the global options, its exit codes epilog and (``formats``) --format."""
    parser = sub.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description or help_text, 100),
        epilog=EXIT_CODES[name],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, in_subcommand=True)
    chosen = getattr(sub, "_radar_command", ALL_COMMANDS)
    parser._radar_full = chosen in (ALL_COMMANDS, name)  # type: ignore[attr-defined]
    if formats:
        parser.add_argument("--format", choices=["table", "json", "csv"], default="table", help=FORMAT_HELP)
    return parser


ALL_COMMANDS = "*"


def _design_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """The design flags (jobs.config.flags) on the command being run only: importing jobs.config costs
    more than the whole of `radar --help` may (it loads the lake's and the fleet file's modules)."""
    if getattr(parser, "_radar_full", False):
        from jobs.config.flags import add_design_flags

        add_design_flags(parser, *names)


GLOBAL_OPTIONS_WITH_VALUE = frozenset(
    {"--config", "--lake", "--fleet-file", "--embedded-root", "--lock-wait-s"}
)


def command_in(argv: list[str]) -> str | None:
    """The command an argument list runs: its first word that is not a global option or its value."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


DETECTOR_FLAGS = ("window_minutes", "min_executions", "latency_threshold", "changepoint_tolerance")
ALL_DESIGN_FLAGS = (*DETECTOR_FLAGS, "capture_plans", "auto_explain")


def build_parser(command: str | None = ALL_COMMANDS) -> argparse.ArgumentParser:
    """The parser; ``command``: the one whose design flags to add (ALL_COMMANDS: every command's, None:
    none, for the top-level help)."""
    parser = argparse.ArgumentParser(
        prog="radar",
        description=__doc__.splitlines()[0],
        epilog="Every command documents its exit codes in `radar COMMAND --help`.",
    )
    _global_options(parser, in_subcommand=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sub._radar_command = command  # type: ignore[attr-defined]

    fleet = _command(sub, "fleet", "start, stop or list a local embedded PostgreSQL 18 fleet")
    fleet.add_argument("action", choices=["up", "down", "status"])
    fleet.add_argument("--names", default="alpha,beta", help="comma-separated instance names (up)")
    fleet.add_argument("--destroy", action="store_true", help="delete the data folders too (down)")
    fleet.add_argument(
        "--sampler",
        action="store_true",
        help="up: run auto_explain as a sampler of executions ([plans.auto_explain.sampler]: per-execution "
        "drift) instead of logging plans slower than 200 ms",
    )
    fleet.set_defaults(func=cmd_fleet)

    snapshot = _command(
        sub,
        "snapshot",
        "one collection cycle: snapshot the fleet, then (when asked) capture plans and read auto_explain",
        formats=True,
        description="One collection cycle, what the Dagster job does: snapshot pg_stat_statements of every "
        "instance, then with --capture-plans the plans of that snapshot's top queries (pg_store_plans when "
        "trusted, else EXPLAIN GENERIC_PLAN), and with --auto-explain the new auto_explain records of each "
        "instance's log_dir. Both default to the [plans] settings.",
    )
    _design_flags(snapshot, "capture_plans", "auto_explain")
    snapshot.set_defaults(func=cmd_snapshot)

    deploy = _command(sub, "deploy", "record deploys")
    deploy.add_argument("action", choices=["mark", "ingest"])
    target = deploy.add_mutually_exclusive_group()
    target.add_argument("--instance", action="append", help="instance deployed to (repeatable)")
    target.add_argument("--fleet", action="store_true", help="the deploy went to every instance")
    deploy.add_argument("--version", help="version deployed (mark)")
    deploy.add_argument("--at", help="ISO-8601 time of the deploy (default: now)")
    deploy.add_argument(
        "--inbox", default=None, help="folder of deploy files (ingest; default: [deploys] inbox)"
    )
    deploy.add_argument(
        "--allow-unknown-instance",
        action="store_true",
        help="record instance names the fleet does not know, or unchecked when there is no fleet "
        "(default: refuse them)",
    )
    deploy.add_argument(
        "--max-file-bytes",
        type=int,
        default=None,
        help="refuse an inbox file bigger than this, unread (default: [deploys] max_file_bytes)",
    )
    deploy.add_argument(
        "--max-events-per-file",
        type=int,
        default=None,
        help="refuse an inbox file with more deploy events (default: [deploys] max_events_per_file)",
    )
    deploy.set_defaults(func=cmd_deploy)

    samples = _command(sub, "samples", "append per-interval samples for new snapshots (or --rebuild)")
    _design_flags(samples, "min_executions")
    samples.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild instead of appending the snapshots after the watermark (a repair; all days by default)",
    )
    samples.add_argument("--from", dest="date_from", type=_iso_date, help="first day of the rebuild (UTC)")
    samples.add_argument("--to", dest="date_to", type=_iso_date, help="last day of the rebuild (UTC)")
    samples.set_defaults(func=cmd_samples)

    detect = _command(
        sub,
        "detect",
        "find regressions around deploys and unannounced ones",
        formats=True,
        description="Find regressions around deploys and unannounced ones. JSON/CSV rows: the findings "
        "that are open or that this run changed (the finding_states columns, then drift_cost, drift_latency, "
        "drift_cardinality: the latest per-execution drift flag of the query, null when never scored).",
    )
    _design_flags(detect, *DETECTOR_FLAGS)
    detect.add_argument("--all", action="store_true", help="also list the series that were not reported")
    detect.add_argument(
        "--full",
        action="store_true",
        help="rebuild the samples and re-examine every deploy and series (default: only what is new)",
    )
    detect.add_argument(
        "--fail-on-detect", action="store_true", help="exit 1 when a finding is open after the run"
    )
    detect.add_argument(
        "--shard",
        type=shard_flag,
        default=None,
        metavar="K/N",
        help="only shard K of N (instances by the hash of their name): one shard's pass of a sharded "
        "detection, after every shard's --phase candidates",
    )
    detect.add_argument(
        "--phase",
        choices=("candidates", "detect"),
        default="detect",
        help="with --shard: 'candidates' records the shard's unannounced candidates (phase 1); 'detect' "
        "(default) runs its detection, the false discovery rate over every shard's candidates (phase 2)",
    )
    detect.set_defaults(func=cmd_detect)

    alerts = _command(
        sub,
        "alerts",
        "send each finding to the alert sinks of [alerts] (JSONL file, Slack, webhook), once each",
        description="Sinks come from [alerts] in the config file: the JSONL file, Slack when its URL is "
        "set (env RADAR_SLACK_WEBHOOK or [alerts] slack_webhook_url), the generic JSON webhook likewise "
        "(env RADAR_ALERT_WEBHOOK or [alerts] webhook_url). Each sink gets each alert at most once; "
        "webhook URLs are never printed (only scheme://host).",
    )
    alerts.add_argument("--file", default=None, help="JSONL file sink (default: [alerts] file)")
    alerts.add_argument(
        "--dead-letter-file", default=None, help="dead-letter JSONL file (default: [alerts] dead_letter_file)"
    )
    alerts.add_argument(
        "--webhook",
        default=None,
        metavar="URL",
        help="generic JSON webhook URL (prefer env RADAR_ALERT_WEBHOOK: a command line is visible to ps)",
    )
    alerts.add_argument("--no-resolved", action="store_true", help="send no recovered/superseded updates")
    alerts.add_argument(
        "--retry-dead-letters",
        action="store_true",
        help="send dead-lettered alerts again (each sink: those it refused or did not take)",
    )
    alerts.add_argument("--format", choices=["text", "json"], default="text", help="output (default: text)")
    alerts.set_defaults(func=cmd_alerts)

    gate = _command(
        sub,
        "gate",
        "PASS / WARN / BLOCK: a workload on a baseline vs a candidate database",
        formats=True,
        description="PASS / WARN / BLOCK: a workload on a baseline vs a candidate database. --format json "
        "prints the report object of jobs/contracts/gate_report.schema.json; csv one row per query.",
    )
    gate.add_argument("--baseline", required=True, help="DSN of the database with the current schema")
    gate.add_argument("--candidate", required=True, help="DSN of the database with the change applied")
    source = gate.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--workload", help="workload TOML (see tests/fixtures/gate_workload.toml): the paired-rounds engine"
    )
    source.add_argument(
        "--scenarios",
        help="scenario file (.sql, .toml workload, .py) or builtin[:name,...]: the cycles engine with "
        "memory, temp/shared blocks, WAL and planning measured and the servers calibrated",
    )
    gate.add_argument(
        "--calibration-dsn", help="calibration aa: a copy of the baseline database on the candidate's server"
    )
    gate.add_argument("--calibration", choices=["off", "auto", "aa", "probe"], help="[gate] calibration")
    gate.add_argument(
        "--aa-timing",
        choices=["interleaved", "before"],
        help="[gate] aa_timing: the copy measured inside every cycle (default) or A/A cycles before them",
    )
    gate.add_argument("--cycles", type=int, help="[gate] cycles (default 3)")
    gate.add_argument("--selection", choices=["median", "best"], help="[gate] selection")
    gate.add_argument("--seed", type=int, help="[gate] seed")
    gate.add_argument(
        "--filter",
        dest="sample_filter",
        choices=["none", "drop_first", "running_mean_sigma", "fences"],
        help="[gate] sample_filter",
    )
    gate.add_argument(
        "--aggregation",
        choices=["minimum", "mean", "mean_minus_std", "normal_fit", "p50", "p95"],
        help="[gate] aggregation (wallclock)",
    )
    gate.add_argument(
        "--threshold",
        action="append",
        metavar="NAME=RATIO",
        help="a measurement's relative threshold, repeatable: wallclock, memory, temp_blocks, "
        "shared_blocks, wal_bytes, planning (e.g. --threshold memory=0.3)",
    )
    gate.add_argument(
        "--lake-write",
        action="store_true",
        help="--scenarios: append the run's rows to the lake's gate_results table ([lake] root or --lake)",
    )
    gate.add_argument(
        "--suite-max-seconds", type=float, default=None, help="[gate] suite_max_seconds (scenarios budget)"
    )
    gate.add_argument("--json", help="also write the JSON report (gate_report.schema.json) here")
    gate.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="measurement budget (default: [gate] max_seconds, 120)",
    )
    gate.add_argument("--no-fail-on-warn", action="store_true", help="exit 0 on WARN")
    gate.set_defaults(func=cmd_gate)

    drift = _command(
        sub,
        "drift",
        "distribution drift against anchored baselines ([drift] settings)",
        formats=True,
        description="run / anchor: the per-interval latency drift of pg_stat_statements means (the cheaper "
        "proxy). anchor-samples / score / checks: per-execution drift of the auto_explain samples "
        "(latency, cost, cardinality) against anchored baselines ([drift.samples], [drift.score]): "
        "anchor-samples anchors a window under a new --version; score scores the current window, writes "
        "execution_drift and runs the checks; score --payload FILE scores one CI candidate "
        "(drift_payload.schema.json; '-' reads stdin) against its baseline_version; checks runs the "
        "stale-baseline and degenerate-samples checks.",
    )
    drift.add_argument(
        "action", nargs="?", choices=["run", "anchor", "anchor-samples", "score", "checks"], default="run"
    )
    drift.add_argument("--start", help="anchor, anchor-samples: baseline window start (ISO-8601)")
    drift.add_argument("--end", help="anchor, anchor-samples: baseline window end (ISO-8601)")
    drift.add_argument("--label", help="anchor: a name for the baseline, e.g. 'before v812'")
    drift.add_argument(
        "--version",
        help="anchor-samples: the new baseline version (never reused); score: score against this version "
        "(default: each pair's newest)",
    )
    drift.add_argument(
        "--payload", metavar="FILE", help="score: one CI candidate payload (JSON; - for stdin)"
    )
    drift.add_argument("--now", help="score, checks, anchor-samples: the as-of time (ISO-8601; default now)")
    drift.add_argument(
        "--current-window",
        default=None,
        help="score: candidate window ending at --now, e.g. 10m ([drift.samples] current_window)",
    )
    drift.add_argument(
        "--profile",
        choices=["calibrated", "design"],
        default=None,
        help="score: the scorer's profile ([drift.score] profile, calibrated)",
    )
    drift.add_argument(
        "--instance", help="anchor, anchor-samples, score --payload: one instance (default: the whole fleet)"
    )
    drift.add_argument("--fingerprint", help="anchor: one query fingerprint (default: every query)")
    drift.add_argument(
        "--all",
        action="store_true",
        help="rows of every series (default: status drift or watch; score: flag WARN or BLOCK)",
    )
    drift.add_argument("--fail-on-drift", action="store_true", help="exit 1 when a series has status drift")
    drift.set_defaults(func=cmd_drift)

    compact = _command(sub, "compact", "merge each closed day's snapshot files into one per instance")
    compact.add_argument(
        "--min-age-days", type=int, default=1, help="only days at least this old (default 1)"
    )
    compact.add_argument(
        "--analysis-retention-days",
        type=int,
        default=None,
        help="delete analysis rows of runs older than this many days (0 keeps them; default: [lake] "
        "analysis_retention_days, 30)",
    )
    compact.set_defaults(func=cmd_compact)

    report = _command(
        sub,
        "report",
        "write the weekly regression report (HTML + markdown + plots)",
        formats=True,
        description="Write the weekly regression report (report.html, self-contained with its plots, and "
        "report.md with PNGs) and print its regressions (the findings that began in the week, the "
        "finding_states columns).",
    )
    report.add_argument("--week", help="ISO week YYYY-Www (default: the current week, so far)")
    report.add_argument("--out", default=None, help="report folder (default: [report] out, data/reports)")
    report.set_defaults(func=cmd_report)

    views = _command(sub, "views", "print the DuckDB view definitions over the lake")
    views.set_defaults(func=cmd_views)
    sql = _command(sub, "sql", "run a DuckDB query over the lake views", formats=True)
    sql.add_argument("query")
    sql.add_argument(
        "--max-rows",
        type=_positive_rows,
        default=None,
        help=f"print at most this many rows, 0 for all (default: {TABLE_MAX_ROWS} in a table, all in JSON "
        "and CSV); a line (stderr for JSON/CSV) says when rows were left out",
    )
    sql.add_argument(
        "--max-width",
        type=_positive_rows,
        default=SQL_CELL_WIDTH,
        metavar="CHARS",
        help=f"table format: cut each cell at this many characters with an ellipsis, 0 for never (default: "
        f"{SQL_CELL_WIDTH}); a table still wider than the terminal prints one vertical record per row",
    )
    sql.set_defaults(func=cmd_sql)

    plans = _command(
        sub,
        "plans",
        "a query's plan history and its last plan change",
        formats=True,
        description="A query's plan history: every stored plan shape per source, oldest first, each with "
        "what changed since the one before it, then the last change and the plan diff of its latest "
        "regression. QUERY is a queryid (negative ones too) or a fragment of the normalized text.",
    )
    plans.add_argument("query", metavar="QUERYID|TEXT")
    plans.add_argument("--instance", help="only this instance")
    plans.add_argument(
        "--source",
        choices=["pg_store_plans", "generic_explain", "auto_explain"],
        help="only this plan source",
    )
    plans.add_argument(
        "--max-rows", type=_positive_rows, default=None, help="print at most this many rows, 0 for all"
    )
    plans.set_defaults(func=cmd_plans)

    config = _command(
        sub,
        "config",
        "show the effective settings and where each came from, or check them without running",
        formats=True,
        description="show: every setting's effective value and its source (default, file, env, flag); "
        "check: validate the settings (and the fleet file) without running anything. The design flags "
        "given here are applied as they would be on the command that takes them.",
    )
    config.add_argument("action", choices=["show", "check"])
    _design_flags(config, *ALL_DESIGN_FLAGS)
    config.set_defaults(func=cmd_config)

    setup = _command(
        sub, "setup-sql", "print the SQL for the monitoring login, the explain role and the EXPLAIN helper"
    )
    target = setup.add_mutually_exclusive_group()
    target.add_argument(
        "--server-version-num", type=int, default=None, help="target server's version (default: 180000)"
    )
    target.add_argument(
        "--dsn",
        help="read the version and pg_stat_statements from this server instead (its password is never "
        "printed); --database then defaults to the DSN's database",
    )
    setup.add_argument(
        "--database", action="append", help="database to install the helper in (repeatable; default postgres)"
    )
    setup.add_argument("--monitor-role", default="radar_monitor", help="login role (default: %(default)s)")
    setup.add_argument("--explain-role", default="radar_explain", help="NOLOGIN role EXPLAINs run as")
    setup.add_argument("--helper", default="radar.explain_generic", help="schema.function of the helper")
    setup.set_defaults(func=cmd_setup_sql)

    demo = _command(sub, "demo", "embedded fleet + workload + a real regression found and explained")
    demo.add_argument("--seconds", type=float, default=75.0, help="workload duration")
    demo.add_argument("--keep", action="store_true", help="leave the demo fleet running")
    demo.set_defaults(func=cmd_demo, lake="data/demo/lake")
    return parser


LAKELESS_COMMANDS = frozenset({"fleet", "setup-sql", "config", "gate"})
"""Commands that never read or write the lake (their run does not resolve [lake] root)."""
LAKE_READING_COMMANDS = frozenset(
    {"samples", "detect", "alerts", "drift", "compact", "report", "views", "sql", "plans"}
)
"""Commands that need a lake to exist: on a folder that is not there they stop (exit 2) instead of reading
nothing and saying so ("No open regression", exit 0) while creating ``<typo>/_locks``."""


def missing_lake(args: argparse.Namespace) -> str | None:
    """Why a lake-reading command cannot run on ``--lake`` (a local folder that does not exist), else None.
    An object-store root is not checked: an empty prefix is a new lake there, and listing costs a request."""
    if args.command not in LAKE_READING_COMMANDS:
        return None
    root = lake_root(args)
    if isinstance(root, Path) and not root.is_dir():
        return (
            f"lake root {root} does not exist (--lake or [lake] root): fix the path, or run "
            "`radar snapshot` first to start a lake there"
        )
    return None


def internal_error(args: argparse.Namespace, exc: Exception) -> int:
    """An exception nothing expected: one line (scrubbed of DSNs) and EXIT_INTERNAL, so a cron job or CI
    step never mistakes a bug for a verdict (``--fail-on-detect``'s 1, the gate's BLOCK) and a JSON reader
    gets an empty stdout with a distinct code; ``RADAR_DEBUG=1`` re-raises for the traceback."""
    import os

    if os.environ.get("RADAR_DEBUG", "").strip() not in ("", "0"):
        raise exc
    where = ""
    tb = exc.__traceback__
    while tb is not None:  # the innermost frame of radar's own code names where it broke
        if tb.tb_frame.f_globals.get("__name__", "").startswith(("jobs.", "orchestration.")):
            where = f" at {tb.tb_frame.f_globals['__name__']}:{tb.tb_lineno}"
        tb = tb.tb_next
    first_line = (str(exc).strip().splitlines() or [""])[0][:300]
    say(
        args,
        f"[red]internal error:[/red] {type(exc).__name__}{where}: {_escape(_scrubbed(first_line))} "
        f"(a bug in radar, not in your input; exit {EXIT_INTERNAL}; RADAR_DEBUG=1 shows the traceback)",
    )
    return EXIT_INTERNAL


def _is_error(exc: BaseException, *names: str) -> bool:
    """The exception is (a subclass of) one of these jobs/ classes, checked without importing them."""
    return any(cls.__name__ in names and cls.__module__.startswith("jobs.") for cls in type(exc).__mro__)


def _scrubbed(text: str) -> str:
    """``text`` without the DSNs registered with the scrubber (none can be before jobs.redaction loads)."""
    if "jobs.redaction" not in sys.modules:
        return text
    from jobs.redaction import registered_dsns, scrub

    return scrub(text, *registered_dsns())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(command_in(argv)).parse_args(argv)
    if (
        args.command == "deploy"
        and args.action == "mark"
        and (not args.version or not (args.instance or args.fleet))
    ):
        say(args, "[red]radar deploy mark needs --version and one of --instance NAME or --fleet[/red]")
        return EXIT_USAGE
    if getattr(args, "baseline", None) or getattr(args, "candidate", None):
        from jobs.redaction import install_log_scrubber

        install_log_scrubber(args.baseline, args.candidate)
    # The lake's incident log is per process; not imported yet means empty (0).
    mark = sys.modules["jobs.lake"].incident_mark() if "jobs.lake" in sys.modules else 0
    try:
        if args.lake is None and args.command not in LAKELESS_COMMANDS:
            args.lake = str(settings_of(args).lake.root)
        if (problem := missing_lake(args)) is not None:
            say(args, f"[red]error:[/red] {_escape(problem)}")
            return EXIT_USAGE
        return int(args.func(args))
    except Exception as exc:
        if _is_error(exc, "LakeLockError"):
            say(args, f"[red]error:[/red] {_escape(str(exc))}")
            return EXIT_LOCKED
        if _is_error(exc, "ConfigError") or isinstance(exc, ValueError | RuntimeError | FileNotFoundError):
            say(args, f"[red]error:[/red] {_escape(_scrubbed(str(exc)))}")
            return EXIT_USAGE
        return internal_error(args, exc)
    finally:
        print_lake_incidents(mark, args)


if __name__ == "__main__":
    sys.exit(main())
