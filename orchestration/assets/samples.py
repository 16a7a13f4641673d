"""query_samples: per-interval samples differenced from the cumulative snapshots."""

from datetime import date

import dagster as dg

from jobs.lake import incident_mark
from jobs.samples import run_samples_job
from orchestration.freshness import COLLECTION_OWNERS, SAMPLES_FRESHNESS
from orchestration.partitions import collection_days
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, section_from_config
from orchestration.tables import lake_incident_metadata, table_metadata

SamplesRunConfig = section_config("samples")  # [samples] of the config file


@dg.asset(
    partitions_def=collection_days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=["statement_snapshots"],
    group_name="analyse",
    kinds={"polars", "parquet"},
    owners=COLLECTION_OWNERS,
    freshness_policy=SAMPLES_FRESHNESS,
    description="Per-interval deltas of every statement (invalid deltas dropped and counted by reason), "
    "one partition per collected UTC day (`collection_days`, added by the snapshot runs). A run appends "
    "what is new since the watermark; a backfill of several days rebuilds them from the snapshots.",
)
def query_samples(
    context: dg.AssetExecutionContext,
    config: SamplesRunConfig,  # type: ignore[valid-type]
    lake: LakeResource,
) -> dg.MaterializeResult:
    # A normal run appends the snapshots after the watermark; a single-run backfill of several days
    # rebuilds them (a repair, up to the watermark) and then appends what is newer.
    first, last = context.partition_key_range.start, context.partition_key_range.end
    mark = incident_mark()
    sample_config = section_from_config("samples", config, "query_samples")
    if first != last:
        run_samples_job(lake.path, sample_config, dates=(date.fromisoformat(first), date.fromisoformat(last)))
    report = run_samples_job(lake.path, sample_config, mode="append")
    context.log.info(f"{first}..{last}: {report.snapshot_rows} snapshot rows -> {report.sample_rows} samples")
    return dg.MaterializeResult(
        metadata={
            "snapshot_rows": report.snapshot_rows,
            "sample_rows": report.sample_rows,
            "instances": report.instances,
            "files_written": report.files_written,
            "seconds": round(report.seconds, 3),
            "dropped": table_metadata(report.dropped_counts),
            **lake_incident_metadata(mark, context.log),
        }
    )
