"""Per-execution drift next to everything else the radar shows (pure: frames in, frames out).

``execution_drift`` (jobs/schemas/analysed.py) holds one row per scoring run x (instance, query_hash,
metric). Here:
the latest scoring of each pair (what the DuckDB view ``execution_drift_latest`` shows), and the flags of a
query's metrics joined onto any frame with ``instance`` and ``fingerprint`` (findings, regressions, alert
lists), keyed by ``query_hash = jobs.drift.scorer.query_hash(fingerprint)``. A query never scored gets
null flags (shown as "–"), never an error; insufficient_samples rows are a WARN like any other, kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from jobs.drift.scorer import BLOCK, INSUFFICIENT_SAMPLES, METRICS, WARN, query_hash
from jobs.schemas.analysed import EXECUTION_DRIFT

PAIR_KEY = ("instance", "query_hash", "metric")
DRIFT_FLAG_COLUMNS: tuple[str, ...] = tuple(f"drift_{metric}" for metric in METRICS)
"""drift_cost, drift_latency, drift_cardinality: the latest flag of that metric, or null."""
NOT_SCORED = "–"
PLAN_CHANGED_COLUMN = "drift_plan_changed"
"""True when the query's latest scoring ran a plan shape its baseline's window never did (the design's
stronger signal beside a BLOCK); null when unknown."""


def latest_execution_drift(drift: pl.DataFrame | None) -> pl.DataFrame:
    """The newest scoring of each (instance, query_hash, metric), every flag and reason kept (an
    insufficient_samples WARN included); an empty or missing table gives an empty frame of the shape."""
    if drift is None or drift.is_empty():
        return EXECUTION_DRIFT.empty()
    return (
        drift.sort("scored_at", *PAIR_KEY, descending=[True, False, False, False], nulls_last=True)
        .unique(list(PAIR_KEY), keep="first", maintain_order=True)
        .sort(*PAIR_KEY)
    )


def query_hash_column(fingerprint: str = "fingerprint") -> pl.Expr:
    """jobs.drift.scorer.query_hash of each fingerprint (null stays null)."""
    return pl.col(fingerprint).map_elements(query_hash, return_dtype=pl.String(), skip_nulls=True)


def with_drift_flags(frame: pl.DataFrame, drift_latest: pl.DataFrame | None) -> pl.DataFrame:
    """``frame`` (with ``instance`` and ``fingerprint``) plus one column per metric (DRIFT_FLAG_COLUMNS):
    the latest execution_drift flag of that query on that instance, null when it was never scored."""
    if frame.is_empty() or "fingerprint" not in frame.columns:
        return frame.with_columns(
            *(pl.lit(None, pl.String()).alias(c) for c in DRIFT_FLAG_COLUMNS),
            pl.lit(None, pl.Boolean()).alias(PLAN_CHANGED_COLUMN),
        )
    latest = latest_execution_drift(drift_latest)
    flags = (
        latest.select("instance", "query_hash", pl.format("drift_{}", "metric").alias("column"), "flag")
        .filter(pl.col("column").is_in(list(DRIFT_FLAG_COLUMNS)))
        .pivot("column", index=["instance", "query_hash"], values="flag")
        if latest.height
        else pl.DataFrame(schema={"instance": pl.String(), "query_hash": pl.String()})
    )
    for column in DRIFT_FLAG_COLUMNS:
        if column not in flags.columns:
            flags = flags.with_columns(pl.lit(None, pl.String()).alias(column))
    if "plan_changed" not in latest.columns:  # rows scored before the column: unknown
        latest = latest.with_columns(pl.lit(None, pl.Boolean()).alias("plan_changed"))
    # any metric's row saying so (max of booleans: null only when every row is unknown)
    changed = latest.group_by("instance", "query_hash").agg(pl.col("plan_changed").max())
    flags = flags.join(changed, on=["instance", "query_hash"], how="left").rename(
        {"plan_changed": PLAN_CHANGED_COLUMN}
    )
    dropped = [c for c in (*DRIFT_FLAG_COLUMNS, PLAN_CHANGED_COLUMN) if c in frame.columns]
    keyed = frame.drop(dropped).with_columns(query_hash_column().alias("_drift_query_hash"))
    return keyed.join(
        flags.select(
            "instance",
            pl.col("query_hash").alias("_drift_query_hash"),
            *DRIFT_FLAG_COLUMNS,
            PLAN_CHANGED_COLUMN,
        ),
        on=["instance", "_drift_query_hash"],
        how="left",
    ).drop("_drift_query_hash")


def drift_flags_text(row: dict[str, object]) -> str:
    """``latency BLOCK · cost PASS · cardinality – · plan shape changed``: a row's drift flags in words,
    "–" where not scored, and whether the query ran a plan shape its baseline never did."""
    text = " · ".join(f"{metric} {row.get(f'drift_{metric}') or NOT_SCORED}" for metric in METRICS)
    return text + (" · plan shape changed" if row.get(PLAN_CHANGED_COLUMN) is True else "")


FLAG_ORDER = {"BLOCK": 0, "WARN": 1, "PASS": 2}


@dataclass(frozen=True)
class WeekDrift:
    """What the weekly report says about per-execution drift (``week_drift``)."""

    scored_pairs: int
    """(instance, query_hash, metric) pairs scored at least once in the week (0: "no per-execution drift
    scored")."""
    latest_counts: dict[str, int]
    """Per flag, the pairs whose latest scoring of the week had it."""
    flagged: pl.DataFrame
    """One row per pair WARN or BLOCK at some scoring of the week for its distributions (not for too few
    samples): worst flag, largest JS and PSI, baseline, how often, first and latest flagged, latest flag."""
    insufficient_pairs: int
    """Pairs whose latest scoring of the week was WARN insufficient_samples: too few samples to judge."""


def week_drift(drift: pl.DataFrame | None, start: datetime, end: datetime) -> WeekDrift:
    """Pure: the week's execution_drift rows (``start <= scored_at < end``) summarised for the report."""
    week = (
        drift.filter(pl.col("scored_at").is_between(start, end, closed="left"))
        if drift is not None and drift.height
        else EXECUTION_DRIFT.empty()
    )
    latest = latest_execution_drift(week)
    counts = {flag: latest.filter(pl.col("flag") == flag).height for flag in FLAG_ORDER}
    insufficient = latest.filter(pl.col("reason") == INSUFFICIENT_SAMPLES).height
    shaped = week.filter(
        pl.col("flag").is_in([WARN, BLOCK]) & (pl.col("reason").fill_null("") != INSUFFICIENT_SAMPLES)
    )
    latest_flag = latest.select(*PAIR_KEY, pl.col("flag").alias("latest_flag"))
    flagged = (
        shaped.sort("scored_at")
        .group_by(list(PAIR_KEY), maintain_order=True)
        .agg(
            pl.when((pl.col("flag") == BLOCK).any())
            .then(pl.lit(BLOCK))
            .otherwise(pl.lit(WARN))
            .alias("flag"),
            pl.col("fingerprint").last(),
            pl.col("queryid").drop_nulls().last(),
            pl.col("js").max(),
            pl.col("psi").max(),
            pl.col("baseline_version").last(),
            pl.col("plan_changed").max(),  # a flagged scoring beside a new plan shape (null: unknown)
            pl.len().alias("scorings_flagged"),
            pl.col("scored_at").min().alias("first_flagged_at"),
            pl.col("scored_at").max().alias("last_flagged_at"),
        )
        .join(latest_flag, on=list(PAIR_KEY), how="left")
        .with_columns(pl.col("flag").replace_strict(FLAG_ORDER, return_dtype=pl.Int64).alias("_order"))
        .sort("_order", "js", *PAIR_KEY, descending=[False, True, False, False, False], nulls_last=True)
        .drop("_order")
    )
    return WeekDrift(latest.height, counts, flagged, insufficient)
