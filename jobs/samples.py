"""Interval samples: per-interval deltas of pg_stat_statements counters between consecutive snapshots.

A cumulative counter is only comparable within one server incarnation and one life of an entry, so every
delta is checked before it becomes a sample. An invalid delta is dropped and counted by reason, never turned
into a negative or huge sample. The work is vectorized polars: rows are sorted by entry and time, the
predecessor of each row is the previous row of the same entry (a shift, not a per-query loop), and the
instances are processed one at a time so memory stays bounded by the largest instance.
"""

from __future__ import annotations

import hashlib
import re
import resource
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import polars as pl

from jobs import lake
from jobs.detect.config import SampleConfig as SampleConfig
from jobs.lake import LakeConfig, exclusive_lock, scan_table, stem_for, with_recovery, write_table
from jobs.schemas import (
    COLLECTION_HEALTH,
    QUERY_SAMPLES,
    SAMPLE_DELTAS,
    SAMPLE_FRONTIER,
    SNAPSHOT_RUNS,
    STATEMENT_SNAPSHOTS,
    TableSchema,
)
from jobs.storage import LakePath, lake_path

ENTRY_KEY: tuple[str, ...] = ("instance", "dbid", "userid", "queryid", "toplevel")

# Why a delta was dropped, in the order the checks are applied (a delta gets the first reason that holds).
DROP_REASONS: tuple[str, ...] = (
    "server_replaced",  # system_identifier changed: another server answers under this instance name
    "server_restarted",  # postmaster start time changed: counters restarted from zero
    "stats_reset",  # pg_stat_statements_info.stats_reset changed
    "entry_recreated",  # stats_since changed: the entry was evicted (or reset) and made again
    "clock_skew",  # server-clock interval <= 0, or the server-collector clock offset moved too much
    "counter_decreased",  # any cumulative counter went down
    "evicted_in_interval",  # dealloc grew (only when SampleConfig.drop_when_dealloc_grew)
    "below_min_executions",  # valid, but fewer calls than SampleConfig.min_executions
)

_SNAPSHOT_COLUMNS: tuple[str, ...] = (
    *ENTRY_KEY,
    "captured_at",
    "collector_clock",
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


def samples_from_snapshots(
    snapshots: pl.LazyFrame | pl.DataFrame,
    runs: pl.LazyFrame | pl.DataFrame | None,
    config: SampleConfig = SampleConfig(),
) -> SamplesResult:
    """Difference consecutive snapshots of each entry into interval samples; pure, any number of instances.

    ``snapshots`` carries the statement_snapshots columns plus ``instance``; ``runs`` the snapshot_runs
    columns plus ``instance`` (only ``dealloc`` is used from it; None means eviction is unknown).
    """
    return _samples_of_prepared(_prepared(snapshots, runs).collect(), config)


def _prepared(
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


def _samples_of_prepared(prepared: pl.DataFrame, config: SampleConfig) -> SamplesResult:
    if prepared["instance"].n_unique() <= 1:  # the job's case: no partition copy
        parts = [prepared] if prepared.height else []
    else:
        parts = [part for _, part in sorted(prepared.partition_by("instance", as_dict=True).items())]
    results = [_instance_samples(part, config) for part in parts]
    if not results:
        return SamplesResult(samples=_finish_samples(_instance_samples(prepared, config)[0]))
    samples = pl.concat([r[0] for r in results])
    dropped = pl.concat([r[1] for r in results]).sort("instance", "reason")
    counts = pl.concat([r[2] for r in results]).sort("instance", "interval_end", "reason")
    return SamplesResult(samples=_finish_samples(samples), dropped_counts=dropped, interval_counts=counts)


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
    offset = ((pl.col("captured_at") - pl.col("collector_clock")).dt.total_microseconds() / 1e6).alias(
        "_offset"
    )
    ordered = (
        frame.lazy()
        .with_columns(packed, taken, offset)
        .sort(["queryid", "_db_user", "toplevel", "_taken", "captured_at"], nulls_last=True)
    )
    key = ("queryid", "_db_user", "toplevel")
    same_entry = pl.all_horizontal([pl.col(k).eq_missing(pl.col(k).shift(1)) for k in key])
    deltas = [(pl.col(c) - pl.col(c).shift(1)).alias(c) for c in SAMPLE_DELTAS]
    decreased = pl.any_horizontal([(pl.col(c) < pl.col(c).shift(1)).fill_null(False) for c in SAMPLE_DELTAS])
    evictions = (pl.col("dealloc") - pl.col("dealloc").shift(1)).alias("evictions")
    reason = (
        pl.when(_changed("system_identifier"))
        .then(pl.lit("server_replaced"))
        .when(_changed("postmaster_start"))
        .then(pl.lit("server_restarted"))
        .when(_changed("stats_reset"))
        .then(pl.lit("stats_reset"))
        .when(_changed("stats_since"))
        .then(pl.lit("entry_recreated"))
        .when(
            (pl.col("captured_at") <= pl.col("captured_at").shift(1))
            | ((pl.col("_offset") - pl.col("_offset").shift(1)).abs() > config.max_clock_skew_s).fill_null(
                False
            )
        )
        .then(pl.lit("clock_skew"))
        .when(decreased)
        .then(pl.lit("counter_decreased"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    if config.drop_when_dealloc_grew:
        reason = (
            pl.when(reason.is_null() & (evictions > 0)).then(pl.lit("evicted_in_interval")).otherwise(reason)
        )
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
    latest = (
        rows.sort([*ENTRY_KEY, "_taken", "captured_at"], nulls_last=True)
        .group_by(list(ENTRY_KEY), maintain_order=True)
        .last()
        .join(marks, on="instance", how="left")
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
    new = _prepared(snapshots, runs).collect()
    if frontier.height:
        marks = frontier.group_by("instance").agg(pl.col("watermark_taken").max())
        new = (
            new.join(marks, on="instance", how="left")
            .filter(pl.col("watermark_taken").is_null() | (pl.col("watermark_taken") < _TAKEN))
            .drop("watermark_taken")
        )
    base = frontier.select(_PREPARED_COLUMNS).cast(dict(new.schema))
    combined = pl.concat([base, new.select(_PREPARED_COLUMNS)], how="vertical")
    result = _samples_of_prepared(combined, config)
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
    out = valid.with_columns(
        ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() * 1e-6).alias(
            "interval_seconds"
        ),
        pl.when(calls > 0).then(pl.col("total_exec_time") / calls).alias("mean_exec_time"),
        pl.when(plans > 0).then(pl.col("total_plan_time") / plans).alias("mean_plan_time"),
    )
    return out.select("instance", *QUERY_SAMPLES.column_names)


# ---------------------------------------------------------------------------------------------------------
# The job: lake in, lake out, one instance at a time (I/O at the edge).


@dataclass(frozen=True)
class SamplesJobReport:
    """What one run of the samples job read, wrote and dropped; peak RSS of this process in MiB."""

    instances: int
    snapshot_rows: int
    sample_rows: int
    dropped_counts: pl.DataFrame
    files_written: int
    seconds: float
    peak_rss_mib: float
    rebuilt_for_settings: tuple[str, ...] = ()
    """Instances an append rebuilt instead: their samples were built with other sample settings."""

    @property
    def rows_per_second(self) -> float:
        return self.snapshot_rows / self.seconds if self.seconds > 0 else float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def lake_instances(lake_root: LakePath) -> list[str]:
    """Instances that have statement snapshots in the lake, from the partition folder names."""
    base = lake_path(lake_root) / STATEMENT_SNAPSHOTS.name
    if not base.exists():
        return []
    return sorted(p.name.removeprefix("instance=") for p in base.glob("instance=*") if p.is_dir())


SAMPLES_LOCK = "samples"
# The samples job's own file names: stem_for(latest interval end) + ".parquet".
OWN_FILE_NAME = re.compile(r"^\d{8}T\d{12}Z\.parquet$")
# A lake file name's timestamps: the collector's "<stem>-<digest>", compaction's "compacted-<first>-<last>".
_STAMP = re.compile(r"\d{8}T\d{12}Z")
SampleMode = Literal["append", "rebuild"]
SAMPLE_MODES: tuple[str, ...] = ("append", "rebuild")


def run_samples_job(
    lake_root: LakePath,
    config: SampleConfig = SampleConfig(),
    *,
    instances: list[str] | None = None,
    out_root: LakePath | None = None,
    dates: tuple[date, date] | None = None,
    lake_config: LakeConfig | None = None,
    mode: SampleMode | None = None,
) -> SamplesJobReport:
    """Bring query_samples up to date (``mode="append"``, the default) or rebuild it (``"rebuild"``, the
    default when ``dates`` is given) for the given instances (all by default).

    Append: per instance, only the statement_snapshots files after the instance's watermark (kept in
    ``sample_frontier``, the latest differenced snapshot) are read; each entry's first new snapshot is
    differenced against its frontier row, so an entry's predecessor may be any older snapshot. New sample
    files are added (named after their latest interval end), none is deleted. An instance without a
    frontier (a lake from before append mode) is rebuilt once, which writes its frontier.

    Rebuild: one file per (instance, date) named after the latest interval end, replacing the partition's
    files. With ``dates`` (first, last), snapshots from the day before ``first`` are read too, so the first
    interval of the range has its predecessor, only partitions inside the range are written, and where an
    append frontier exists only samples up to its watermark (the rest is the next append's, which would
    otherwise write them twice). Without ``dates`` everything is rebuilt and the frontier with it.

    One run at a time per output lake (the ``samples`` lock, waiting at most ``lake_config.lock_wait_s``).
    Crash safety: samples files are written before the frontier, and an append first deletes its own
    files past the committed watermark (a crashed run's), so a run that dies mid-way leaves no duplicate.
    """
    chosen = mode or ("rebuild" if dates is not None else "append")
    if chosen not in SAMPLE_MODES:
        raise SamplesError(f"unknown samples mode {chosen!r}; use one of {list(SAMPLE_MODES)}")
    if chosen == "append" and dates is not None:
        raise SamplesError("a date range is a rebuild: use mode='rebuild' with dates")
    out_root = lake_path(out_root or lake_root)
    with exclusive_lock(out_root, SAMPLES_LOCK, lake_config):
        return _run_samples_job(lake_root, config, instances, out_root, dates, lake_config, chosen)


def run_samples_per_instance(
    lake_root: LakePath,
    config: SampleConfig,
    instances: list[str],
    *,
    dates: tuple[date, date] | None = None,
    lake_config: LakeConfig | None = None,
    mode: SampleMode | None = None,
) -> SamplesJobReport:
    """``run_samples_job`` once per instance, in order, summed into one report. Each holds the samples lock
    only while its own instance is differenced, so concurrent runs over other instances (Dagster's shard
    runs) take turns per instance instead of one waiting for a whole shard, longer than a lock wait of
    seconds. Every instance's files are the same as one run over them all would write."""
    started = time.perf_counter()
    reports = [
        run_samples_job(lake_root, config, instances=[name], dates=dates, lake_config=lake_config, mode=mode)
        for name in instances
    ]
    drops = [r.dropped_counts for r in reports]
    empty = SamplesResult(samples=pl.DataFrame()).dropped_counts
    return SamplesJobReport(
        instances=len(instances),
        snapshot_rows=sum(r.snapshot_rows for r in reports),
        sample_rows=sum(r.sample_rows for r in reports),
        dropped_counts=(pl.concat(drops) if drops else empty).sort("instance", "reason"),
        files_written=sum(r.files_written for r in reports),
        seconds=time.perf_counter() - started,
        peak_rss_mib=peak_rss_mib(),
        rebuilt_for_settings=tuple(name for r in reports for name in r.rebuilt_for_settings),
    )


def _run_samples_job(
    lake_root: LakePath,
    config: SampleConfig,
    instances: list[str] | None,
    out_root: LakePath,
    dates: tuple[date, date] | None,
    lake_config: LakeConfig | None,
    mode: str,
) -> SamplesJobReport:
    started = time.perf_counter()
    names = instances if instances is not None else lake_instances(lake_root)

    scans: list[tuple[pl.LazyFrame, pl.LazyFrame]] = []
    # A run over named instances (a shard's run, a snapshot cycle's samples) lists only their folders; a
    # whole-fleet run lists each table once. Listing the whole table for each named instance made a shard's
    # first run cost (its instances x the lake's files).
    per_instance = instances is not None and len(instances) < len(lake_instances(lake_root))

    # A rebuild over dates reads from the day before the first (the interval that ends on it).
    read_from = dates[0] - timedelta(days=1) if dates is not None else date(1970, 1, 1)

    def dated(frame: pl.LazyFrame) -> pl.LazyFrame:
        if dates is None:
            return frame
        return frame.filter(
            pl.col("date").is_between(pl.lit(read_from.isoformat()), pl.lit(dates[1].isoformat()))
        )

    def instance_scans(name: str) -> tuple[pl.LazyFrame, pl.LazyFrame]:
        since = datetime(read_from.year, read_from.month, read_from.day, tzinfo=UTC)
        return (
            dated(lake.scan_files(lake_root, STATEMENT_SNAPSHOTS, instance_files(lake_root, name, since))),
            dated(
                lake.scan_files(
                    lake_root, SNAPSHOT_RUNS, instance_files(lake_root, name, since, SNAPSHOT_RUNS)
                )
            ),
        )

    def lake_scans() -> tuple[pl.LazyFrame, pl.LazyFrame]:
        """The snapshot and run scans, listed once per job (again only after a bad file was quarantined)."""
        if not scans:
            scans.append(
                (
                    dated(scan_table(lake_root, STATEMENT_SNAPSHOTS)),
                    dated(scan_table(lake_root, SNAPSHOT_RUNS)),
                )
            )
        return scans[0]

    def rebuilt(name: str) -> tuple[int, SamplesResult, pl.DataFrame]:
        snapshots, runs = instance_scans(name) if per_instance else lake_scans()
        try:
            one = snapshots.filter(pl.col("instance") == name)
            prepared = _prepared(one, runs.filter(pl.col("instance") == name)).collect()
            front = frontier_of(prepared, config.frontier_keep) if dates is None else empty_frontier()
            return prepared.height, _samples_of_prepared(prepared, config), front
        except lake.READ_ERRORS:
            scans.clear()  # with_recovery quarantines the bad file; the retry lists the files again
            raise

    def appended(name: str, frontier: pl.DataFrame) -> tuple[int, SamplesResult, pl.DataFrame]:
        since = frontier["watermark_captured_at"].max()
        snapshots = lake.scan_files(
            lake_root, STATEMENT_SNAPSHOTS, new_snapshot_files(lake_root, name, since)
        )
        runs = lake.scan_files(
            lake_root, SNAPSHOT_RUNS, new_snapshot_files(lake_root, name, since, SNAPSHOT_RUNS)
        )
        new = snapshots.collect()
        result, front = append_samples(frontier, new, runs, config)
        return new.height, result, front

    total_rows = 0
    sample_rows = 0
    files = 0
    drops: list[pl.DataFrame] = []
    digest = sample_config_digest(config)
    rebuilt_for_settings: list[str] = []
    for name in names:
        frontier = read_frontier(out_root, name)
        watermark = frontier["watermark_captured_at"].max() if frontier.height else None
        recorded = set(frontier["config_digest"].drop_nulls().to_list())
        if mode == "append" and watermark is not None and recorded and recorded != {digest}:
            # Appending under other settings would mix two rules in one series: rebuild the instance.
            rebuilt_for_settings.append(name)
            watermark = None
        tables = (STATEMENT_SNAPSHOTS, SNAPSHOT_RUNS)
        if mode == "append" and watermark is not None:
            remove_unconfirmed_samples(out_root, name, watermark)  # type: ignore[arg-type]
            remove_unconfirmed_samples(out_root, name, watermark, COLLECTION_HEALTH)  # type: ignore[arg-type]
            rows, result, front = with_recovery(lake_root, tables, lambda n=name, f=frontier: appended(n, f))
        else:
            rows, result, front = with_recovery(lake_root, tables, lambda n=name: rebuilt(n))
        total_rows += rows
        drops.append(result.dropped_counts)
        samples = result.samples.drop("instance")
        if dates is not None and watermark is not None:
            samples = samples.filter(pl.col("interval_end") <= watermark)
        written_days: set[str] = set()
        for day, part in _by_end_date(samples):
            if dates is not None and not (dates[0].isoformat() <= day <= dates[1].isoformat()):
                continue
            written_days.add(day)
            sample_rows += part.height
            stem = stem_for(part["interval_end"].max())  # type: ignore[arg-type]
            written = write_table(
                out_root, QUERY_SAMPLES, part, {"instance": name, "date": day}, stem, config=lake_config
            )
            if mode == "rebuild" or watermark is None:
                replace_partition(out_root, written)
            files += 1
        if mode == "rebuild" or watermark is None:
            clear_days_without_samples(lake_root, out_root, name, written_days, dates)
        replacing = mode == "rebuild" or watermark is None
        health = result.interval_counts
        _write_collection_health(lake_root, out_root, name, health, replacing, watermark, dates, lake_config)
        if front.height and (mode == "append" or dates is None):
            write_frontier(
                out_root, name, front.with_columns(pl.lit(digest).alias("config_digest")), lake_config
            )
    dropped = (pl.concat(drops) if drops else SamplesResult(samples=pl.DataFrame()).dropped_counts).sort(
        "instance", "reason"
    )
    return SamplesJobReport(
        instances=len(names),
        snapshot_rows=total_rows,
        sample_rows=sample_rows,
        dropped_counts=dropped,
        files_written=files,
        seconds=time.perf_counter() - started,
        peak_rss_mib=peak_rss_mib(),
        rebuilt_for_settings=tuple(rebuilt_for_settings),
    )


def _write_collection_health(
    lake_root: LakePath,
    out_root: LakePath,
    instance: str,
    interval_counts: pl.DataFrame,
    replacing: bool,
    watermark: datetime | None,
    dates: tuple[date, date] | None,
    lake_config: LakeConfig | None,
) -> None:
    """collection_health files of one instance, written as its samples are: one per (instance, date) named
    after the day's latest interval end; a rebuild (``replacing``) replaces the day's files (and clears a
    rebuilt day left without intervals), an append adds a file of the new intervals only."""
    counts = (
        interval_counts.filter(pl.col("instance") == instance) if interval_counts.height else interval_counts
    )
    if dates is not None and watermark is not None:
        counts = counts.filter(pl.col("interval_end") <= watermark)  # past it: the next append's
    rows = collection_health_rows(counts)
    written_days: set[str] = set()
    for (day,), part in sorted(rows.partition_by("day", as_dict=True).items()) if rows.height else []:
        text = day.isoformat()  # type: ignore[union-attr]
        if dates is not None and not (dates[0].isoformat() <= text <= dates[1].isoformat()):
            continue
        written_days.add(text)
        stem = stem_for(part["last_interval_end"].max())  # type: ignore[arg-type]
        parts = {"instance": instance, "date": text}
        written = write_table(
            out_root, COLLECTION_HEALTH, part.drop("instance"), parts, stem, config=lake_config
        )
        if replacing:
            clear_partition(out_root, written.parent, written, COLLECTION_HEALTH)
    if replacing:
        clear_days_without_samples(lake_root, out_root, instance, written_days, dates, COLLECTION_HEALTH)


def sample_config_digest(config: SampleConfig) -> str:
    """A stable hash of the sample settings (a frozen dataclass's repr), recorded with each frontier."""
    return hashlib.sha256(repr(config).encode()).hexdigest()[:16]


def latest_stamp(path: LakePath) -> str | None:
    """The latest timestamp stem in a lake file's name (None when it carries none)."""
    stamps = _STAMP.findall(path.name)
    return max(stamps) if stamps else None


def new_snapshot_files(
    lake_root: LakePath, instance: str, since: datetime, table: TableSchema = STATEMENT_SNAPSHOTS
) -> list[LakePath]:
    """The instance's files of ``table`` that may hold a snapshot captured after ``since`` (server clock):
    partitions dated ``since``'s day or later, and there the files whose name's latest timestamp is after
    it (a name without one is read, to be safe). Older partitions are not even listed."""
    mark = stem_for(since)
    found = []
    for path in _files_dated_from(lake_path(lake_root) / table.name / f"instance={instance}", since):
        stamp = latest_stamp(path)
        if stamp is None or stamp > mark:
            found.append(path)
    return found


def instance_files(
    lake_root: LakePath, instance: str, since: datetime, table: TableSchema = STATEMENT_SNAPSHOTS
) -> list[LakePath]:
    """Every file of ``table`` in the instance's partitions dated ``since``'s UTC day or later."""
    return list(_files_dated_from(lake_path(lake_root) / table.name / f"instance={instance}", since))


def _files_dated_from(base: LakePath, moment: datetime) -> Iterator[LakePath]:
    """The Parquet files of an instance's folder (``base``) in its partitions dated ``moment``'s UTC day
    or later, in name order; older partitions are not even listed."""
    if not base.exists():
        return
    day = moment.date().isoformat()
    for folder in sorted(base.glob("date=*")):
        if folder.name.removeprefix("date=") >= day:
            yield from sorted(folder.glob("*.parquet"))


def read_frontier(out_root: LakePath, instance: str) -> pl.DataFrame:
    """The instance's committed frontier (its newest frontier file; empty when it has none)."""
    folder = lake_path(out_root) / SAMPLE_FRONTIER.name / f"instance={instance}"
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    for path in reversed(files):  # newest first; an unreadable one is quarantined, the previous is used
        frame = lake.read_file(out_root, SAMPLE_FRONTIER, path)
        if frame is not None:
            return frame.with_columns(pl.lit(instance).alias("instance")).select(
                SAMPLE_FRONTIER.scan_schema().names()
            )
    return empty_frontier()


def write_frontier(
    out_root: LakePath, instance: str, frontier: pl.DataFrame, config: LakeConfig | None
) -> LakePath:
    """Commit a frontier: write it (atomically, named after its watermark), then delete the older ones."""
    stem = stem_for(frontier["watermark_captured_at"].max())  # type: ignore[arg-type]
    written = write_table(
        out_root, SAMPLE_FRONTIER, frontier.drop("instance"), {"instance": instance}, stem, config=config
    )
    for old in written.parent.glob("*.parquet"):
        if old != written:
            old.unlink(missing_ok=True)
    return written


def remove_unconfirmed_samples(
    out_root: LakePath, instance: str, watermark: datetime, table: TableSchema = QUERY_SAMPLES
) -> list[LakePath]:
    """Delete the samples job's own ``table`` files (query_samples, collection_health) of ``instance`` named
    after an interval end past the committed watermark: an append that died before committing its frontier
    wrote them, and this run writes those rows again. Returns the removed files."""
    mark = stem_for(watermark)
    removed = []
    for path in _files_dated_from(lake_path(out_root) / table.name / f"instance={instance}", watermark):
        if path.stem > mark and is_own_file(path, table):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _by_end_date(samples: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Samples split by the UTC date of their interval end; no copy when they all share one date."""
    if samples.height == 0:
        return []
    days = samples["interval_end"].dt.date()
    if days.min() == days.max():
        return [(str(days.min()), samples)]
    split = samples.with_columns(days.cast(pl.String).alias("date")).partition_by("date", as_dict=True)
    return [(str(day), part.drop("date")) for (day,), part in sorted(split.items())]


def is_own_file(path: LakePath, table: TableSchema = QUERY_SAMPLES) -> bool:
    """A file the samples job wrote: its naming, and ``table`` in its radar metadata."""
    if not OWN_FILE_NAME.match(path.name):
        return False
    try:
        return lake.read_file_metadata(path).get("radar.table") == table.name
    except (OSError, ValueError):
        return False


def replace_partition(out_root: LakePath, kept: LakePath) -> list[LakePath]:
    """A rebuild replaces the (instance, date) partition: the job's older files beside the new one would
    duplicate it and are removed; any other file there is not the job's to delete and is quarantined (moved
    with a note, named in the run's output). Returns the removed files."""
    return clear_partition(out_root, kept.parent, kept)


def clear_days_without_samples(
    lake_root: LakePath,
    out_root: LakePath,
    instance: str,
    written: set[str],
    dates: tuple[date, date] | None,
    table: TableSchema = QUERY_SAMPLES,
) -> list[LakePath]:
    """A rebuild replaces every day it read, also a day whose snapshots now give no sample at all (a higher
    ``min_executions``): its old samples would otherwise outlive the rule that excludes them. Only days
    that still have snapshots are cleared (samples whose snapshots are gone are all that is left of them)."""

    def days(root: LakePath, table: TableSchema) -> set[str]:
        base = lake.partition_dir(root, table, {"instance": instance, "date": "0"}).parent
        return {p.name.removeprefix("date=") for p in base.glob("date=*") if p.is_dir()}

    stale = (days(out_root, table) & days(lake_root, STATEMENT_SNAPSHOTS)) - written
    if dates is not None:
        stale = {d for d in stale if dates[0].isoformat() <= d <= dates[1].isoformat()}
    removed: list[LakePath] = []
    for day in sorted(stale):
        folder = lake.partition_dir(out_root, table, {"instance": instance, "date": day})
        removed += clear_partition(out_root, folder, None, table)
    return removed


def clear_partition(
    out_root: LakePath, folder: LakePath, kept: LakePath | None, table: TableSchema = QUERY_SAMPLES
) -> list[LakePath]:
    """Remove the samples job's files of one ``table`` partition but ``kept``; quarantine any other."""
    removed = []
    for old in folder.glob("*.parquet"):
        if old == kept:
            continue
        if is_own_file(old, table):
            old.unlink(missing_ok=True)
            removed.append(old)
        else:
            lake.quarantine_file(
                out_root,
                table,
                old,
                f"not written by the samples job, in a {table.name} partition it rebuilds "
                "(kept out of the table so it cannot duplicate its rows)",
            )
    return removed
