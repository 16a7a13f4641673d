"""`radar demo`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, lake_root


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.local.demo import DemoConfig, run_demo

    config = DemoConfig(
        lake_root=lake_root(args),
        fleet_root=Path(args.embedded_root).parent / "demo-fleet",
        seconds=args.seconds,
        keep_fleet=args.keep,
        show_all=args.all,
    )
    return run_demo(config, console._real())
