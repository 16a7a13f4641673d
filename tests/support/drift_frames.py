"""Inline frames of the per-execution drift stage's lake tables (execution_samples, table_stats_snapshots,
execution_drift), in the shapes of jobs/schemas/analysed.py, and writers putting them in a test lake through
jobs.lake.io: for the stage's tests (scoring, checks, Dagster) and for what publishes drift (views, report,
alerts, flags next to findings, ANALYZE mentions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.drift.scorer import query_hash
from jobs.lake import io as lake
from jobs.schemas.analysed import EXECUTION_DRIFT
from jobs.schemas.collected import EXECUTION_SAMPLES, TABLE_STATS_SNAPSHOTS

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
TS = pl.Datetime("us", "UTC")
SCORED = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # Monday of 2026-W49


def executions(
    fingerprint: str,
    start: datetime,
    latency: Sequence[float] | np.ndarray,
    *,
    cost: Sequence[float] | np.ndarray | float | None = 10.0,
    cardinality: Sequence[float] | np.ndarray | float | None = 1.0,
    instance: str = "alpha",
    queryid: int = 7,
    step: timedelta = timedelta(seconds=1),
    session: str | None = None,
) -> pl.DataFrame:
    """One execution_samples row per latency value, logged at start + (i + 1) x step (so every row lies
    in (start, start + n x step]); cost / cardinality: one number for all, one per row, or None (null)."""
    n = len(latency)

    def column(value: Sequence[float] | np.ndarray | float | None) -> list[float | None]:
        if value is None:
            return [None] * n
        if isinstance(value, int | float):
            return [float(value)] * n
        return [float(v) for v in value]

    return pl.DataFrame(
        {
            "instance": instance,
            "logged_at": [start + (i + 1) * step for i in range(n)],
            "session_id": session or f"{fingerprint}-{start:%H%M%S}",
            "line_num": list(range(n)),
            "dbname": "app",
            "queryid": queryid,
            "fingerprint": fingerprint,
            "query_hash": query_hash(fingerprint),
            "latency_ms": [float(v) for v in latency],
            "total_cost": column(cost),
            "cardinality": column(cardinality),
        },
        schema_overrides={
            "logged_at": TS,
            "total_cost": pl.Float64,
            "cardinality": pl.Float64,
            "queryid": pl.Int64,
        },
    )


def write_executions(lake_root: Path, frame: pl.DataFrame, stem: str = "s") -> None:
    """execution_samples files, one per (instance, date) of ``frame``."""
    dated = frame.with_columns(pl.col("logged_at").dt.date().cast(pl.String).alias("date"))
    for (instance, day), part in dated.group_by("instance", "date"):
        parts = {"instance": str(instance), "date": str(day)}
        lake.write_table(lake_root, EXECUTION_SAMPLES, part.drop("instance", "date"), parts, stem)


def table_stats(rows: list[dict[str, object]]) -> pl.DataFrame:
    """table_stats_snapshots rows (with instance); absent columns null."""
    schema = {"instance": pl.String(), **dict(TABLE_STATS_SNAPSHOTS.polars_schema)}
    full = [{k: row.get(k) for k in schema} for row in rows]
    return pl.DataFrame(full, schema=schema)


def write_table_stats(lake_root: Path, frame: pl.DataFrame, stem: str = "t") -> None:
    dated = frame.with_columns(pl.col("captured_at").dt.date().cast(pl.String).alias("date"))
    for (instance, day), part in dated.group_by("instance", "date"):
        parts = {"instance": str(instance), "date": str(day)}
        lake.write_table(lake_root, TABLE_STATS_SNAPSHOTS, part.drop("instance", "date"), parts, stem)


def drift_rows(
    flags: Sequence[tuple[str, str]], scored_at: datetime, *, instance: str = "alpha", n: int = 500
) -> pl.DataFrame:
    """execution_drift-like rows: one pair (query i, latency) per (flag, reason), scored at ``scored_at``."""
    return pl.DataFrame(
        {
            "scored_at": [scored_at] * len(flags),
            "instance": instance,
            "query_hash": [query_hash(f"q{i}") for i in range(len(flags))],
            "metric": "latency",
            "flag": [f for f, _ in flags],
            "reason": [r for _, r in flags],
            "n_baseline": [0 if r == "no_baseline" else n for _, r in flags],
            "n_candidate": [50 if r == "insufficient_samples" else n for _, r in flags],
        },
        schema_overrides={"scored_at": TS},
    )


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
    return table_stats(rows)


def write_stats(lake_root: Path, rows: list[dict[str, Any]]) -> None:
    """One table_stats_snapshots file per (instance, snapshot)."""
    frame = stats_frame(rows)
    for (_, captured), part in frame.group_by("instance", "captured_at", maintain_order=True):
        write_table_stats(lake_root, part, lake.stem_for(captured))  # type: ignore[arg-type]
