"""Findings rows and lakes holding them, for the alert tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.lake import io as lake
from jobs.schemas.analysed import FINDING_STATES

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def finding_row(n: int, **change: Any) -> dict[str, Any]:
    """A finding_states row: finding n on db1, onset n minutes after AT."""
    return {
        "finding_id": f"{n:016x}",
        "run_id": "r1",
        "computed_at": AT + timedelta(hours=1),
        "status": "open",
        "instance": "db1",
        "series": f"fp{n}",
        "fingerprint": f"fp{n}",
        "queryid": 100 + n,
        "query": f"select * from orders_{n} where customer_id = $1",
        "onset": AT + timedelta(minutes=n),
        "detected_change_at": AT + timedelta(minutes=n),
        "analysis": "deploy",
        "deploy_version": "v2",
        "before_mean_ms": 1.5,
        "after_mean_ms": 45.0,
        "p_value": 1e-6,
        **change,
    }


def write_findings(lake_root: Path, rows: list[dict[str, Any]], run: str = "r1") -> None:
    frame = FINDING_STATES.conform(pl.DataFrame([{**r, "run_id": run} for r in rows]))
    lake.write_table(lake_root, FINDING_STATES, frame, {"date": "2026-11-29"}, f"states-{run}")
