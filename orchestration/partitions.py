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
from typing import Any

import dagster as dg

from jobs.collect.shards import shard_index, shard_key, shard_keys
from jobs.lake.storage import LakePath, lake_path
from orchestration.run_config import definitions_settings

COLLECTION_DAYS = "collection_days"
collection_days = dg.DynamicPartitionsDefinition(name=COLLECTION_DAYS)
COLLECTED_TABLE = "snapshot_runs"  # one row per instance per snapshot attempt: its day folders are the days


def lake_days(lake_root: LakePath) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) that hold a snapshot attempt in the lake (its day folders)."""
    days: set[str] = set()
    for folder in (lake_path(lake_root) / COLLECTED_TABLE).glob("**/date=*"):
        if folder.is_dir() and any(folder.glob("*.parquet")):
            days.add(folder.name.removeprefix("date="))
    return sorted(days)


def register_collection_days(instance: Any, days: Iterable[str]) -> list[str]:
    """Add the days not yet partitions of ``collection_days`` (in date order); returns the ones added."""
    new = sorted(set(days) - set(instance.get_dynamic_partitions(COLLECTION_DAYS)))
    if new:
        try:
            instance.add_dynamic_partitions(COLLECTION_DAYS, new)
        except Exception:  # another shard's run added the same day between the read and the insert
            known = set(instance.get_dynamic_partitions(COLLECTION_DAYS))
            if not set(new) <= known:
                raise
    return new


def today_key(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).date().isoformat()


# Shards ([schedules] shard_count; jobs.collect.shards): with more than one, the collection assets are
# partitioned by shard, so one run collects (and samples) only its shard's instances.
SHARD_DIMENSION = "shard"
SHARD_COUNT = definitions_settings().settings.schedules.shard_count
"""The shard count the definitions are built with (the config file's [schedules] shard_count)."""
DAY_DIMENSION = "day"


def shard_partitions(shard_count: int) -> dg.StaticPartitionsDefinition | None:
    """``shard-0``..``shard-<n-1>`` as static partitions; None for one shard (the assets stay unpartitioned,
    as they were before sharding: one run covers the fleet)."""
    return dg.StaticPartitionsDefinition(shard_keys(shard_count)) if shard_count > 1 else None


def samples_partitions(shard_count: int) -> dg.PartitionsDefinition:
    """query_samples' partitions: the collected days, times the shards when there is more than one."""
    shards = shard_partitions(shard_count)
    if shards is None:
        return collection_days
    return dg.MultiPartitionsDefinition({DAY_DIMENSION: collection_days, SHARD_DIMENSION: shards})


def _dimension(key: str | dg.MultiPartitionKey, name: str) -> str:
    return key.keys_by_dimension[name] if isinstance(key, dg.MultiPartitionKey) else key


def run_shards(context: dg.AssetExecutionContext, shard_count: int) -> list[int] | None:
    """The shards a run covers (one, or several for a single-run backfill); None when the asset is not
    partitioned by shard (one shard: the whole fleet)."""
    if shard_count <= 1:
        return None
    if not (context.has_partition_key or context.has_partition_key_range):  # never the whole fleet by mistake
        raise dg.Failure(
            f"a run of a sharded asset needs shard partitions (shard-0..shard-{shard_count - 1})"
        )
    return sorted({shard_index(_dimension(key, SHARD_DIMENSION)) for key in context.partition_keys})


def shard_label(shards: list[int] | None) -> str:
    """How a run's metadata and messages name its shards."""
    return "whole fleet" if shards is None else ", ".join(shard_key(s) for s in shards)


def run_days(context: dg.AssetExecutionContext) -> list[str]:
    """The collection days a query_samples run covers, sharded or not."""
    keys = context.partition_keys
    return sorted(
        {_dimension(key, DAY_DIMENSION) if isinstance(key, dg.MultiPartitionKey) else key for key in keys}
    )


def shard_run_requests(shard_count: int, run_key: str, day: str | None = None) -> list[dg.RunRequest]:
    """One run per shard (one run without a shard partition when there is one shard); ``day``: the
    collection day of query_samples' partitions."""
    if shard_count <= 1:
        return [dg.RunRequest(run_key=run_key, partition_key=day)]
    requests = []
    for key in shard_keys(shard_count):
        partition: str = key
        if day is not None:
            partition = dg.MultiPartitionKey({DAY_DIMENSION: day, SHARD_DIMENSION: key})
        requests.append(dg.RunRequest(run_key=f"{run_key}:{key}", partition_key=partition))
    return requests
