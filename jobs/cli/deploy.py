"""`radar deploy`: mark, import and list deploy events."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from jobs.cli.common import (
    NO_FLEET_HINT,
    escaped,
    find_fleet,
    lake_root,
    say,
    settings_of,
    show_rows,
)
from jobs.escaping import one_line


def cmd_deploy(args: argparse.Namespace) -> int:
    from jobs.collect.deploys import ingest_deploy_files, mark_deploy
    from jobs.errors import ConfigError

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
    if args.format != "table":
        show_rows(args, ingest_rows(report))
        return 1 if report.rejected or report.failed else 0
    say(args, f"{len(report.processed)} files processed, {len(report.events)} deploys recorded")
    for path, why in report.rejected.items():
        # One line each: a file name is anyone's, and a line break in it would start a line of its own.
        say(args, f"[red]rejected[/red] {escaped(one_line(path))}: {escaped(one_line(why))}")
    for path, why in report.failed.items():
        say(args, f"[red]not recorded[/red] {escaped(one_line(path))}: {escaped(one_line(why))}")
    return 1 if report.rejected or report.failed else 0


def ingest_rows(report: Any) -> Any:
    """One row per inbox file of an ingest (jobs.collect.deploys.IngestReport): file, outcome
    (processed | rejected | not_recorded) and why (null when processed)."""
    import polars as pl

    rows = [{"file": str(p), "outcome": "processed", "reason": None} for p in report.processed]
    rows += [{"file": str(p), "outcome": "rejected", "reason": why} for p, why in report.rejected.items()]
    rows += [{"file": str(p), "outcome": "not_recorded", "reason": why} for p, why in report.failed.items()]
    return pl.DataFrame(rows, schema={"file": pl.String, "outcome": pl.String, "reason": pl.String})
