"""The cost of the activity read (activity_snapshots, issue 24) on the monitored server.

One embedded PostgreSQL 18 server with ``IDLE`` idle sessions and ``ACTIVE`` sessions running a statement
(pg_sleep), at two sizes. Measured, in the same run:

- the activity query alone on the server: ``EXPLAIN (ANALYZE)``'s execution time, and the round trip of
  the query over one connection (median of ``REPS`` executions);
- a whole instance snapshot (``snapshot_instance``: identity, pg_stat_statements, texts, the write) with
  ``[collector] activity`` on and off, alternated, ``REPS`` of each: the named peer of the read is the same
  snapshot without it. Medians of the collector's server-side milliseconds and of the wall time.

Prints a table and writes .bench/results/activity.json. ACTIVITY_BENCH_QUICK=1 for a smoke run.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path

import psycopg

from jobs.collect.collector import snapshot_instance
from jobs.collect.fleet import CollectorConfig, FleetConfig
from jobs.local.embedded import EmbeddedFleet
from jobs.sqlfiles import load_sql
from tests.benchmarks.common import fresh_bench_folder

QUICK = os.environ.get("ACTIVITY_BENCH_QUICK") == "1"
RESULTS = Path(__file__).resolve().parents[2] / ".bench" / "results" / "activity.json"
REPS = 5 if QUICK else 25
SIZES = ((20, 2), (200, 5))
"""(idle sessions, active sessions); the server gets max_connections 300."""


def _sleepers(dsn: str, count: int, stack: ExitStack) -> None:
    """``count`` sessions running pg_sleep until the block ends."""
    conns = [stack.enter_context(psycopg.connect(dsn, autocommit=True)) for _ in range(count)]
    for conn in conns:
        threading.Thread(target=lambda c=conn: _quiet(c, "select pg_sleep(600)"), daemon=True).start()
    stack.callback(lambda: [c.cancel_safe() for c in conns])


def _quiet(conn: psycopg.Connection, sql: str) -> None:
    with suppress(psycopg.Error):  # cancelled at the end
        conn.execute(sql)


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def measure(fleet: EmbeddedFleet, idle: int, active: int) -> dict[str, object]:
    server = fleet.server("bench")
    sql = load_sql("activity")
    with ExitStack() as stack:
        for _ in range(idle):
            stack.enter_context(psycopg.connect(server.dsn, autocommit=True))
        _sleepers(server.dsn, active, stack)
        time.sleep(0.5)
        with psycopg.connect(fleet.server("bench").monitor_dsn, autocommit=True) as conn:
            explain, trips = [], []
            for _ in range(REPS):
                plan = conn.execute("explain (analyze, format json) " + sql).fetchone()[0]  # type: ignore[index]
                explain.append(float(plan[0]["Execution Time"]))
                started = time.perf_counter()
                conn.execute(sql).fetchone()
                trips.append((time.perf_counter() - started) * 1000)
            seen = conn.execute(sql).fetchone()
        base = FleetConfig.from_embedded(fleet)
        instance = base.instances[0]
        lake = fresh_bench_folder("activity-lake")
        runs: dict[bool, dict[str, list[float]]] = {
            True: {"server": [], "wall": []},
            False: {"server": [], "wall": []},
        }
        for rep in range(2 * REPS):
            on = rep % 2 == 0
            result = snapshot_instance(lake, instance, CollectorConfig(activity=on, table_stats=False))
            assert result.status == "ok", result.error
            runs[on]["server"].append(result.server_ms or 0.0)
            runs[on]["wall"].append(result.wall_ms or 0.0)
    on, off = runs[True], runs[False]
    return {
        "idle_sessions": idle,
        "active_sessions": active,
        "backends_seen": seen[0] if seen else None,
        "activity_query_execution_ms": _median_ms(explain),
        "activity_query_round_trip_ms": _median_ms(trips),
        "snapshot_server_ms_with": _median_ms(on["server"]),
        "snapshot_server_ms_without": _median_ms(off["server"]),
        "snapshot_wall_ms_with": _median_ms(on["wall"]),
        "snapshot_wall_ms_without": _median_ms(off["wall"]),
        "server_ms_ratio": round(statistics.median(on["server"]) / statistics.median(off["server"]), 3),
        "wall_ms_ratio": round(statistics.median(on["wall"]) / statistics.median(off["wall"]), 3),
    }


def main() -> None:
    base = fresh_bench_folder("activity")
    fleet = EmbeddedFleet.create(base / "fleet", ["bench"], extra_settings={"max_connections": "300"})
    try:
        rows = [measure(fleet, idle, active) for idle, active in SIZES]
    finally:
        fleet.destroy()
    print(
        "| sessions (idle + active) | activity query: execution | round trip | snapshot server ms with / "
        "without | ratio | snapshot wall ms with / without | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['idle_sessions']} + {r['active_sessions']} | {r['activity_query_execution_ms']} ms | "
            f"{r['activity_query_round_trip_ms']} ms | {r['snapshot_server_ms_with']} / "
            f"{r['snapshot_server_ms_without']} | ×{r['server_ms_ratio']} | {r['snapshot_wall_ms_with']} / "
            f"{r['snapshot_wall_ms_without']} | ×{r['wall_ms_ratio']} |"
        )
    out = {"machine": platform.platform(), "cpus": os.cpu_count(), "quick": QUICK, "reps": REPS, "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
