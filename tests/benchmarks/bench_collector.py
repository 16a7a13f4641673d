"""Snapshot cost on one real server holding 5,000 distinct statements.

Two strategies, measured in the same run on the same server:
  texts-for-all   every snapshot fetches every query text (what a naive collector does: showtext := true),
  texts-for-new   texts only for queryids the lake has not seen (the collector's strategy).
Reported per strategy: wall time of the whole snapshot, server-side time of its queries, bytes written.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import psycopg
from psycopg.types.numeric import Int4

from jobs.collect.collector import snapshot_fleet
from jobs.collect.fleet import FleetConfig
from jobs.local.embedded import EmbeddedFleet
from tests.benchmarks.common import fresh_bench_folder

TABLES = 50
COLUMNS = 100  # 50 tables x 100 columns = 5,000 distinct statements
ROUNDS = 5
RESULTS = Path(".bench/results")


def load_statements(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET pg_stat_statements.track = 'none'")
        for t in range(TABLES):
            cols = ", ".join(f"c{j} int" for j in range(COLUMNS))
            conn.execute(f"DROP TABLE IF EXISTS bench_t{t}")
            conn.execute(f"CREATE TABLE bench_t{t} (id int primary key, {cols})")
        conn.execute("SELECT pg_stat_statements_reset()")
        conn.execute("RESET pg_stat_statements.track")
        for t in range(TABLES):
            for j in range(COLUMNS):
                conn.execute(f"SELECT c{j} FROM bench_t{t} WHERE id = %s", [Int4(j)])
        return conn.execute("SELECT count(*) FROM pg_stat_statements").fetchone()[0]  # type: ignore[index]


def measure(fleet: FleetConfig, lake_root: Path, fresh_lake_each_time: bool) -> list[dict[str, float]]:
    out = []
    shutil.rmtree(lake_root, ignore_errors=True)
    for _ in range(ROUNDS + 1):
        if fresh_lake_each_time:
            shutil.rmtree(lake_root, ignore_errors=True)
        started = time.perf_counter()
        result = snapshot_fleet(fleet, lake_root)
        wall = (time.perf_counter() - started) * 1000
        one = result.results[0]
        assert one.status == "ok", one.error
        out.append(
            {
                "wall_ms": wall,
                "server_ms": one.server_ms,
                "bytes": float(one.bytes_written),
                "new_texts": float(one.new_texts),
                "statements": float(one.statement_rows),
            }
        )
    return out[1:]  # the first incremental round is the one that fetches every text: reported apart


def main() -> None:
    base = fresh_bench_folder("collector")
    fleet = EmbeddedFleet.create(base / "fleet", ["bench"])
    try:
        distinct = load_statements(fleet.servers[0].dsn)
        config = FleetConfig.from_embedded(fleet)
        first = snapshot_fleet(config, base / "lake-first").results[0]
        naive = measure(config, base / "lake-naive", fresh_lake_each_time=True)
        incremental = measure(config, base / "lake-incremental", fresh_lake_each_time=False)
    finally:
        fleet.destroy()

    def median(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    report = {
        "distinct_statements": distinct,
        "rounds": ROUNDS,
        "first_snapshot": {
            "wall_ms": first.wall_ms,
            "server_ms": first.server_ms,
            "bytes": first.bytes_written,
        },
        "texts_for_all": {k: median(naive, k) for k in naive[0]},
        "texts_for_new": {k: median(incremental, k) for k in incremental[0]},
    }
    report["ratio_wall_all_over_new"] = (
        report["texts_for_all"]["wall_ms"] / report["texts_for_new"]["wall_ms"]
    )
    report["ratio_server_all_over_new"] = (
        report["texts_for_all"]["server_ms"] / report["texts_for_new"]["server_ms"]
    )
    report["ratio_bytes_all_over_new"] = report["texts_for_all"]["bytes"] / report["texts_for_new"]["bytes"]
    print(f"one instance, {distinct} rows in pg_stat_statements, median of {ROUNDS} snapshots")
    print(f"{'strategy':<16}{'wall ms':>10}{'server ms':>11}{'bytes':>10}{'texts':>8}")
    for name in ("texts_for_all", "texts_for_new"):
        r = report[name]
        print(
            f"{name:<16}{r['wall_ms']:>10.1f}{r['server_ms']:>11.1f}{r['bytes']:>10.0f}{r['new_texts']:>8.0f}"
        )
    print(
        f"texts-for-all / texts-for-new: wall {report['ratio_wall_all_over_new']:.2f}x, "
        f"server {report['ratio_server_all_over_new']:.2f}x, bytes {report['ratio_bytes_all_over_new']:.2f}x"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "collector.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
