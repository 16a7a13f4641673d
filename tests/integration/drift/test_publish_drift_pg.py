"""ANALYZE seen on a real PostgreSQL 18 server: two collection cycles around an ANALYZE give one new
row in table_analyses (view and pure twin), which a plan change shortly after is told about."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.collect.fleet import FleetConfig
from jobs.lake import views as duckdb_views
from jobs.lake.io import read_table
from jobs.pipeline.collection import run_cycle
from jobs.plans.analyses import analyses_before, analyze_note, table_analyses
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres


def test_an_analyze_between_two_cycles_is_one_analysis_named_before_the_change(
    fleet_factory: FleetFactory, lake_root: Path
) -> None:
    fleet = fleet_factory(["an"])
    server = fleet.server("an")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int, customer int) WITH (autovacuum_enabled = off)")
        conn.execute("INSERT INTO orders SELECT g, g % 100 FROM generate_series(1, 2000) g")
        conn.execute("SELECT count(*) FROM orders")
    config = FleetConfig.from_embedded(fleet)
    first = run_cycle(config, lake_root).snapshot.ok[0].captured_at  # type: ignore[union-attr]
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("ANALYZE orders")
    second = run_cycle(config, lake_root).snapshot.ok[0].captured_at  # type: ignore[union-attr]

    analyses = table_analyses(read_table(lake_root, "table_stats_snapshots"))
    orders = analyses.filter(pl.col("relname") == "orders")
    assert orders.height == 1 and orders["kind"][0] == "manual", orders
    analysed = orders["analysed_at"][0]
    assert first < analysed <= second and orders["first_seen_at"][0] == second
    view = (
        duckdb_views.connect(lake_root)
        .execute("select relname, kind, analysed_at from table_analyses where relname = 'orders'")
        .fetchall()
    )
    assert view == [("orders", "manual", analysed)]
    found = analyses_before(analyses, "an", ["orders"], second)
    assert [f["relname"] for f in found] == ["orders"]
    assert analyze_note(found, second).startswith("ANALYZE of public.orders at ")
