"""The Parquet lake: hive-partitioned files, atomic writes, one read path that survives bad files.

Layout: ``<root>/<table>/instance=<name>/date=<YYYY-MM-DD>/<stem>.parquet`` (the partition keys come from
the table's schema). A file is written to a hidden temp name unique to its writer
(``.tmp-<stem>.<uuid>.partial``) in the same folder and renamed into place, so a reader globbing
``*.parquet`` never sees a partial file. A crash leaves a stray temp file; every write sweeps its folder of
temp files older than ``LakeConfig.stale_temp_after_s`` (never younger ones: they may belong to a writer
still at work), and ``compact_lake`` sweeps the whole lake. Writing the same (table, partitions, stem) again
replaces the file: snapshots are idempotent per (instance, captured_at).

Bad files. ``scan_table`` checks each file's Parquet envelope (magic bytes at both ends, a footer length
that fits: a few bytes read per file, cached per process by size and mtime) and moves a file that fails to
``<root>/_quarantine/<table>/<its path under the table>`` with a ``.quarantine.json`` note beside it (why,
when, where from). ``read_table`` and ``with_recovery`` also catch what only a read finds (a column whose
type cannot be cast, a corrupt page): on a read error they read each file on its own, quarantine the bad
ones and retry. Where a move is unsafe (the lake is read-only, or a compaction holds the lake's compaction
lock) the file is left in place and skipped by this process. Every quarantined or skipped file becomes a
``LakeIncident``: logged, and kept for the run's output (``incident_mark``/``incidents_since``).

Locks. Writers that must run alone (the samples job rebuilding partitions, compaction) hold
``exclusive_lock(root, name)``: ``fcntl.flock`` on ``<root>/_locks/<name>.lock``, waiting at most
``LakeConfig.lock_wait_s``, then ``LakeLockError`` names the holder's pid and start time.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.schemas import SCHEMA_VERSION, TABLES, TableSchema

DEFAULT_LAKE_ROOT = Path("data/lake")
TEMP_MARK = ".tmp-"
TEMP_SUFFIX = ".partial"
QUARANTINE = "_quarantine"
NOTE_SUFFIX = ".quarantine.json"
LOCKS = "_locks"
COMPACTION_LOCK = "compaction"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_MAGIC = b"PAR1"
log = logging.getLogger("jobs.lake")
T = TypeVar("T")


@dataclass(frozen=True)
class LakeConfig:
    """Thresholds of the lake's writers and locks."""

    stale_temp_after_s: float = 3600.0
    """A ``.tmp-*.partial`` file older than this is a crashed writer's leftover and is removed by whoever
    finds it (every write sweeps its folder, compaction the lake); a younger one may be a live writer's."""
    lock_wait_s: float = 10.0
    """How long a run waits for a lake lock (samples, compaction) before failing with LakeLockError."""
    analysis_retention_days: int = 30
    """Analysis rows (performance_regressions, resource_regressions, instance_slowdowns, plan_diffs,
    analysis_runs) of runs more than this many days old are deleted by compaction (``jobs.compaction``),
    whole date partitions at a time; 0 keeps them forever. They are derived: a full detection run (or a
    samples rebuild and a full run) makes them again from the samples that are still there."""


class LakeError(RuntimeError):
    """A lake file could not be written or read; the message names the file."""


class LakeLockError(LakeError):
    """Another run holds a lake lock; the message names the lock, the holder's pid and since when."""


# Errors a read of lake files can raise (a panic in the Parquet reader is a BaseException in Python).
READ_ERRORS: tuple[type[BaseException], ...] = (
    pl.exceptions.PolarsError,
    OSError,
    pl.exceptions.PanicException,
)


def table_schema(table: str | TableSchema) -> TableSchema:
    if isinstance(table, TableSchema):
        return table
    try:
        return TABLES[table]
    except KeyError:
        raise LakeError(f"unknown lake table {table!r}; known: {sorted(TABLES)}") from None


def stem_for(ts: datetime) -> str:
    """A file-name-safe, sortable stem for a timestamp (hourly partition keys contain ':')."""
    return ts.strftime("%Y%m%dT%H%M%S%fZ")


def partition_dir(root: Path, table: str | TableSchema, partitions: Mapping[str, str]) -> Path:
    schema = table_schema(table)
    missing = [k for k in schema.partition_by if k not in partitions]
    if missing:
        raise LakeError(f"table {schema.name}: missing partition values {missing}")
    path = Path(root) / schema.name
    for key in schema.partition_by:
        value = str(partitions[key])
        if not _SAFE_VALUE.match(value):
            raise LakeError(f"table {schema.name}: partition {key}={value!r} is not a safe folder name")
        path = path / f"{key}={value}"
    return path


# ---------------------------------------------------------------------------------------------------------
# Writing


def write_table(
    root: Path,
    table: str | TableSchema,
    frame: pl.DataFrame,
    partitions: Mapping[str, str],
    stem: str,
    *,
    config: LakeConfig | None = None,
) -> Path:
    """Write one file atomically (temp file + fsync + rename) and return its final path."""
    schema = table_schema(table)
    folder = partition_dir(root, schema, partitions)
    folder.mkdir(parents=True, exist_ok=True)
    return write_file(folder / f"{stem}.parquet", schema, frame, config=config)


def write_file(
    final: Path, schema: TableSchema, frame: pl.DataFrame, *, config: LakeConfig | None = None
) -> Path:
    """Conform ``frame`` to ``schema`` and write it to ``final`` through a temp file in the same folder.

    The temp name is unique to this writer; the folder's temp files older than the stale threshold are
    removed first (a younger one may be another writer's, even of the same stem).
    """
    config = config or LakeConfig()
    folder, stem = final.parent, final.stem
    arrow = schema.conform(frame).to_arrow()
    metadata = dict(arrow.schema.metadata or {})
    metadata.update(
        {
            b"radar.table": schema.name.encode(),
            b"radar.schema_version": str(SCHEMA_VERSION).encode(),
        }
    )
    arrow = arrow.replace_schema_metadata(metadata)
    sweep_stale_temp_files(folder, config.stale_temp_after_s)
    tmp = folder / f"{TEMP_MARK}{stem}.{uuid.uuid4().hex}{TEMP_SUFFIX}"
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(arrow, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, Exception):
            raise LakeError(f"could not write {final}: {exc}") from exc
        raise
    return final


def sweep_stale_temp_files(folder: Path, older_than_s: float, now: float | None = None) -> list[Path]:
    """Remove the folder's ``.tmp-*.partial`` files last modified more than ``older_than_s`` ago."""
    now = time.time() if now is None else now
    removed = []
    for tmp in Path(folder).glob(f"{TEMP_MARK}*{TEMP_SUFFIX}"):
        try:
            age = now - tmp.stat().st_mtime
        except FileNotFoundError:
            continue
        if age > older_than_s:
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def sweep_lake_temp_files(root: Path, config: LakeConfig | None = None) -> list[Path]:
    """The whole-lake sweep (run by compaction): stale temp files of every partition folder of every table."""
    config = config or LakeConfig()
    removed: list[Path] = []
    for schema in TABLES.values():
        base = Path(root) / schema.name
        for folder in base.glob("/".join(["*"] * len(schema.partition_by))):
            if folder.is_dir():
                removed += sweep_stale_temp_files(folder, config.stale_temp_after_s)
    return removed


# ---------------------------------------------------------------------------------------------------------
# Incidents: every quarantined or skipped file, for the run's output


@dataclass(frozen=True)
class LakeIncident:
    """A lake file a reader could not use: moved to quarantine, or left in place and skipped."""

    table: str
    path: Path
    reason: str
    action: str  # "quarantined" | "skipped"
    moved_to: Path | None
    at: datetime
    note: str = ""
    """For a skipped file: why it was not moved."""

    def message(self) -> str:
        if self.action == "quarantined":
            return f"lake file {self.path} quarantined to {self.moved_to}: {self.reason}"
        return f"lake file {self.path} skipped, not moved ({self.note}): {self.reason}"

    def as_row(self) -> dict[str, str]:
        return {
            "table": self.table,
            "file": str(self.path),
            "action": self.action,
            "reason": self.reason,
            "moved_to": str(self.moved_to or ""),
            "at": self.at.isoformat(),
        }


_INCIDENTS: list[LakeIncident] = []
_INCIDENTS_GUARD = threading.Lock()


def incident_mark() -> int:
    """A position in this process's incident log; pass it to ``incidents_since`` after a run."""
    with _INCIDENTS_GUARD:
        return len(_INCIDENTS)


def incidents_since(mark: int) -> list[LakeIncident]:
    with _INCIDENTS_GUARD:
        return list(_INCIDENTS[mark:])


def _record(incident: LakeIncident) -> LakeIncident:
    with _INCIDENTS_GUARD:
        _INCIDENTS.append(incident)
    log.warning(incident.message())
    return incident


# ---------------------------------------------------------------------------------------------------------
# Checking files

Signature = tuple[int, int]  # (size, mtime_ns): a file rewritten in place is checked again
# Per process and per (root, table): files that passed the envelope check, the full-read check, and bad
# files that could not be moved (skipped by every later scan while unchanged).
_ENVELOPE_OK: dict[tuple[str, str], dict[str, Signature]] = {}
_READ_OK: dict[tuple[str, str], dict[str, Signature]] = {}
_SKIPPED: dict[tuple[str, str], dict[str, Signature]] = {}


def _signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def envelope_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole Parquet file, judged by its first and last bytes; None if whole."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 12:
                return f"{size} bytes: too short for a Parquet file"
            head = handle.read(4)
            handle.seek(size - 8)
            tail = handle.read(8)
    except FileNotFoundError:
        raise
    except OSError as exc:
        return f"cannot be opened: {exc}"
    if head != _MAGIC:
        return "not a Parquet file (no PAR1 magic at its start)"
    if tail[4:] != _MAGIC:
        return "truncated or not Parquet (no PAR1 magic at its end)"
    (footer_length,) = struct.unpack("<I", tail[:4])
    if footer_length + 12 > size:
        return f"footer length {footer_length} does not fit in {size} bytes"
    return None


def read_problem(path: Path, table: str | TableSchema) -> str | None:
    """Why ``path`` cannot be read as a ``table`` file (every column, cast to the schema); None if it can."""
    schema = table_schema(table)
    try:
        problem = envelope_problem(path)
        if problem:
            return problem
        _scan([path], schema, hive=False).collect()
    except FileNotFoundError:
        raise
    except READ_ERRORS as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return None


def _table_key(root: Path, schema: TableSchema) -> tuple[str, str]:
    return str(Path(root).resolve()), schema.name


# ---------------------------------------------------------------------------------------------------------
# Quarantine


def quarantine_path(root: Path, table: str | TableSchema, path: Path) -> Path:
    """Where a bad file of ``table`` goes: the same relative path under ``<root>/_quarantine/<table>/``."""
    schema = table_schema(table)
    base = Path(root) / schema.name
    try:
        relative = Path(path).relative_to(base)
    except ValueError:
        relative = Path(Path(path).name)
    return Path(root) / QUARANTINE / schema.name / relative


@contextmanager
def _compaction_guard(root: Path) -> Iterator[str | None]:
    """A shared hold on the compaction lock while a reader moves a file; yields why not when it cannot."""
    try:
        folder = Path(root) / LOCKS
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{COMPACTION_LOCK}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        yield f"the lake is not writable: {exc.strerror or exc}"
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield "a compaction is running in this lake; it will deal with the file"
            return
        yield None
    finally:
        os.close(fd)


def quarantine_file(
    root: Path, table: str | TableSchema, path: Path, reason: str, *, compaction_held: bool = False
) -> LakeIncident | None:
    """Move a bad file to the quarantine with a note, or skip it when moving is unsafe; None if it vanished.

    ``compaction_held``: the caller holds the compaction lock itself (compaction quarantining its inputs).
    """
    schema = table_schema(table)
    path = Path(path)
    signature = _signature(path)
    if signature is None:
        return None
    now = datetime.now(UTC)
    if compaction_held:
        return _move_to_quarantine(root, schema, path, reason, now, signature)
    with _compaction_guard(root) as unsafe:
        if unsafe is not None:
            return _skip(root, schema, path, reason, now, signature, unsafe)
        return _move_to_quarantine(root, schema, path, reason, now, signature)


def _skip(
    root: Path, schema: TableSchema, path: Path, reason: str, now: datetime, signature: Signature, why: str
) -> LakeIncident:
    _SKIPPED.setdefault(_table_key(root, schema), {})[str(path)] = signature
    return _record(LakeIncident(schema.name, path, reason, "skipped", None, now, note=why))


def _move_to_quarantine(
    root: Path, schema: TableSchema, path: Path, reason: str, now: datetime, signature: Signature
) -> LakeIncident | None:
    target = quarantine_path(root, schema, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or Path(f"{target}{NOTE_SUFFIX}").exists():
            target = target.with_name(f"{target.stem}.{uuid.uuid4().hex[:8]}{target.suffix}")
        os.rename(path, target)
    except FileNotFoundError:
        if not path.exists():
            return None  # another reader moved it first
        return _skip(root, schema, path, reason, now, signature, "cannot create the quarantine folder")
    except OSError as exc:
        why = (
            "the lake is read-only"
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            else "move failed"
        )
        return _skip(root, schema, path, reason, now, signature, f"{why}: {exc.strerror or exc}")
    note = {
        "original_path": str(path),
        "table": schema.name,
        "reason": reason,
        "quarantined_at": now.isoformat(),
        "size_bytes": signature[0],
        "by_pid": os.getpid(),
        "by_host": socket.gethostname(),
    }
    try:
        Path(f"{target}{NOTE_SUFFIX}").write_text(json.dumps(note, indent=2) + "\n")
    except OSError as exc:
        log.warning(f"quarantined {path} to {target} but could not write its note: {exc}")
    return _record(LakeIncident(schema.name, path, reason, "quarantined", target, now))


def quarantined_files(root: Path) -> list[dict[str, object]]:
    """Every note in the lake's quarantine (what is there, why, since when)."""
    base = Path(root) / QUARANTINE
    return [json.loads(p.read_text()) for p in sorted(base.rglob(f"*{NOTE_SUFFIX}"))] if base.exists() else []


# ---------------------------------------------------------------------------------------------------------
# Reading


def table_files(root: Path, table: str | TableSchema) -> list[Path]:
    """Every ``*.parquet`` file of the table, as listed (no check)."""
    schema = table_schema(table)
    base = Path(root) / schema.name
    if not base.exists():
        return []
    return sorted(base.glob("/".join(["*"] * len(schema.partition_by) + ["*.parquet"])))


def usable_files(root: Path, table: str | TableSchema, files: Iterable[Path] | None = None) -> list[Path]:
    """The table's files (or just ``files`` of it) minus those failing the envelope check (quarantined now)
    or skipped before."""
    schema = table_schema(table)
    key = _table_key(root, schema)
    known = _ENVELOPE_OK.get(key, {})
    skipped = _SKIPPED.get(key, {})
    checked: dict[str, Signature] = dict(known) if files is not None else {}
    usable = []
    for path in table_files(root, schema) if files is None else sorted(Path(f) for f in files):
        signature = _signature(path)
        if signature is None:
            continue
        name = str(path)
        if skipped.get(name) == signature:
            continue
        if known.get(name) != signature:
            try:
                problem = envelope_problem(path)
            except FileNotFoundError:
                continue
            if problem is not None:
                quarantine_file(root, schema, path, problem)
                continue
        checked[name] = signature
        usable.append(path)
    _ENVELOPE_OK[key] = (
        checked  # a full listing keeps only files listed now: the cache never outgrows the table
    )
    return usable


# Castable differences between a file and the schema are read, not quarantined (e.g. an int32 column).
CAST_OPTIONS = pl.ScanCastOptions(
    integer_cast="upcast", float_cast="upcast", datetime_cast=["nanosecond-downcast", "convert-timezone"]
)


def _scan(files: list[Path], schema: TableSchema, *, hive: bool = True) -> pl.LazyFrame:
    return pl.scan_parquet(
        files,
        schema=schema.polars_schema,
        hive_partitioning=hive,
        hive_schema=(
            pl.Schema({k: schema.partition_dtypes.get(k, pl.String()) for k in schema.partition_by})
            if hive
            else None
        ),
        missing_columns="insert",
        extra_columns="ignore",
        cast_options=CAST_OPTIONS,
    )


def scan_table(root: Path, table: str | TableSchema) -> pl.LazyFrame:
    """The one way to read a lake table with polars: hive columns included, schema enforced.

    Files that are not whole Parquet files are quarantined before the scan. What only a read finds (a
    column that cannot be cast, a corrupt page) raises at ``collect()``: collect through ``read_table`` or
    ``with_recovery`` to have those files quarantined and the read retried.
    """
    schema = table_schema(table)
    return _scan_usable(root, schema, usable_files(root, schema))


def scan_files(root: Path, table: str | TableSchema, files: Iterable[Path]) -> pl.LazyFrame:
    """``scan_table`` restricted to some of the table's files (an incremental reader that knows which
    files are new): the same envelope check, quarantine, hive columns and schema."""
    schema = table_schema(table)
    return _scan_usable(root, schema, usable_files(root, schema, files))


def _scan_usable(root: Path, schema: TableSchema, usable: list[Path]) -> pl.LazyFrame:
    if not usable:
        return pl.LazyFrame(schema=schema.scan_schema())
    try:
        frame = _scan(usable, schema)
    except READ_ERRORS as exc:
        raise LakeError(f"cannot scan lake table {schema.name} under {root}: {exc}") from exc
    return frame.select(list(schema.scan_schema().names()))


def find_unreadable_files(root: Path, table: str | TableSchema) -> tuple[list[LakeIncident], int]:
    """Read each usable file of the table on its own; quarantine (or skip) the bad ones.

    Returns the incidents and how many files vanished meanwhile (e.g. a compaction swapped a partition).
    Files already read whole by this process and unchanged since are not read again.
    """
    schema = table_schema(table)
    key = _table_key(root, schema)
    good = _READ_OK.setdefault(key, {})
    incidents: list[LakeIncident] = []
    vanished = 0
    for path in usable_files(root, schema):
        signature = _signature(path)
        if signature is None:
            vanished += 1
            continue
        if good.get(str(path)) == signature:
            continue
        try:
            problem = read_problem(path, schema)
        except FileNotFoundError:
            vanished += 1
            continue
        if problem is None:
            good[str(path)] = signature
            continue
        incident = quarantine_file(root, schema, path, problem)
        if incident is None:
            vanished += 1
        else:
            incidents.append(incident)
    return incidents, vanished


def with_recovery(
    root: Path, tables: Iterable[str | TableSchema], action: Callable[[], T], attempts: int = 3
) -> T:
    """Run ``action`` (which scans ``tables`` with ``scan_table`` and collects); on a read error find the bad
    files of those tables, quarantine them and run it again. A read error no file explains is a LakeError
    naming the tables."""
    schemas = [table_schema(t) for t in tables]
    names = ", ".join(s.name for s in schemas)
    for _ in range(attempts):
        try:
            return action()
        except READ_ERRORS as exc:
            mark = incident_mark()
            vanished = sum(find_unreadable_files(root, schema)[1] for schema in schemas)
            if not vanished and not incidents_since(mark):
                raise LakeError(
                    f"cannot read lake table {names} under {root}: {type(exc).__name__}: {exc}"
                ) from exc
    try:
        return action()
    except READ_ERRORS as exc:
        raise LakeError(
            f"cannot read lake table {names} under {root} after {attempts} recoveries: {exc}"
        ) from exc


def read_table(
    root: Path,
    table: str | TableSchema,
    query: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None,
) -> pl.DataFrame:
    """Collect a table (through ``query``, e.g. a filter) with bad files quarantined and the read retried."""

    def run() -> pl.DataFrame:
        frame = scan_table(root, table)
        return (query(frame) if query is not None else frame).collect()

    return with_recovery(root, [table], run)


def read_file(root: Path, table: str | TableSchema, path: Path) -> pl.DataFrame | None:
    """One file of ``table`` (file columns only, cast to the schema); None when it is unreadable (then
    quarantined or skipped, like any bad file) or gone. For writers that rewrite single files."""
    schema = table_schema(table)
    try:
        return _scan([Path(path)], schema, hive=False).collect()
    except FileNotFoundError:
        return None
    except READ_ERRORS:
        try:
            problem = read_problem(Path(path), schema)
        except FileNotFoundError:
            return None
        if problem is None:
            raise
        quarantine_file(root, schema, Path(path), problem)
        return None


def read_file_metadata(path: Path) -> dict[str, str]:
    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"radar.")}


def arrow_schema(table: str | TableSchema) -> pa.Schema:
    return table_schema(table).empty().to_arrow().schema


# ---------------------------------------------------------------------------------------------------------
# Locks


def _lock_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    return f"pid {holder.get('pid', 'unknown')}, since {holder.get('since', 'unknown')}"


@contextmanager
def exclusive_lock(root: Path, name: str, config: LakeConfig | None = None) -> Iterator[Path]:
    """Hold ``<root>/_locks/<name>.lock`` (flock) for the block; wait at most ``config.lock_wait_s``.

    Raises LakeLockError "another run holds the <name> lock (pid …, since …)" when the wait runs out. The
    lock is the kernel's: a run that dies releases it, and a lock file left behind means nothing.
    """
    config = config or LakeConfig()
    folder = Path(root) / LOCKS
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LakeError(f"cannot create the {name} lock under {folder}: {exc}") from exc
    path = folder / f"{name}.lock"
    deadline = time.monotonic() + max(0.0, config.lock_wait_s)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LakeLockError(
                        f"another run holds the {name} lock ({_lock_holder(path)}; lock file {path}); "
                        f"waited {config.lock_wait_s:g} s: try again when it has finished"
                    ) from None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        holder = json.dumps({"pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")})
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
