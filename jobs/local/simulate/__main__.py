"""``python -m jobs.local.simulate --instances N --statements M --minutes T --lake PATH``: write a simulated
fleet
into a lake and print the throughput (snapshot rows/s, MB written)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs.local.simulate.simulated_fleet import FleetShape
from jobs.local.simulate.writer import write_fleet


def main(argv: list[str] | None = None) -> int:
    defaults = FleetShape()
    parser = argparse.ArgumentParser(prog="python -m jobs.local.simulate", description=__doc__)
    parser.add_argument("--instances", type=int, default=defaults.instances)
    parser.add_argument("--statements", type=int, default=defaults.statements)
    parser.add_argument("--minutes", type=int, default=defaults.minutes)
    parser.add_argument("--step-seconds", type=int, default=defaults.step_seconds)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--regressions", type=int, default=defaults.regressions)
    parser.add_argument("--lake", type=Path, required=True, help="lake root to write into")
    parser.add_argument("--truth", type=Path, default=None, help="ground truth JSON (default: in the lake)")
    parser.add_argument(
        "--collector-writers",
        action="store_true",
        help="write through the collector's own writers (fsync per file) instead of the same bytes faster",
    )
    args = parser.parse_args(argv)
    try:
        shape = FleetShape(
            instances=args.instances,
            statements=args.statements,
            minutes=args.minutes,
            step_seconds=args.step_seconds,
            seed=args.seed,
            regressions=args.regressions,
        )
        report = write_fleet(args.lake, shape, args.truth, fast=not args.collector_writers)
    except ValueError as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    print(
        f"{shape.key}: {report.snapshot_rows:,} snapshot rows in {report.files:,} files, "
        f"{report.mb_written:,.1f} MB in {report.seconds:.1f} s "
        f"({report.rows_per_second:,.0f} rows/s, {report.mb_written / report.seconds:,.1f} MB/s; "
        f"generating {report.generate_seconds:.1f} s); ground truth: {report.truth_path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
