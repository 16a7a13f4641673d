"""compacted_lake: yesterday's and older per-snapshot files merged into one per (instance, day)."""

import dagster as dg

from jobs.lake.compaction import compact_lake
from jobs.lake.io import incident_mark
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, section_from_config
from orchestration.tables import lake_incident_metadata

# [lake] of the config file (retention, lock wait, temp files); where the lake is ([lake] root) is
# LakeResource's.
LakeRunConfig = section_config("lake", exclude=("root",))


@dg.asset(
    deps=["statement_snapshots"],
    group_name="maintain",
    kinds={"parquet"},
    description="Closed days of the per-snapshot tables compacted to one file per instance, swapped in "
    "atomically (renameat2 RENAME_EXCHANGE) so readers never see duplicates.",
)
def compacted_lake(
    context: dg.AssetExecutionContext,
    config: LakeRunConfig,  # type: ignore[valid-type]
    lake: LakeResource,
) -> dg.MaterializeResult:
    mark = incident_mark()
    done = compact_lake(lake.path, config=section_from_config("lake", config, "compacted_lake"))
    return dg.MaterializeResult(
        metadata={
            "partitions_compacted": len(done),
            "files_merged": sum(d.files_before for d in done),
            "rows": sum(d.rows for d in done),
            **lake_incident_metadata(mark, context.log),
        }
    )
