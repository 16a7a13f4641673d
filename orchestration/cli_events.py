"""What the CLI tells Dagster: a `radar snapshot` / `radar samples` / `radar detect` run outside Dagster
reports a runless materialization of the asset it produced, so the UI shows when the data was last
written instead of "Never materialized".

The CLI (jobs/cli/main.py, which never imports dagster at its top) imports this module lazily, only when a
Dagster instance is there (``DAGSTER_HOME``, else the ``./.dagster_home`` of `make dev`), and turns any
error into one warning line: telling Dagster is never a reason for a collection to fail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from jobs.collect.shards import shard_keys
from jobs.pipeline.detection import DETECTION_ASSETS
from orchestration.partitions import (
    COLLECTION_DAYS,
    DAY_DIMENSION,
    SHARD_COUNT,
    SHARD_DIMENSION,
    lake_days,
    register_collection_days,
)

PARTITIONED_ASSETS = frozenset({"query_samples"})
"""Assets partitioned by ``collection_days``: their event names the day's partition."""
SHARDED_ASSETS = frozenset({"statement_snapshots", "plan_snapshots", "query_samples", *DETECTION_ASSETS})
"""Assets partitioned by shard when [schedules] shard_count is above 1: a CLI run covers every shard."""


def cli_partitions(asset: str, days: Sequence[str], shard_count: int = SHARD_COUNT) -> list[str | None]:
    """The partitions a CLI run of the whole fleet materialized of ``asset``: its days, times every shard
    when the definitions are sharded; [None] for an unpartitioned asset."""
    daily = sorted(days) if asset in PARTITIONED_ASSETS else [None]
    if shard_count <= 1 or asset not in SHARDED_ASSETS:
        return list(daily)
    return [
        key if day is None else dg.MultiPartitionKey({DAY_DIMENSION: day, SHARD_DIMENSION: key})
        for day in daily
        for key in shard_keys(shard_count)
    ]


def _metadata_value(value: Any) -> Any:
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


class _NoMissingYamlWarning(logging.Filter):
    """Drops Dagster's "No dagster instance configuration file (dagster.yaml) found" line: a folder
    without one is the instance `make dev` and the README's DAGSTER_HOME use, not a problem to report on
    every `radar` run's stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No dagster instance configuration file" not in record.getMessage()


def _instance_without_default_warning(home: Path) -> dg.DagsterInstance:
    """The instance of the folder ``home`` (its dagster.yaml, else Dagster's defaults there), quietly."""
    dagster_logger = logging.getLogger("dagster")
    quiet = _NoMissingYamlWarning()
    dagster_logger.addFilter(quiet)
    try:
        return dg.DagsterInstance.from_config(str(home))
    finally:
        dagster_logger.removeFilter(quiet)


def report_cli_materializations(
    assets: Sequence[str],
    lake_root: Path,
    metadata: Mapping[str, Any],
    *,
    days: Sequence[str],
    instance: dg.DagsterInstance | None = None,
    home: Path | None = None,
) -> list[str]:
    """Register the lake's collected days as ``collection_days`` partitions and record one runless
    materialization per asset (one per day of ``days`` for the daily ones); returns the asset keys reported.
    ``instance``: the one of the folder ``home`` (else of ``DAGSTER_HOME``) when None."""
    own = instance is None
    if instance is not None:
        target = instance
    elif home is not None:
        target = _instance_without_default_warning(home)
    else:
        target = dg.DagsterInstance.get()
    assert target is not None
    try:
        register_collection_days(target, [*lake_days(lake_root), *days])
        plain = {"source": "radar CLI", **{k: _metadata_value(v) for k, v in metadata.items()}}
        for asset in assets:
            for partition in cli_partitions(asset, days):
                target.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset_key=asset,
                        partition=partition,
                        metadata=plain,
                        description=f"written by the radar CLI (not a Dagster run); lake {lake_root}",
                    )
                )
        return list(assets)
    finally:
        if own:
            target.dispose()


__all__ = ["COLLECTION_DAYS", "report_cli_materializations"]
