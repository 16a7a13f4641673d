"""Compaction: closed days become one file, the same rows, swapped in atomically; today is untouched."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs import lake
from jobs.compaction import compact_lake, exchange_directories
from jobs.samples import run_samples_job

DAY = date(2026, 11, 27)


def write_snapshots(lake_root: Path, day: date, snapshots: int, instance: str = "db1") -> None:
    start = datetime(day.year, day.month, day.day, 10, tzinfo=UTC)
    for i in range(snapshots):
        at = start + timedelta(minutes=i)
        frame = pl.DataFrame(
            {
                "captured_at": [at, at],
                "system_identifier": [1, 1],
                "postmaster_start": [start, start],
                "userid": [10, 10],
                "dbid": [5, 5],
                "toplevel": [True, True],
                "queryid": [7, 8],
                "calls": [100 * i, 10 * i],
                "total_exec_time": [50.0 * i, 9.0 * i],
            }
        )
        lake.write_table(
            lake_root,
            "statement_snapshots",
            frame,
            {"instance": instance, "date": day.isoformat()},
            lake.stem_for(at),
        )


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

    from jobs.cli import main
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
