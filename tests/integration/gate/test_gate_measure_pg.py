"""The scenario measurement edge (jobs/gate/measure.py) against real PostgreSQL 18 servers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.types.numeric import Int4

from jobs.gate.config import GateConfig, GateError
from jobs.gate.measure import CandidateFailure, StatementCounters, TargetSession
from jobs.gate.scenario import Scenario, ScenarioStatement, ScenarioSuite
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

SHARED = (
    "CREATE TABLE IF NOT EXISTS gate_m_orders (id int PRIMARY KEY, customer_id int NOT NULL, amount numeric)",
    "INSERT INTO gate_m_orders SELECT g, g % 2000, g * 0.5 FROM generate_series(1, 20000) g"
    " ON CONFLICT DO NOTHING",
    "CREATE INDEX IF NOT EXISTS gate_m_orders_customer ON gate_m_orders (customer_id)",
    "CREATE TABLE IF NOT EXISTS gate_m_big AS"
    " SELECT random() AS v, g AS id FROM generate_series(1, 300000) g",
    "CREATE TABLE IF NOT EXISTS gate_m_log (id int, pad text)",
    "CREATE TABLE IF NOT EXISTS gate_m_counter (id int PRIMARY KEY, n int)",
    "INSERT INTO gate_m_counter VALUES (1, 0) ON CONFLICT DO NOTHING",
    "ANALYZE",
)
BIG_SORT = "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY v) AS r FROM gate_m_big) s"


def stmt(sql: str, measured: bool = True, line: int | None = None) -> ScenarioStatement:
    head = sql.split()[0].upper()
    explainable = head in ("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE", "WITH")
    returns = head in ("SELECT", "VALUES", "TABLE", "WITH") or "RETURNING" in sql.upper()
    return ScenarioStatement(sql, measured, line, explainable, returns)


def scenario(name: str, *statements: ScenarioStatement, **options: Any) -> Scenario:
    return Scenario(name=name, benchmark=statements, source="tests/measure.sql", line=1, **options)


@pytest.fixture(scope="module")
def servers(fleet_factory: FleetFactory) -> dict[str, Any]:
    """Two servers with track_planning on; on the first also ``gate_m_other`` (no pg_stat_statements)."""
    fleet = fleet_factory(["m1", "m2"], {"pg_stat_statements.track_planning": "on"})
    one = fleet.server("m1")
    with psycopg.connect(one.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE gate_m_other")
    return {"one": one, "two": fleet.server("m2")}


@pytest.fixture(scope="module")
def base(servers: dict[str, Any]) -> Iterator[TargetSession]:
    session = TargetSession("baseline", servers["one"].dsn, GateConfig())
    session.run_shared(ScenarioSuite(scenarios=(), shared=SHARED))
    yield session
    session.close()


@pytest.fixture(scope="module")
def cand(servers: dict[str, Any], base: TargetSession) -> Iterator[TargetSession]:
    session = TargetSession("candidate", servers["one"].dsn, GateConfig())
    yield session
    session.close()


def measured_counters(
    session: TargetSession, sc: Scenario, params: tuple[object, ...], n: int
) -> StatementCounters:
    session.start_scenario(sc, params)
    before = session.counters(sc)
    assert before is not None, session.facts().statements_note
    for _ in range(n):
        session.execute(sc, params)
    after = session.counters(sc)
    session.end_scenario(sc)
    assert after is not None
    return after.minus(before)


def test_prepared_plans_once_with_a_generic_plan_unprepared_every_call(base: TargetSession) -> None:
    sql = "SELECT count(*), sum(amount) FROM gate_m_orders WHERE customer_id = $1"
    params = (Int4(7),)
    unprepared = measured_counters(base, scenario("unprepared", stmt(sql)), params, 10)
    assert (unprepared.calls, unprepared.plans) == (10, 10)
    generic = scenario("generic", stmt(sql), prepared=True, plan_cache_mode="force_generic_plan")
    delta = measured_counters(base, generic, params, 10)
    assert delta.calls == 10 and delta.plans <= 1  # one generic plan, reused
    custom = scenario("custom", stmt(sql), prepared=True, plan_cache_mode="force_custom_plan")
    assert measured_counters(base, custom, params, 10).plans == 10  # plan_cache_mode reached the server
    plan = base.plans["generic"][0]
    assert plan[0]["Query Identifier"] and plan[0]["Plan"]["Node Type"]
    with base.conn.cursor() as cur:
        assert cur.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"  # end_scenario reset it


def test_only_the_marked_part_is_timed(base: TargetSession) -> None:
    sc = scenario(
        "markers",
        stmt("SELECT pg_sleep(0.2)", measured=False),
        stmt("SELECT count(*) FROM gate_m_orders WHERE customer_id = $1"),
        stmt("SELECT pg_sleep(0.1)", measured=False),
        repeat=3,
    )
    params = (Int4(3),)
    base.start_scenario(sc, params)
    before = base.counters(sc)
    started = time.perf_counter()
    measured_ns = base.execute(sc, params)
    wall = time.perf_counter() - started
    after = base.counters(sc)
    base.end_scenario(sc)
    assert wall >= 0.3
    assert 0 < measured_ns < 0.1e9
    assert before is not None and after is not None
    assert after.minus(before).calls == 3  # repeat: the measured part three times, the sleeps once


def test_transactions_commit_and_a_failure_inside_rolls_back(
    base: TargetSession, cand: TargetSession
) -> None:
    sc = scenario(
        "tx",
        stmt("BEGIN", measured=False),
        stmt("UPDATE gate_m_counter SET n = n + 1 WHERE id = 1"),
        stmt("SELECT n FROM gate_m_counter WHERE id = 1"),
        stmt("COMMIT", measured=False),
    )
    read = "SELECT n FROM gate_m_counter WHERE id = 1"
    start = base.conn.execute(read).fetchone()[0]
    base.start_scenario(sc, ())
    base.execute(sc, ())
    base.execute(sc, ())
    base.end_scenario(sc)
    assert base.conn.execute(read).fetchone()[0] == start + 2
    failing = scenario(
        "tx_fails",
        stmt("BEGIN", measured=False),
        stmt("UPDATE gate_m_counter SET n = n + 100 WHERE id = 1"),
        stmt("SELECT 1 / (n - n) FROM gate_m_counter WHERE id = 1", line=42),
        stmt("COMMIT", measured=False),
    )
    cand.start_scenario(failing, ())
    with pytest.raises(CandidateFailure, match=r"tx_fails.*measure.sql:42.*candidate.*division by zero"):
        cand.execute(failing, ())
    assert cand.conn.info.transaction_status == TransactionStatus.IDLE
    cand.end_scenario(failing)
    assert cand.conn.execute(read).fetchone()[0] == start + 2  # the failed transaction was rolled back
    cand.start_scenario(sc, ())
    cand.execute(sc, ())  # the session keeps working
    cand.end_scenario(sc)
    assert cand.conn.execute(read).fetchone()[0] == start + 3


def test_baseline_failure_names_the_scenario_and_line(base: TargetSession) -> None:
    sc = scenario("broken", stmt("SELECT * FROM gate_m_missing", line=7))
    with pytest.raises(
        GateError, match=r"scenario 'broken' \(tests/measure.sql:7\).*baseline.*gate_m_missing"
    ):
        base.start_scenario(sc, ())
    base.end_scenario(sc)
    assert base.conn.execute("SELECT 1").fetchone()[0] == 1


def test_small_work_mem_spills_a_big_sort_and_memory_grows_with_work_mem(base: TargetSession) -> None:
    readings = {}
    for work_mem in ("64kB", "256MB"):
        sc = scenario(f"sort_{work_mem}", stmt(BIG_SORT), settings=(("work_mem", work_mem),))
        base.start_scenario(sc, ())
        before = base.counters(sc)
        base.execute(sc, ())
        after = base.counters(sc)
        assert base.conn.execute("SHOW work_mem").fetchone()[0] == work_mem
        base.memory_execution(sc, ())  # a backend that ran the statement before must read the same
        readings[work_mem] = (after.minus(before), base.memory_execution(sc, ()))  # type: ignore[union-attr]
        base.end_scenario(sc)
        assert base.conn.execute("SHOW work_mem").fetchone()[0] == "4MB"
    small, big = readings["64kB"], readings["256MB"]
    print({k: (c.temp_blocks_written, m) for k, (c, m) in readings.items()})
    assert small[0].temp_blocks_written > 0
    assert big[0].temp_blocks_written == 0
    assert small[1].context_bytes is not None and big[1].context_bytes is not None
    assert big[1].context_bytes > small[1].context_bytes + 5 * 2**20
    assert small[1].rss_bytes is not None and big[1].rss_bytes is not None
    assert big[1].rss_bytes > small[1].rss_bytes + 2**20


def test_wal_bytes_grow_for_an_insert(base: TargetSession) -> None:
    sc = scenario(
        "insert", stmt("INSERT INTO gate_m_log SELECT g, md5(g::text) FROM generate_series(1, $1) g")
    )
    delta = measured_counters(base, sc, (Int4(1000),), 2)
    assert delta.calls == 2
    assert delta.wal_bytes > 2 * 1000 * 50
    read = measured_counters(base, scenario("read", stmt("SELECT count(*) FROM gate_m_orders")), (), 2)
    assert read.wal_bytes == 0 and read.shared_blocks > 0


def test_facts_tell_servers_and_databases_apart(servers: dict[str, Any], base: TargetSession) -> None:
    config = GateConfig()
    other_db = TargetSession("candidate", servers["one"].dsn_for("gate_m_other"), config)
    other_server = TargetSession("calibration", servers["two"].dsn, config)
    try:
        facts = base.facts()
        assert facts.version_num >= 180000 and facts.version.startswith("PostgreSQL 18")
        assert facts.system_identifier is not None and facts.address.startswith("127.0.0.1:")
        assert dict(facts.settings)["work_mem"] == "4MB" and "io_method" in dict(facts.settings)
        assert facts.statements_note is None and facts.track_planning
        assert facts.memory_contexts and facts.local_proc
        assert facts.same_server(other_db.facts())
        assert not facts.same_server(other_server.facts())
        # No extension in gate_m_other: counters say None, the facts say why.
        note = other_db.facts().statements_note
        assert note is not None and "not installed" in note
        sc = scenario("no_pgss", stmt("SELECT 1"))
        other_db.start_scenario(sc, ())
        assert other_db.counters(sc) is None
    finally:
        other_db.close()
        other_server.close()


def test_probe_and_reconnect(base: TargetSession) -> None:
    seconds = base.probe()
    print("probe seconds", seconds)
    assert 0.005 < seconds < 10
    sc = scenario("reconnect", stmt("SELECT 1"), settings=(("work_mem", "1MB"),))
    base.start_scenario(sc, ())
    pid = base.conn.info.backend_pid
    base.reconnect()
    assert base.conn.info.backend_pid != pid
    assert base.conn.execute("SHOW work_mem").fetchone()[0] == "1MB"  # the scenario's settings again
    base.end_scenario(sc)


def test_missing_parameters_are_a_failure(base: TargetSession) -> None:
    sc = scenario("params", stmt("SELECT $1::int + $2::int", line=3))
    with pytest.raises(GateError, match=r"uses \$2 but 1 parameter"):
        base.start_scenario(sc, (Int4(1),))
    base.end_scenario(sc)


def test_connection_failure_is_a_gate_error() -> None:
    with pytest.raises(GateError, match="candidate: cannot connect") as info:
        TargetSession("candidate", "postgresql://u:s3cretpw@127.0.0.1:1/x", GateConfig(connect_timeout_s=2))
    assert "s3cretpw" not in str(info.value)


class PythonScenario:
    """The Python form: callables, mark("A") / mark("B") around the timed part."""

    name = "python_form"

    def __init__(self) -> None:
        self.inits = 0

    def init(self, conn: psycopg.Connection[Any]) -> None:
        self.inits += 1

    def before(self, conn: psycopg.Connection[Any], params: tuple[object, ...]) -> None:
        conn.execute("SELECT pg_sleep(0.1)")

    def benchmark(self, conn: psycopg.Connection[Any], params: tuple[object, ...], mark: Any) -> None:
        conn.execute("SELECT pg_sleep(0.1)")
        mark("A")
        conn.execute("SELECT $1::int", params)
        mark("B")


def test_python_form_times_between_its_marks(base: TargetSession) -> None:
    code = PythonScenario()
    sc = Scenario(name="python_form", params=(), python=code, source="ops/scenarios.py")
    base.start_scenario(sc, ())
    base.start_scenario(sc, ())
    assert code.inits == 1  # init once per target database
    base.before(sc, (Int4(1),))
    assert 0 < base.execute(sc, (Int4(1),)) < 0.05e9
    base.end_scenario(sc)


def test_parallel_workers_memory_is_counted(base: TargetSession) -> None:
    rss = {}
    for workers in ("0", "2"):
        settings = (
            ("max_parallel_workers_per_gather", workers), ("parallel_setup_cost", "0"),
            ("parallel_tuple_cost", "0"), ("min_parallel_table_scan_size", "0"),
        )  # fmt: skip
        sc = scenario(
            f"parallel_{workers}",
            # md5 per row (parallel safe) keeps the workers alive for tens of milliseconds: a bare
            # count(*) over 300k rows let them finish between two polls on a loaded host (CI, once).
            stmt("SELECT count(*), sum(v) FROM gate_m_big WHERE md5(id::text || v::text) <> ''"),
            settings=settings,
        )
        base.start_scenario(sc, ())
        assert ("Gather" in str(base.plans[sc.name])) is (workers == "2")
        # The largest of three readings: on a loaded CI host the 2 ms poller can miss short-lived workers
        # once (seen: +140 kB instead of the workers' megabytes).
        readings = [base.memory_execution(sc, ()) for _ in range(3)]
        base.end_scenario(sc)
        assert all(r.rss_bytes is not None for r in readings), [r.note for r in readings]
        assert all(r.worker_bytes is not None for r in readings), [r.note for r in readings]
        rss[workers] = max(float(r.worker_bytes or 0.0) for r in readings)
    print("workers' memory by workers", rss)
    assert rss["0"] == 0.0  # no worker ran
    assert rss["2"] > 2**20  # each worker's own memory is the query's too, measured apart (50% threshold)
