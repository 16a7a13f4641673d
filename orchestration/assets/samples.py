"""query_samples: per-interval samples differenced from the cumulative snapshots, per collected day (and per
shard when [schedules] shard_count is above 1: a run samples only its shard's instances)."""

from datetime import date

import dagster as dg

from jobs.collect.shards import names_in_shards
from jobs.detect.samples_job import lake_instances, run_samples_job, run_samples_per_instance
from jobs.lake.io import incident_mark
from orchestration.freshness import COLLECTION_OWNERS, SAMPLES_FRESHNESS
from orchestration.partitions import SHARD_COUNT, run_days, run_shards, samples_partitions, shard_label
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, section_from_config
from orchestration.tables import lake_incident_metadata, table_metadata

SamplesRunConfig = section_config("samples")  # [samples] of the config file


def build_query_samples(shard_count: int) -> dg.AssetsDefinition:
    """The asset for ``shard_count`` shards (days x shards when above 1, days alone otherwise)."""

    @dg.asset(
        name="query_samples",
        partitions_def=samples_partitions(shard_count),
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=["statement_snapshots"],
        group_name="analyse",
        kinds={"polars", "parquet"},
        owners=COLLECTION_OWNERS,
        freshness_policy=SAMPLES_FRESHNESS,
        description="Per-interval deltas of every statement (invalid deltas dropped and counted by reason), "
        "one partition per collected UTC day (`collection_days`, added by the snapshot runs). A run appends "
        "what is new since the watermark; a backfill of several days rebuilds them from the snapshots. With "
        "[schedules] shard_count > 1 the partitions are (day, shard): a run samples its shard's instances.",
    )
    def query_samples(
        context: dg.AssetExecutionContext,
        config: SamplesRunConfig,  # type: ignore[valid-type]
        lake: LakeResource,
    ) -> dg.MaterializeResult:
        # A normal run appends the snapshots after the watermark; a single-run backfill of several days
        # rebuilds them (a repair, up to the watermark) and then appends what is newer.
        days = run_days(context)
        first, last = days[0], days[-1]
        shards = run_shards(context, shard_count)
        # The shard's instances among those the lake holds snapshots of (None: every instance, unsharded).
        names = None if shards is None else names_in_shards(lake_instances(lake.path), shards, shard_count)
        mark = incident_mark()
        sample_config = section_from_config("samples", config, "query_samples")
        if first != last:
            dates = (date.fromisoformat(first), date.fromisoformat(last))
            if names is None:
                run_samples_job(lake.path, sample_config, dates=dates)
            else:
                run_samples_per_instance(lake.path, sample_config, names, dates=dates)
        if names is None:
            report = run_samples_job(lake.path, sample_config, mode="append")
        else:  # a shard: the samples lock per instance, so the other shards' runs are not kept waiting
            report = run_samples_per_instance(lake.path, sample_config, names, mode="append")
        context.log.info(
            f"{first}..{last}, {shard_label(shards)}: {report.snapshot_rows} snapshot rows -> "
            f"{report.sample_rows} samples"
        )
        return dg.MaterializeResult(
            metadata={
                "shard": shard_label(shards),
                "snapshot_rows": report.snapshot_rows,
                "sample_rows": report.sample_rows,
                "instances": report.instances,
                "files_written": report.files_written,
                "seconds": round(report.seconds, 3),
                "dropped": table_metadata(report.dropped_counts),
                **lake_incident_metadata(mark, context.log),
            }
        )

    return query_samples


query_samples = build_query_samples(SHARD_COUNT)
