"""Tiny execution_drift and table_stats_snapshots frames (the shapes of jobs/schemas.py) for the tests of
what publishes per-execution drift: views, report, alerts, flags next to findings, ANALYZE mentions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs import lake
from jobs.drift.scorer import query_hash
from jobs.schemas import EXECUTION_DRIFT, TABLE_STATS_SNAPSHOTS

SCORED = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # Monday of 2026-W49


def drift_row(
    fingerprint: str,
    metric: str,
    flag: str,
    *,
    instance: str = "db1",
    scored_at: datetime = SCORED,
    reason: str | None = None,
    js: float = 0.05,
    psi: float = 0.05,
    n: int = 500,
    baseline_version: str = "v1",
    queryid: int | None = 111,
    **over: Any,
) -> dict[str, Any]:
    """One execution_drift row of ``fingerprint`` (query_hash its SHA-256) scored at ``scored_at``."""
    row: dict[str, Any] = {
        "scored_at": scored_at,
        "instance": instance,
        "query_hash": query_hash(fingerprint),
        "metric": metric,
        "fingerprint": fingerprint,
        "queryid": queryid,
        "baseline_version": baseline_version,
        "window_start": scored_at - timedelta(minutes=10),
        "window_end": scored_at,
        "shard": 0,
        "n_baseline": n,
        "n_candidate": n,
        "js": js,
        "psi": psi,
        "wasserstein": 1.0,
        "flag": flag,
        "reason": reason or {"PASS": "within_bands", "WARN": "js_warn", "BLOCK": "js_block"}[flag],
        "psi_data_quality": False,
        "profile": "calibrated",
        "js_noise": 0.01,
        "psi_noise": 0.01,
    }
    row.update(over)
    return row


def drift_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return EXECUTION_DRIFT.conform(pl.DataFrame(rows, schema_overrides=dict(EXECUTION_DRIFT.polars_schema)))


def write_drift(lake_root: Path, rows: list[dict[str, Any]]) -> None:
    """One execution_drift file per scoring run (scored_at), as the stage writes them."""
    frame = drift_frame(rows)
    for (scored,), part in frame.group_by("scored_at", maintain_order=True):
        lake.write_table(
            lake_root,
            EXECUTION_DRIFT,
            part,
            {"date": scored.date().isoformat()},  # type: ignore[union-attr]
            lake.stem_for(scored),  # type: ignore[arg-type]
        )


def stats_row(
    captured_at: datetime,
    relname: str,
    *,
    last_analyze: datetime | None = None,
    last_autoanalyze: datetime | None = None,
    instance: str = "db1",
    dbname: str = "app",
    relid: int = 16384,
    schemaname: str = "public",
) -> dict[str, Any]:
    return {
        "instance": instance,
        "captured_at": captured_at,
        "dbname": dbname,
        "relid": relid,
        "schemaname": schemaname,
        "relname": relname,
        "n_live_tup": 1000,
        "n_mod_since_analyze": 0,
        "last_analyze": last_analyze,
        "last_autoanalyze": last_autoanalyze,
        "analyze_count": 1,
        "autoanalyze_count": 0,
    }


def stats_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    schema = TABLE_STATS_SNAPSHOTS.scan_schema()
    return pl.DataFrame(rows, schema={k: schema[k] for k in rows[0]})


def write_stats(lake_root: Path, rows: list[dict[str, Any]]) -> None:
    """One table_stats_snapshots file per (instance, snapshot)."""
    frame = stats_frame(rows)
    for (instance, captured), part in frame.group_by("instance", "captured_at", maintain_order=True):
        lake.write_table(
            lake_root,
            TABLE_STATS_SNAPSHOTS,
            part.drop("instance"),
            {"instance": str(instance), "date": captured.date().isoformat()},  # type: ignore[union-attr]
            lake.stem_for(captured),  # type: ignore[arg-type]
        )
