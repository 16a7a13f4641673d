"""The built-in gate scenarios run on a real PostgreSQL 18 server, and aggregate_sort spills only under a
small work_mem (a simple loop here; the gate's executor is jobs/gate/measure.py)."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobs.gate.scenario import Scenario, builtin_suite
from jobs.gate.workload import placeholder_numbers
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres


def run_scenario(conn: psycopg.Connection[Any], scenario: Scenario, rng: random.Random) -> list[int]:
    """init, before and benchmark (its measured part ``repeat`` times) once; the benchmark's row counts."""
    for name, value in scenario.settings:
        conn.execute(sql.SQL("SELECT set_config({}, {}, false)").format(name, value))
    if scenario.plan_cache_mode is not None:
        conn.execute("SELECT set_config('plan_cache_mode', $1, false)", (scenario.plan_cache_mode,))
    for text in scenario.init:
        conn.execute(text)
    params = scenario.draw(rng)
    for text in scenario.before:
        conn.execute(text, params[: max(placeholder_numbers(text), default=0)])
    counts = []
    for statement in scenario.benchmark:
        for _ in range(scenario.repeat if statement.measured else 1):
            cursor = conn.execute(statement.sql, params[: statement.placeholder_count])
        counts.append(cursor.rowcount)
    conn.execute("RESET ALL")
    return counts


def explain_analyze(conn: psycopg.Connection[Any], statement: str) -> dict[str, Any]:
    row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement).fetchone()
    assert row is not None
    raw = row[0]
    document = raw if isinstance(raw, list) else json.loads(raw)
    return document[0]  # type: ignore[no-any-return]


def temp_written(node: dict[str, Any]) -> int:
    return int(node.get("Temp Written Blocks", 0)) + sum(temp_written(n) for n in node.get("Plans", []))


def test_builtin_scenarios_run_on_postgres(fleet_factory: FleetFactory) -> None:
    fleet = fleet_factory(["scenarios"])
    suite = builtin_suite()
    with psycopg.connect(fleet.servers[0].dsn, autocommit=True, cursor_factory=psycopg.RawCursor) as conn:
        started = time.perf_counter()
        for text in suite.shared:
            conn.execute(text)
        first_shared = time.perf_counter() - started
        for text in suite.shared:  # idempotent: a second database visit fills nothing twice
            conn.execute(text)
        assert first_shared < 10.0  # < 3 s on an idle machine; generous for a loaded CI host
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM radar_gate_orders), (SELECT count(*) FROM radar_gate_customers)"
        ).fetchone()
        assert counts == (200_000, 10_000)
        rng = random.Random(20261201)
        rows = {scenario.name: run_scenario(conn, scenario, rng) for scenario in suite.scenarios}
        assert rows["point_lookup"] == [1]
        assert rows["range_scan"] == [1]
        assert rows["join"] == [400]
        assert rows["aggregate_sort"] == [100]
        assert rows["write_burst"][1] == 2000  # the INSERT of one execution (repeat 1)
        # before() resets the table: a second measurement starts from the same state
        run_scenario(conn, next(s for s in suite.scenarios if s.name == "write_burst"), rng)
        events = conn.execute("SELECT count(*), max(id) FROM radar_gate_events").fetchone()
        assert events == (2000, 2000)


def test_aggregate_sort_spills_only_under_a_small_work_mem(fleet_factory: FleetFactory) -> None:
    fleet = fleet_factory(["spill"])
    suite = builtin_suite(["aggregate_sort"])
    (scenario,) = suite.scenarios
    (statement,) = scenario.benchmark
    with psycopg.connect(fleet.servers[0].dsn, autocommit=True) as conn:
        for text in suite.shared:
            conn.execute(text)
        for name, value in scenario.settings:
            conn.execute(sql.SQL("SELECT set_config({}, {}, false)").format(name, value))
        conn.execute("SET work_mem = '64kB'")
        small = explain_analyze(conn, statement.sql)
        conn.execute("RESET work_mem")  # the server default, 4MB
        default = explain_analyze(conn, statement.sql)
        conn.execute("SET work_mem = '64MB'")
        large = explain_analyze(conn, statement.sql)
    assert temp_written(small["Plan"]) >= 8, small  # at least blocks_min_increase
    assert temp_written(default["Plan"]) == 0, default
    assert temp_written(large["Plan"]) == 0, large
