"""Real embedded servers snapshotted into a bucket of a local S3 server (moto), then the rest of the
pipeline there (samples, detection, Dagster assets, DuckDB views, the weekly report, `radar sql`), and the
same lake mirrored to a local folder giving the same results."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest

from jobs.collect.deploys import mark_deploy
from jobs.lake import io as lake
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath
from jobs.lake.views import query
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.publish.weekly import write_weekly_report
from jobs.schemas.collected import STATEMENT_SNAPSHOTS
from orchestration.resources import FleetResource, LakeResource
from tests.support.pg_workload import Workload, one_instance, setup_orders, snapshot_phase

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

COMPARED = ["instance", "queryid", "status", "deploy_version", "detected_change_at", "p_value"]


def mirror(bucket: ObjectPath, folder: Path) -> int:
    """Copy every object of the lake (not its locks) to a local folder, byte for byte."""
    copied = 0
    for path in bucket.glob("**/*", files_only=True):
        relative = str(path.relative_to(bucket))
        if relative.startswith("_locks/"):
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
        copied += 1
    return copied


def _results(root: LakePath, out: Path, now: object) -> dict[str, object]:
    outcome = run_detection(root, DetectionConfig(), now=now)  # type: ignore[arg-type]
    report = write_weekly_report(root, now.strftime("%G-W%V"), out)  # type: ignore[attr-defined]
    return {
        "regressions": outcome.regressions.select(COMPARED).sort(COMPARED, nulls_last=True),
        "view": query(
            root, "select instance, queryid, count(*) as n from query_samples group by all order by all"
        ),
        "report": report.markdown.read_text().replace(str(out), "<out>"),
    }


def test_real_servers_into_a_bucket_then_the_pipeline_matches_a_local_copy(
    pg_fleet: EmbeddedFleet, s3_lake: ObjectPath, s3_environment: dict[str, str], tmp_path: Path
) -> None:
    dsn, config = one_instance(pg_fleet, "alpha")
    setup_orders(dsn, "radar_s3", index=True)
    sql = "select count(*), sum(amount) from radar_s3 where customer_id = %s"
    with Workload(dsn, sql):
        snapshot_phase(config, s3_lake)
        mark_deploy(s3_lake, version="v2-drop-index", instances=["alpha"])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop index radar_s3_customer")
        snapshot_phase(config, s3_lake)
    # Dagster on the bucket: a snapshot run and the samples of its day through the LakeResource
    resources = {
        "fleet": FleetResource(embedded_root=str(pg_fleet.root)),
        "lake": LakeResource(root=str(s3_lake)),
    }
    from orchestration.assets.snapshots import statement_snapshots

    with dg.instance_for_test() as instance:
        assert dg.materialize([statement_snapshots], resources=resources, instance=instance).success
    assert not any(tmp_path.iterdir())  # nothing landed on the local disk
    local = tmp_path / "lake"
    assert mirror(s3_lake, local) > 40
    now = lake.read_table(s3_lake, STATEMENT_SNAPSHOTS)["captured_at"].max() + timedelta(minutes=1)
    on_s3 = _results(s3_lake, tmp_path / "report-s3", now)
    on_disk = _results(local, tmp_path / "report-local", now)
    found = on_s3["regressions"].filter(  # type: ignore[union-attr]
        (pl.col("status") == "detected") & (pl.col("deploy_version") == "v2-drop-index")
    )
    assert found.height >= 1, on_s3["regressions"]
    for key in ("regressions", "view"):
        assert on_s3[key].equals(on_disk[key]), key  # type: ignore[union-attr]
    assert on_s3["report"] == on_disk["report"]
    assert "v2-drop-index" in str(on_s3["report"])
    # `radar sql` on the bucket, as a user runs it (credentials only in the environment)
    env = {**os.environ, **s3_environment}
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cli.main",
            "sql",
            "--lake",
            str(s3_lake),
            "--format",
            "json",
            "select count(*) as n from statement_snapshots",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert str(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS).height) in shown.stdout
    assert s3_environment["AWS_SECRET_ACCESS_KEY"] not in shown.stdout + shown.stderr
