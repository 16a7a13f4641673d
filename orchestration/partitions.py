"""Partitions shared by the assets: one per UTC day on which the fleet was actually collected.

pg_stat_statements holds cumulative counters of *now*: a past day cannot be snapshotted. So
statement_snapshots is not partitioned (every run is "now"), and the daily assets downstream
(query_samples) are partitioned by ``collection_days``, a dynamic partitions definition whose keys are
added by the collection itself: a snapshot run (the asset or `radar snapshot` with DAGSTER_HOME set)
registers its UTC day, and every older day it finds in the lake. The UI then shows exactly the days that
hold snapshots; none is "Missing" that could never be filled, and a backfill of samples over any of them
works (samples are rebuilt from the lake's snapshots).
"""

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

COLLECTION_DAYS = "collection_days"
collection_days = dg.DynamicPartitionsDefinition(name=COLLECTION_DAYS)
COLLECTED_TABLE = "snapshot_runs"  # one row per instance per snapshot attempt: its day folders are the days


def lake_days(lake_root: Path) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) that hold a snapshot attempt in the lake (its day folders)."""
    days: set[str] = set()
    for folder in (Path(lake_root) / COLLECTED_TABLE).glob("**/date=*"):
        if folder.is_dir() and any(folder.glob("*.parquet")):
            days.add(folder.name.removeprefix("date="))
    return sorted(days)


def register_collection_days(instance: Any, days: Iterable[str]) -> list[str]:
    """Add the days not yet partitions of ``collection_days`` (in date order); returns the ones added."""
    known = set(instance.get_dynamic_partitions(COLLECTION_DAYS))
    new = sorted(set(days) - known)
    if new:
        instance.add_dynamic_partitions(COLLECTION_DAYS, new)
    return new


def today_key(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).date().isoformat()
