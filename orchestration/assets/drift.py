"""latency_drift: the shape of every query's latency distribution against its anchored baseline."""

import dagster as dg
import polars as pl

from jobs.drift import run_drift
from orchestration.resources import LakeResource
from orchestration.run_config import section_config, section_from_config
from orchestration.tables import markdown_table

DriftRunConfig = section_config("drift")  # [drift] of the config file


@dg.asset(
    deps=["query_samples"],
    group_name="analyse",
    kinds={"numpy", "parquet"},
    description="Jensen-Shannon, PSI and Wasserstein of each query's latency distribution, current window "
    "vs anchored baseline; precision-first verdicts (drift / watch / improved / no_drift).",
)
def latency_drift(config: DriftRunConfig, lake: LakeResource) -> dg.MaterializeResult:  # type: ignore[valid-type]
    drift = run_drift(lake.path, section_from_config("drift", config, "latency_drift"))
    flagged = drift.filter(pl.col("status").is_in(["drift", "watch"]))
    return dg.MaterializeResult(
        metadata={
            "series": drift.height,
            "drift": drift.filter(pl.col("status") == "drift").height,
            "watch": drift.filter(pl.col("status") == "watch").height,
            "flagged": dg.MetadataValue.md(
                markdown_table(flagged.select("instance", "status", "reason", "query", "js", "psi"))
            ),
        }
    )
