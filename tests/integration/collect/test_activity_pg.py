"""The instance's sessions at each snapshot (activity_snapshots) on a real PostgreSQL 18 server: what the
contention step reads as the instance's load (jobs.detect.load)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.collect.collector import snapshot_fleet
from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from jobs.schemas.collected import ACTIVITY_SNAPSHOTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

pytestmark = pytest.mark.postgres


@contextmanager
def sessions(dsn: str, statements: list[str]) -> Iterator[None]:
    """Each statement running in its own session (a thread) for the block; cancelled at its end."""
    conns = [psycopg.connect(dsn, autocommit=True) for _ in statements]
    threads = []
    for conn, sql in zip(conns, statements, strict=True):

        def run(conn: psycopg.Connection = conn, sql: str = sql) -> None:
            with suppress(psycopg.Error):  # cancelled at the end of the block
                conn.execute(sql)

        threads.append(threading.Thread(target=run, daemon=True))
    try:
        for thread in threads:
            thread.start()
        yield
    finally:
        for conn in conns:
            conn.cancel_safe()
        for thread in threads:
            thread.join(timeout=10)
        for conn in conns:
            conn.close()


def wait_for(dsn: str, condition: str, timeout: float = 15.0) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if conn.execute(f"select {condition} from pg_stat_activity").fetchone()[0]:  # type: ignore[index]
                return
            time.sleep(0.05)
    raise AssertionError(f"never true: {condition}")


def activity(lake_root: Path) -> pl.DataFrame:
    return lake.read_table(lake_root, ACTIVITY_SNAPSHOTS)


def test_a_snapshot_counts_the_sessions_running_waiting_and_on_a_cpu(
    pg_fleet: EmbeddedFleet, lake_root: Path
) -> None:
    server = pg_fleet.server("alpha")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("drop table if exists radar_activity")
        conn.execute("create table radar_activity (id int primary key, v int)")
        conn.execute("insert into radar_activity values (1, 0)")
    config = FleetConfig.from_embedded(pg_fleet)  # the monitoring role (pg_monitor), not a superuser
    config = replace(
        config, instances=tuple(replace(i, cores=4) for i in config.instances if i.name == "alpha")
    )
    with ExitStack() as stack, psycopg.connect(server.dsn, autocommit=True) as holder:
        holder.execute("begin")
        holder.execute("update radar_activity set v = 1 where id = 1")  # idle in transaction, holding the row
        stack.enter_context(
            sessions(
                server.dsn,
                [
                    "select pg_sleep(30)",
                    "select pg_sleep(30)",
                    "select count(*) from pg_class a, pg_class b, pg_class c, pg_class d",  # CPU only
                    "update radar_activity set v = 2 where id = 1",  # waits for the holder's row lock
                ],
            )
        )
        wait_for(server.dsn, "count(*) filter (where wait_event_type = 'Lock') = 1")
        wait_for(server.dsn, "count(*) filter (where query = 'select pg_sleep(30)' and state = 'active') = 2")
        wait_for(server.dsn, "count(*) filter (where query like 'select count(*) from pg_class a%') = 1")
        result = snapshot_fleet(config, lake_root)
        holder.execute("rollback")
    assert not result.failed, result.failed
    rows = activity(lake_root)
    assert rows.height == 1
    row = rows.row(0, named=True)
    runs = lake.read_table(lake_root, SNAPSHOT_RUNS)
    assert row["captured_at"] == runs["captured_at"][0]  # joins the snapshot's other rows
    assert row["instance"] == "alpha" and row["cores"] == 4
    assert row["waiting_lock"] == 1
    assert row["active_on_cpu"] >= 1  # the CPU loop (the radar's own session is left out)
    assert row["waiting_other"] >= 2  # the two sleeps (wait event Timeout)
    assert (
        row["active"]
        == row["active_on_cpu"]
        + row["waiting_lock"]
        + row["waiting_lwlock"]
        + row["waiting_io"]
        + row["waiting_other"]
    )
    assert row["active"] >= 4 and row["backends"] >= 5  # + the idle-in-transaction holder
    assert row["oldest_active_s"] is not None and row["oldest_active_s"] >= 0
    # With nothing running, nothing is active: the radar's own session is not counted.
    wait_for(server.dsn, "count(*) filter (where backend_type = 'client backend' and state = 'active') = 1")
    assert not snapshot_fleet(config, lake_root).failed
    latest = activity(lake_root).sort("captured_at").row(-1, named=True)
    assert latest["active"] == 0 and latest["active_on_cpu"] == 0


def test_activity_off_writes_no_rows_and_a_hidden_session_records_none_with_a_warning(
    pg_fleet: EmbeddedFleet, lake_root: Path
) -> None:
    server = pg_fleet.server("beta")
    config = FleetConfig.from_embedded(pg_fleet, CollectorConfig(activity=False))
    config = replace(config, instances=tuple(i for i in config.instances if i.name == "beta"))
    assert not snapshot_fleet(config, lake_root).failed
    assert activity(lake_root).height == 0
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("drop role if exists radar_plain")
        conn.execute("create role radar_plain login")
    plain = FleetConfig(instances=(InstanceConfig(name="beta", dsn=server.dsn_for(user="radar_plain")),))
    with sessions(server.dsn, ["select pg_sleep(30)"]):  # another role's session: its state is hidden
        wait_for(server.dsn, "count(*) filter (where query = 'select pg_sleep(30)') = 1")
        result = snapshot_fleet(plain, lake_root)
    assert not result.failed
    assert activity(lake_root).height == 0  # wrong counts are worse than none
    assert any("activity not recorded" in w and "pg_read_all_stats" in w for w in result.results[0].warnings)
    assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height > 0  # the snapshot itself was kept
