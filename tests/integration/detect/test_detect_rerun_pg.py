"""`radar detect`, run again and again on one lake as cron runs it, on what a real server holds: DDL and
utility statements, `DO` blocks (equal normalized texts under two queryids), texts withheld by the
collector, queryids seen once, entries evicted from pg_stat_statements (`max` at its floor of 100), and
statements whose text the collector's role may not read.

Issue 21: every incremental run after the first crashed (``chain_queryids``: None > None) once a series had
moved, because the history read identified fake sample rows without interval times whose queryids shared
one text (two `DO $1`). Each run's JSON must parse and its exit code must be 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.cli.main import main
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

LOOKUP = "select count(*), sum(amount) from rerun_orders where customer_id = %s"


@pytest.fixture(scope="module")
def rerun_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    fleet = fleet_factory(["rerun"], {"pg_stat_statements.max": "100", "pg_stat_statements.track": "'all'"})
    with psycopg.connect(fleet.server("rerun").dsn, autocommit=True) as conn:
        conn.execute("create table rerun_orders (id bigserial, customer_id int not null, amount numeric)")
        conn.execute(
            "insert into rerun_orders (customer_id, amount)"
            " select g % 2000, g from generate_series(1, 100000) g"
        )
        conn.execute("analyze rerun_orders")
        # A role the collector's login may not read the statements of (pg_monitor reads all; the texts of
        # roles it cannot read come back as <insufficient privilege> with a null queryid).
        conn.execute("create role rerun_app login")
        conn.execute("grant select on rerun_orders to rerun_app")
    return fleet


def real_world_burst(dsn: str, cycle: int) -> None:
    """One cycle of what real servers run beside the application's statements."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # DDL and utility statements (stored verbatim, not normalized).
        conn.execute(f"create table if not exists rerun_scratch_{cycle % 3} (id int)")
        conn.execute(f"drop table if exists rerun_scratch_{(cycle + 1) % 3}")
        conn.execute("vacuum rerun_orders")
        # Two DO blocks: two queryids, one normalized text (`DO $1`).
        conn.execute("do $$ begin perform 1; end $$")
        conn.execute("do $$ begin perform pg_sleep(0); end $$")
        # A statement seen once in the lake's whole history.
        conn.execute(f"select {cycle} as seen_once_{cycle}")
        # Statements of another role.
        conn.execute("set role rerun_app")
        conn.execute("select count(*) from rerun_orders where id < %s", [Int4(cycle + 10)])
        conn.execute("reset role")
        if cycle % 4 == 1:
            # More distinct statements than pg_stat_statements keeps: entries are evicted (dealloc).
            # (Column aliases are not jumbled: the column counts tell these statements apart.)
            for k in range(1, 131):
                conn.execute("select " + ", ".join(["1"] * k))
        for k in range(40):
            conn.execute(LOOKUP, [Int4(k)])


def detect_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    capsys.readouterr()
    code = main([*args, "detect", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, (code, captured.err[-2000:])
    return json.loads(captured.out)


@pytest.mark.parametrize("query_text", ["normalized", "withheld"])
def test_incremental_detection_runs_again_and_again_on_real_server_data(
    rerun_fleet: EmbeddedFleet,
    lake_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    query_text: str,
) -> None:
    dsn = rerun_fleet.server("rerun").dsn
    with psycopg.connect(dsn, autocommit=True) as conn:  # each case drops it
        conn.execute("create index if not exists rerun_orders_customer on rerun_orders (customer_id)")
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(rerun_fleet.fleet_config_toml())
    config_file = tmp_path / "radar.toml"
    config_file.write_text(f'[collector]\nquery_text = "{query_text}"\n')
    common = ["--lake", str(lake_root), "--fleet-file", str(fleet_file), "--config", str(config_file)]

    def snapshot() -> None:
        capsys.readouterr()
        assert main([*common, "snapshot", "--format", "json"]) == 0, capsys.readouterr().err[-2000:]

    runs = 0
    for cycle in range(36):
        if cycle == 18:  # the lookup's index goes: its series moves, the incremental runs read its history
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("drop index rerun_orders_customer")
        real_world_burst(dsn, cycle)
        snapshot()
        if cycle >= 12 and cycle % 4 == 0:
            detect_json(capsys, *common)
            runs += 1
    assert runs == 6

    # The lake holds what the test is about.
    texts = lake.read_table(lake_root, QUERY_TEXTS)
    snapshot_runs = lake.read_table(lake_root, SNAPSHOT_RUNS)
    assert snapshot_runs["dealloc"].max() > 0, "no eviction happened"
    do_texts = texts.filter(pl.col("query").str.starts_with("DO") | pl.col("query").str.contains("withheld"))
    assert do_texts.height >= 2
    if query_text == "normalized":  # withheld markers hash the statement's own text
        shared = texts.group_by("query").agg(pl.col("queryid").n_unique().alias("n")).filter(pl.col("n") > 1)
        assert shared.height >= 1, "no two queryids share a stored text"

    # A last incremental run after everything, then a full one: both work, and the lookup's step is found.
    detect_json(capsys, *common)
    full = json.loads(_full_run(capsys, common))
    if query_text == "normalized":  # a withheld text is a marker: nothing to match the lookup by
        assert any("rerun_orders where customer_id" in str(f.get("query")) for f in full), full


def _full_run(capsys: pytest.CaptureFixture[str], common: list[str]) -> str:
    capsys.readouterr()
    code = main([*common, "detect", "--full", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    return captured.out
