"""statement_snapshots: one snapshot of the whole fleet per run, into today's partition."""

from dataclasses import replace
from datetime import UTC, datetime

import dagster as dg
import polars as pl

from jobs.collect.collector import snapshot_fleet
from jobs.collect.table_stats import table_stats_after_snapshot
from jobs.lake import incident_mark
from orchestration.partitions import daily
from orchestration.resources import FleetResource, LakeResource
from orchestration.run_config import definitions_settings, section_config, section_from_config
from orchestration.tables import lake_incident_metadata, markdown_table

# [collector] of the config file. A run's collector: the fleet file's [collector], under the config file's
# keys (LoadedSettings.collector_for, as the CLI), under what this run's config changed.
CollectorRunConfig = section_config("collector")


@dg.asset(
    partitions_def=daily,
    group_name="collect",
    kinds={"postgres", "parquet"},
    description="Cumulative pg_stat_statements counters of every fleet instance, one snapshot per run. "
    "pg_stat_statements cannot be backfilled: only today's partition can be materialized.",
)
def statement_snapshots(
    context: dg.AssetExecutionContext,
    config: CollectorRunConfig,  # type: ignore[valid-type]
    fleet: FleetResource,
    lake: LakeResource,
) -> dg.MaterializeResult:
    today = datetime.now(UTC).date().isoformat()
    if context.partition_key != today:
        raise dg.Failure(
            f"statement_snapshots reads live counters: partition {context.partition_key} cannot be "
            f"backfilled (today is {today})"
        )
    fleet_config = fleet.load()
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
    if not result.ok:
        raise dg.Failure(f"every instance failed: {'; '.join(r.reason for r in result.failed)}")
    return dg.MaterializeResult(
        metadata={
            "instances_ok": len(result.ok),
            "instances_failed": len(result.failed),
            "instances_degraded": len(result.degraded),
            "failed_instances": "; ".join(f"{r.instance}: {r.reason}" for r in result.failed) or "none",
            "degraded_instances": "; ".join(f"{r.instance}: {r.reason}" for r in result.degraded) or "none",
            "statement_rows": sum(r.statement_rows for r in result.results),
            "table_stats_rows": sum(item.frame.height for item in stats),
            "table_stats_problems": "; ".join(f"{i.instance}: {p}" for i in stats for p in i.problems)
            or "none",
            "bytes_written": sum(r.bytes_written for r in result.results),
            "per_instance": dg.MetadataValue.md(markdown_table(pl.DataFrame(result.summary_rows()))),
            **lake_incident_metadata(mark, context.log),
        }
    )
