"""Table statistics with each snapshot, on a real PostgreSQL 18 server: pg_stat_user_tables of every
database the snapshot saw lands in table_stats_snapshots; a database that refuses is noted, not fatal."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.collect.fleet import CollectorConfig, FleetConfig
from jobs.collect.table_stats import choose_databases, read_table_stats, table_stats_frame
from jobs.lake.io import scan_table
from jobs.local.embedded import EmbeddedServer
from jobs.pipeline.collection import run_cycle
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres


def run_in(server: EmbeddedServer, dbname: str, *statements: str) -> None:
    with psycopg.connect(server.dsn_for(dbname), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def test_analyze_appears_in_the_lake_and_a_refusing_database_is_noted(
    fleet_factory: FleetFactory, lake_root: Path
) -> None:
    fleet = fleet_factory(["ts"])
    server = fleet.server("ts")
    run_in(server, "postgres", "CREATE DATABASE shop", "CREATE DATABASE locked")
    run_in(
        server,
        "shop",
        "CREATE TABLE orders (id int, customer int) WITH (autovacuum_enabled = off)",
        "INSERT INTO orders SELECT g, g % 100 FROM generate_series(1, 5000) g",
        "SELECT count(*) FROM orders",
    )
    run_in(server, "locked", "CREATE TABLE secret (x int)", "SELECT count(*) FROM secret")
    # A copy of shop in which no statement ever ran: pg_stat_statements never saw it.
    run_in(server, "postgres", "CREATE DATABASE unseen TEMPLATE shop")
    run_in(server, "postgres", "REVOKE CONNECT ON DATABASE locked FROM PUBLIC")
    config = FleetConfig.from_embedded(fleet)

    before = run_cycle(config, lake_root)
    assert not before.snapshot.failed  # type: ignore[union-attr]
    problems = before.table_stats_problems["ts"]
    assert any(p.startswith("database locked:") and "permission denied" in p for p in problems), problems
    stats = scan_table(lake_root, "table_stats_snapshots").collect()
    orders = stats.filter((pl.col("dbname") == "shop") & (pl.col("relname") == "orders"))
    assert (
        orders.height == 1 and orders["last_analyze"][0] is None and orders["n_mod_since_analyze"][0] == 5000
    )
    assert "unseen" not in stats["dbname"].to_list(), "a database no statement ran in is not read"
    assert orders["captured_at"][0] == before.snapshot.ok[0].captured_at  # type: ignore[union-attr]

    run_in(server, "shop", "ANALYZE orders")
    time.sleep(0.6)  # the cumulative statistics reach other backends within stats_fetch_consistency's flush
    after = run_cycle(config, lake_root)
    stats = scan_table(lake_root, "table_stats_snapshots").collect()
    latest = stats.filter(
        (pl.col("relname") == "orders") & (pl.col("captured_at") == after.snapshot.ok[0].captured_at)  # type: ignore[union-attr]
    )
    assert latest.height == 1 and latest["last_analyze"][0] is not None
    assert latest["analyze_count"][0] == 1 and latest["n_mod_since_analyze"][0] == 0
    assert latest["instance"][0] == "ts" and latest["schemaname"][0] == "public"

    off = replace(config, collector=CollectorConfig(table_stats=False))
    quiet = run_cycle(off, lake_root)
    assert not quiet.table_stats_rows
    assert scan_table(lake_root, "table_stats_snapshots").collect().height == stats.height


def test_unreachable_instance_is_noted_and_the_database_bound_holds(fleet_factory: FleetFactory) -> None:
    fleet = fleet_factory(["tb"])
    server = fleet.server("tb")
    run_in(server, "postgres", "CREATE DATABASE a1", "CREATE DATABASE a2", "CREATE TABLE here (x int)")
    run_in(server, "a1", "CREATE TABLE t1 (x int)")
    run_in(server, "a2", "CREATE TABLE t2 (x int)")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        dbids = [
            r[0] for r in conn.execute("SELECT oid::bigint FROM pg_database WHERE datname IN ('a1','a2')")
        ]
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    bounded = read_table_stats(
        server.monitor_dsn, "tb", dbids, now, CollectorConfig(table_stats_max_databases=2)
    )
    assert bounded.databases_read == ["postgres", "a1"], "the connected database first, then by name"
    assert any("a2" in p and "table_stats_max_databases" in p for p in bounded.problems)
    assert set(bounded.frame["relname"].to_list()) == {"here", "t1"}
    dead = read_table_stats(
        "postgresql://radar_monitor@127.0.0.1:1/postgres", "tb", dbids, now, CollectorConfig()
    )
    assert dead.frame.is_empty() and dead.problems[0].startswith("instance tb: table statistics not read")


def test_choose_databases_and_frame_are_pure() -> None:
    listed = [
        {"datname": "postgres", "datallowconn": True},
        {"datname": "closed", "datallowconn": False},
        {"datname": "b", "datallowconn": True},
    ]
    names, problems = choose_databases(listed, 5)
    assert names == ["postgres", "b"] and problems[0].startswith("database closed: does not allow")
    from datetime import UTC, datetime, timedelta, timezone

    stamp = datetime(2026, 12, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    frame = table_stats_frame([{"dbname": "b", "relid": 1, "relname": "t", "last_analyze": stamp}], stamp)
    assert frame["last_analyze"][0] == stamp.astimezone(UTC) and frame["last_autoanalyze"][0] is None
