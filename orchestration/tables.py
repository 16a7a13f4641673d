"""Small rendering helpers for Dagster metadata."""

from typing import Any

import dagster as dg
import polars as pl

from jobs.lake import incidents_since


def markdown_table(frame: pl.DataFrame, max_rows: int = 50) -> str:
    if frame.is_empty():
        return "_(no rows)_"
    with pl.Config(
        tbl_formatting="MARKDOWN",
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
        tbl_rows=max_rows,
        fmt_str_lengths=120,
    ):
        return str(frame.head(max_rows))


def lake_incident_metadata(mark: int, log: Any = None) -> dict[str, Any]:
    """The lake files this run quarantined or skipped (jobs.lake.LakeIncident), each logged as a warning."""
    incidents = incidents_since(mark)
    for incident in incidents:
        if log is not None:
            log.warning(incident.message())
    metadata: dict[str, Any] = {"lake_files_quarantined": sum(i.action == "quarantined" for i in incidents)}
    if incidents:
        lines = [
            f"- `{i.path}`: {i.action}, {i.reason}"
            + (f" (to `{i.moved_to}`)" if i.moved_to else f" ({i.note})")
            for i in incidents
        ]
        metadata["lake_incidents"] = dg.MetadataValue.md("\n".join(lines))
    return metadata
