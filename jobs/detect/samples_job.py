"""The samples job: reads new snapshot files per instance, appends samples and the frontier to the
lake (append or rebuild), with the collection-health rows."""

from __future__ import annotations

import hashlib
import re
import resource
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import polars as pl

from jobs.detect.config import SampleConfig
from jobs.detect.samples import (
    SamplesError,
    SamplesResult,
    append_samples,
    collection_health_rows,
    empty_frontier,
    prepared_snapshots,
    samples_and_frontier,
    samples_of_prepared,
)
from jobs.lake import io as lake
from jobs.lake.io import scan_table, stem_for, with_recovery, write_table
from jobs.lake.locks import LakeConfig, LakeStorageError, exclusive_lock
from jobs.lake.storage import LakePath, lake_path
from jobs.schemas.collected import (
    COLLECTION_HEALTH,
    QUERY_SAMPLES,
    SAMPLE_FRONTIER,
    SNAPSHOT_RUNS,
    STATEMENT_SNAPSHOTS,
)
from jobs.schemas.table import TableSchema

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

    @classmethod
    def summed(cls, reports: list[SamplesJobReport], seconds: float) -> SamplesJobReport:
        """Several runs' reports as one (runs per instance, a detection's chunks), this process's peak."""
        drops = [r.dropped_counts for r in reports]
        empty = SamplesResult(samples=pl.DataFrame()).dropped_counts
        return cls(
            instances=sum(r.instances for r in reports),
            snapshot_rows=sum(r.snapshot_rows for r in reports),
            sample_rows=sum(r.sample_rows for r in reports),
            dropped_counts=(pl.concat(drops) if drops else empty).sort("instance", "reason"),
            files_written=sum(r.files_written for r in reports),
            seconds=seconds,
            peak_rss_mib=peak_rss_mib(),
            rebuilt_for_settings=tuple(name for r in reports for name in r.rebuilt_for_settings),
        )

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
    committed: list[str] = []
    with exclusive_lock(out_root, SAMPLES_LOCK, lake_config):
        try:
            return _run_samples_job(
                lake_root, config, instances, out_root, dates, lake_config, chosen, committed
            )
        except LakeStorageError as exc:
            names = instances if instances is not None else lake_instances(lake_root)
            raise exc.keeping(uncommitted_samples(committed, names)) from exc


def uncommitted_samples(committed: list[str], names: list[str]) -> str:
    """What a samples run stopped by a refused write keeps: the instances it committed (samples, then the
    frontier), the one it was at (frontier unchanged: the next run redoes it from there), the snapshots."""
    at = names[len(committed)] if len(committed) < len(names) else None
    parts = [f"samples of {', '.join(committed)} committed"] if committed else []
    if at is not None:
        parts.append(f"{at}: not committed (its frontier unchanged), the next run redoes it")
    if len(names) > len(committed) + 1:
        parts.append(f"{len(names) - len(committed) - 1} more instances not started")
    return "; ".join([*parts, "statement_snapshots untouched"])


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
    reports: list[SamplesJobReport] = []
    for name in instances:
        try:
            reports.append(
                run_samples_job(
                    lake_root, config, instances=[name], dates=dates, lake_config=lake_config, mode=mode
                )
            )
        except LakeStorageError as exc:
            if not reports:
                raise
            done = ", ".join(instances[: len(reports)])
            raise exc.keeping(f"samples of {done} committed before it") from exc
    return SamplesJobReport.summed(reports, time.perf_counter() - started)


def _run_samples_job(
    lake_root: LakePath,
    config: SampleConfig,
    instances: list[str] | None,
    out_root: LakePath,
    dates: tuple[date, date] | None,
    lake_config: LakeConfig | None,
    mode: str,
    committed: list[str],
) -> SamplesJobReport:
    """The job under its lock; ``committed`` gets each instance's name once its frontier is written."""
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
            prepared = prepared_snapshots(one, runs.filter(pl.col("instance") == name)).collect()
            if dates is None:
                return prepared.height, *samples_and_frontier(prepared, config)
            return prepared.height, samples_of_prepared(prepared, config), empty_frontier()
        except lake.read_errors():
            scans.clear()  # with_recovery quarantines the bad file; the retry lists the files again
            raise

    def snapshot_days(files: list[LakePath]) -> list[tuple[str, int]]:
        """The snapshot rows per date partition of ``files`` (from their metadata), in day order."""
        counted = lake.scan_files(lake_root, STATEMENT_SNAPSHOTS, files).group_by("date").len().collect()
        return sorted((str(day), int(n)) for day, n in counted.iter_rows())

    def piece_of(
        listed: tuple[list[LakePath], list[LakePath]], days: list[str], frontier: pl.DataFrame
    ) -> tuple[int, SamplesResult, pl.DataFrame]:
        """The samples of the snapshots dated ``days`` (of the instance's ``listed`` snapshot and run
        files), differenced from ``frontier`` (the piece before)."""
        chosen = set(days)
        runs_from, runs_to = _day_after(days[0], -1), _day_after(days[-1], 1)
        snapshot_files = [f for f in listed[0] if _partition_day(f) in chosen]
        run_files = [f for f in listed[1] if runs_from <= _partition_day(f) <= runs_to]
        new = lake.scan_files(lake_root, STATEMENT_SNAPSHOTS, snapshot_files).collect()
        runs = lake.scan_files(lake_root, SNAPSHOT_RUNS, run_files)
        result, front = append_samples(frontier, new, runs, config)
        return new.height, result, front

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
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    tables = (STATEMENT_SNAPSHOTS, SNAPSHOT_RUNS)

    def planned(name: str) -> tuple[list[list[str]], tuple[list[LakePath], list[LakePath]]]:
        """A whole rebuild's pieces of days (none or one: at once) and the instance's listed files."""
        listed = (
            instance_files(lake_root, name, epoch),
            instance_files(lake_root, name, epoch, SNAPSHOT_RUNS),
        )
        days = snapshot_days(listed[0])
        if sum(n for _, n in days) > config.rebuild_piece_rows:
            return day_pieces(days, config.rebuild_piece_rows), listed
        return [], listed

    def differenced(name: str) -> tuple[list[list[str]], tuple[list[LakePath], list[LakePath]], Any]:
        """A whole rebuild's plan and, when it is at once, its samples (``rebuilt``)."""
        pieces, listed = planned(name)
        if len(pieces) > 1:
            return pieces, listed, None
        return pieces, listed, with_recovery(lake_root, tables, lambda: rebuilt(name))

    # With [samples] rebuild_ahead a whole rebuild differences the next instance on a thread while this
    # one's files are written (polars and the Parquet writer release the GIL): one instance ahead at most,
    # so at most two instances' rows are held at once.
    ahead = mode == "rebuild" and dates is None and config.rebuild_ahead and len(names) > 1
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="samples-ahead") if ahead else None
    coming: dict[str, Future[Any]] = {}
    try:
        for index, name in enumerate(names):
            frontier = read_frontier(out_root, name)
            watermark = frontier["watermark_captured_at"].max() if frontier.height else None
            recorded = set(frontier["config_digest"].drop_nulls().to_list())
            if mode == "append" and watermark is not None and recorded and recorded != {digest}:
                # Appending under other settings would mix two rules in one series: rebuild the instance.
                rebuilt_for_settings.append(name)
                watermark = None
            pieces: list[list[str]] = []
            done: Any = None
            if name in coming:
                pieces, listed, done = coming.pop(name).result()
            elif dates is None and (mode == "rebuild" or watermark is None):
                pieces, listed = planned(name)
            if pool is not None and index + 1 < len(names):
                coming[names[index + 1]] = pool.submit(differenced, names[index + 1])
            if len(pieces) > 1:
                # A rebuild in pieces of days: each piece's samples written (and its days replaced) as it is
                # differenced; the frontier committed after the last, as a one-piece rebuild does.
                front = empty_frontier()
                kept: dict[str, list[LakePath]] = {}
                kept_health: dict[str, list[LakePath]] = {}
                for piece in pieces:
                    rows, result, front = with_recovery(
                        lake_root, tables, lambda d=piece, f=front, ls=listed: piece_of(ls, d, f)
                    )
                    total_rows += rows
                    drops.append(result.dropped_counts)
                    for day, part in _by_end_date(result.samples.drop("instance")):
                        sample_rows += part.height
                        stem = stem_for(part["interval_end"].max())  # type: ignore[arg-type]
                        parts = {"instance": name, "date": day}
                        written = write_table(out_root, QUERY_SAMPLES, part, parts, stem, config=lake_config)
                        kept.setdefault(day, []).append(written)
                        clear_partition(out_root, written.parent, kept[day])
                        files += 1
                    _write_collection_health(
                        lake_root,
                        out_root,
                        name,
                        result.interval_counts,
                        True,
                        None,
                        None,
                        lake_config,
                        kept_health,
                    )
                clear_days_without_samples(lake_root, out_root, name, set(kept), None)
                clear_days_without_samples(
                    lake_root, out_root, name, set(kept_health), None, COLLECTION_HEALTH
                )
                if front.height:
                    write_frontier(
                        out_root, name, front.with_columns(pl.lit(digest).alias("config_digest")), lake_config
                    )
                committed.append(name)
                continue
            if mode == "append" and watermark is not None:
                remove_unconfirmed_samples(out_root, name, watermark)  # type: ignore[arg-type]
                remove_unconfirmed_samples(out_root, name, watermark, COLLECTION_HEALTH)  # type: ignore[arg-type]
                rows, result, front = with_recovery(
                    lake_root, tables, lambda n=name, f=frontier: appended(n, f)
                )
            elif done is not None:
                rows, result, front = done
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
            _write_collection_health(
                lake_root, out_root, name, health, replacing, watermark, dates, lake_config
            )
            if front.height and (mode == "append" or dates is None):
                write_frontier(
                    out_root, name, front.with_columns(pl.lit(digest).alias("config_digest")), lake_config
                )
            committed.append(name)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
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
    pieces: dict[str, list[LakePath]] | None = None,
) -> None:
    """collection_health files of one instance, written as its samples are: one per (instance, date) named
    after the day's latest interval end; a rebuild (``replacing``) replaces the day's files (and clears a
    rebuilt day left without intervals), an append adds a file of the new intervals only. ``pieces``: a
    rebuild in pieces of days, its files so far per day (kept when a day is replaced; the caller clears
    the days left without intervals after the last piece)."""
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
        if pieces is not None:
            pieces.setdefault(text, []).append(written)
            clear_partition(out_root, written.parent, pieces[text], COLLECTION_HEALTH)
        elif replacing:
            clear_partition(out_root, written.parent, written, COLLECTION_HEALTH)
    if replacing and pieces is None:
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


def day_pieces(days: list[tuple[str, int]], piece_rows: int) -> list[list[str]]:
    """Consecutive days (day, rows) grouped into pieces of at most ``piece_rows`` rows; a larger day is a
    piece of its own (a day is never split: the samples job writes a day's partition whole)."""
    pieces: list[list[str]] = []
    filled = 0
    for day, rows in days:
        if not pieces or filled + rows > piece_rows:
            pieces.append([])
            filled = 0
        pieces[-1].append(day)
        filled += rows
    return pieces


def _day_after(day: str, days: int) -> str:
    """The partition day ``days`` after ``day`` (a folder named otherwise, not the collector's: itself)."""
    try:
        return (date.fromisoformat(day) + timedelta(days=days)).isoformat()
    except ValueError:
        return day


def _partition_day(path: LakePath) -> str:
    """The ``date=`` partition of a lake file (its parent folder)."""
    return path.parent.name.removeprefix("date=")


def _by_end_date(samples: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Samples split by the UTC date of their interval end; no copy when they all share one date."""
    if samples.height == 0:
        return []
    days = samples["interval_end"].dt.date()
    if days.min() == days.max():
        return [(str(days.min()), samples)]
    if days.null_count() == 0:
        # One filter per day (a few): partitioning by the day as text hashed a string per sample (0.2 s
        # of a rebuild of 1,000 series whose samples cross midnight). Same rows, same order.
        return [(str(day), samples.filter(days == day)) for day in days.unique().sort()]
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
    out_root: LakePath,
    folder: LakePath,
    kept: LakePath | list[LakePath] | None,
    table: TableSchema = QUERY_SAMPLES,
) -> list[LakePath]:
    """Remove the samples job's files of one ``table`` partition but ``kept`` (a file, or the files a rebuild
    in pieces wrote there); quarantine any other."""
    keep = set(kept) if isinstance(kept, list) else {kept}
    removed = []
    for old in folder.glob("*.parquet"):
        if old in keep:
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
