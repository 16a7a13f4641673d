"""What a lake written by an older radar costs the DuckDB views: connect() with every column in the files,
then with one column in no file (the base view is rejected, the files' columns asked for, the view made
again), and the DESCRIBE that asks for them on its own.

The lake: 3,000 one-row finding_states files (one per detection run that changed a finding), written by
lake.write_table over 21 days; then every file rewritten without `kind`, envelope metadata kept.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.schemas.analysed import FINDING_STATES
from tests.benchmarks.common import fresh_bench_folder

FILES = 3000
REPEATS = 5
RESULTS = Path(".bench/results")


def write_runs(lake_root: Path) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for i in range(FILES):
        at = start + timedelta(minutes=10 * i)
        frame = pl.DataFrame(
            {
                "finding_id": [f"f{i % 500}"],
                "run_id": [f"r{i}"],
                "computed_at": [at],
                "status": ["open"],
                "instance": ["alpha"],
                "kind": ["plan_or_work"],
                "after_mean_ms": [float(i)],
            },
            schema_overrides={"computed_at": pl.Datetime("us", "UTC")},
        )
        lake.write_table(lake_root, FINDING_STATES, frame, {"date": at.date().isoformat()}, f"run{i:05d}")


def median_s(run: Callable[[], object]) -> float:
    """Median of REPEATS runs after one warm-up (the envelope check caches per process)."""
    run()
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def describe_s(lake_root: Path) -> float:
    conn = duckdb_views.connect(lake_root)
    scan = duckdb_views.table_scan(lake_root, FINDING_STATES)
    assert scan is not None
    started = time.perf_counter()
    duckdb_views.files_columns(conn, scan)
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def main() -> None:
    lake_root = fresh_bench_folder("views") / "lake"
    write_runs(lake_root)
    report: dict[str, float | int] = {"files": FILES}
    report["connect_every_column_s"] = median_s(lambda: duckdb_views.connect(lake_root).close())
    report["describe_s"] = statistics.median(describe_s(lake_root) for _ in range(REPEATS))
    for path in lake.table_files(lake_root, FINDING_STATES):
        pq.write_table(pq.read_table(path).drop_columns(["kind"]), path, compression="zstd")
    report["connect_column_in_no_file_s"] = median_s(lambda: duckdb_views.connect(lake_root).close())
    nulls = duckdb_views.query(lake_root, "select count(*) - count(kind) as n from findings")["n"][0]
    assert nulls == 500, nulls
    print(f"{FILES} finding_states files, median of {REPEATS} connects")
    print(f"connect, every column in the files:  {report['connect_every_column_s']:.3f} s")
    print(f"connect, `kind` in no file:          {report['connect_column_in_no_file_s']:.3f} s")
    print(f"the DESCRIBE alone (one table):      {report['describe_s']:.3f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "views.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
