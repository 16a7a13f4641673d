"""Golden comparison of two builds' detection on the same lake (issue 25): the rows must be the same, or
each difference explained.

  dump     python -m tests.benchmarks.golden_detection dump OUT [--instances 4 --queries 100 --days 0.5]
           builds (or reuses, under .bench/) the generated detection lake of that shape, runs a full
           run_detection on a copy with the build on PYTHONPATH, writes every analysis table to OUT/*.parquet;
           --shards N runs it as N shards' passes instead (jobs.pipeline.sharded, each pass in its own
           process, peak RSS per pass printed): a chunked run's memory, and its rows against a whole run's;
           --budget-mib M runs it within a memory budget of M MiB (jobs.pipeline.budgeted, one process)
  compare  python -m tests.benchmarks.golden_detection compare OUT_A OUT_B
           per table: rows only in A, only in B (keyed by the table's identity columns), and per column the
           rows whose values differ; exit 0 when identical, 1 otherwise

Run ``dump`` once with each build (e.g. ``PYTHONPATH=../main python -m ...`` and ``PYTHONPATH=. python -m
...``): the lake is generated from a fixed seed, so both read the same snapshots. Columns that name the run
(``run_id``, ``computed_at``, ``opened_at``, ``updated_at``, ``updated_by_run``) are left out.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

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


def dump(out: Path, shape: LakeShape, shards: int = 1, budget_mib: int = 0) -> None:
    from jobs.detect.config import MemoryConfig
    from jobs.pipeline.budgeted import run_detection_in_budget
    from jobs.pipeline.detection import DetectionConfig, run_detection

    generated = build_lake(BENCH_DIR / "golden-lakes", shape)
    lake = BENCH_DIR / "golden-work" / out.name
    shutil.rmtree(lake, ignore_errors=True)
    shutil.copytree(generated.root, lake)
    now = shape.end + timedelta(minutes=TAIL_MINUTES)
    if shards > 1:
        dump_sharded(out, lake, now, shards)
        return
    if budget_mib:
        started = time.perf_counter()
        run = run_detection_in_budget(lake, DetectionConfig(memory=MemoryConfig(budget_mib=budget_mib)), now)
        print(
            f"{len(run.chunks)} chunks of {[len(c) for c in run.chunks]} instances, estimates "
            f"{[round(e) for e in run.estimated_mib]} MiB; {time.perf_counter() - started:.1f} s, "
            f"peak RSS {run.peak_rss_mib:,.0f} MiB here, "
            f"passes {[round(m) for m in run.chunk_peak_rss_mib]} MiB"
        )
        write_frames(run.outcome, out)
        return
    write_frames(run_detection(lake, DetectionConfig(), now=now), out)


def write_frames(outcome: Any, out: Path, *, quiet: bool = False) -> None:
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
            if not quiet:
                print(f"{name}: {frame.height} rows")


def shard_pass(lake: str, now_iso: str, phase: str, shard: int, count: int, out: str) -> dict[str, Any]:
    """One pass of a sharded detection (jobs.pipeline.sharded) in this (fresh) process: phase "samples"
    (the shard's samples built, as the collection keeps them: a shard's instances are those with samples),
    "candidates" or "detect"; the detect pass writes its tables under ``out/shard-<k>``."""
    from jobs.pipeline.detection import DetectionConfig
    from jobs.pipeline.sharded import record_shard_candidates, run_shard_detection

    now = datetime.fromisoformat(now_iso)
    started = time.perf_counter()
    if phase == "samples":  # what the collection's samples job would have done for the shard's instances
        from jobs.collect.shards import shard_of
        from jobs.detect.samples_job import run_samples_job
        from jobs.schemas.collected import STATEMENT_SNAPSHOTS

        folders = (Path(lake) / STATEMENT_SNAPSHOTS.name).glob("instance=*")
        names = sorted(f.name.removeprefix("instance=") for f in folders)
        mine = [n for n in names if shard_of(n, count) == shard]
        config = DetectionConfig()
        run_samples_job(Path(lake), config.samples, instances=mine, lake_config=config.lake, mode="rebuild")
    elif phase == "candidates":
        record_shard_candidates(Path(lake), DetectionConfig(), shard, count, now)
    else:
        outcome = run_shard_detection(Path(lake), DetectionConfig(), shard, count, now).outcome
        write_frames(outcome, Path(out) / f"shard-{shard}", quiet=True)
    return {
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def dump_sharded(out: Path, lake: Path, now: datetime, count: int) -> None:
    """The detection as ``count`` shards' passes, each in its own process (every phase 1, then every phase
    2): the memory a chunked run needs is the largest pass's, and the union of the shards' tables is
    compared with a whole-fleet run's like any other build's."""
    from tests.benchmarks.bench_detection import in_fresh_process

    parts = out / "shards"
    shutil.rmtree(parts, ignore_errors=True)
    passes = []
    for phase in ("samples", "candidates", "detect"):
        for shard in range(count):
            run = in_fresh_process(shard_pass, str(lake), now.isoformat(), phase, shard, count, str(parts))
            if run.get("stopped"):
                raise SystemExit(f"shard {shard} {phase}: {run['stopped']}")
            passes.append(run)
            print(f"  shard {shard}/{count} {phase}: {run['seconds']:.1f} s, {run['peak_rss_mib']:,.0f} MiB")
    print(
        f"sharded in {count}: {sum(p['seconds'] for p in passes):.1f} s in all, largest pass "
        f"{max(p['peak_rss_mib'] for p in passes):,.0f} MiB peak RSS"
    )
    for name in KEYS:
        files = sorted(parts.glob(f"shard-*/{name}.parquet"))
        frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed") if files else None
        if frame is not None:
            frame.write_parquet(out / f"{name}.parquet")
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
    d.add_argument("--shards", type=int, default=1, help="run as N shards' passes, each in its own process")
    d.add_argument(
        "--budget-mib", type=int, default=0, help="one run within this memory budget (jobs.pipeline.budgeted)"
    )
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        shape = LakeShape(instances=args.instances, queries=args.queries, days=args.days)
        dump(args.out, shape, args.shards, args.budget_mib)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
