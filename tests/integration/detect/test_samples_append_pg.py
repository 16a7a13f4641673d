"""Append mode on real snapshots (PostgreSQL 18 from the embedded wheel): samples appended after each
batch of snapshots equal one rebuild of the whole lake, through a statistics reset and a query that stops
being called (pg_stat_statements keeps its entry; the collector snapshots it every time, unchanged)."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl

from jobs.detect.config import SampleConfig
from jobs.detect.samples_job import SAMPLES_LOCK, run_samples_job
from jobs.lake import io as lake
from jobs.lake.locks import LakeConfig, exclusive_lock
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.collection import CycleConfig, run_cycle
from jobs.schemas.collected import QUERY_SAMPLES
from tests.conftest import FleetFactory
from tests.support.pg_workload import SNAPSHOT_EVERY, Workload, one_instance, reset_statements, snapshot_phase

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


def test_samples_on_collect_append_after_each_cycle_and_equal_one_rebuild(
    fleet_factory: FleetFactory, tmp_path: Path
) -> None:
    """[collector] samples_on_collect: each collection cycle appends the samples of the instances it
    snapshotted; after the cycles they equal one rebuild of the lake. A samples failure (another run holds
    the samples lock) is reported and the snapshot stays."""
    fleet: EmbeddedFleet = fleet_factory(["alpha"])
    dsn, config = one_instance(fleet, "alpha")
    lake_root, rebuilt = tmp_path / "lake", tmp_path / "rebuilt"
    cycle = CycleConfig(samples=SampleConfig(), lake=LakeConfig(lock_wait_s=0.2))
    appended_rows = []
    with Workload(dsn, ["select count(*) from pg_class where relpages >= %s"]):
        for _ in range(6):
            started = time.monotonic()
            result = run_cycle(config, lake_root, cycle)
            assert result.samples is not None and result.samples_error is None
            appended_rows.append(result.samples.sample_rows)
            time.sleep(max(0.0, SNAPSHOT_EVERY - (time.monotonic() - started)))
        with exclusive_lock(lake_root, SAMPLES_LOCK):
            blocked = run_cycle(config, lake_root, cycle)
    assert appended_rows[0] == 0 and sum(appended_rows[1:]) > 0  # the first snapshot has no predecessor
    assert blocked.samples is None and blocked.samples_error is not None
    assert "alpha" in blocked.samples_error and "lock" in blocked.samples_error
    assert blocked.snapshot is not None and [r.instance for r in blocked.snapshot.ok] == ["alpha"]
    run_cycle(config, lake_root, cycle)  # the next cycle catches up with the blocked one's interval too
    appended = samples_of(lake_root)
    run_samples_job(lake_root, out_root=rebuilt, mode="rebuild")
    assert appended.equals(samples_of(rebuilt))
    assert CycleConfig().samples is None  # off unless [collector] samples_on_collect
