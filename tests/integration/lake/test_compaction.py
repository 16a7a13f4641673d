"""Compaction: closed days become one file, the same rows, swapped in atomically; today is untouched."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs.detect.samples_job import run_samples_job
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.compaction import compact_lake, exchange_directories
from jobs.schemas.collected import ACTIVITY_SNAPSHOTS
from tests.support.compaction_lakes import DAY, write_snapshots


def test_closed_days_become_one_file_with_the_same_rows(lake_root: Path) -> None:
    write_snapshots(lake_root, DAY, 30)
    write_snapshots(lake_root, DAY + timedelta(days=2), 5)  # "today": still being written
    before = lake.scan_table(lake_root, "statement_snapshots").sort("captured_at", "queryid").collect()
    samples_before = run_samples_job(lake_root).sample_rows
    done = compact_lake(lake_root, today=DAY + timedelta(days=2))
    assert [(d.partition, d.files_before, d.rows) for d in done] == [("instance=db1/date=2026-11-27", 30, 60)]
    files = lake.table_files(lake_root, "statement_snapshots")
    assert len(files) == 1 + 5
    after = lake.scan_table(lake_root, "statement_snapshots").sort("captured_at", "queryid").collect()
    assert after.equals(before)
    assert run_samples_job(lake_root, mode="rebuild").sample_rows == samples_before
    merged = next(f for f in files if f.name.startswith("compacted-"))
    assert lake.read_file_metadata(merged)["radar.table"] == "statement_snapshots"
    assert compact_lake(lake_root, today=DAY + timedelta(days=2)) == [], "idempotent"
    assert not list((lake_root / "_compaction").rglob("*.parquet")), "no staging files left"


def test_min_age_protects_partitions_still_being_written(lake_root: Path) -> None:
    write_snapshots(lake_root, DAY, 3)
    assert compact_lake(lake_root, today=DAY) == []
    assert compact_lake(lake_root, today=DAY + timedelta(days=1), min_age_days=2) == []
    with pytest.raises(ValueError, match="min_age_days"):
        compact_lake(lake_root, today=DAY, min_age_days=0)


def test_exchange_is_a_swap(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "from_a").touch()
    (b / "from_b").touch()
    exchange_directories(a, b)
    assert [p.name for p in a.iterdir()] == ["from_b"] and [p.name for p in b.iterdir()] == ["from_a"]
    with pytest.raises(OSError, match="cannot exchange"):
        exchange_directories(a, tmp_path / "missing")


def test_compaction_asset_and_cli(lake_root: Path) -> None:
    import dagster as dg

    from jobs.cli.main import main
    from orchestration.assets.maintenance import compacted_lake
    from orchestration.resources import LakeResource

    write_snapshots(lake_root, DAY, 4)
    write_snapshots(lake_root, DAY, 3, instance="db2")
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [compacted_lake], resources={"lake": LakeResource(root=str(lake_root))}, instance=instance
        )
    assert result.success
    assert result.asset_materializations_for_node("compacted_lake")[0].metadata["files_merged"].value == 7
    write_snapshots(lake_root, DAY - timedelta(days=1), 2)
    assert main(["--lake", str(lake_root), "compact"]) == 0
    assert len(lake.table_files(lake_root, "statement_snapshots")) == 3


# ---------------------------------------------------------------------------------------------------------
# Analysis rows: closed days compacted, days past the retention expire


def write_run_rows(lake_root: Path, day: date, runs: int) -> None:
    """One analysis_runs and one performance_regressions file per detection run of ``day``."""
    for i in range(runs):
        at = datetime(day.year, day.month, day.day, 10, tzinfo=UTC) + timedelta(minutes=15 * i)
        part = {"date": day.isoformat()}
        state = pl.DataFrame({"run_id": [lake.stem_for(at)], "computed_at": [at], "instance": ["db1"]})
        lake.write_table(lake_root, "analysis_runs", state, part, lake.stem_for(at))
        row = pl.DataFrame({"analysis": ["deploy"], "instance": ["db1"], "status": ["no_regression"]})
        lake.write_table(lake_root, "performance_regressions", row, part, lake.stem_for(at))


def test_analysis_rows_past_the_retention_expire_and_closed_days_are_compacted(lake_root: Path) -> None:
    today = DAY + timedelta(days=40)
    for day in (DAY, DAY + timedelta(days=9), DAY + timedelta(days=39), today):
        write_run_rows(lake_root, day, 3)
    write_snapshots(lake_root, DAY, 3)  # collected data is never expired
    expired: list = []
    done = compact_lake(
        lake_root, today=today, config=locks.LakeConfig(analysis_retention_days=30), expired=expired
    )
    assert sorted((e.table, e.partition, e.files) for e in expired) == [
        ("analysis_runs", "date=2026-11-27", 3),
        ("analysis_runs", "date=2026-12-06", 3),
        ("performance_regressions", "date=2026-11-27", 3),
        ("performance_regressions", "date=2026-12-06", 3),
    ]
    runs = lake.read_table(lake_root, "analysis_runs")
    assert sorted(set(runs["date"])) == ["2027-01-05", "2027-01-06"]
    assert runs.height == 6
    compacted = {(d.table, d.partition) for d in done}
    assert ("analysis_runs", "date=2027-01-05") in compacted  # closed: one file
    assert ("analysis_runs", "date=2027-01-06") not in compacted  # today: still being written
    assert lake.read_table(lake_root, "statement_snapshots").height == 6


def test_a_retention_of_zero_keeps_every_analysis_row(lake_root: Path) -> None:
    write_run_rows(lake_root, DAY, 2)
    expired: list = []
    compact_lake(
        lake_root,
        today=DAY + timedelta(days=400),
        config=locks.LakeConfig(analysis_retention_days=0),
        expired=expired,
    )
    assert expired == []
    assert lake.read_table(lake_root, "performance_regressions").height == 2


def test_activity_rows_of_a_closed_day_are_merged_too(lake_root: Path) -> None:
    start = datetime(DAY.year, DAY.month, DAY.day, 10, tzinfo=UTC)
    for i in range(4):
        at = start + timedelta(minutes=i)
        row = {"captured_at": at, "backends": 10 + i, "active": i, "oldest_active_s": None, "cores": 4}
        frame = pl.DataFrame([row]).cast({"cores": pl.Int32()})
        lake.write_table(
            lake_root, ACTIVITY_SNAPSHOTS, frame, {"instance": "db1", "date": DAY.isoformat()}, f"a{i}"
        )
    before = lake.scan_table(lake_root, "activity_snapshots").sort("captured_at").collect()
    done = compact_lake(lake_root, today=DAY + timedelta(days=2))
    assert [(d.table, d.files_before, d.rows) for d in done] == [("activity_snapshots", 4, 4)]
    assert len(lake.table_files(lake_root, "activity_snapshots")) == 1
    assert lake.scan_table(lake_root, "activity_snapshots").sort("captured_at").collect().equals(before)
