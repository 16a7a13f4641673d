"""Reading one collected day before and after compaction, in the same run on the same rows.

The lake: 1 instance, 1 day at one snapshot a minute (1,440 files, as the collector writes them) of 500
statements. Peer: the same lake uncompacted. Measured: the samples job and a DuckDB aggregate over the
view, before and after `compact_lake`, plus the compaction itself.
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from jobs.detect.samples_job import run_samples_job
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.lake.compaction import compact_lake
from tests.benchmarks.common import fresh_bench_folder

SNAPSHOTS = 1440
STATEMENTS = 500
DAY = date(2026, 1, 5)
RESULTS = Path(".bench/results")


def write_day(lake_root: Path) -> None:
    rng = np.random.default_rng(5)
    start = datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC)
    rate = rng.integers(1, 50, STATEMENTS)
    latency = rng.lognormal(0, 1, STATEMENTS)
    for i in range(SNAPSHOTS):
        at = start + timedelta(minutes=i)
        calls = rate * (i + 1)
        frame = pl.DataFrame(
            {
                "captured_at": [at] * STATEMENTS,
                "system_identifier": np.full(STATEMENTS, 1),
                "postmaster_start": [start] * STATEMENTS,
                "userid": np.full(STATEMENTS, 10),
                "dbid": np.full(STATEMENTS, 5),
                "toplevel": np.full(STATEMENTS, True),
                "queryid": np.arange(STATEMENTS, dtype=np.int64),
                "calls": calls,
                "total_exec_time": calls * latency,
            }
        )
        lake.write_table(
            lake_root,
            "statement_snapshots",
            frame,
            {"instance": "db1", "date": DAY.isoformat()},
            lake.stem_for(at),
        )


def read_costs(lake_root: Path, rounds: int = 3) -> dict[str, float]:
    samples, views = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        run_samples_job(lake_root)
        samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        conn = duckdb_views.connect(lake_root)
        conn.execute("select instance, count(*), sum(calls) from statement_snapshots group by 1").fetchall()
        views.append(time.perf_counter() - started)
    return {"samples_job_s": statistics.median(samples), "duckdb_view_s": statistics.median(views)}


def main() -> None:
    base = fresh_bench_folder("compaction")
    lake_root = base / "lake"
    started = time.perf_counter()
    write_day(lake_root)
    generated = time.perf_counter() - started
    files_before = len(lake.table_files(lake_root, "statement_snapshots"))
    before = read_costs(lake_root)
    started = time.perf_counter()
    done = compact_lake(lake_root, today=DAY + timedelta(days=1))
    compaction_s = time.perf_counter() - started
    files_after = len(lake.table_files(lake_root, "statement_snapshots"))
    after = read_costs(lake_root)
    report = {
        "snapshots": SNAPSHOTS,
        "statements": STATEMENTS,
        "rows": SNAPSHOTS * STATEMENTS,
        "generate_s": generated,
        "files_before": files_before,
        "files_after": files_after,
        "compaction_s": compaction_s,
        "partitions": len(done),
        "uncompacted": before,
        "compacted": after,
        "speedup_samples_job": before["samples_job_s"] / after["samples_job_s"],
        "speedup_duckdb_view": before["duckdb_view_s"] / after["duckdb_view_s"],
    }
    rows = SNAPSHOTS * STATEMENTS
    print(f"1 instance, 1 day: {SNAPSHOTS} snapshots x {STATEMENTS} statements = {rows:,} rows")
    print(f"files: {files_before} -> {files_after}; compaction took {compaction_s:.2f} s")
    print(f"{'read':<28}{'uncompacted s':>15}{'compacted s':>13}{'speedup':>9}")
    for key, label in (("samples_job_s", "samples job"), ("duckdb_view_s", "DuckDB aggregate over view")):
        print(f"{label:<28}{before[key]:>15.3f}{after[key]:>13.3f}{before[key] / after[key]:>8.1f}x")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compaction.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
