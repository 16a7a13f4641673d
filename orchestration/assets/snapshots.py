"""statement_snapshots: one snapshot of the fleet per run ("now": never partitioned by day); with
[schedules] shard_count above 1, one run per shard, each snapshotting only its shard's instances."""

from dataclasses import replace

import dagster as dg
import polars as pl

from jobs.collect.collector import snapshot_fleet
from jobs.collect.shards import fleet_of_shards
from jobs.collect.table_stats import table_stats_after_snapshot
from jobs.lake.io import incident_mark
from orchestration.freshness import COLLECTION_OWNERS, SNAPSHOT_FRESHNESS
from orchestration.partitions import (
    SHARD_COUNT,
    lake_days,
    register_collection_days,
    run_shards,
    shard_label,
    shard_partitions,
)
from orchestration.resources import FleetResource, LakeResource
from orchestration.run_config import definitions_settings, section_config, section_from_config
from orchestration.tables import lake_incident_metadata, table_metadata

# [collector] of the config file. A run's collector: the fleet file's [collector], under the config file's
# keys (LoadedSettings.collector_for, as the CLI), under what this run's config changed.
CollectorRunConfig = section_config("collector")


def build_statement_snapshots(shard_count: int) -> dg.AssetsDefinition:
    """The asset for ``shard_count`` shards (partitioned by shard when above 1; tests build other counts)."""

    @dg.asset(
        name="statement_snapshots",
        partitions_def=shard_partitions(shard_count),
        group_name="collect",
        kinds={"postgres", "parquet"},
        owners=COLLECTION_OWNERS,
        freshness_policy=SNAPSHOT_FRESHNESS,
        description="Cumulative pg_stat_statements counters (and table statistics) of every fleet instance: "
        "one snapshot per run, into the lake's folder of the run's UTC day. Never partitioned by day: "
        "pg_stat_statements holds only *now*, so there is nothing to backfill. Each run adds its day to the "
        "`collection_days` partitions of the daily assets (query_samples). With [schedules] shard_count > 1 "
        "it is partitioned by shard: a run snapshots only its shard's instances (stable hash of the name).",
    )
    def statement_snapshots(
        context: dg.AssetExecutionContext,
        config: CollectorRunConfig,  # type: ignore[valid-type]
        fleet: FleetResource,
        lake: LakeResource,
    ) -> dg.MaterializeResult:
        shards = run_shards(context, shard_count)
        fleet_config = fleet_of_shards(fleet.load(), shards, shard_count)
        if not fleet_config.instances:  # an empty shard: nothing to do, and nothing failed
            context.log.info(f"{shard_label(shards)}: no instance of the fleet hashes to it")
            return dg.MaterializeResult(
                metadata={"shard": shard_label(shards), "instances_ok": 0, "instances_failed": 0}
            )
        base = definitions_settings().collector_for(fleet_config)
        collector = section_from_config("collector", config, "statement_snapshots", base=base)
        mark = incident_mark()
        run_fleet = replace(fleet_config, collector=collector)
        result = snapshot_fleet(run_fleet, lake.path)
        stats = table_stats_after_snapshot(run_fleet, lake.path, result)
        for item in stats:
            for problem in item.problems:
                context.log.warning(f"table stats: {item.instance}: {problem}")
        for failed in result.failed:
            context.log.warning(f"snapshot failed: {failed.reason}")
        for degraded in result.degraded:
            context.log.warning(f"snapshot degraded: {degraded.instance}: {degraded.reason}")
        # The days this lake holds (today's included once a snapshot attempt is written) become partitions.
        days = register_collection_days(context.instance, lake_days(lake.path))
        if days:
            context.log.info(f"collection days added: {', '.join(days)}")
        if not result.ok:  # this shard's run only: the other shards' runs are separate
            raise dg.Failure(
                f"{shard_label(shards)}: every instance failed: {'; '.join(r.reason for r in result.failed)}"
            )
        return dg.MaterializeResult(
            metadata={
                "shard": shard_label(shards),
                "instances_ok": len(result.ok),
                "instances_failed": len(result.failed),
                "instances_degraded": len(result.degraded),
                "failed_instances": "; ".join(f"{r.instance}: {r.reason}" for r in result.failed) or "none",
                "degraded_instances": "; ".join(f"{r.instance}: {r.reason}" for r in result.degraded)
                or "none",
                "statement_rows": sum(r.statement_rows for r in result.results),
                "table_stats_rows": sum(item.frame.height for item in stats),
                "table_stats_problems": "; ".join(f"{i.instance}: {p}" for i in stats for p in i.problems)
                or "none",
                "bytes_written": sum(r.bytes_written for r in result.results),
                "per_instance": table_metadata(pl.DataFrame(result.summary_rows()), {"bytes": "bytes"}),
                **lake_incident_metadata(mark, context.log),
            }
        )

    return statement_snapshots


statement_snapshots = build_statement_snapshots(SHARD_COUNT)
