"""Regressions of work on a real PostgreSQL 18 server: a work_mem cut that makes a sort spill, an index drop.

As in tests/integration/detect/test_regressions_pg.py: a client loops on one query while the collector
snapshots every ~0.2 s
(1-minute windows), a deploy is marked, the server is changed, the lake goes through the samples job and
the detection pipeline (jobs.pipeline.detection.detect_from_frames).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.collect.deploys import load_deploy_events, mark_deploy
from jobs.collect.fleet import FleetConfig
from jobs.detect.samples import samples_from_snapshots
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.detection import DetectionConfig, DetectionFrames, detect_from_frames
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.pg_workload import (
    SNAPSHOTS_PER_PHASE,
    Workload,
    lake_frames,
    one_instance,
    setup_orders,
    snapshot_phase,
)
from tests.support.real_server_detection import CONFIG

pytestmark = pytest.mark.postgres

APP_ROLE = "radar_app"
DETECTION = DetectionConfig(regression=CONFIG, rebuild_samples=False)


@pytest.fixture
def alpha(pg_fleet: EmbeddedFleet) -> tuple[EmbeddedFleet, FleetConfig]:
    return pg_fleet, one_instance(pg_fleet, "alpha")[1]


def detect(lake_root: Path) -> DetectionFrames:
    snapshots, runs, texts = lake_frames(lake_root)
    samples = samples_from_snapshots(snapshots, runs).samples
    return detect_from_frames(
        samples, texts, load_deploy_events(lake_root), PLAN_SNAPSHOTS.empty(), DETECTION
    )


def ours(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    return frame.filter(pl.col("query").str.contains(f"from {table} where"))


@pytest.mark.slow  # 9-35 s each on a real server: make test stays under 10 minutes beside a CPU hog
def test_work_mem_cut_at_a_deploy_is_a_temp_blocks_resource_regression(
    alpha: tuple[EmbeddedFleet, FleetConfig], lake_root: Path
) -> None:
    fleet, config = alpha
    server = fleet.server("alpha")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"drop role if exists {APP_ROLE}")
        conn.execute(f"create role {APP_ROLE} login")
        conn.execute(f"alter role {APP_ROLE} set work_mem = '64MB'")  # the sort fits in memory
    setup_orders(server.dsn, "radar_sort", index=False)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"grant select on radar_sort to {APP_ROLE}")
    # A full sort of ~40,000 rows (no LIMIT: not a top-N heap sort) that the application aggregates.
    sql = (
        "select sum(amount) from (select amount from radar_sort where customer_id between %s and 1000"
        " order by amount offset 0) sorted"
    )
    # Reconnecting every few calls, as a pooled application does, so the per-role work_mem reaches it.
    with Workload(server.dsn_for(user=APP_ROLE), sql, calls_per_connection=5):
        snapshot_phase(config, lake_root)
        mark_deploy(lake_root, version="v42-work-mem", instances=["alpha"])
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"alter role {APP_ROLE} set work_mem = '64kB'")  # the deploy's config change
        snapshot_phase(config, lake_root)
    found = detect(lake_root)
    resources = ours(found.resource_regressions, "radar_sort").filter(pl.col("analysis") == "deploy")
    temp = resources.filter(pl.col("metric") == "temp_blocks").row(0, named=True)
    assert temp["status"] == "detected", resources.select("metric", "reason", "naive_ratio", "p_value").rows()
    # In memory, then spilled (the before side may hold the one interval where the first reconnected
    # sessions spilled already: 2.7 blocks per call seen against 116 after).
    assert temp["after_per_call"] > 50 and temp["before_per_call"] < 0.1 * temp["after_per_call"]
    assert temp["summary"].startswith("temp blocks per call ")
    assert " at deploy v42-work-mem, latency " in temp["summary"]
    assert temp["latency_change"] is not None
    # The same rows and buffers per call: only the spill changed.
    for metric in ("rows", "shared_blocks"):
        assert resources.filter(pl.col("metric") == metric)["status"].to_list() == ["no_regression"]
    print(temp["summary"], temp["before_count"], temp["after_count"], temp["p_value"])
    latency = ours(found.regressions, "radar_sort").row(0, named=True)
    print(latency["reason"], latency["latency_change"], latency["work_evidence"])
    if latency["status"] == "detected":  # the spill may well slow the sort past 20% too: then it says why
        assert latency["work_changed"] is True and "temp blocks per call" in latency["work_evidence"]


@pytest.mark.slow  # 9-35 s each on a real server: make test stays under 10 minutes beside a CPU hog
def test_index_drop_latency_finding_carries_its_shared_blocks_evidence(
    alpha: tuple[EmbeddedFleet, FleetConfig], lake_root: Path
) -> None:
    fleet, config = alpha
    dsn = fleet.server("alpha").dsn
    setup_orders(dsn, "radar_work_idx", index=True)
    sql = "select count(*), sum(amount) from radar_work_idx where customer_id = %s"
    with Workload(dsn, sql, calls_per_connection=1000):
        snapshot_phase(config, lake_root, SNAPSHOTS_PER_PHASE)
        mark_deploy(lake_root, version="v2-drop-index", instances=["alpha"])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop index radar_work_idx_customer")
        snapshot_phase(config, lake_root, SNAPSHOTS_PER_PHASE)
    found = detect(lake_root)
    row = ours(found.regressions, "radar_work_idx").row(0, named=True)
    assert row["status"] == "detected", (row["reason"], row["p_value"])
    assert row["work_changed"] is True
    assert row["work_evidence"].startswith("shared blocks per call ×"), row["work_evidence"]
    assert "rows unchanged" in row["work_evidence"]
    print(row["work_evidence"], row["before_mean_ms"], row["after_mean_ms"])
    shared = ours(found.resource_regressions, "radar_work_idx").filter(
        (pl.col("analysis") == "deploy") & (pl.col("metric") == "shared_blocks")
    )
    assert shared["status"].to_list() == ["detected"]
    print(shared["summary"][0])
