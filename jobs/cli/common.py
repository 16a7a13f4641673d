"""What every command shares: the consoles, rows out, settings, the lake and the fleet of this run."""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from jobs.collect.fleet import FleetConfig
    from jobs.lake.locks import LakeConfig
from jobs.escaping import terminal_markup, visible_controls
from jobs.lake.storage import LakePath, lake_path

DEFAULT_LAKE = Path("data/lake")
DEFAULT_FLEET_FILE = Path("data/fleet.toml")
DEFAULT_EMBEDDED_ROOT = Path(tempfile.gettempdir()) / "pg-regression-radar" / "fleet"
EXIT_LOCKED = 75  # EX_TEMPFAIL: another run holds a lake lock; try again later
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in radar (an exception nothing expected); never a verdict's code
EXIT_GATE_USAGE = 64
"""EX_USAGE for `radar gate`: a bad flag, value or config file (its 2 is BLOCK, its 1 WARN)."""
EXIT_SERVER_UNREADABLE = 3  # setup-sql --dsn: like the gate's "could not run" (an unreachable database)
EXIT_STORAGE = 74
"""EX_IOERR: the operating system refused a write (disk full, quota, read-only, permission, I/O error); one
line names the path and what was kept. Not 70: nothing is wrong with radar, and nothing collected is lost."""
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
    return getattr(args, "format", "table") in ("json", "jsonl", "csv")


_STYLE_TAG = re.compile(r"(?<!\\)\[/?(?:red|yellow|dim|bold|green)?\]")


def say(args: argparse.Namespace, text: str, *, markup: bool = True) -> None:
    """A message for people: on stdout with the table format (rich), as plain lines on stderr with JSON or
    CSV (no styles, no rich import: a script's start-up stays small)."""
    if not markup:
        text = visible_controls(text)  # a message naming fleet text: no escape sequence reaches the terminal
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
        say(args, f"[yellow]warning:[/yellow] not recorded in Dagster ({home}): {escaped(first_line)}")


# ---------------------------------------------------------------------------------------------------------
# Settings, fleet, lake


def _flag_overrides(args: argparse.Namespace) -> list[Any]:
    """Overrides of the flags that are not design flags (jobs.config.flags): each names its flag."""
    from jobs.config.flags import Override

    pairs = (
        ("lake", "lake.root", str),
        ("lock_wait_s", "lake.lock_wait_s", float),
        ("analysis_retention_days", "lake.analysis_retention_days", int),
        ("inbox", "deploys.inbox", str),
        ("max_file_bytes", "deploys.max_file_bytes", int),
        ("max_events_per_file", "deploys.max_events_per_file", int),
        ("suite_max_seconds", "gate.suite_max_seconds", float),
        ("max_cycles", "gate.max_cycles", int),
        ("verdict_rule", "gate.verdict_rule", str),
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
        ("memory_budget_mib", "detector.memory.budget_mib", int),
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
            from jobs.errors import ConfigError

            raise ConfigError(
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


def command_line_overrides(args: argparse.Namespace) -> list[Any]:
    """Every setting this command line sets: design flags, the other flags and --set, in that order."""
    from jobs.config.flags import overrides_from_args
    from jobs.config.loader import setting_override

    assignments = [*(getattr(args, "set_before", None) or []), *(getattr(args, "set_after", None) or [])]
    return [*overrides_from_args(args), *_flag_overrides(args), *(setting_override(a) for a in assignments)]


def loaded_settings(args: argparse.Namespace) -> Any:
    """jobs.config.loader.LoadedSettings: defaults < --config file (or RADAR_CONFIG, or data/radar.toml) < env
    RADAR_<SECTION>__<KEY> < flags. Loaded once per run."""
    cached = getattr(args, "_loaded_settings", None)
    if cached is None:
        from jobs.config.loader import load_settings

        cached = load_settings(getattr(args, "config", None), overrides=command_line_overrides(args))
        args._loaded_settings = cached
    return cached


def settings_of(args: argparse.Namespace) -> Any:
    """jobs.config.sections.RadarSettings of this run (see loaded_settings)."""
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
    from jobs.collect.fleet import FleetConfig
    from jobs.errors import ConfigError

    if args.fleet_file is not None and args.embedded:
        raise ConfigError("give either --fleet-file or --embedded, not both")
    if args.fleet_file is not None:
        if not Path(args.fleet_file).is_file():
            raise ConfigError(f"fleet file not found: {args.fleet_file} (given with --fleet-file)")
        return _scrubbing(FleetConfig.load(Path(args.fleet_file)))
    if args.embedded:
        from jobs.local.embedded import EmbeddedFleet

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

    from jobs.errors import ConfigError

    fleet = find_fleet(args)
    if fleet is None:
        raise ConfigError(f"no fleet: {NO_FLEET_HINT}")
    # The fleet file's [collector], with every key the config file, environment or a flag sets on top.
    return replace(fleet, collector=loaded_settings(args).collector_for(fleet))


def iso_date(text: str) -> Any:
    from datetime import date

    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def positive_rows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} rows: give 0 (every row) or more")
    return value


def print_lake_incidents(mark: int, args: argparse.Namespace) -> None:
    """One warning line per lake file this run quarantined or skipped (jobs.lake.io.LakeIncident)."""
    if "jobs.lake.io" not in sys.modules:  # the command never read the lake: nothing can have happened
        return
    from jobs.lake.io import incidents_since

    for incident in incidents_since(mark):
        say(args, f"warning: {incident.message()}", markup=False)


escaped = terminal_markup
"""A value from the fleet or a file inside a message with rich markup (``jobs.escaping``)."""


def write_report_file(out: Path, text: str) -> None:
    """--json PATH: written whole or not at all (a temp file renamed over it), so CI never reads half."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    tmp.write_text(text)
    tmp.replace(out)
