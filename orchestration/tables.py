"""Small rendering helpers for Dagster metadata."""

from collections.abc import Mapping
from typing import Any

import dagster as dg
import polars as pl

from jobs.escaping import markdown_code, markdown_text
from jobs.lake.io import incidents_since
from jobs.publish.markdown import CellFormat, markdown_table


def table_metadata(frame: pl.DataFrame, formats: Mapping[str, CellFormat] | None = None) -> dg.MetadataValue:
    """A frame as Markdown metadata that renders as a table in the UI (jobs.publish.markdown: every asset
    that shows a table goes through it, so cells are formatted and escaped the same way everywhere)."""
    return dg.MetadataValue.md(markdown_table(frame, formats))


def lake_incident_metadata(mark: int, log: Any = None) -> dict[str, Any]:
    """The lake files this run quarantined or skipped (jobs.lake.io.LakeIncident), each logged as a
    warning."""
    incidents = incidents_since(mark)
    for incident in incidents:
        if log is not None:
            log.warning(incident.message())
    metadata: dict[str, Any] = {"lake_files_quarantined": sum(i.action == "quarantined" for i in incidents)}
    if incidents:
        lines = [
            f"- {markdown_code(i.path)}: {i.action}, {markdown_text(i.reason)}"
            + (f" (to {markdown_code(i.moved_to)})" if i.moved_to else f" ({markdown_text(i.note)})")
            for i in incidents
        ]
        metadata["lake_incidents"] = dg.MetadataValue.md("\n".join(lines))
    return metadata
