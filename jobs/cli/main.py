"""`radar`: parse, run the command, map failures to exit codes that cannot be confused.

Start-up is kept small: the cli modules import only the standard library at their top; each command imports
what it needs (polars, rich, psycopg, ...) when it runs, so `radar --help` answers without them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import (
    EXIT_GATE_USAGE,
    EXIT_INTERNAL,
    EXIT_LOCKED,
    EXIT_STORAGE,
    EXIT_USAGE,
    escaped,
    lake_root,
    print_lake_incidents,
    say,
    settings_of,
)
from jobs.cli.parser import build_parser, command_in

LAKELESS_COMMANDS = frozenset({"fleet", "setup-sql", "config", "gate"})
"""Commands that never read or write the lake (their run does not resolve [lake] root)."""
LAKE_READING_COMMANDS = frozenset(
    {
        "samples",
        "detect",
        "alerts",
        "drift",
        "compact",
        "report",
        "views",
        "sql",
        "plans",
        "pins",
        "metrics",
        "serve-metrics",
    }
)
"""Commands that need a lake to exist: on a folder that is not there they stop (exit 2) instead of reading
nothing and saying so ("No open regression", exit 0) while creating ``<typo>/_locks``."""


def missing_lake(args: argparse.Namespace) -> str | None:
    """Why a lake-reading command cannot run on ``--lake`` (a local folder that does not exist), else None.
    An object-store root is not checked: an empty prefix is a new lake there, and listing costs a request."""
    if args.command not in LAKE_READING_COMMANDS or getattr(args, "rules", False):
        return None  # `radar metrics --rules` prints the rules of the settings alone
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
        f"[red]internal error:[/red] {type(exc).__name__}{where}: {escaped(_scrubbed(first_line))} "
        f"(a bug in radar, not in your input; exit {EXIT_INTERNAL}; RADAR_DEBUG=1 shows the traceback)",
    )
    return EXIT_INTERNAL


def storage_error(exc: Exception) -> str | None:
    """The one line for the OS refusing storage, or None: a lake write's ``LakeStorageError`` names the path
    and what is kept; any other ``OSError`` with a storage errno (a state file, the weekly report, a file
    that may not be read) names its file. A missing file is not one (a bad path: exit 2), nor is a network
    error."""
    if _is_error(exc, "LakeStorageError"):
        return str(exc)
    if isinstance(exc, FileNotFoundError | ConnectionError | TimeoutError) or not isinstance(exc, OSError):
        return None
    from jobs.errors import STORAGE_ERRNOS, describe_os_error, os_error_advice

    if exc.errno not in STORAGE_ERRNOS:
        return None
    where = exc.filename if exc.filename is not None else "a file"
    return (
        f"{describe_os_error(exc)} at {where}; kept: every file radar finished writing (each is written "
        f"under a temp name and renamed into place); {os_error_advice(exc)}"
    )


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
    mark = sys.modules["jobs.lake.io"].incident_mark() if "jobs.lake.io" in sys.modules else 0
    try:
        if args.lake is None and args.command not in LAKELESS_COMMANDS:
            args.lake = str(settings_of(args).lake.root)
        if (problem := missing_lake(args)) is not None:
            say(args, f"[red]error:[/red] {escaped(problem)}")
            return EXIT_USAGE
        return int(args.func(args))
    except Exception as exc:
        if _is_error(exc, "LakeLockError"):
            say(args, f"[red]error:[/red] {escaped(str(exc))}")
            return EXIT_LOCKED
        if (storage := storage_error(exc)) is not None:
            say(args, f"[red]error:[/red] {escaped(_scrubbed(storage))}")
            return EXIT_STORAGE
        if _is_error(exc, "ConfigError") or isinstance(exc, ValueError | RuntimeError | FileNotFoundError):
            say(args, f"[red]error:[/red] {escaped(_scrubbed(str(exc)))}")
            # the gate's 2 is BLOCK: its usage and config errors have their own code
            return EXIT_GATE_USAGE if args.command == "gate" else EXIT_USAGE
        return internal_error(args, exc)
    finally:
        print_lake_incidents(mark, args)


if __name__ == "__main__":
    sys.exit(main())
