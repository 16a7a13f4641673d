"""The snapshot collector against real PostgreSQL 18 servers (and recorded column lists for 13-17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import psycopg
import pytest
from pglast import parse_sql
from pglast.visitors import Visitor
from psycopg.types.numeric import Int4

from jobs.collect.collector import STATEMENT_SQL_BY_VERSION, snapshot_fleet, statements_sql_for
from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.local.embedded import EmbeddedFleet
from jobs.schemas.collected import STATEMENT_COUNTERS, STATEMENT_SNAPSHOTS
from jobs.sqlfiles import load_sql

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED_COLUMNS = json.loads((FIXTURES / "pgss_columns.json").read_text())
ORDERS_SQL = "select count(*) from radar_orders where customer_id = %s"


def fleet_config(fleet: EmbeddedFleet, **collector: int) -> FleetConfig:
    return FleetConfig.from_embedded(fleet, CollectorConfig(**collector))


def statements(lake_root: Path) -> pl.DataFrame:
    return lake.scan_table(lake_root, STATEMENT_SNAPSHOTS).collect()


@pytest.fixture(scope="module")
def orders_fleet(pg_fleet: EmbeddedFleet) -> EmbeddedFleet:
    for server in pg_fleet.servers:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("drop table if exists radar_orders")
            conn.execute("create table radar_orders (id serial primary key, customer_id int, amount numeric)")
            conn.execute(
                "insert into radar_orders (customer_id, amount) "
                "select g % 100, g from generate_series(1, 2000) g"
            )
    return pg_fleet


def test_call_deltas_equal_the_calls_made(orders_fleet: EmbeddedFleet, lake_root: Path) -> None:
    config = fleet_config(orders_fleet)
    first = snapshot_fleet(config, lake_root)
    assert not first.failed
    made = {"alpha": 37, "beta": 11}
    for server in orders_fleet.servers:
        with psycopg.connect(server.dsn) as conn:
            for i in range(made[server.name]):
                conn.execute(ORDERS_SQL, [Int4(i % 100)])
    second = snapshot_fleet(config, lake_root)
    assert not second.failed
    texts = lake.scan_table(lake_root, "query_texts").collect()
    frame = statements(lake_root).join(
        texts.select("instance", "queryid", "query"), on=["instance", "queryid"]
    )
    orders = frame.filter(pl.col("query").str.contains("radar_orders where customer_id")).sort("captured_at")
    for name, calls in made.items():
        per_snapshot = orders.filter(pl.col("instance") == name)["calls"].to_list()
        before = per_snapshot[0] if len(per_snapshot) == 2 else 0
        assert per_snapshot[-1] - before == calls


def test_explain_rows_are_skipped_and_counted(orders_fleet: EmbeddedFleet, lake_root: Path) -> None:
    server = orders_fleet.server("alpha")
    with psycopg.connect(server.dsn) as conn:
        conn.execute("explain select * from radar_orders where id = 1")
        conn.execute("  EXPLAIN (costs off) select * from radar_orders where customer_id = 2")
    result = snapshot_fleet(fleet_config(orders_fleet), lake_root)
    alpha = next(r for r in result.results if r.instance == "alpha")
    assert alpha.explain_rows_dropped >= 2
    texts = lake.scan_table(lake_root, "query_texts").collect()
    explain_ids = texts.filter(pl.col("is_explain"))["queryid"].to_list()
    assert len(explain_ids) >= 2
    assert statements(lake_root).filter(pl.col("queryid").is_in(explain_ids)).height == 0
    runs = lake.scan_table(lake_root, "snapshot_runs").filter(pl.col("instance") == "alpha").collect()
    assert runs["explain_rows_dropped"].max() == alpha.explain_rows_dropped


def test_one_instance_down_does_not_fail_the_others(orders_fleet: EmbeddedFleet, lake_root: Path) -> None:
    config = fleet_config(orders_fleet)
    broken = InstanceConfig(name="gone", dsn="postgresql://radar:hunter2-secret@127.0.0.1:1/postgres")
    config = FleetConfig(instances=(*config.instances, broken), collector=config.collector)
    result = snapshot_fleet(config, lake_root)
    assert [r.instance for r in result.failed] == ["gone"]
    assert "instance gone" in (result.failed[0].error or "")
    assert "hunter2-secret" not in (result.failed[0].error or "")
    written = statements(lake_root)["instance"].unique().sort().to_list()
    assert written == ["alpha", "beta"]
    runs = lake.scan_table(lake_root, "snapshot_runs").collect()
    gone = runs.filter(pl.col("instance") == "gone")
    assert gone["status"].to_list() == ["failed"]
    assert not any("hunter2-secret" in str(v) for v in runs.to_dicts())


def test_extension_not_installed_is_reported_by_instance(
    orders_fleet: EmbeddedFleet, lake_root: Path
) -> None:
    server = orders_fleet.server("beta")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("drop database if exists no_pgss")
        conn.execute("create database no_pgss")
    config = FleetConfig(instances=(InstanceConfig(name="beta-nopgss", dsn=server.dsn_for("no_pgss")),))
    result = snapshot_fleet(config, lake_root)
    assert len(result.failed) == 1
    assert "instance beta-nopgss" in (result.failed[0].error or "")
    assert "not installed" in (result.failed[0].error or "")


def test_statement_timeout_bounds_the_read(orders_fleet: EmbeddedFleet, lake_root: Path) -> None:
    server = orders_fleet.server("alpha")
    locked = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        with psycopg.connect(server.dsn) as conn, conn.transaction():
            conn.execute("lock table pg_catalog.pg_extension in access exclusive mode")
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(10)
        config = FleetConfig(
            instances=(InstanceConfig(name="alpha", dsn=server.dsn),),
            collector=CollectorConfig(statement_timeout_ms=300),
        )
        result = snapshot_fleet(config, lake_root)
    finally:
        release.set()
        holder.join()
    assert len(result.failed) == 1
    assert "statement timeout" in (result.failed[0].error or "")
    assert result.failed[0].wall_ms < 10_000


def test_insufficient_privilege_rows_are_counted_and_reported(
    orders_fleet: EmbeddedFleet, lake_root: Path
) -> None:
    server = orders_fleet.server("alpha")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("drop role if exists radar_limited")
        conn.execute("create role radar_limited login")
        conn.execute("select count(*) from radar_orders")
    limited = FleetConfig(instances=(InstanceConfig(name="alpha", dsn=server.dsn_for(user="radar_limited")),))
    result = snapshot_fleet(limited, lake_root)
    assert not result.failed
    hidden = result.results[0].insufficient_privilege_rows
    assert hidden > 0
    assert "pg_read_all_stats" in (result.results[0].error or "")
    assert statements(lake_root)["queryid"].null_count() == 0
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("grant pg_read_all_stats to radar_limited")
    granted = snapshot_fleet(limited, lake_root)
    assert granted.results[0].insufficient_privilege_rows == 0


class _ColumnNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_ColumnRef(self, ancestors: object, node: object) -> None:
        self.names.add(node.fields[-1].sval)  # type: ignore[attr-defined]


def source_columns(sql: str) -> set[str]:
    visitor = _ColumnNames()
    visitor(parse_sql(sql))
    return visitor.names


@pytest.mark.parametrize("version", sorted(STATEMENT_SQL_BY_VERSION))
def test_column_mapping_reads_only_columns_the_version_has(version: str) -> None:
    recorded = set(RECORDED_COLUMNS[version])
    used = source_columns(statements_sql_for(version))
    assert used <= recorded, f"{version} reads columns it lacks: {used - recorded}"
    # Every counter the version has reaches a canonical column (renamed ones included).
    renamed = {"blk_read_time": "shared_blk_read_time", "blk_write_time": "shared_blk_write_time"}
    canonical_counters = {renamed.get(c, c) for c in recorded & used} & set(STATEMENT_COUNTERS)
    available = {renamed.get(c, c) for c in recorded} & set(STATEMENT_COUNTERS)
    assert canonical_counters == available


def test_older_versions_leave_missing_columns_null_not_zero() -> None:
    from jobs.collect.collector import statements_frame

    row = {"userid": 10, "dbid": 5, "queryid": 42, "calls": 3, "total_exec_time": 1.5}
    identity = {"captured_at": None, "system_identifier": 1, "postmaster_start": None}
    frame, _, _ = statements_frame([row], identity, None, set())
    assert frame["calls"].to_list() == [3]
    assert frame["wal_buffers_full"].to_list() == [None]
    assert frame["toplevel"].to_list() == [None]


def test_column_mapping_matches_the_real_pg18_server(orders_fleet: EmbeddedFleet) -> None:
    server = orders_fleet.server("alpha")
    with psycopg.connect(server.dsn) as conn:
        real = [
            r[0]
            for r in conn.execute(
                "select attname from pg_attribute where attrelid = 'pg_stat_statements'::regclass "
                "and attnum > 0 and not attisdropped order by attnum"
            ).fetchall()
        ]
        version = conn.execute(
            "select extversion from pg_extension where extname = 'pg_stat_statements'"
        ).fetchone()
        cursor = conn.execute(statements_sql_for("1.12"))
        names = [d.name for d in cursor.description or []]
    assert version == ("1.12",)
    assert real == RECORDED_COLUMNS["1.12"]
    assert set(names) <= set(STATEMENT_SNAPSHOTS.column_names)
    assert load_sql("statements_1_12") == statements_sql_for("1.12")


_WRITER = """
import sys, polars as pl, numpy as np
from pathlib import Path
from jobs.lake import io as lake
root = Path(sys.argv[1])
n = 3_000_000
rng = np.random.default_rng(0)
frame = pl.DataFrame({"queryid": np.arange(n), "calls": np.arange(n), "total_exec_time": rng.random(n)})
print("ready", flush=True)
while True:
    lake.write_table(root, "statement_snapshots", frame, {"instance": "a", "date": "2026-01-01"}, "big")
"""


def test_interrupted_write_leaves_no_partial_parquet_visible(lake_root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(lake_root)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    folder = lake_root / "statement_snapshots" / "instance=a" / "date=2026-01-01"
    # Kill it while a temp file is being written (a .partial exists), i.e. mid-write.
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(folder.glob("*.partial")):
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    visible = lake.table_files(lake_root, "statement_snapshots")
    for path in visible:
        assert path.suffix == ".parquet"
        lake.read_file_metadata(path)  # a complete footer
    frame = lake.scan_table(lake_root, "statement_snapshots").collect()
    assert frame.height in (0, 3_000_000)
    # The killed writer's temp file is removed by the next write into its folder once it is stale (a fresh
    # one may belong to a live writer: see tests/integration/lake/test_lake_safety.py).
    for stray in folder.glob("*.partial"):
        os.utime(stray, (time.time() - 2 * locks.LakeConfig().stale_temp_after_s,) * 2)
    lake.write_table(
        lake_root,
        "statement_snapshots",
        pl.DataFrame({"queryid": [1]}),
        {"instance": "a", "date": "2026-01-01"},
        "big",
    )
    assert not list(folder.glob("*.partial"))
    assert lake.scan_table(lake_root, "statement_snapshots").collect().height == 1


def test_the_collector_adds_no_statements_of_its_own(orders_fleet: EmbeddedFleet, lake_root: Path) -> None:
    server = orders_fleet.server("beta")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("select pg_stat_statements_reset()")
    config = FleetConfig(instances=(InstanceConfig(name="beta", dsn=server.dsn),))
    for _ in range(3):
        assert not snapshot_fleet(config, lake_root).failed
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        texts = [r[0] for r in conn.execute("select query from pg_stat_statements").fetchall()]
    collector_markers = ("pg_control_system", "showtext", "pg_stat_statements_info", "SET pg_stat_statements")
    assert not [t for t in texts if any(marker in t for marker in collector_markers)], texts
