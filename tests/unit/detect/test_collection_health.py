"""collection_health: the samples job's dropped intervals by reason per instance and day, in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.detect.samples_job import run_samples_job
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.schemas.collected import COLLECTION_HEALTH, SNAPSHOT_RUNS
from tests.support.lakes import SNAPSHOT_BOOT, snapshot_frame, snapshot_row, write_snapshot_files

START = datetime(2026, 11, 29, 23, 20, tzinfo=UTC)  # snapshots every 10 min, across midnight
RESET_AT, EVICTED_AT, FAILED_AT, MISSED_AT = 4, 6, 8, 9
RESET = START + timedelta(minutes=10 * RESET_AT)
EVICTED = START + timedelta(minutes=10 * EVICTED_AT)


def _at(i: int) -> datetime:
    return START + timedelta(minutes=10 * i)


def _snapshot_rows(steps: range) -> list[dict[str, Any]]:
    """Two entries; the statistics are reset at step 4 (both counters restart), entry 2 is evicted and
    made again at step 6; step 8 failed and step 9 was never taken (no rows)."""
    rows = []
    for i in steps:
        if i in (FAILED_AT, MISSED_AT):
            continue
        reset = RESET if i >= RESET_AT else SNAPSHOT_BOOT
        for queryid in (1, 2):
            since = reset
            calls = 100 * (i + 1) if i < RESET_AT else 100 * (i - RESET_AT + 1)
            if queryid == 2 and i >= EVICTED_AT:
                since, calls = EVICTED, 100 * (i - EVICTED_AT + 1)
            rows.append(
                snapshot_row(
                    "alpha", _at(i), queryid, calls, float(calls), stats_reset=reset, stats_since=since
                )
            )
    return rows


def _runs(steps: range) -> pl.DataFrame:
    taken = [i for i in steps if i != MISSED_AT]
    return pl.DataFrame(
        {
            "instance": "alpha",
            "captured_at": [_at(i) for i in taken],
            "status": ["failed" if i == FAILED_AT else "ok" for i in taken],
            "dealloc": [0 if i < EVICTED_AT else 1 for i in taken],
        },
        schema_overrides={"captured_at": pl.Datetime("us", "UTC")},
    )


def _write(lake_root: Path, steps: range) -> None:
    runs = _runs(steps)
    write_snapshot_files(lake_root, snapshot_frame(_snapshot_rows(steps)), runs)
    failed = runs.filter(pl.col("status") == "failed")
    for row in failed.iter_rows(named=True):
        parts = {"instance": "alpha", "date": row["captured_at"].date().isoformat()}
        lake.write_table(
            lake_root, SNAPSHOT_RUNS, failed.drop("instance"), parts, lake.stem_for(row["captured_at"])
        )


DAILY = (
    "select day::varchar as day, snapshots_ok, snapshots_failed, snapshots_missed, intervals_sampled, "
    "intervals_dropped, stats_resets, evictions from collection_health_daily where instance = 'alpha' "
    "order by day"
)
EXPECTED = [
    # day 1: steps 0-3 (three intervals per entry, all sampled)
    ("2026-11-29", 4, 0, 0, 6, 0, 0, 0),
    # day 2: steps 4-7 and 10-11 (8 failed, 9 missed); 2 intervals cut by the reset, 1 by the eviction
    ("2026-11-30", 6, 1, 1, 9, 3, 1, 1),
]


def test_resets_and_evictions_per_day_in_one_query_idempotent_across_append_and_rebuild(
    lake_root: Path,
) -> None:
    _write(lake_root, range(0, 6))
    run_samples_job(lake_root)  # first run: builds the instance (no frontier yet)
    _write(lake_root, range(6, 12))
    run_samples_job(lake_root)  # append: the new intervals' counts only, in a new file
    health = lake.read_table(lake_root, COLLECTION_HEALTH)
    assert {r: int(n) for r, n in health.group_by("reason").agg(pl.col("intervals").sum()).iter_rows()} == {
        "sampled": 15,
        "stats_reset": 2,
        "entry_recreated": 1,
    }
    assert duckdb_views.query(lake_root, DAILY).rows() == EXPECTED
    week = duckdb_views.query(
        lake_root,
        "select sum(stats_resets) + sum(restarts), sum(evictions) from collection_health_daily "
        "where day >= date '2026-11-23' and day < date '2026-11-30' + 7",
    )
    assert week.rows() == [(1, 1)]
    run_samples_job(lake_root)  # nothing new: nothing added
    run_samples_job(lake_root, mode="rebuild")  # a rebuild replaces each day's files
    assert duckdb_views.query(lake_root, DAILY).rows() == EXPECTED
    assert len(lake.table_files(lake_root, COLLECTION_HEALTH)) == 2, "one file per day after a rebuild"
