"""Interval samples: per-interval deltas of pg_stat_statements counters between consecutive snapshots.

A cumulative counter is only comparable within one server incarnation and one life of an entry, so every
delta is checked before it becomes a sample. An invalid delta is dropped and counted by reason, never turned
into a negative or huge sample. The work is vectorized polars: rows are sorted by entry and time, the
predecessor of each row is the previous row of the same entry (a shift, not a per-query loop), and the
instances are processed one at a time so memory stays bounded by the largest instance.
"""

from __future__ import annotations

import re
import resource
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import polars as pl

from jobs import lake
from jobs.lake import LakeConfig, exclusive_lock, scan_table, stem_for, with_recovery, write_table
from jobs.schemas import QUERY_SAMPLES, SAMPLE_DELTAS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

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
class SampleConfig:
    """Thresholds of the samples job."""

    min_executions: int = 1
    """An interval with fewer calls than this is not a sample (its mean latency is too noisy or undefined)."""
    drop_when_dealloc_grew: bool = False
    """Flagged by default (``evictions`` > 0): on a busy server eviction is constant and would drop all."""
    max_clock_skew_s: float = 2.0
    """An interval whose (server clock - collector clock) offset changed by more than this is dropped
    (``clock_skew``): one of the two clocks was stepped, so the server-clock length cannot be trusted.
    2 s sits far above the offset's own noise (half a read's round trip, milliseconds on a LAN, and NTP
    slews at most 0.5 ms/s) and far below a typical 60 s interval, whose mean latency it would distort."""


@dataclass(frozen=True)
class SamplesResult:
    """Samples in the ``query_samples`` schema plus ``instance``, and drop counts per (instance, reason)."""

    samples: pl.DataFrame
    dropped_counts: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"instance": pl.String, "reason": pl.String, "count": pl.UInt32}
        )
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
        lazy = lazy.join(_dealloc_per_snapshot(runs), on=["instance", "captured_at"], how="left")
    else:
        lazy = lazy.with_columns(pl.lit(None, dtype=pl.Int64).alias("dealloc"))

    prepared = lazy.collect()
    if prepared["instance"].n_unique() <= 1:  # the job's case: no partition copy
        parts = [prepared] if prepared.height else []
    else:
        parts = [part for _, part in sorted(prepared.partition_by("instance", as_dict=True).items())]
    results = [_instance_samples(part, config) for part in parts]
    if not results:
        return SamplesResult(samples=_finish_samples(_instance_samples(prepared, config)[0]))
    samples = pl.concat([r[0] for r in results])
    dropped = pl.concat([r[1] for r in results]).sort("instance", "reason")
    return SamplesResult(samples=_finish_samples(samples), dropped_counts=dropped)


def _instance_samples(frame: pl.DataFrame, config: SampleConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Valid deltas and drop counts of one instance.

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
    return out.filter(pl.col("drop_reason").is_null()), dropped


def _dtype_of(column: str) -> pl.DataType:
    schema = STATEMENT_SNAPSHOTS.scan_schema()
    return schema[column] if column in schema else pl.String()


def _finish_samples(valid: pl.DataFrame) -> pl.DataFrame:
    """Add the derived columns; rows stay ordered by instance, entry (queryid, dbid, userid) and time."""
    calls = pl.col("calls").cast(pl.Float64)
    plans = pl.col("plans").cast(pl.Float64)
    out = valid.with_columns(
        ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() / 1e6).alias(
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

    @property
    def rows_per_second(self) -> float:
        return self.snapshot_rows / self.seconds if self.seconds > 0 else float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def lake_instances(lake_root: Path) -> list[str]:
    """Instances that have statement snapshots in the lake, from the partition folder names."""
    base = Path(lake_root) / STATEMENT_SNAPSHOTS.name
    if not base.exists():
        return []
    return sorted(p.name.removeprefix("instance=") for p in base.glob("instance=*") if p.is_dir())


SAMPLES_LOCK = "samples"
# The samples job's own file names: stem_for(latest interval end) + ".parquet".
OWN_FILE_NAME = re.compile(r"^\d{8}T\d{12}Z\.parquet$")


def run_samples_job(
    lake_root: Path,
    config: SampleConfig = SampleConfig(),
    *,
    instances: list[str] | None = None,
    out_root: Path | None = None,
    dates: tuple[date, date] | None = None,
    lake_config: LakeConfig | None = None,
) -> SamplesJobReport:
    """Rebuild query_samples for the given instances (all by default) and interval-end dates (all by default).

    One instance is read, differenced and written per step, partitioned by the date of each interval's end,
    one file per (instance, date) named after the latest interval end; rerunning replaces the files. With
    ``dates`` (first, last), snapshots from the day before ``first`` are read too, so the first interval of
    the range has its predecessor, and only partitions inside the range are written. One run at a time per
    output lake (the ``samples`` lock, waiting at most ``lake_config.lock_wait_s``).
    """
    out_root = Path(out_root or lake_root)
    with exclusive_lock(out_root, SAMPLES_LOCK, lake_config):
        return _run_samples_job(lake_root, config, instances, out_root, dates, lake_config)


def _run_samples_job(
    lake_root: Path,
    config: SampleConfig,
    instances: list[str] | None,
    out_root: Path,
    dates: tuple[date, date] | None,
    lake_config: LakeConfig | None,
) -> SamplesJobReport:
    started = time.perf_counter()
    names = instances if instances is not None else lake_instances(lake_root)

    scans: list[tuple[pl.LazyFrame, pl.LazyFrame]] = []

    def lake_scans() -> tuple[pl.LazyFrame, pl.LazyFrame]:
        """The snapshot and run scans, listed once per job (again only after a bad file was quarantined)."""
        if not scans:
            snapshots = scan_table(lake_root, STATEMENT_SNAPSHOTS)
            runs = scan_table(lake_root, SNAPSHOT_RUNS)
            if dates is not None:
                first, last = dates
                read_from, until = pl.lit((first - timedelta(days=1)).isoformat()), pl.lit(last.isoformat())
                snapshots = snapshots.filter(pl.col("date").is_between(read_from, until))
                runs = runs.filter(pl.col("date").is_between(read_from, until))
            scans.append((snapshots, runs))
        return scans[0]

    def instance_samples(name: str) -> tuple[int, SamplesResult]:
        snapshots, runs = lake_scans()
        try:
            one = snapshots.filter(pl.col("instance") == name)
            rows = one.select(pl.len()).collect().item()
            return rows, samples_from_snapshots(one, runs.filter(pl.col("instance") == name), config)
        except lake.READ_ERRORS:
            scans.clear()  # with_recovery quarantines the bad file; the retry lists the files again
            raise

    total_rows = 0
    sample_rows = 0
    files = 0
    drops: list[pl.DataFrame] = []
    for name in names:
        rows, result = with_recovery(
            lake_root, (STATEMENT_SNAPSHOTS, SNAPSHOT_RUNS), lambda name=name: instance_samples(name)
        )
        total_rows += rows
        drops.append(result.dropped_counts)
        for day, part in _by_end_date(result.samples.drop("instance")):
            if dates is not None and not (dates[0].isoformat() <= day <= dates[1].isoformat()):
                continue
            sample_rows += part.height
            stem = stem_for(part["interval_end"].max())  # type: ignore[arg-type]
            written = write_table(
                out_root, QUERY_SAMPLES, part, {"instance": name, "date": day}, stem, config=lake_config
            )
            replace_partition(out_root, written)
            files += 1
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
    )


def _by_end_date(samples: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Samples split by the UTC date of their interval end; no copy when they all share one date."""
    if samples.height == 0:
        return []
    days = samples["interval_end"].dt.date()
    if days.min() == days.max():
        return [(str(days.min()), samples)]
    split = samples.with_columns(days.cast(pl.String).alias("date")).partition_by("date", as_dict=True)
    return [(str(day), part.drop("date")) for (day,), part in sorted(split.items())]


def is_own_file(path: Path) -> bool:
    """A file the samples job wrote: its naming, and query_samples in its radar metadata."""
    if not OWN_FILE_NAME.match(path.name):
        return False
    try:
        return lake.read_file_metadata(path).get("radar.table") == QUERY_SAMPLES.name
    except (OSError, ValueError):
        return False


def replace_partition(out_root: Path, kept: Path) -> list[Path]:
    """A rebuild replaces the (instance, date) partition: the job's older files beside the new one would
    duplicate it and are removed; any other file there is not the job's to delete and is quarantined (moved
    with a note, named in the run's output). Returns the removed files."""
    removed = []
    for old in kept.parent.glob("*.parquet"):
        if old == kept:
            continue
        if is_own_file(old):
            old.unlink(missing_ok=True)
            removed.append(old)
        else:
            lake.quarantine_file(
                out_root,
                QUERY_SAMPLES,
                old,
                "not written by the samples job, in a query_samples partition it rebuilds "
                "(kept out of the table so it cannot duplicate samples)",
            )
    return removed
