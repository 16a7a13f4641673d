"""Append mode on real snapshots (PostgreSQL 18 from the embedded wheel): samples appended after each
batch of snapshots equal one rebuild of the whole lake, through a statistics reset and a query that stops
being called (pg_stat_statements keeps its entry; the collector snapshots it every time, unchanged)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from jobs import lake
from jobs.fleet import EmbeddedFleet
from jobs.samples import run_samples_job
from jobs.schemas import QUERY_SAMPLES
from tests.conftest import FleetFactory
from tests.pg_workload import Workload, one_instance, reset_statements, snapshot_phase

ORDER = ["queryid", "dbid", "userid", "toplevel", "interval_end"]


def samples_of(root: Path) -> pl.DataFrame:
    return lake.read_table(root, QUERY_SAMPLES).drop("date").sort(ORDER)


def test_appended_real_samples_equal_one_rebuild(fleet_factory: FleetFactory, tmp_path: Path) -> None:
    fleet: EmbeddedFleet = fleet_factory(["alpha"])
    dsn, config = one_instance(fleet, "alpha")
    lake_root, rebuilt = tmp_path / "lake", tmp_path / "rebuilt"
    busy = "select count(*) from pg_class where relpages >= %s"
    quiet = "select count(*) from pg_attribute where attnum = %s"
    with Workload(dsn, [busy, quiet]):
        snapshot_phase(config, lake_root, 8)
        run_samples_job(lake_root)
        snapshot_phase(config, lake_root, 6)
    run_samples_job(lake_root)
    with Workload(dsn, busy):  # the quiet query is no longer called: its entry stays, unchanged
        snapshot_phase(config, lake_root, 6)
        run_samples_job(lake_root)
        reset_statements(dsn)  # every entry recreated: stats_since and the info's stats_reset change
        snapshot_phase(config, lake_root, 6)
    run_samples_job(lake_root)
    run_samples_job(lake_root)  # nothing new
    appended = samples_of(lake_root)
    run_samples_job(lake_root, out_root=rebuilt, mode="rebuild")
    assert appended.height > 20
    expected = samples_of(rebuilt)
    assert appended.equals(expected)
