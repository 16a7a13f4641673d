"""Lake compaction: each closed (instance, date) partition of a per-snapshot table becomes one file.

The collector writes one small file per instance per snapshot (1,440 a day at one a minute). Compaction
merges a closed day's files into one, built in a staging folder beside the lake, then swaps the staging
folder and the live partition with one ``renameat2(RENAME_EXCHANGE)``: a reader lists either all the old
files or the merged one, never both (double counting) and never neither. Only days at least
``min_age_days`` old are touched, so no collector is still writing into them.

On an object store (no directory exchange) the merged file is one PUT whose Parquet metadata lists the
files it replaces (``radar.replaces``), then those files are deleted. Readers never double count in between:
the lake's file listing drops any file a present compacted file replaces (``lake.usable_files``). A
compaction that died between the PUT and the deletes is finished by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath, lake_path
from jobs.schemas.analysed import (
    ALERT_DEAD_LETTERS,
    ALERTS_SENT,
    ANALYSIS_RUNS,
    INSTANCE_SLOWDOWNS,
    PERFORMANCE_REGRESSIONS,
    PLAN_DIFFS,
    RESOURCE_REGRESSIONS,
)
from jobs.schemas.collected import (
    ACTIVITY_QUERIES,
    ACTIVITY_SNAPSHOTS,
    PLAN_CAPTURE_LOG,
    QUERY_TEXTS,
    SNAPSHOT_RUNS,
    STATEMENT_SNAPSHOTS,
)
from jobs.schemas.table import TableSchema

# Analysis-row tables: one file per detection run in the run's date partition; closed days are compacted,
# days older than LakeConfig.analysis_retention_days expire.
ANALYSIS_TABLES: tuple[TableSchema, ...] = (
    PERFORMANCE_REGRESSIONS,
    RESOURCE_REGRESSIONS,
    INSTANCE_SLOWDOWNS,
    PLAN_DIFFS,
    ANALYSIS_RUNS,
)
COMPACTABLE: tuple[TableSchema, ...] = (
    STATEMENT_SNAPSHOTS,
    SNAPSHOT_RUNS,
    ACTIVITY_SNAPSHOTS,
    ACTIVITY_QUERIES,
    QUERY_TEXTS,
    PLAN_CAPTURE_LOG,
    *ANALYSIS_TABLES,
    ALERTS_SENT,  # one file per alert and sink (written before the next alert is sent)
    ALERT_DEAD_LETTERS,
)
STAGING = "_compaction"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange_directories(a: Path, b: Path) -> None:
    """Atomically swap two directories (Linux renameat2 RENAME_EXCHANGE); raises OSError naming both."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise OSError(errno.ENOSYS, f"atomic directory exchange needs Linux renameat2: {a} <-> {b}")
    done = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot exchange {a} and {b}: {os.strerror(code)}")


@dataclass(frozen=True)
class PartitionCompaction:
    table: str
    partition: str
    files_before: int
    rows: int


def partition_sort_key(table: TableSchema) -> list[str]:
    """Rows of a compacted file in primary-key order (minus the folder-held partition columns)."""
    return [c for c in table.primary_key if c not in table.partition_by]


def _merge(files: list[LakePath], table: TableSchema) -> pl.DataFrame:
    return lake.scan_file_columns(files, table).sort(partition_sort_key(table), nulls_last=True).collect()


def _partition_files(folder: LakePath) -> list[LakePath]:
    """The partition's Parquet files a reader would use (on an object store, minus replaced ones)."""
    return lake.drop_replaced(sorted(folder.glob("*.parquet")))


def _quarantine_failing(
    lake_root: LakePath,
    table: TableSchema,
    files: list[LakePath],
    check: Callable[[LakePath, TableSchema], str | None],
) -> None:
    """Quarantine each of ``files`` that ``check`` finds a problem with (the compaction lock is held, so
    moving them is safe); a file gone meanwhile is skipped."""
    for path in files:
        try:
            problem = check(path, table)
        except FileNotFoundError:
            continue
        if problem is not None:
            lake.quarantine_file(lake_root, table, path, problem, compaction_held=True)


def _merge_readable(
    lake_root: LakePath, table: TableSchema, folder: LakePath
) -> tuple[list[LakePath], pl.DataFrame]:
    """The partition's files and their merged rows; files that are not the table's own (``file_problem``)
    and unreadable files are quarantined first (we hold the compaction lock, so moving them is safe) and the
    rest merged: a foreign file merged would become the table's own."""
    files = _partition_files(folder)
    if len(files) <= 1:
        return files, pl.DataFrame()
    _quarantine_failing(lake_root, table, files, lake.file_problem)
    files = _partition_files(folder)
    if len(files) <= 1:
        return files, pl.DataFrame()
    try:
        return files, _merge(files, table)
    except lake.read_errors():
        _quarantine_failing(lake_root, table, files, lake.read_problem)
    files = _partition_files(folder)
    if len(files) <= 1:
        return files, pl.DataFrame()
    try:
        return files, _merge(files, table)
    except lake.read_errors() as exc:
        raise locks.LakeError(f"cannot compact {folder}: {type(exc).__name__}: {exc}") from exc


def compact_partition(
    lake_root: LakePath, table: TableSchema, folder: LakePath, config: locks.LakeConfig | None = None
) -> PartitionCompaction | None:
    """Merge one partition folder's files into one and swap it in; None when there is nothing to merge.

    The caller holds the compaction lock. Only the files merged are deleted: anything else the swap carried
    into the staging folder (a file that arrived meanwhile, a writer's temp file, a foreign file) is moved
    back into the partition.
    """
    lake_root = lake_path(lake_root)
    if isinstance(folder, ObjectPath):
        return _compact_object_partition(lake_root, table, folder, config)
    files, merged = _merge_readable(lake_root, table, folder)
    if len(files) <= 1:
        return None
    staging_root = Path(lake_root) / STAGING / table.name
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = staging_root / f"{folder.parent.name}.{folder.name}.{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        lake.write_file(
            staging / f"compacted-{files[0].stem}-{files[-1].stem}.parquet", table, merged, config=config
        )
        exchange_directories(staging, folder)  # folder now holds the merged file, staging the originals
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    merged_names = {f.name for f in files}
    for entry in sorted(staging.iterdir()):
        if entry.name in merged_names:
            entry.unlink()
        elif not (folder / entry.name).exists():
            os.rename(entry, folder / entry.name)
    try:
        staging.rmdir()
    except OSError:
        left = sorted(p.name for p in staging.iterdir())
        lake.log.warning(f"compaction of {folder}: left {left} in {staging} (same names in the partition)")
    partition = str(folder.relative_to(Path(lake_root) / table.name))
    return PartitionCompaction(table.name, partition, len(files), merged.height)


def _compact_object_partition(
    lake_root: LakePath, table: TableSchema, folder: ObjectPath, config: locks.LakeConfig | None
) -> PartitionCompaction | None:
    """Object store: PUT the merged file (naming what it replaces), then delete what it replaces. A
    previous compaction's leftovers (files a present merged file replaces) are deleted first."""
    listed = sorted(folder.glob("*.parquet"))
    for leftover in sorted(set(listed) - set(lake.drop_replaced(listed))):
        leftover.unlink(missing_ok=True)
    files, merged = _merge_readable(lake_root, table, folder)
    if len(files) <= 1:
        return None
    target = folder / f"compacted-{files[0].stem}-{files[-1].stem}.parquet"
    names = sorted(f.name for f in files if f != target)
    lake.write_file(target, table, merged, config=config, metadata={lake.REPLACES_KEY: json.dumps(names)})
    for path in files:
        if path != target:
            path.unlink(missing_ok=True)
    partition = str(folder.relative_to(lake_path(lake_root) / table.name))
    return PartitionCompaction(table.name, partition, len(files), merged.height)


def _date_folders(lake_root: LakePath, table: TableSchema) -> list[LakePath]:
    """The table's partition folders that end in a date (``instance=*/date=*`` or ``date=*``)."""
    pattern = "/".join(f"{key}=*" for key in table.partition_by)
    return (
        sorted((lake_path(lake_root) / table.name).glob(pattern))
        if table.partition_by[-1:] == ("date",)
        else []
    )


@dataclass(frozen=True)
class ExpiredPartition:
    table: str
    partition: str
    files: int


def expire_analysis_rows(
    lake_root: LakePath,
    *,
    today: date,
    retention_days: int,
    tables: tuple[TableSchema, ...] = ANALYSIS_TABLES,
) -> list[ExpiredPartition]:
    """Delete the date partitions of analysis-row tables more than ``retention_days`` before ``today``
    (a run's rows live in its run date's partition); 0 days keeps everything. Only ``*.parquet`` files are
    deleted (the folder goes when nothing else is left in it). The caller holds the compaction lock."""
    if retention_days <= 0:
        return []
    cutoff = (today - timedelta(days=retention_days)).isoformat()
    expired = []
    for table in tables:
        for folder in _date_folders(lake_root, table):
            if folder.name.removeprefix("date=") >= cutoff:
                continue
            files = sorted(folder.glob("*.parquet"))
            for path in files:
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()
            relative = folder.relative_to(lake_path(lake_root) / table.name)  # type: ignore[arg-type]
            expired.append(ExpiredPartition(table.name, str(relative), len(files)))
    return expired


def compact_lake(
    lake_root: LakePath,
    *,
    today: date | None = None,
    min_age_days: int = 1,
    tables: tuple[TableSchema, ...] = COMPACTABLE,
    config: locks.LakeConfig | None = None,
    expired: list[ExpiredPartition] | None = None,
) -> list[PartitionCompaction]:
    """Compact every partition whose date is at least ``min_age_days`` before ``today`` (UTC), after
    expiring the analysis rows older than ``config.analysis_retention_days`` (appended to ``expired``
    when given).

    One compaction at a time per lake (the ``compaction`` lock); it also sweeps the whole lake of temp files
    older than ``config.stale_temp_after_s`` (crashed writers' leftovers).
    """
    if min_age_days < 1:
        raise ValueError("min_age_days must be >= 1: today's partitions are still being written")
    config = config or locks.LakeConfig()
    day = today or datetime.now(UTC).date()
    cutoff = (day - timedelta(days=min_age_days - 1)).isoformat()
    done = []
    with locks.exclusive_lock(lake_root, locks.COMPACTION_LOCK, config):
        swept = lake.sweep_lake_temp_files(lake_root, config)
        if swept:
            lake.log.info(f"removed {len(swept)} stale temp files: {[str(p) for p in swept[:5]]}")
        gone = expire_analysis_rows(
            lake_root,
            today=day,
            retention_days=config.analysis_retention_days,
            tables=tuple(t for t in tables if t in ANALYSIS_TABLES),
        )
        if expired is not None:
            expired.extend(gone)
        for table in tables:
            for folder in _date_folders(lake_root, table):
                if folder.name.removeprefix("date=") >= cutoff:
                    continue
                result = compact_partition(lake_root, table, folder, config)
                if result is not None:
                    done.append(result)
    return done
