"""Plan snapshot history in the lake: write only new shapes, keep the last N distinct shapes per query.

A plan row is written when a (queryid, source)'s shape differs from the last stored one (or, with
``cost_change_ratio``, its estimated cost moved that much on the same shape), so an unchanged plan costs
nothing per cycle; ``captured_at`` of a row is the first time that shape was seen in its run
(A → B → A is three rows). ``bound_plan_history`` keeps, per (instance, queryid, source), the unbroken run
of latest rows that holds the last ``max_shapes`` distinct shapes; the writer applies it after each write
and rewrites only the files that lost rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from jobs.lake.io import read_file, read_table, stem_for, usable_files, write_table
from jobs.schemas.collected import PLAN_SNAPSHOTS

HISTORY_KEY: tuple[str, ...] = ("instance", "queryid", "source")


def new_shape_rows(
    candidates: pl.DataFrame, stored: pl.DataFrame, cost_change_ratio: float = 0.0
) -> pl.DataFrame:
    """Rows of ``candidates`` whose shape differs from the previous one for its (instance, queryid, source),
    or, with ``cost_change_ratio`` > 1, whose estimated total cost moved by that factor or more either way
    on the same shape (the plan diff can then show the cost change that a shape-only history never kept).

    ``stored`` holds at least instance, queryid, source, captured_at, shape_hash (and total_cost for the
    cost rule) of rows already in the lake; the previous row of a candidate is the stored latest one or
    the candidate just before it.
    """
    if candidates.is_empty():
        return candidates
    key = list(HISTORY_KEY)
    with_cost = cost_change_ratio > 1 and "total_cost" in candidates.columns
    stored_cost = pl.col("total_cost") if "total_cost" in stored.columns else pl.lit(None, pl.Float64)
    latest = (
        stored.select([*key, "captured_at", "shape_hash", stored_cost.cast(pl.Float64).alias("total_cost")])
        .sort("captured_at")
        .group_by(key, maintain_order=True)
        .agg(
            pl.col("shape_hash").last().alias("_stored_shape"),
            pl.col("total_cost").last().alias("_stored_cost"),
        )
    )
    cost = pl.col("total_cost") if with_cost else pl.lit(None, pl.Float64)
    ordered = (
        candidates.with_row_index("_order")
        .sort([*key, "captured_at", "_order"])
        .join(latest, on=key, how="left", nulls_equal=True)
        .with_columns(
            pl.col("shape_hash")
            .shift(1)
            .over(key)
            .fill_null(pl.col("_stored_shape"))
            .alias("_previous_shape"),
            cost.cast(pl.Float64)
            .shift(1)
            .over(key)
            .fill_null(pl.col("_stored_cost"))
            .alias("_previous_cost"),
            cost.cast(pl.Float64).alias("_cost"),
        )
    )
    low = pl.min_horizontal("_cost", "_previous_cost")
    high = pl.max_horizontal("_cost", "_previous_cost")
    cost_moved = (
        pl.lit(with_cost)
        & (low > 0)
        & pl.col("_cost").is_not_null()
        & pl.col("_previous_cost").is_not_null()
        & (high >= low * cost_change_ratio)
    ).fill_null(False)
    kept = ordered.filter(
        pl.col("_previous_shape").is_null() | (pl.col("_previous_shape") != pl.col("shape_hash")) | cost_moved
    )
    return kept.sort("_order").drop(
        "_order", "_stored_shape", "_stored_cost", "_previous_shape", "_previous_cost", "_cost"
    )


ROWS_PER_SHAPE = 4
"""A query's history keeps at most ``max_shapes * ROWS_PER_SHAPE`` rows: a plan flipping between two shapes,
or a shape whose cost keeps moving (``cost_change_ratio``), must not grow it without end."""


def bound_plan_history(snapshots: pl.DataFrame, max_shapes: int = 5) -> pl.DataFrame:
    """Keep, per (instance, queryid, source), the latest rows that hold at most ``max_shapes`` distinct
    shapes (and at most ``max_shapes * ROWS_PER_SHAPE`` rows): an unbroken run back from the newest row.

    Keeping every row of the last N shapes instead left holes: in A → B → C → A, dropping B kept the first
    A, and its successor read as A → C, a change that never happened (issue 21)."""
    if max_shapes < 1:
        raise ValueError(f"max_shapes must be >= 1, got {max_shapes}")
    if snapshots.is_empty():
        return snapshots
    key = list(HISTORY_KEY)
    newest_first = snapshots.with_row_index("_order").sort([*key, "captured_at", "_order"], descending=True)
    ranked = newest_first.with_columns(
        pl.col("shape_hash").is_first_distinct().cast(pl.Int64).cum_sum().over(key).alias("_shapes_since"),
        pl.int_range(pl.len()).over(key).alias("_rows_since"),
    )
    return (
        ranked.filter(
            (pl.col("_shapes_since") <= max_shapes) & (pl.col("_rows_since") < max_shapes * ROWS_PER_SHAPE)
        )
        .sort("_order")
        .drop("_order", "_shapes_since", "_rows_since")
    )


@dataclass(frozen=True)
class SnapshotWrite:
    """What one write did: rows offered, new-shape rows written, rows pruned by the bound, files."""

    offered_rows: int
    written_rows: int
    pruned_rows: int
    files: list[Path]


_KEY_COLUMNS = ["instance", "queryid", "source", "captured_at", "shape_hash"]


def stored_snapshot_keys(lake_root: Path, instance: str, *extra: str) -> pl.DataFrame:
    """The key columns (and ``extra`` ones, e.g. total_cost) of an instance's stored plan rows."""
    return read_table(
        lake_root,
        PLAN_SNAPSHOTS,
        lambda plans: plans.filter(pl.col("instance") == instance).select([*_KEY_COLUMNS, *extra]),
    )


def store_snapshot_rows(
    lake_root: Path,
    instance: str,
    rows: pl.DataFrame,
    stem: str,
    max_shapes: int = 5,
    cost_change_ratio: float = 0.0,
) -> SnapshotWrite:
    """Write the new-shape (and, with ``cost_change_ratio``, moved-cost) rows of one instance (one file per
    date), then apply the bounded history."""
    rows = rows.with_columns(pl.lit(instance).alias("instance"))
    stored = stored_snapshot_keys(lake_root, instance, "total_cost")
    fresh = new_shape_rows(rows, stored, cost_change_ratio)
    files: list[Path] = []
    if not fresh.is_empty():
        dated = fresh.with_columns(pl.col("captured_at").dt.strftime("%Y-%m-%d").alias("date"))
        for (date,), part in dated.group_by("date", maintain_order=True):
            files.append(
                write_table(
                    lake_root,
                    PLAN_SNAPSHOTS,
                    part.drop("date"),
                    {"instance": instance, "date": str(date)},
                    stem,
                )
            )
    pruned = _prune_history(lake_root, instance, max_shapes) if not fresh.is_empty() else 0
    return SnapshotWrite(rows.height, fresh.height, pruned, files)


def _prune_history(lake_root: Path, instance: str, max_shapes: int) -> int:
    keys = stored_snapshot_keys(lake_root, instance)
    kept = bound_plan_history(keys, max_shapes)
    if kept.height == keys.height:
        return 0
    dropped = keys.join(kept, on=_KEY_COLUMNS, how="anti", nulls_equal=True).drop("instance")
    removed = 0
    folder_mark = f"instance={instance}"
    for path in usable_files(lake_root, PLAN_SNAPSHOTS):
        if path.parent.parent.name != folder_mark:
            continue
        frame = read_file(lake_root, PLAN_SNAPSHOTS, path)
        if frame is None:  # unreadable: quarantined, like any bad lake file
            continue
        left = frame.join(dropped, on=_KEY_COLUMNS[1:], how="anti", nulls_equal=True)
        if left.height == frame.height:
            continue
        removed += frame.height - left.height
        if left.is_empty():
            path.unlink()
        else:
            date = path.parent.name.removeprefix("date=")
            write_table(lake_root, PLAN_SNAPSHOTS, left, {"instance": instance, "date": date}, path.stem)
    return removed


def snapshot_stem(ts: datetime, tag: str) -> str:
    return f"{stem_for(ts)}-{tag}"
