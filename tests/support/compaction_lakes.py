"""Lakes of per-snapshot files over several days, for compaction and lake-safety tests."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

from jobs.lake import io as lake

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
