"""ANALYZE before a plan change (pure): when the statistics of a table of the query moved shortly before.

``table_stats_snapshots`` (pg_stat_user_tables with each snapshot) carries ``last_analyze`` and
``last_autoanalyze``; each distinct value of a table is one ANALYZE (``table_analyses``, the same rule as
the DuckDB view of that name). A plan diff or a finding whose change falls at most ``window``
([drift.samples] analyze_before_plan_change, 30 min) after an ANALYZE of one of the plan's relations says
so: "ANALYZE of public.orders at 10:12:05 UTC, 18 min before the plan change".
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from jobs.drift.config import SampleDriftConfig

ANALYSES_SCHEMA = pl.Schema(
    {
        "instance": pl.String(),
        "dbname": pl.String(),
        "relid": pl.Int64(),
        "schemaname": pl.String(),
        "relname": pl.String(),
        "kind": pl.String(),
        "analysed_at": pl.Datetime("us", "UTC"),
        "first_seen_at": pl.Datetime("us", "UTC"),
    }
)
DEFAULT_WINDOW = SampleDriftConfig().analyze_before_plan_change


def table_analyses(snapshots: pl.DataFrame | None) -> pl.DataFrame:
    """One row per distinct ``last_analyze`` (kind manual) / ``last_autoanalyze`` (kind auto) value of a
    table (instance, dbname, relid), with the first snapshot that showed it; sorted by time."""
    if snapshots is None or snapshots.is_empty():
        return pl.DataFrame(schema=ANALYSES_SCHEMA)
    seen = pl.concat(
        [
            snapshots.filter(pl.col(column).is_not_null()).select(
                "instance",
                "dbname",
                "relid",
                "schemaname",
                "relname",
                pl.lit(kind).alias("kind"),
                pl.col(column).alias("analysed_at"),
                "captured_at",
            )
            for kind, column in (("manual", "last_analyze"), ("auto", "last_autoanalyze"))
        ]
    )
    return (
        seen.sort("captured_at")
        .group_by("instance", "dbname", "relid", "kind", "analysed_at", maintain_order=True)
        .agg(
            pl.col("schemaname").last(),
            pl.col("relname").last(),
            pl.col("captured_at").min().alias("first_seen_at"),
        )
        .select(list(ANALYSES_SCHEMA.names()))
        .cast(dict(ANALYSES_SCHEMA))
        .sort("analysed_at", "instance", "dbname", "relid", "kind")
    )


def _names(relations: Iterable[str]) -> set[str]:
    """Plan relation names as given and without a schema (``public.orders`` also matches ``orders``)."""
    out = set()
    for name in relations:
        if name:
            out.add(name)
            out.add(name.rsplit(".", 1)[-1])
    return out


def analyses_before(
    analyses: pl.DataFrame,
    instance: str,
    relations: Iterable[str],
    change_at: datetime,
    window: timedelta = DEFAULT_WINDOW,
    dbname: str | None = None,
) -> list[dict[str, Any]]:
    """The ANALYZEs on ``instance`` (and ``dbname`` when known) of a table named in ``relations`` at
    ``change_at - window <= analysed_at <= change_at``, the latest per table, newest first."""
    names = _names(relations)
    if analyses.is_empty() or not names or change_at is None:
        return []
    near = analyses.filter(
        (pl.col("instance") == instance)
        & pl.col("analysed_at").is_between(change_at - window, change_at, closed="both")
        & (
            pl.col("relname").is_in(list(names))
            | (pl.col("schemaname") + "." + pl.col("relname")).is_in(list(names))
        )
    )
    if dbname is not None:
        near = near.filter(pl.col("dbname") == dbname)
    latest = near.sort("analysed_at", descending=True).unique(
        ["dbname", "relid"], keep="first", maintain_order=True
    )
    return latest.to_dicts()


def analyze_note(found: list[dict[str, Any]], change_at: datetime, *, plan_changed: bool = True) -> str:
    """``ANALYZE of public.orders at 2026-11-02 10:12:05 UTC, 18 min before the plan change`` (one clause
    per table, ``;``-joined); empty when nothing was analysed."""
    what = "the plan change" if plan_changed else "the change"
    parts = []
    for row in found:
        minutes = (change_at - row["analysed_at"]).total_seconds() / 60
        auto = " (autoanalyze)" if row.get("kind") == "auto" else ""
        table = f"{row['schemaname']}.{row['relname']}" if row.get("schemaname") else row["relname"]
        parts.append(
            f"ANALYZE of {table}{auto} at {row['analysed_at']:%Y-%m-%d %H:%M:%S} UTC, "
            f"{minutes:.0f} min before {what}"
        )
    return "; ".join(parts) + "." if parts else ""
