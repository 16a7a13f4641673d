"""Samples job throughput on a generated lake: snapshot rows per second and peak memory, against DuckDB.

The lake (default 50 instances x 2,000 statements x 500 snapshots = 50 million statement_snapshots rows)
is generated with numpy into the hive layout, one compacted file per (instance, date), and cached under
``.bench/lake-samples-<shape>`` so a rerun measures only the job. Every tenth instance restarts half way
and a few entries are re-created (stats_since changes), so the invalid-delta paths run too.

Contenders, each in a fresh process so its peak RSS is its own:
- ``jobs.detect.samples_job.run_samples_job`` (polars, one instance at a time, writes query_samples to
Parquet);
- peer: DuckDB 2 (2 threads) doing the same LAG-based deltas and validity checks in one SQL statement over
  the same files, writing the valid samples to Parquet (it does not count drops by reason).
Sizes can be shrunk for a quick look: RADAR_BENCH_INSTANCES, RADAR_BENCH_STATEMENTS, RADAR_BENCH_SNAPSHOTS.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.lake.io import write_table
from jobs.schemas.collected import SAMPLE_DELTAS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

BENCH_DIR = Path(".bench")
RESULTS = BENCH_DIR / "results" / "samples.json"
START = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
START_NAIVE = np.datetime64(START.replace(tzinfo=None), "us")  # numpy datetimes carry no zone: UTC
SNAPSHOT_SECONDS = 60


def shape() -> tuple[int, int, int]:
    return (
        int(os.environ.get("RADAR_BENCH_INSTANCES", 50)),
        int(os.environ.get("RADAR_BENCH_STATEMENTS", 2000)),
        int(os.environ.get("RADAR_BENCH_SNAPSHOTS", 500)),
    )


def generate_instance(
    seed: int, statements: int, snapshots: int, restart: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cumulative counters of one instance, snapshot-major (as the collector writes them), and its runs."""
    rng = np.random.default_rng(seed)
    queryid = rng.integers(-(2**62), 2**62, statements, dtype=np.int64)
    rate = rng.lognormal(2.0, 1.5, statements)
    latency = rng.lognormal(-1.0, 1.5, statements)
    calls_step = rng.poisson(rate, (snapshots, statements))
    exec_step = calls_step * latency * rng.lognormal(0.0, 0.2, (snapshots, statements))
    read_step = rng.poisson(0.5, (snapshots, statements))
    first_life = np.zeros(snapshots, dtype=bool)
    if restart:  # counters start again from zero half way, under a new postmaster start time
        first_life[: snapshots // 2] = True
        calls_step[snapshots // 2] = 0
    calls = _restarting_cumsum(calls_step, snapshots, restart)
    exec_ms = _restarting_cumsum(exec_step, snapshots, restart)
    reads = _restarting_cumsum(read_step, snapshots, restart)
    captured = START_NAIVE + np.arange(snapshots) * np.timedelta64(SNAPSHOT_SECONDS, "s")
    boot = np.where(
        first_life | (not restart), (START_NAIVE - np.timedelta64(1, "D")), captured[snapshots // 2]
    )
    since = np.full((snapshots, statements), (START_NAIVE - np.timedelta64(1, "D")))
    recreated = rng.choice(statements, size=max(1, statements // 200), replace=False)
    since[snapshots // 3 :, recreated] = captured[snapshots // 3]
    n = snapshots * statements
    frame = pl.DataFrame(
        {
            "captured_at": np.repeat(captured, statements),
            "system_identifier": np.full(n, 7_000_000 + seed, dtype=np.int64),
            "postmaster_start": np.repeat(boot, statements),
            "stats_reset": np.full(n, (START_NAIVE - np.timedelta64(1, "D"))),
            "userid": np.full(n, 10, dtype=np.int64),
            "dbid": np.full(n, 5, dtype=np.int64),
            "toplevel": np.ones(n, dtype=bool),
            "queryid": np.tile(queryid, snapshots),
            "calls": calls.ravel(),
            "plans": np.zeros(n, dtype=np.int64),
            "total_exec_time": exec_ms.ravel(),
            "total_plan_time": np.zeros(n),
            "rows": calls.ravel() * 3,
            "shared_blks_hit": calls.ravel() * 12,
            "shared_blks_read": reads.ravel(),
            "stats_since": since.ravel(),
        }
    ).with_columns(
        pl.col("captured_at", "postmaster_start", "stats_reset", "stats_since").dt.replace_time_zone("UTC")
    )
    runs = pl.DataFrame(
        {
            "captured_at": captured,
            "status": ["ok"] * snapshots,
            "dealloc": np.zeros(snapshots, dtype=np.int64),
        }
    ).with_columns(pl.col("captured_at").dt.replace_time_zone("UTC"))
    return frame, runs


def _restarting_cumsum(steps: np.ndarray, snapshots: int, restart: bool) -> np.ndarray:
    out = np.cumsum(steps, axis=0)
    if restart:
        half = snapshots // 2
        out[half:] = np.cumsum(steps[half:], axis=0)
    return out


def build_lake(root: Path, instances: int, statements: int, snapshots: int) -> float:
    """Generate the lake once (cached by shape); returns seconds spent generating (0 when cached)."""
    marker = root / "complete.json"
    if marker.exists():
        return 0.0
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    for i in range(instances):
        frame, runs = generate_instance(i, statements, snapshots, restart=i % 10 == 0)
        name = f"inst-{i:03d}"
        for (day,), part in (
            frame.with_columns(pl.col("captured_at").dt.strftime("%Y-%m-%d").alias("date"))
            .partition_by("date", as_dict=True)
            .items()
        ):
            write_table(
                root,
                STATEMENT_SNAPSHOTS,
                part.drop("date"),
                {"instance": name, "date": str(day)},
                "compacted",
            )
        for (day,), part in (
            runs.with_columns(pl.col("captured_at").dt.strftime("%Y-%m-%d").alias("date"))
            .partition_by("date", as_dict=True)
            .items()
        ):
            write_table(
                root, SNAPSHOT_RUNS, part.drop("date"), {"instance": name, "date": str(day)}, "compacted"
            )
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"instances": instances, "statements": statements, "snapshots": snapshots}))
    return seconds


def run_polars(root: str, out: str) -> dict[str, Any]:
    from jobs.detect.samples_job import run_samples_job

    shutil.rmtree(out, ignore_errors=True)
    report = run_samples_job(Path(root), out_root=Path(out))
    return {
        "seconds": report.seconds,
        "snapshot_rows": report.snapshot_rows,
        "sample_rows": report.sample_rows,
        "peak_rss_mib": report.peak_rss_mib,
        "dropped": int(report.dropped_counts["count"].sum()),
    }


def duckdb_sql(root: str, out: str) -> str:
    entry = "instance, dbid, userid, queryid, toplevel"
    lags = ",\n".join(
        f"lag({c}) over w as prev_{c}"
        for c in (
            "captured_at",
            "system_identifier",
            "postmaster_start",
            "stats_reset",
            "stats_since",
            "dealloc",
            *SAMPLE_DELTAS,
        )
    )
    decreased = " or ".join(f"coalesce({c} < prev_{c}, false)" for c in SAMPLE_DELTAS)
    deltas = ",\n".join(f"{c} - prev_{c} as {c}" for c in SAMPLE_DELTAS)
    files = f"{root}/statement_snapshots/*/*/*.parquet"
    runs = f"{root}/snapshot_runs/*/*/*.parquet"
    return f"""
copy (
  with snaps as (
    select s.*, r.dealloc
    from read_parquet('{files}', hive_partitioning = true, union_by_name = true) s
    left join (select instance, captured_at, dealloc
               from read_parquet('{runs}', hive_partitioning = true, union_by_name = true)
               where status = 'ok') r using (instance, captured_at)
    where s.queryid is not null
  ),
  lagged as (
    select *, {lags}
    from snaps
    window w as (partition by {entry} order by captured_at)
  )
  select {entry}, prev_captured_at as interval_start, captured_at as interval_end,
         {deltas},
         (total_exec_time - prev_total_exec_time) / (calls - prev_calls) as mean_exec_time,
         dealloc - prev_dealloc as evictions
  from lagged
  where prev_captured_at is not null
    and system_identifier is not distinct from prev_system_identifier
    and postmaster_start is not distinct from prev_postmaster_start
    and stats_reset is not distinct from prev_stats_reset
    and stats_since is not distinct from prev_stats_since
    and captured_at > prev_captured_at
    and not ({decreased})
    and calls - prev_calls >= 1
) to '{out}' (format parquet, compression zstd, per_thread_output true)
"""


def run_duckdb(root: str, out: str) -> dict[str, Any]:
    import resource

    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    Path(out).mkdir(parents=True)
    started = time.perf_counter()
    con = duckdb.connect()
    con.execute("set threads = 2")
    con.execute("set memory_limit = '16GB'")
    con.execute("set preserve_insertion_order = false")
    con.execute(f"set temp_directory = '{Path(out).parent / 'duckdb-tmp'}'")
    con.execute(duckdb_sql(root, out))
    seconds = time.perf_counter() - started
    sample_rows = con.execute(f"select count(*) from read_parquet('{out}/*.parquet')").fetchone()[0]  # type: ignore[index]
    snapshot_rows = con.execute(
        f"select count(*) from read_parquet('{root}/statement_snapshots/*/*/*.parquet')"
    ).fetchone()[0]  # type: ignore[index]
    return {
        "seconds": seconds,
        "snapshot_rows": snapshot_rows,
        "sample_rows": sample_rows,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def in_fresh_process(function: Any, *args: Any) -> dict[str, Any]:
    """Run in a new interpreter so peak RSS and caches belong to that contender alone."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def main() -> None:
    instances, statements, snapshots = shape()
    root = BENCH_DIR / f"lake-samples-{instances}x{statements}x{snapshots}"
    generated = build_lake(root, instances, statements, snapshots)
    os.sync()  # flush the generated files now, so neither contender's fsyncs wait for them
    out = BENCH_DIR / "samples-out"
    results = {
        "polars (jobs.detect.samples_job.run_samples_job)": in_fresh_process(
            run_polars, str(root), str(out / "polars")
        ),
        "duckdb 2 (window LAG SQL, peer)": in_fresh_process(
            run_duckdb, str(root.resolve()), str((out / "duckdb").resolve())
        ),
    }
    shutil.rmtree(out, ignore_errors=True)
    ours = results["polars (jobs.detect.samples_job.run_samples_job)"]
    peer = results["duckdb 2 (window LAG SQL, peer)"]
    print(
        f"lake: {instances} instances x {statements} statements x {snapshots} snapshots "
        f"(generated in {generated:.0f} s; 0 = cached)"
    )
    print(
        f"{'contender':42} {'snapshot rows':>14} {'samples':>12} {'seconds':>8} {'rows/s':>12} "
        f"{'peak RSS MiB':>13}"
    )
    for name, r in results.items():
        r["rows_per_second"] = r["snapshot_rows"] / r["seconds"]
        print(
            f"{name:42} {r['snapshot_rows']:>14,} {r['sample_rows']:>12,} {r['seconds']:>8.1f} "
            f"{r['rows_per_second']:>12,.0f} {r['peak_rss_mib']:>13,.0f}"
        )
    speed_ratio = ours["rows_per_second"] / peer["rows_per_second"]
    memory_ratio = ours["peak_rss_mib"] / peer["peak_rss_mib"]
    same = ours["sample_rows"] == peer["sample_rows"]
    print(
        f"polars / duckdb: throughput x{speed_ratio:.2f}, peak memory x{memory_ratio:.2f}; "
        f"same samples: {same}"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "shape": {"instances": instances, "statements": statements, "snapshots": snapshots},
                "results": results,
                "throughput_ratio_vs_duckdb": speed_ratio,
                "peak_memory_ratio_vs_duckdb": memory_ratio,
                "same_sample_count": same,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
