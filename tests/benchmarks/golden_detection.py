"""Golden comparison of two builds' detection on the same lake (issue 25): the rows must be the same, or
each difference explained.

  dump     python -m tests.benchmarks.golden_detection dump OUT [--instances 4 --queries 100 --days 0.5]
           builds (or reuses, under .bench/) the generated detection lake of that shape, runs a full
           run_detection on a copy with the build on PYTHONPATH, writes every analysis table to OUT/*.parquet
  compare  python -m tests.benchmarks.golden_detection compare OUT_A OUT_B
           per table: rows only in A, only in B (keyed by the table's identity columns), and per column the
           rows whose values differ; exit 0 when identical, 1 otherwise

Run ``dump`` once with each build (e.g. ``PYTHONPATH=../main python -m ...`` and ``PYTHONPATH=. python -m
...``): the lake is generated from a fixed seed, so both read the same snapshots. Columns that name the run
(``run_id``, ``computed_at``, ``opened_at``, ``updated_at``, ``updated_by_run``) are left out.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl

from tests.benchmarks.detection_lake import TAIL_MINUTES, LakeShape, build_lake

BENCH_DIR = Path(".bench")
RUN_COLUMNS = ("run_id", "computed_at", "opened_at", "updated_at", "updated_by_run")
KEYS: dict[str, tuple[str, ...]] = {
    "regressions": ("instance", "deploy_id", "series"),
    "unannounced": ("instance", "series"),
    "resources": ("analysis", "instance", "deploy_id", "series", "metric"),
    "findings": ("finding_id",),
    "instance_slowdowns": ("instance", "analysis", "deploy_id", "began_at"),
}


def dump(out: Path, shape: LakeShape) -> None:
    from jobs.pipeline.detection import DetectionConfig, run_detection

    generated = build_lake(BENCH_DIR / "golden-lakes", shape)
    lake = BENCH_DIR / "golden-work" / out.name
    shutil.rmtree(lake, ignore_errors=True)
    shutil.copytree(generated.root, lake)
    outcome = run_detection(lake, DetectionConfig(), now=shape.end + timedelta(minutes=TAIL_MINUTES))
    out.mkdir(parents=True, exist_ok=True)
    frames = {
        "regressions": outcome.regressions,
        "unannounced": outcome.unannounced,
        "resources": outcome.resource_regressions,
        "findings": outcome.findings,
        "instance_slowdowns": outcome.instance_slowdowns,
    }
    for name, frame in frames.items():
        if isinstance(frame, pl.DataFrame):
            frame.drop([c for c in RUN_COLUMNS if c in frame.columns]).write_parquet(out / f"{name}.parquet")
            print(f"{name}: {frame.height} rows")


def compare(a: Path, b: Path) -> int:
    different = 0
    for name, keys in KEYS.items():
        pa, pb = a / f"{name}.parquet", b / f"{name}.parquet"
        if not (pa.exists() and pb.exists()):
            print(f"{name}: missing in {'A' if not pa.exists() else 'B'}")
            continue
        left, right = pl.read_parquet(pa), pl.read_parquet(pb)
        on = [k for k in keys if k in left.columns and k in right.columns]
        only_a = left.join(right.select(on), on=on, how="anti", nulls_equal=True)
        only_b = right.join(left.select(on), on=on, how="anti", nulls_equal=True)
        joined = left.join(right, on=on, how="inner", suffix="__b", nulls_equal=True)
        changed: dict[str, int] = {}
        for column in left.columns:
            if column in on or f"{column}__b" not in joined.columns:
                continue
            x, y = joined[column], joined[f"{column}__b"]
            same = (x == y) | (x.is_null() & y.is_null())
            if x.dtype.is_float():
                same = same | (x.is_nan() & y.is_nan()).fill_null(False)
            n = int((~same.fill_null(False)).sum())
            if n:
                changed[column] = n
        print(
            f"{name}: A {left.height} rows, B {right.height}; only in A {only_a.height}, only in B "
            f"{only_b.height}; differing columns {changed or 'none'}"
        )
        different += only_a.height + only_b.height + sum(changed.values())
    return 0 if different == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="golden_detection", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--instances", type=int, default=4)
    d.add_argument("--queries", type=int, default=100)
    d.add_argument("--days", type=float, default=0.5)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        dump(args.out, LakeShape(instances=args.instances, queries=args.queries, days=args.days))
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
