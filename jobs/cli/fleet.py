"""`radar fleet`: the instances of the fleet file and whether each answers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import (
    console,
    escaped,
    render,
    settings_of,
    status,
)


def cmd_fleet(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.local.embedded import EmbeddedFleet

    root = Path(args.embedded_root)
    if args.action == "up":
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        sampler = settings_of(args).plans.auto_explain.sampler if args.sampler else None
        with status(f"starting {len(names)} PostgreSQL 18 servers under {root}"):
            fleet = EmbeddedFleet.create(root, names, sampler=sampler)
        (root / "fleet.toml").write_text(fleet.fleet_config_toml())
        render(pl.DataFrame(fleet.status()), "embedded fleet")
        console.print(
            f"fleet file: {escaped(str(root / 'fleet.toml'))}  (use it with `radar --embedded snapshot`, or "
            f"--fleet-file {escaped(str(root / 'fleet.toml'))})"
        )
        return 0
    fleet = EmbeddedFleet.load(root)
    if fleet is None:
        console.print(f"no embedded fleet at {escaped(str(root))}")
        return 0 if args.action != "status" else 1
    if args.action == "down":
        fleet.destroy() if args.destroy else fleet.stop()
        console.print("stopped" + (" and deleted" if args.destroy else ""))
        return 0
    render(pl.DataFrame(fleet.status()), "embedded fleet")
    return 0
