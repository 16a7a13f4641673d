"""Plan capture cost per cycle for 500 distinct queries, and auto_explain jsonlog ingest rate.

1. capture: one real server, 500 distinct normalized statements (10 tables x 10 select columns x 5 filter
   columns) in pg_stat_statements; ``select_plan_candidates`` + ``capture_plans`` (EXPLAIN GENERIC_PLAN,
   pg_store_plans absent) + ``write_plan_snapshots``, median of ROUNDS cycles. The first write stores 500
   shapes; later cycles store none (unchanged shapes are not rewritten).
2. ingest: a second server with auto_explain.log_min_duration = 0 (log_analyze on) under
   ``pgbench -S`` for PGBENCH_SECONDS; ``ingest_auto_explain_logs`` over the whole jsonlog into a fresh
   lake, MB/s of jsonlog read.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import psycopg
from psycopg.types.numeric import Int4

from jobs.local.embedded import EmbeddedFleet, postgres_bin_dir
from jobs.plans.auto_explain import ingest_auto_explain_logs
from jobs.plans.capture import capture_plans, select_plan_candidates, write_plan_snapshots
from tests.benchmarks.common import fresh_bench_folder

TABLES = 10
SELECT_COLUMNS = 10
FILTER_COLUMNS = 5  # 10 x 10 x 5 = 500 distinct statements
ROUNDS = 3
PGBENCH_SECONDS = 8
RESULTS = Path(".bench/results")


def load_statements(dsn: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET pg_stat_statements.track = 'none'")
        cols = ", ".join(f"c{j} int" for j in range(SELECT_COLUMNS))
        for t in range(TABLES):
            conn.execute(f"DROP TABLE IF EXISTS bench_p{t}")
            conn.execute(f"CREATE TABLE bench_p{t} (id int primary key, {cols})")
            values = ", ".join(["g"] * SELECT_COLUMNS)
            conn.execute(f"INSERT INTO bench_p{t} SELECT g, {values} FROM generate_series(1, 2000) g")
            conn.execute(f"CREATE INDEX ON bench_p{t} (c0); ANALYZE bench_p{t}")
        conn.execute("SELECT pg_stat_statements_reset()")
        conn.execute("RESET pg_stat_statements.track")
        for t in range(TABLES):
            for s in range(SELECT_COLUMNS):
                for f in range(FILTER_COLUMNS):
                    conn.execute(f"SELECT c{s} FROM bench_p{t} WHERE c{f} = %s", [Int4(s + f)])
        rows = conn.execute(
            "SELECT queryid, dbid::bigint, userid::bigint, total_exec_time, query FROM pg_stat_statements"
        ).fetchall()
    frame = pl.DataFrame(rows, schema=["queryid", "dbid", "userid", "total_exec_time", "query"], orient="row")
    return frame.drop("query"), frame.select("queryid", "query")


def bench_capture(fleet: EmbeddedFleet, lake_root: Path) -> dict[str, object]:
    dsn = fleet.servers[0].dsn
    statements, texts = load_statements(dsn)
    cycles = []
    for _ in range(ROUNDS):
        captured_at = datetime.now(UTC)
        started = time.perf_counter()
        candidates = select_plan_candidates(statements, texts, top_n=500)
        selected = time.perf_counter()
        result = capture_plans(dsn, "bench", candidates, captured_at)
        captured = time.perf_counter()
        write = write_plan_snapshots(lake_root, "bench", captured_at, result)
        written = time.perf_counter()
        statuses = result.log.filter(pl.col("source") == "generic_explain")["status"].value_counts()
        cycles.append(
            {
                "candidates": candidates.height,
                "captured": int((result.log["status"] == "captured").sum()),
                "statuses": dict(zip(statuses["status"], statuses["count"], strict=True)),
                "select_ms": (selected - started) * 1000,
                "capture_ms": (captured - selected) * 1000,
                "write_ms": (written - captured) * 1000,
                "cycle_ms": (written - started) * 1000,
                "rows_written": write.written_rows,
            }
        )
    later = cycles[1:] or cycles
    return {
        "candidates": cycles[0]["candidates"],
        "captured_per_cycle": cycles[0]["captured"],
        "statuses": cycles[0]["statuses"],
        "first_cycle": cycles[0],
        "median_cycle_ms": statistics.median(c["cycle_ms"] for c in cycles),
        "median_capture_ms": statistics.median(c["capture_ms"] for c in cycles),
        "median_ms_per_query": statistics.median(c["capture_ms"] / max(c["candidates"], 1) for c in cycles),
        "later_cycles_rows_written": [c["rows_written"] for c in later],
        "later_cycles_write_ms": statistics.median(c["write_ms"] for c in later),
    }


def bench_ingest(fleet: EmbeddedFleet, lake_root: Path) -> dict[str, object]:
    server = fleet.servers[0]
    pgbench = str(postgres_bin_dir() / "pgbench")
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(server.port), "PGUSER": "postgres"}
    subprocess.run([pgbench, "-i", "-s", "1", "-q", "postgres"], env=env, check=True, capture_output=True)
    for old in server.log_dir.glob("*.json"):
        old.write_bytes(b"")  # measure the workload's log only (the server keeps its file handle)
    subprocess.run(
        [pgbench, "-n", "-S", "-c", "2", "-j", "1", "-T", str(PGBENCH_SECONDS), "postgres"],
        env=env,
        check=True,
        capture_output=True,
    )
    time.sleep(1.0)  # let the logging collector flush
    size = sum(p.stat().st_size for p in server.log_dir.glob("*.json"))
    started = time.perf_counter()
    result = ingest_auto_explain_logs(server.log_dir, "bench", lake_root)
    seconds = time.perf_counter() - started
    return {
        "jsonlog_bytes": size,
        "bytes_read": result.bytes_read,
        "plan_records": result.plan_records,
        "snapshot_rows_written": result.snapshot_rows_written,
        "errors": len(result.errors),
        "seconds": seconds,
        "mb_per_s": result.bytes_read / 1e6 / seconds,
        "records_per_s": result.plan_records / seconds,
    }


def main() -> None:
    base = fresh_bench_folder("plans")
    capture_fleet = EmbeddedFleet.create(base / "fleet-capture", ["bench"])
    try:
        capture = bench_capture(capture_fleet, base / "lake-capture")
    finally:
        capture_fleet.destroy()
    ingest_fleet = EmbeddedFleet.create(
        base / "fleet-ingest", ["bench"], extra_settings={"auto_explain.log_min_duration": "0"}
    )
    try:
        ingest = bench_ingest(ingest_fleet, base / "lake-ingest")
    finally:
        ingest_fleet.destroy()
        shutil.rmtree(base, ignore_errors=True)
    report = {"capture": capture, "ingest": ingest, "rounds": ROUNDS, "pgbench_seconds": PGBENCH_SECONDS}
    print(f"plan capture, one PG18 server, {capture['candidates']} statements, median of {ROUNDS} cycles")
    print(f"{'measure':<40}{'value':>14}")
    rows = [
        ("captured per cycle (generic_explain)", f"{capture['captured_per_cycle']}"),
        ("cycle wall ms (select+capture+write)", f"{capture['median_cycle_ms']:.0f}"),
        ("capture ms", f"{capture['median_capture_ms']:.0f}"),
        ("ms per query", f"{capture['median_ms_per_query']:.2f}"),
        ("first write rows", f"{capture['first_cycle']['rows_written']}"),
        ("later cycles rows written", f"{capture['later_cycles_rows_written']}"),
        ("later cycles write ms", f"{capture['later_cycles_write_ms']:.0f}"),
        ("jsonlog MB (pgbench -S, every plan)", f"{ingest['jsonlog_bytes'] / 1e6:.1f}"),
        ("auto_explain plan records", f"{ingest['plan_records']}"),
        ("ingest seconds", f"{ingest['seconds']:.2f}"),
        ("ingest MB/s of jsonlog", f"{ingest['mb_per_s']:.1f}"),
        ("ingest plan records/s", f"{ingest['records_per_s']:.0f}"),
    ]
    for name, value in rows:
        print(f"{name:<40}{value:>14}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "plans.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
