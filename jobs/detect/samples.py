"""Interval samples: per-interval deltas of pg_stat_statements counters between consecutive snapshots.

A cumulative counter is only comparable within one server incarnation and one life of an entry, so every
delta is checked before it becomes a sample. An invalid delta is dropped and counted by reason, never turned
into a negative or huge sample. The work is vectorized polars: rows are sorted by entry and time, the
predecessor of each row is the previous row of the same entry (a shift, not a per-query loop), and the
instances are processed one at a time so memory stays bounded by the largest instance."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import polars as pl

from jobs.detect.config import SampleConfig
from jobs.schemas.collected import (
    QUERY_SAMPLES,
    SAMPLE_DELTAS,
    SAMPLE_FRONTIER,
    STATEMENT_SNAPSHOTS,
)

ENTRY_KEY: tuple[str, ...] = ("instance", "dbid", "userid", "queryid", "toplevel")

# Why a delta was dropped, in the order the checks are applied (a delta gets the first reason that holds).
DROP_REASONS: tuple[str, ...] = (
    "server_replaced",  # system_identifier changed: another server answers under this instance name
    "server_restarted",  # postmaster start time changed: counters restarted from zero
    "stats_reset",  # pg_stat_statements_info.stats_reset changed
    "entry_recreated",  # stats_since changed: the entry was evicted (or reset) and made again
    "clock_skew",  # server-clock interval <= 0, the server-collector clock offset moved too much, or both
    # clocks were stepped together (the collector's clock moved unlike its boot clock)
    "counter_decreased",  # any cumulative counter went down
    "evicted_in_interval",  # dealloc grew (only when SampleConfig.drop_when_dealloc_grew)
    "below_min_executions",  # valid, but fewer calls than SampleConfig.min_executions
)

_SNAPSHOT_COLUMNS: tuple[str, ...] = (
    *ENTRY_KEY,
    "captured_at",
    "collector_clock",
    "collector_boot",
    "collector_uptime_s",
    "system_identifier",
    "postmaster_start",
    "stats_reset",
    "stats_since",
    *SAMPLE_DELTAS,
)


@dataclass(frozen=True)
class SamplesResult:
    """Samples in the ``query_samples`` schema plus ``instance``, and drop counts per (instance, reason)."""

    samples: pl.DataFrame
    dropped_counts: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"instance": pl.String, "reason": pl.String, "count": pl.UInt32}
        )
    )
    interval_counts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=INTERVAL_COUNTS))
    """Per (instance, interval_end, reason): entry intervals sampled (reason ``sampled``) or dropped; the
    job sums them per day into ``collection_health`` (``collection_health_rows``)."""


SAMPLED = "sampled"
INTERVAL_COUNTS: dict[str, pl.DataType] = {
    "instance": pl.String(),
    "interval_end": pl.Datetime("us", "UTC"),
    "reason": pl.String(),
    "intervals": pl.Int64(),
}


def collection_health_rows(interval_counts: pl.DataFrame) -> pl.DataFrame:
    """Pure: ``interval_counts`` (of one or more instances) summed per (instance, day, reason): the
    collection_health rows, so "how many resets this week" is a sum in SQL, not a rerun of the job."""
    return (
        interval_counts.with_columns(pl.col("interval_end").dt.date().alias("day"))
        .group_by("instance", "day", "reason")
        .agg(
            pl.col("intervals").sum(),
            pl.col("interval_end").n_unique().cast(pl.Int64).alias("snapshots"),
            pl.col("interval_end").min().alias("first_interval_end"),
            pl.col("interval_end").max().alias("last_interval_end"),
        )
        .sort("instance", "day", "reason")
    )


class SamplesError(ValueError):
    """Snapshot input cannot be differenced; the message names the instance and column."""


def _check_columns(frame_columns: Iterable[str], needed: Iterable[str], what: str) -> None:
    missing = sorted(set(needed) - set(frame_columns))
    if missing:
        raise SamplesError(f"{what}: missing columns {missing}")


def _dealloc_per_snapshot(runs: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """One dealloc value per (instance, captured_at) of the successful snapshot runs."""
    lazy = runs.lazy()
    _check_columns(lazy.collect_schema().names(), ("instance", "captured_at", "dealloc"), "snapshot_runs")
    names = lazy.collect_schema().names()
    if "status" in names:
        lazy = lazy.filter(pl.col("status").fill_null("ok") == "ok")
    return lazy.select("instance", "captured_at", "dealloc").unique(["instance", "captured_at"], keep="first")


def _changed(column: str) -> pl.Expr:
    """Null-safe inequality of a column and its predecessor (null to a value counts as a change)."""
    return pl.col(column).ne_missing(pl.col(column).shift(1))


def _clock_columns() -> tuple[pl.Expr, pl.Expr]:
    """(``_offset``: the server's clock minus the collector's; ``_booted``: when the collector booted, by its
    clock). Both clocks stepped together leave the offset alone; the collector's boot clock is never
    stepped, so ``_booted`` moves by the step (compared within one collector boot only)."""
    offset = ((pl.col("captured_at") - pl.col("collector_clock")).dt.total_microseconds() / 1e6).alias(
        "_offset"
    )
    booted = (
        pl.col("collector_clock").dt.epoch("us").cast(pl.Float64) * 1e-6 - pl.col("collector_uptime_s")
    ).alias("_booted")
    return offset, booted


def _evictions() -> pl.Expr:
    """Entries pg_stat_statements evicted between a row and its predecessor (its ``dealloc`` counter)."""
    return (pl.col("dealloc") - pl.col("dealloc").shift(1)).alias("evictions")


def _drop_reason(config: SampleConfig, label: Callable[[str], pl.Expr], none: pl.Expr) -> pl.Expr:
    """Why an interval (a row and its predecessor of one entry, in entry order, with ``_offset`` and
    ``_booted``) is not a sample, as ``label(reason)``; ``none`` where it is one. One rule for the general
    differencing (reasons as text) and the entry-order one (reasons as bytes until counted)."""
    skew = config.max_clock_skew_s
    decreased = pl.any_horizontal([(pl.col(c) < pl.col(c).shift(1)).fill_null(False) for c in SAMPLE_DELTAS])
    reason = (
        pl.when(_changed("system_identifier"))
        .then(label("server_replaced"))
        .when(_changed("postmaster_start"))
        .then(label("server_restarted"))
        .when(_changed("stats_reset"))
        .then(label("stats_reset"))
        .when(_changed("stats_since"))
        .then(label("entry_recreated"))
        .when(
            (pl.col("captured_at") <= pl.col("captured_at").shift(1))
            | ((pl.col("_offset") - pl.col("_offset").shift(1)).abs() > skew).fill_null(False)
            | (
                pl.col("collector_boot").eq(pl.col("collector_boot").shift(1))
                & ((pl.col("_booted") - pl.col("_booted").shift(1)).abs() > skew)
            ).fill_null(False)
        )
        .then(label("clock_skew"))
        .when(decreased)
        .then(label("counter_decreased"))
        .otherwise(none)
    )
    if config.drop_when_dealloc_grew:
        evicted = reason.is_null() & (_evictions() > 0)
        reason = pl.when(evicted).then(label("evicted_in_interval")).otherwise(reason)
    return reason


def samples_from_snapshots(
    snapshots: pl.LazyFrame | pl.DataFrame,
    runs: pl.LazyFrame | pl.DataFrame | None,
    config: SampleConfig = SampleConfig(),
) -> SamplesResult:
    """Difference consecutive snapshots of each entry into interval samples; pure, any number of instances.

    ``snapshots`` carries the statement_snapshots columns plus ``instance``; ``runs`` the snapshot_runs
    columns plus ``instance`` (only ``dealloc`` is used from it; None means eviction is unknown).
    """
    return samples_of_prepared(prepared_snapshots(snapshots, runs).collect(), config)


def prepared_snapshots(
    snapshots: pl.LazyFrame | pl.DataFrame, runs: pl.LazyFrame | pl.DataFrame | None
) -> pl.LazyFrame:
    """The snapshot columns the differencing needs (missing ones null) with each snapshot's ``dealloc``."""
    lazy = snapshots.lazy()
    names = lazy.collect_schema().names()
    _check_columns(
        names, ("instance", "captured_at", "dbid", "userid", "queryid", "calls"), "statement_snapshots"
    )
    selected = [
        (pl.col(c) if c in names else pl.lit(None, dtype=_dtype_of(c))).alias(c) for c in _SNAPSHOT_COLUMNS
    ]
    lazy = lazy.filter(pl.col("queryid").is_not_null()).select(selected)
    if "toplevel" not in names:
        lazy = lazy.with_columns(pl.col("toplevel").fill_null(True))
    if runs is not None:
        return lazy.join(_dealloc_per_snapshot(runs), on=["instance", "captured_at"], how="left")
    return lazy.with_columns(pl.lit(None, dtype=pl.Int64).alias("dealloc"))


def samples_of_prepared(prepared: pl.DataFrame, config: SampleConfig) -> SamplesResult:
    return _samples_of_prepared(prepared, config, None)[0]


def samples_and_frontier(prepared: pl.DataFrame, config: SampleConfig) -> tuple[SamplesResult, pl.DataFrame]:
    """``samples_of_prepared`` and ``frontier_of(prepared, config.frontier_keep)`` of a rebuild, the same
    rows. Why together: the differencing already holds each entry's rows in order, so an instance's
    frontier is the last row of each entry there instead of a group-by over every snapshot."""
    result, frontier = _samples_of_prepared(prepared, config, config.frontier_keep)
    return result, frontier if frontier is not None else frontier_of(prepared, config.frontier_keep)


def _samples_of_prepared(
    prepared: pl.DataFrame, config: SampleConfig, keep: timedelta | None
) -> tuple[SamplesResult, pl.DataFrame | None]:
    """The samples, and the frontier when ``keep`` is given and one instance's differencing gave it."""
    frontier = None
    if prepared["instance"].n_unique() <= 1:  # the job's case: no partition copy
        parts = [prepared] if prepared.height else []
    else:
        parts = [part for _, part in sorted(prepared.partition_by("instance", as_dict=True).items())]
    results = []
    for part in parts:
        fast = _entry_ordered_samples(part, config, keep if len(parts) == 1 else None)
        results.append(fast[:3] if fast is not None else _instance_samples(part, config))
        frontier = fast[3] if fast is not None and len(parts) == 1 else None
    if not results:
        return SamplesResult(samples=_finish_samples(_instance_samples(prepared, config)[0])), None
    samples = pl.concat([r[0].select(_DIFFED_COLUMNS) for r in results])
    dropped = pl.concat([r[1] for r in results]).sort("instance", "reason")
    counts = pl.concat([r[2] for r in results]).sort("instance", "interval_end", "reason")
    result = SamplesResult(samples=_finish_samples(samples), dropped_counts=dropped, interval_counts=counts)
    return result, frontier


# The differenced columns of a valid sample (those ``_finish_samples`` reads), of either differencing.
_DIFFED_COLUMNS: tuple[str, ...] = (
    "instance",
    "interval_start",
    "interval_end",
    "userid",
    "dbid",
    "toplevel",
    "queryid",
    *SAMPLE_DELTAS,
    "evictions",
)


def _instance_samples(
    frame: pl.DataFrame, config: SampleConfig
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Valid deltas, drop counts and per-snapshot interval counts (INTERVAL_COUNTS) of one instance.

    Why one instance at a time: the sort dominates the cost, and without the instance name in the key it
    is about twice as fast; (dbid, userid) are OIDs (< 2^32), so they pack exactly into one UInt64 key.
    """
    packed = (pl.col("dbid").cast(pl.UInt64) * (1 << 32) + pl.col("userid").cast(pl.UInt64)).alias("_db_user")
    # Snapshots are ordered as they were taken (the collector's clock), so a server clock that went
    # backwards shows as a negative interval instead of silently reordering the snapshots.
    taken = pl.coalesce("collector_clock", "captured_at").alias("_taken")
    offset, booted = _clock_columns()
    key = ("queryid", "_db_user", "toplevel")
    ordered = _in_entry_order(frame.with_columns(packed, taken, offset, booted), key).lazy()
    same_entry = pl.all_horizontal([pl.col(k).eq_missing(pl.col(k).shift(1)) for k in key])
    deltas = [(pl.col(c) - pl.col(c).shift(1)).alias(c) for c in SAMPLE_DELTAS]
    evictions = _evictions()
    reason = _drop_reason(config, pl.lit, pl.lit(None, dtype=pl.String))
    diffed = ordered.select(
        pl.col("instance"),
        pl.col("captured_at").shift(1).alias("interval_start"),
        pl.col("captured_at").alias("interval_end"),
        pl.col("userid"),
        pl.col("dbid"),
        pl.col("toplevel"),
        pl.col("queryid"),
        *deltas,
        evictions,
        reason.alias("drop_reason"),
        same_entry.fill_null(False).alias("has_predecessor"),
    ).filter(pl.col("has_predecessor"))
    diffed = diffed.with_columns(
        pl.when(pl.col("drop_reason").is_null() & (pl.col("calls") < config.min_executions))
        .then(pl.lit("below_min_executions"))
        .otherwise(pl.col("drop_reason"))
        .alias("drop_reason")
    )
    out = diffed.collect()
    dropped = (
        out.filter(pl.col("drop_reason").is_not_null())
        .group_by("instance", "drop_reason")
        .agg(pl.len().cast(pl.UInt32).alias("count"))
        .rename({"drop_reason": "reason"})
    )
    counts = (
        out.group_by("instance", "interval_end", pl.col("drop_reason").fill_null(SAMPLED).alias("reason"))
        .agg(pl.len().cast(pl.Int64).alias("intervals"))
        .cast(INTERVAL_COUNTS)  # type: ignore[arg-type]
    )
    return out.filter(pl.col("drop_reason").is_null()), dropped, counts


_TIME_BITS = 44  # 2^44 us is about 203 days of snapshots of one instance in one differencing
_ENTRY_LIMIT = 1 << (63 - _TIME_BITS)


def _in_entry_order(frame: pl.DataFrame, key: tuple[str, ...]) -> pl.DataFrame:
    """``frame`` sorted by ``key``, ``_taken``, ``captured_at`` (nulls last), as one sort of one integer
    where ``_entry_order`` can (else the five-column sort)."""
    found = _entry_order(frame, key)
    if found is None:
        return frame.sort([*key, "_taken", "captured_at"], nulls_last=True)
    # One contiguous chunk per column first: gathering from the many chunks of the snapshot files is
    # slower than copying them together and gathering once.
    return frame.rechunk()[found[0]]


def _entry_order(frame: pl.DataFrame, key: tuple[str, ...]) -> tuple[pl.Series, pl.Series] | None:
    """The rows' order by ``key``, ``_taken``, ``captured_at`` (nulls last) and, in that order, each row's
    entry number (its position among the sorted distinct entries); None where one integer cannot say it.

    Why: a five-column sort of the snapshots was two thirds of the differencing (0.53 of 0.84 s for
    720,000 rows). The entries are few (hundreds), so each row gets its entry's position among the sorted
    distinct entries and the sort key is (entry position, microseconds since the earliest snapshot) packed
    into one UInt64. It is the same order whenever that key is unique and fits: no null ``_taken``, the
    span under 2^44 us, no entry with two snapshots taken at the same moment (captured_at would break
    that tie); otherwise None (the caller sorts the five columns).
    """
    if frame.height < 2 or frame["_taken"].null_count():
        return None
    taken = frame["_taken"].dt.epoch("us")
    first = taken.min()
    if taken.max() - first >= 1 << _TIME_BITS:  # type: ignore[operator]
        return None
    entries = frame.select(key).unique().sort(list(key), nulls_last=True).with_row_index("_entry")
    if entries.height >= _ENTRY_LIMIT:
        return None
    position = frame.select(key).join(
        entries, on=list(key), how="left", nulls_equal=True, maintain_order="left"
    )
    packed = position["_entry"].cast(pl.UInt64) * (1 << _TIME_BITS) + (taken - first).cast(pl.UInt64)
    order = packed.arg_sort()
    ordered = packed.gather(order)
    if (ordered.slice(1) == ordered.slice(0, ordered.len() - 1)).any():
        return None
    return order, ordered // (1 << _TIME_BITS)


# Drop reasons as small integers while differencing (0: none); names only on the counted rows.
_REASON_NAMES: dict[int, str] = dict(enumerate((SAMPLED, *DROP_REASONS)))
_CODE = {reason: i + 1 for i, reason in enumerate(DROP_REASONS)}
# The columns the ordered snapshots need: the instance is one value (added back as a constant), the
# order's own columns are done with.
_ORDERED_COLUMNS: tuple[str, ...] = (*(c for c in _SNAPSHOT_COLUMNS if c != "instance"), "dealloc")


def _code(reason: str) -> pl.Expr:
    return pl.lit(_CODE[reason], dtype=pl.UInt8)


def _entry_ordered_samples(
    frame: pl.DataFrame, config: SampleConfig, keep: timedelta | None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame | None] | None:
    """``_instance_samples`` of one instance whose rows ``_entry_order`` can order (else None), and with
    ``keep`` its frontier (``frontier_of``'s rows) where each entry is one (dbid, userid) pair.

    Why not ``_instance_samples``: that gathered every column, the instance's name included, into entry
    order, compared the three key columns with their predecessors, spelled a drop reason on every row and
    grouped by the instance's name; here only the differenced columns are gathered, an entry boundary is
    a change of the entry number, a reason is a byte until the rows are counted, and the interval
    counts group by (interval end, reason byte) alone. Same rows, same order, same values.
    """
    if not set(_ORDERED_COLUMNS) <= set(frame.columns):
        return None
    taken = pl.coalesce("collector_clock", "captured_at").alias("_taken")
    packed = (pl.col("dbid").cast(pl.UInt64) * (1 << 32) + pl.col("userid").cast(pl.UInt64)).alias("_db_user")
    key = ("queryid", "_db_user", "toplevel")
    found = _entry_order(frame.select(*key[:1], packed, *key[2:], taken, "captured_at"), key)
    if found is None:
        return None
    order, entry = found
    instance = frame["instance"][0]
    ordered = frame.select(_ORDERED_COLUMNS).rechunk()[order].with_columns(entry.alias("_entry"))
    offset, booted = _clock_columns()
    evictions = _evictions()
    reason = _drop_reason(config, _code, pl.lit(None, dtype=pl.UInt8))
    calls = pl.col("calls") - pl.col("calls").shift(1)
    reason = (
        pl.when(reason.is_null() & (calls < config.min_executions))
        .then(_code("below_min_executions"))
        .otherwise(reason)
    )
    diffed = (
        ordered.lazy()
        .with_columns(offset, booted)
        .select(
            pl.col("captured_at").shift(1).alias("interval_start"),
            pl.col("captured_at").alias("interval_end"),
            pl.col("userid"),
            pl.col("dbid"),
            pl.col("toplevel"),
            pl.col("queryid"),
            *[(pl.col(c) - pl.col(c).shift(1)).alias(c) for c in SAMPLE_DELTAS],
            evictions,
            reason.alias("_reason"),
            (pl.col("_entry") == pl.col("_entry").shift(1)).fill_null(False).alias("_predecessor"),
        )
        .filter(pl.col("_predecessor"))
        .collect()
    )
    name = pl.lit(instance, dtype=pl.String).alias("instance")
    counted = (
        diffed.group_by("interval_end", "_reason")
        .agg(pl.len().cast(pl.Int64).alias("intervals"))
        .with_columns(
            name,
            pl.col("_reason")
            .fill_null(0)
            .replace_strict(_REASON_NAMES, return_dtype=pl.String)
            .alias("reason"),
        )
    )
    counts = counted.select(list(INTERVAL_COUNTS)).cast(INTERVAL_COUNTS)  # type: ignore[arg-type]
    dropped = (
        counted.filter(pl.col("_reason").is_not_null())
        .group_by("instance", "reason")
        .agg(pl.col("intervals").sum().cast(pl.UInt32).alias("count"))
    )
    valid = diffed.filter(pl.col("_reason").is_null()).drop("_reason", "_predecessor")
    valid = valid.insert_column(
        0, pl.repeat(instance, valid.height, dtype=pl.String, eager=True).alias("instance")
    )
    frontier = None
    if keep is not None:
        frontier = _ordered_frontier(ordered, instance, keep)
    return valid, dropped, counts, frontier


def _ordered_frontier(ordered: pl.DataFrame, instance: str | None, keep: timedelta) -> pl.DataFrame | None:
    """``frontier_of`` (no previous frontier) of one instance from its rows in entry order: each entry's
    last row. None where an entry is not one (dbid, userid) pair (null or beyond 32 bits: the packed key
    and ``frontier_of``'s group could then differ)."""
    for column in ("dbid", "userid"):
        values = ordered[column]
        if values.null_count() or values.min() < 0 or values.max() >= 1 << 32:  # type: ignore[operator]
            return None
    last = (ordered["_entry"] != ordered["_entry"].shift(-1)).fill_null(True)
    taken = ordered.select(_TAKEN)[:, 0]
    marks = {"watermark_taken": taken.max(), "watermark_captured_at": ordered["captured_at"].max()}
    latest = ordered.filter(last).with_columns(
        pl.lit(instance, dtype=pl.String).alias("instance"),
        _TAKEN.alias("_taken"),
        *[pl.lit(v, dtype=pl.Datetime("us", "UTC")).alias(k) for k, v in marks.items()],
        pl.lit(None, dtype=pl.String).alias("config_digest"),
    )
    latest = latest.filter(pl.col("_taken") >= pl.col("watermark_taken") - keep)
    schema = SAMPLE_FRONTIER.scan_schema()
    return latest.sort(list(ENTRY_KEY), nulls_last=True).select(schema.names()).cast(dict(schema))


# ---------------------------------------------------------------------------------------------------------
# Append: the frontier (each entry's latest differenced snapshot row) is the only state a run needs.

_TAKEN = pl.coalesce("collector_clock", "captured_at")
_PREPARED_COLUMNS: tuple[str, ...] = (*_SNAPSHOT_COLUMNS, "dealloc")
WATERMARKS: tuple[str, ...] = ("watermark_taken", "watermark_captured_at")


def empty_frontier() -> pl.DataFrame:
    """A frontier with no entry (no instance differenced yet), with ``instance``."""
    return pl.DataFrame(schema=SAMPLE_FRONTIER.scan_schema())


def frontier_of(
    prepared: pl.DataFrame, keep: timedelta, previous: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Each entry's latest snapshot row (in the differencing order: collector clock, then server clock) and
    the instance's watermarks: the latest snapshot taken (``watermark_taken``) and the latest server clock
    (``watermark_captured_at``), never behind ``previous``'s. Entries whose latest row was taken more than
    ``keep`` before the watermark are left out: the entry has left pg_stat_statements (the collector
    snapshots every entry every time), and the delta to its next appearance would span ``keep`` or more."""
    rows = prepared.select(_PREPARED_COLUMNS).with_columns(_TAKEN.alias("_taken"))
    marks = rows.group_by("instance").agg(
        pl.col("_taken").max().alias("watermark_taken"),
        pl.col("captured_at").max().alias("watermark_captured_at"),
    )
    if previous is not None and previous.height:
        old = previous.group_by("instance").agg(pl.col(w).max() for w in WATERMARKS)
        marks = (
            pl.concat([marks, old], how="vertical_relaxed")
            .group_by("instance")
            .agg(pl.col(w).max() for w in WATERMARKS)
        )
    # The latest row of each entry found per entry on its clocks alone, then gathered: sorting every
    # column of the snapshots (about 30) by entry cost a full copy and a quarter of the samples job.
    last_rows = (
        rows.select(*ENTRY_KEY, "_taken", "captured_at")
        .with_row_index("_row")
        .group_by(list(ENTRY_KEY))
        .agg(pl.col("_row").sort_by(["_taken", "captured_at"], maintain_order=True).last())
        .sort(list(ENTRY_KEY), nulls_last=True)
    )
    latest = (
        rows[last_rows["_row"]]
        .join(marks, on="instance", how="left", maintain_order="left")
        .filter(pl.col("_taken") >= pl.col("watermark_taken") - keep)
    )
    schema = SAMPLE_FRONTIER.scan_schema()
    return (
        latest.with_columns(pl.lit(None, dtype=pl.String).alias("config_digest"))
        .select(schema.names())
        .cast(dict(schema))
    )  # the digest is the writer's to set (write_frontier's caller)


def append_samples(
    frontier: pl.DataFrame,
    snapshots: pl.LazyFrame | pl.DataFrame,
    runs: pl.LazyFrame | pl.DataFrame | None,
    config: SampleConfig = SampleConfig(),
) -> tuple[SamplesResult, pl.DataFrame]:
    """Samples of the snapshots taken after each instance's watermark, and the frontier after them; pure.

    Each entry's first new snapshot is differenced against its frontier row, the rest against each other:
    for snapshots taken in order, ``full(old + new) == full(old) + append(frontier_of(old), new)`` row for
    row (the drop counts are those of the new intervals only). Snapshots taken at or before the watermark
    are ignored (already differenced). An instance absent from ``frontier`` starts from nothing.
    """
    new = prepared_snapshots(snapshots, runs).collect()
    if frontier.height:
        marks = frontier.group_by("instance").agg(pl.col("watermark_taken").max())
        new = (
            new.join(marks, on="instance", how="left")
            .filter(pl.col("watermark_taken").is_null() | (pl.col("watermark_taken") < _TAKEN))
            .drop("watermark_taken")
        )
    base = frontier.select(_PREPARED_COLUMNS).cast(dict(new.schema))
    combined = pl.concat([base, new.select(_PREPARED_COLUMNS)], how="vertical")
    result = samples_of_prepared(combined, config)
    if new.height == 0:
        return result, frontier
    return result, frontier_of(combined, config.frontier_keep, frontier)


def _dtype_of(column: str) -> pl.DataType:
    schema = STATEMENT_SNAPSHOTS.scan_schema()
    return schema[column] if column in schema else pl.String()


def _finish_samples(valid: pl.DataFrame) -> pl.DataFrame:
    """Add the derived columns; rows stay ordered by instance, entry (queryid, dbid, userid) and time."""
    calls = pl.col("calls").cast(pl.Float64)
    plans = pl.col("plans").cast(pl.Float64)
    # × 1e-6, not / 1e6: polars divides a column by a scalar as a multiplication by its inverse, but a
    # one-row frame by true division, so a one-row append would differ from a rebuild in the last bit.
    # The means by numpy's true division: polars sometimes divides two columns as a multiplication by the
    # divisor's inverse, depending on how the frame was built (the entry-order differencing and the
    # general one gave 110.20067683205812 and ...814 for the same 330.6020304961744 / 3), and identical
    # snapshots must give identical samples whichever path built them.
    out = valid.with_columns(
        ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() * 1e-6).alias(
            "interval_seconds"
        ),
        pl.when(calls > 0).then(_true_ratio(valid, "total_exec_time", "calls")).alias("mean_exec_time"),
        pl.when(plans > 0).then(_true_ratio(valid, "total_plan_time", "plans")).alias("mean_plan_time"),
    )
    return out.select("instance", *QUERY_SAMPLES.column_names)


def _true_ratio(frame: pl.DataFrame, numerator: str, denominator: str) -> pl.Series:
    """numerator / denominator row by row, IEEE division (NaN where either is null or the divisor is 0;
    the caller keeps only rows with a positive divisor)."""
    top = frame[numerator].cast(pl.Float64).to_numpy()
    bottom = frame[denominator].cast(pl.Float64).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        return pl.Series(numerator, np.divide(top, bottom), dtype=pl.Float64, nan_to_null=True)
