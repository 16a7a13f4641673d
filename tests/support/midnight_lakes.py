"""A lake whose snapshots straddle midnight, for the samples job and the Dagster assets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.lake.io import write_table
from jobs.schemas.collected import SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from tests.support.lakes import SNAPSHOT_BOOT, snapshot_frame, snapshot_row

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
BOOT = SNAPSHOT_BOOT


def snap(step: int, calls: int, exec_ms: float, **over: Any) -> dict[str, Any]:
    return snapshot_row(
        str(over.pop("instance", "alpha")),
        over.pop("captured_at", T0 + timedelta(seconds=10 * step)),
        over.pop("queryid", -42),
        calls,
        exec_ms,
        boot=BOOT,
        **over,
    )


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return snapshot_frame(rows)


def runs_frame(deallocs: list[int], instance: str = "alpha") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "instance": [instance] * len(deallocs),
            "captured_at": [T0 + timedelta(seconds=10 * i) for i in range(len(deallocs))],
            "status": ["ok"] * len(deallocs),
            "dealloc": deallocs,
        },
        schema_overrides={"captured_at": pl.Datetime("us", "UTC")},
    )


def write_midnight_lake(lake_root: Path) -> None:
    """Two snapshots on 11-29 (one interval) and one across midnight into 11-30 (queryid 1)."""
    late = T0.replace(hour=23, minute=59, second=50)
    rows = [snap(0, 1, 1.0), snap(1, 5, 9.0), snap(0, 10, 10.0, captured_at=late), snap(0, 20, 30.0)]
    rows[2]["queryid"] = 1
    rows[3].update(queryid=1, captured_at=late + timedelta(seconds=20))
    snaps = frame(rows)
    for (instance, captured_at), part in snaps.group_by("instance", "captured_at"):
        date = captured_at.strftime("%Y-%m-%d")  # type: ignore[union-attr]
        write_table(
            lake_root,
            STATEMENT_SNAPSHOTS,
            part.drop("instance"),
            {"instance": instance, "date": date},
            captured_at.strftime("%H%M%S"),
        )  # type: ignore[union-attr]
    write_table(
        lake_root,
        SNAPSHOT_RUNS,
        runs_frame([0, 0]).drop("instance"),
        {"instance": "alpha", "date": "2026-11-29"},
        "r",
    )
