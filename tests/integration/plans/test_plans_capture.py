"""Plan capture on a real PostgreSQL 18 server: generic plans, safety, pg_store_plans gating and reader,
and an Index Scan → Seq Scan diff after an index drop."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.lake.io import scan_table
from jobs.local.embedded import EmbeddedFleet, EmbeddedServer
from jobs.plans import capture as capture_module
from jobs.plans.capture import capture_plans, select_plan_candidates, write_plan_snapshots
from jobs.plans.config import PlanCaptureConfig
from jobs.plans.diff import plan_diffs_for_regressions
from jobs.plans.safety import open_capture_session
from jobs.plans.store_plans import read_store_plans
from tests.conftest import FleetFactory
from tests.support.lakes import detected_regression

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server(fleet_factory: FleetFactory) -> EmbeddedServer:
    fleet: EmbeddedFleet = fleet_factory(["plans"], {"pg_stat_statements.track": "'all'"})
    srv = fleet.server("plans")
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric)")
        conn.execute(
            "INSERT INTO orders SELECT g, g % 5000, g FROM generate_series(1, 50000) g;"
            "CREATE INDEX orders_customer_idx ON orders (customer_id); ANALYZE orders"
        )
    return srv


def statements_frame(conn: psycopg.Connection[Any]) -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = conn.execute(
        "SELECT queryid, dbid::bigint, userid::bigint, total_exec_time, query FROM pg_stat_statements"
    ).fetchall()
    frame = pl.DataFrame(rows, schema=["queryid", "dbid", "userid", "total_exec_time", "query"], orient="row")
    return frame.drop("query"), frame.select("queryid", "query")


def candidates_for(conn: psycopg.Connection[Any], needle: str) -> pl.DataFrame:
    statements, texts = statements_frame(conn)
    picked = select_plan_candidates(statements, texts)
    return picked.filter(pl.col("query").str.contains(needle, literal=True))


def test_generic_plan_for_normalized_query_and_failures_recorded(server: EmbeddedServer) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SELECT count(*), sum(amount) FROM orders WHERE customer_id = %s", (Int4(42),))
        conn.execute("SELECT now() - interval '1 day' FROM orders WHERE id = %s", (Int4(1),))
        conn.execute("VACUUM orders")
        statements, texts = statements_frame(conn)
    candidates = select_plan_candidates(statements, texts)
    texts_by_id = dict(zip(candidates["queryid"], candidates["query"], strict=True))
    assert any("customer_id = $1" in t for t in texts_by_id.values()), "normalized text from the server"
    result = capture_plans(server.dsn, "plans", candidates, datetime.now(UTC))
    log = result.log.filter(pl.col("source") == "generic_explain")
    by_text = {texts_by_id[q]: row for q, row in zip(log["queryid"], log.to_dicts(), strict=True)}
    orders = next(r for t, r in by_text.items() if "customer_id = $1" in t)
    assert orders["status"] == "captured"
    plan = result.plans.filter(pl.col("queryid") == orders["queryid"]).row(0, named=True)
    assert plan["is_generic"] and plan["source"] == "generic_explain"
    assert "orders_customer_idx" in plan["indexes"] and plan["total_cost"] > 0
    interval = next(r for t, r in by_text.items() if "interval $" in t)
    assert interval["status"] == "failed" and "syntax error" in interval["reason"]
    vacuum = next(r for t, r in by_text.items() if t.lower().startswith("vacuum"))
    assert vacuum["status"] == "refused" and "VacuumStmt" in vacuum["reason"]
    store = result.log.filter(pl.col("source") == "pg_store_plans")
    assert store.height == candidates.height, "pg_store_plans was tried first for every candidate"
    assert set(store["status"]) == {"untrusted"} and "not installed" in store["reason"][0]


def test_capture_adds_no_pg_stat_statements_rows_under_track_all(server: EmbeddedServer) -> None:
    count_sql = "SELECT count(*) FROM pg_stat_statements"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
        for customer in range(3):
            conn.execute("SELECT sum(amount) FROM orders WHERE customer_id = %s", (Int4(customer),))
        statements, texts = statements_frame(conn)
        candidates = select_plan_candidates(statements, texts)
        conn.execute(count_sql)
        before = conn.execute(count_sql).fetchone()
        assert conn.execute(count_sql).fetchone() == before, "counting twice adds nothing"
        result = capture_plans(server.dsn, "plans", candidates, datetime.now(UTC))
        generic = result.log.filter(pl.col("source") == "generic_explain")
        statuses = dict(zip(candidates["query"], generic["status"], strict=True))
        assert statuses["SELECT sum(amount) FROM orders WHERE customer_id = $1"] == "captured"
        # Planned through the helper as radar_explain, which may not run the reset function.
        reset = generic.filter(pl.col("reason").str.contains("pg_stat_statements_reset", literal=True))
        assert reset["status"].to_list() == ["failed"] and "permission denied" in reset["reason"][0]
        after = conn.execute(count_sql).fetchone()
        explains = conn.execute(
            "SELECT count(*) FROM pg_stat_statements WHERE query ILIKE '%%EXPLAIN%%' "
            "OR query ILIKE '%%pg_database%%' OR query ILIKE '%%pg_store_plans%%'"
        ).fetchone()
    assert after == before, "the capture session must not add pg_stat_statements rows"
    assert explains == (0,)


def test_capture_session_is_read_only_with_timeout(server: EmbeddedServer) -> None:
    config = PlanCaptureConfig(statement_timeout_ms=1234, lock_timeout_ms=55)
    with open_capture_session(server.dsn, config) as conn:
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("55ms",)
        assert conn.execute("SHOW pg_stat_statements.track").fetchone() == ("none",)


def test_multi_statement_and_non_explainable_texts_refused_and_not_executed(server: EmbeddedServer) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE victim (id int)")
        dbid = conn.execute(
            "SELECT oid::bigint FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    texts = [
        "SELECT 1; DROP TABLE victim",
        "DROP TABLE victim",
        "SELECT 1 /* ; */ ; DROP TABLE victim;",
        "EXPLAIN ANALYZE DELETE FROM victim",
    ]
    candidates = pl.DataFrame(
        {"queryid": list(range(-4, 0)), "dbid": [dbid[0]] * 4, "userid": [10] * 4, "query": texts}
    )
    result = capture_plans(server.dsn, "plans", candidates, datetime.now(UTC))
    generic = result.log.filter(pl.col("source") == "generic_explain")
    assert generic["status"].to_list() == ["refused"] * 4
    assert "2 statements" in generic["reason"][0]
    assert result.plans.is_empty()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('victim') IS NOT NULL").fetchone() == (True,)


def test_server_refuses_two_statements_even_past_the_parser_check(server: EmbeddedServer) -> None:
    """The second layer: the extended-protocol Parse refuses a two-command text before anything runs."""
    from jobs.plans.generic import ExplainFailed, explain_generic

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS victim2 (id int)")
    with (
        open_capture_session(server.dsn, PlanCaptureConfig()) as conn,
        pytest.raises(ExplainFailed, match="multiple commands"),
    ):
        explain_generic(conn, "SELECT 1; DROP TABLE victim2")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('victim2') IS NOT NULL").fetchone() == (True,)


def test_index_drop_gives_index_scan_to_seq_scan_diff(server: EmbeddedServer, lake_root: Path) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int, sku int)")
        conn.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 20000) g")
        conn.execute("CREATE INDEX items_sku_idx ON items (sku); ANALYZE items")
        conn.execute("SELECT id FROM items WHERE sku = %s", (Int4(7),))
        candidates = candidates_for(conn, "FROM items WHERE sku")
    assert candidates.height == 1
    t0 = datetime.now(UTC)
    first = capture_plans(server.dsn, "plans", candidates, t0)
    write_plan_snapshots(lake_root, "plans", t0, first)
    again = write_plan_snapshots(lake_root, "plans", t0 + timedelta(seconds=30), first)
    assert again.written_rows == 0, "an unchanged shape is not written again"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX items_sku_idx")
    t1 = t0 + timedelta(minutes=1)
    second = capture_plans(server.dsn, "plans", candidates, t1)
    assert write_plan_snapshots(lake_root, "plans", t1, second).written_rows == 1
    snapshots = scan_table(lake_root, "plan_snapshots").collect()
    assert snapshots.height == 2 and set(snapshots["root_node"]) == {"Index Scan", "Seq Scan"}
    regressions = detected_regression(
        t0 + timedelta(seconds=30),
        queryid=candidates["queryid"][0],
        instance="plans",
        query=candidates["query"][0],
    )
    diff = plan_diffs_for_regressions(regressions, snapshots).row(0, named=True)
    assert diff["diff_status"] == "changed"
    summary = diff["plan_diff_summary"]
    assert "Index Scan using items_sku_idx on items" in summary and "Seq Scan on items" in summary
    assert "-items_sku_idx" in summary and "generic plan" in summary


def test_unsupported_below_pg16_logged_once(server: EmbeddedServer, caplog: pytest.LogCaptureFixture) -> None:
    candidates = pl.DataFrame({"queryid": [1], "dbid": [None], "userid": [None], "query": ["select 1"]})
    config = PlanCaptureConfig(generic_plan_min_server_version_num=990000)  # pretend the server is too old
    capture_module._UNSUPPORTED_LOGGED.discard("old")
    with caplog.at_level(logging.INFO, logger="jobs.plans.capture"):
        for _ in range(2):
            result = capture_plans(server.dsn, "old", candidates, datetime.now(UTC), config)
            assert result.log.filter(pl.col("source") == "generic_explain")["status"].to_list() == [
                "unsupported"
            ]
    assert sum("unsupported" in r.getMessage() for r in caplog.records) == 1


def test_store_plans_reader_against_fixture_view(server: EmbeddedServer) -> None:
    """pg_store_plans is not installable here: a fixture view with its documented 1.9 columns stands in."""
    plan_json = '{"Plan": {"Node Type": "Index Scan", "Relation Name": "orders", "Index Name": "x_idx"}}'
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS radar_fixture")
        conn.execute(
            "CREATE OR REPLACE VIEW radar_fixture.pg_store_plans AS SELECT * FROM (VALUES "
            "(10::oid, 5::oid, 77::bigint, 1::bigint, 'Seq Scan on orders'::text, 3::bigint, 1.0::float8,"
            " now() - interval '1 hour', now() - interval '1 hour'),"
            f"(10::oid, 5::oid, 77::bigint, 2::bigint, '{plan_json}'::text, 9::bigint, 2.0::float8,"
            " now() - interval '1 hour', now())"
            ") AS t(userid, dbid, queryid, planid, plan, calls, total_time, first_call, last_call)"
        )
        frame = read_store_plans(conn, [77, 78], relation="radar_fixture.pg_store_plans")
        assert frame.height == 1, "one plan per (dbid, queryid): the most recently used"
        assert frame["planid"][0] == 2 and frame["plan"][0] == plan_json
        with pytest.raises(psycopg.errors.UndefinedTable):
            read_store_plans(conn, [77], relation="pg_store_plans")


def test_capture_prefers_store_plans_fixture_and_falls_back_on_unparseable_plan(
    server: EmbeddedServer,
) -> None:
    """Through the facade: a JSON plan from the fixture answers; a text-format plan falls back to EXPLAIN."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SELECT id FROM orders WHERE id = %s", (Int4(1),))
        conn.execute("SELECT amount FROM orders WHERE id = %s", (Int4(1),))
        statements, texts = statements_frame(conn)
        candidates = select_plan_candidates(statements, texts).filter(
            pl.col("query").str.contains("FROM orders WHERE id = $1", literal=True)
        )
        assert candidates.height == 2
        (json_q, json_db), (text_q, text_db) = candidates.select("queryid", "dbid").rows()
        plan_json = '{"Plan": {"Node Type": "Index Only Scan", "Relation Name": "orders", "Index Name": "p"}}'
        conn.execute("CREATE SCHEMA IF NOT EXISTS radar_fixture")
        conn.execute(
            "CREATE OR REPLACE VIEW radar_fixture.pg_store_plans_facade AS SELECT * FROM (VALUES "
            f"(10::oid, {json_db}::oid, {json_q}::bigint, 1::bigint, '{plan_json}'::text,"
            " 1::bigint, 1.0::float8, now(), now()),"
            f"(10::oid, {text_db}::oid, {text_q}::bigint, 2::bigint,"
            " 'Index Scan using orders_pkey on orders', 1::bigint, 1.0::float8, now(), now())"
            ") AS t(userid, dbid, queryid, planid, plan, calls, total_time, first_call, last_call)"
        )
    config = PlanCaptureConfig(
        store_plans_relation="radar_fixture.pg_store_plans_facade", store_plans_assume_trusted=True
    )
    result = capture_plans(server.dsn, "plans", candidates, datetime.now(UTC), config)
    answered = dict(zip(result.plans["queryid"], result.plans["source"], strict=True))
    assert answered == {json_q: "pg_store_plans", text_q: "generic_explain"}
    stored = result.plans.filter(pl.col("source") == "pg_store_plans").row(0, named=True)
    assert stored["planid"] == 1 and not stored["is_generic"] and stored["root_node"] == "Index Only Scan"
    failed = result.log.filter((pl.col("queryid") == text_q) & (pl.col("source") == "pg_store_plans"))
    assert failed["status"].to_list() == ["failed"] and "plan_format must be json" in failed["reason"][0]


def test_login_without_helper_access_is_refused_with_a_clear_reason(server: EmbeddedServer) -> None:
    """A plain login (no pg_monitor, no EXECUTE on the helper) connects with no refused startup option
    (it used to fail with FATAL for pg_stat_statements.track); its generic plans are refused, saying why."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS radar_plain")
        conn.execute("CREATE ROLE radar_plain LOGIN")
    candidates = pl.DataFrame(
        {"queryid": [1, 2], "dbid": [None, None], "userid": [None, None], "query": ["select 1"] * 2}
    )
    result = capture_plans(server.dsn_for(user="radar_plain"), "plans", candidates, datetime.now(UTC))
    generic = result.log.filter(pl.col("source") == "generic_explain")
    assert result.plans.is_empty() and generic["status"].to_list() == ["refused", "refused"]
    reason = generic["reason"][0]
    assert "radar_plain may not EXECUTE radar.explain_generic" in reason and "radar setup-sql" in reason
    assert result.problems == (reason,), "the instance-level problem is reported once"


def test_a_dropped_then_restored_primary_key_diffs_the_drop(server: EmbeddedServer, lake_root: Path) -> None:
    """Issue 21 on a real server: the primary key is dropped (captured in the change point's cycle), then
    restored 8 minutes later (captured again: A → B → A is three rows). The finding's diff names the drop,
    Index Scan → Seq Scan, and says the plan returned later; it once read Seq Scan → Index Scan."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (aid int PRIMARY KEY, abalance int)")
        conn.execute("INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 20000) g; ANALYZE accounts")
        conn.execute("SELECT abalance FROM accounts WHERE aid = %s", (Int4(7),))
        candidates = candidates_for(conn, "FROM accounts WHERE aid")
    assert candidates.height == 1
    t0 = datetime(2026, 11, 29, 21, 18, tzinfo=UTC)
    drop_at, restore_at = t0 + timedelta(minutes=10), t0 + timedelta(minutes=18)
    write_plan_snapshots(lake_root, "plans", t0, capture_plans(server.dsn, "plans", candidates, t0))
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE accounts DROP CONSTRAINT accounts_pkey")
    dropped = capture_plans(server.dsn, "plans", candidates, drop_at)
    assert write_plan_snapshots(lake_root, "plans", drop_at, dropped).written_rows == 1
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE accounts ADD PRIMARY KEY (aid)")
    restored = capture_plans(server.dsn, "plans", candidates, restore_at)
    assert write_plan_snapshots(lake_root, "plans", restore_at, restored).written_rows == 1
    snapshots = scan_table(lake_root, "plan_snapshots").collect().sort("captured_at")
    assert snapshots["root_node"].to_list() == ["Index Scan", "Seq Scan", "Index Scan"]
    regressions = detected_regression(
        drop_at, queryid=candidates["queryid"][0], instance="plans", query=candidates["query"][0]
    )
    diff = plan_diffs_for_regressions(regressions, snapshots).row(0, named=True)
    summary = diff["plan_diff_summary"]
    assert (diff["before_captured_at"], diff["after_captured_at"]) == (t0, drop_at), summary
    assert summary.startswith(
        "Plan changed: Index Scan using accounts_pkey on accounts → Seq Scan on accounts"
    ), summary
    assert "indexes -accounts_pkey" in summary.lower()
    assert "Later, at 2026-11-29 21:36:00" in summary and "the one before the change again" in summary
    assert json.loads(diff["plan_diff"])["latest_plan"]["indexes_added"] == ["accounts_pkey"]


def test_a_grown_table_stores_the_same_shape_again_with_its_new_cost(
    server: EmbeddedServer, lake_root: Path
) -> None:
    """The table grows ×20 and is analysed: same Seq Scan shape, estimated cost ×20: stored again by the
    default [plans] cost_change_ratio (2.0), not with the rule off (0)."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id int, kind int)")
        conn.execute("INSERT INTO events SELECT g, g % 7 FROM generate_series(1, 5000) g; ANALYZE events")
        conn.execute("SELECT count(*) FROM events WHERE kind = %s", (Int4(3),))
        candidates = candidates_for(conn, "FROM events WHERE kind")
    assert candidates.height == 1
    t0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    first = capture_plans(server.dsn, "plans", candidates, t0)
    assert write_plan_snapshots(lake_root, "plans", t0, first).written_rows == 1
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO events SELECT g, g % 7 FROM generate_series(5001, 100000) g; ANALYZE events"
        )
    t1 = t0 + timedelta(minutes=1)
    grown = capture_plans(server.dsn, "plans", candidates, t1)
    off = PlanCaptureConfig(cost_change_ratio=0)
    assert write_plan_snapshots(lake_root, "plans", t1, grown, off).written_rows == 0, "shape only: nothing"
    assert write_plan_snapshots(lake_root, "plans", t1, grown).written_rows == 1
    stored = scan_table(lake_root, "plan_snapshots").collect().sort("captured_at")
    assert stored["shape_hash"].n_unique() == 1 and stored.height == 2
    low, high = stored["total_cost"].to_list()
    assert high > 10 * low
