"""The Parquet lake: hive-partitioned files, atomic writes, one read path that survives bad files.

Layout: ``<root>/<table>/instance=<name>/date=<YYYY-MM-DD>/<stem>.parquet`` (the partition keys come from
the table's schema). A file is written to a hidden temp name unique to its writer
(``.tmp-<stem>.<uuid>.partial``) in the same folder and renamed into place, so a reader globbing
``*.parquet`` never sees a partial file. A crash leaves a stray temp file; every write sweeps its folder of
temp files older than ``LakeConfig.stale_temp_after_s`` (never younger ones: they may belong to a writer
still at work), and ``compact_lake`` sweeps the whole lake. Writing the same (table, partitions, stem) again
replaces the file: snapshots are idempotent per (instance, captured_at).

Bad and foreign files. ``scan_table`` checks each file before any reader sees it (``file_problem``: the
Parquet envelope, magic bytes at both ends and a footer length that fits; the file's folders, the table's
partition keys; and its footer's ``radar.table`` mark, the table the radar wrote it for: a few bytes and
one footer read per file, cached per process by size and mtime) and moves a file that fails to
``<root>/_quarantine/<table>/<its path under the table>`` with a ``.quarantine.json`` note beside it (why,
when, where from). Only the lake's own files are data: a Parquet file of another table, or one the radar
did not write, is never counted, however well its columns would cast. ``read_table`` and
``with_recovery`` also catch what only a read finds (a column whose type cannot be cast, a corrupt page):
on a read error they read each file on its own, quarantine the bad ones and retry. Where a move is
unsafe (the lake is read-only, or a compaction holds the lake's compaction lock) the file is left in place
and skipped by this process. Every quarantined or skipped file becomes a
``LakeIncident``: logged, and kept for the run's output (``incident_mark``/``incidents_since``).

Locks. Writers that must run alone (the samples job rebuilding partitions, compaction) hold
``exclusive_lock(root, name)``: ``fcntl.flock`` on ``<root>/_locks/<name>.lock``, waiting at most
``LakeConfig.lock_wait_s``, then ``LakeLockError`` names the holder's pid and start time."""

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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jobs.lake.locks import (
    COMPACTION_LOCK,
    LOCKS,
    LakeConfig,
    LakeError,
    LakeStorageError,
    object_lock_holder,
)
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath, lake_path, polars_storage_options
from jobs.schemas.registry import TABLES
from jobs.schemas.table import SCHEMA_VERSION, TableSchema

if TYPE_CHECKING:
    # pyarrow (0.1-0.2 s to import) is imported by the functions that write or read footers with it: a
    # reader such as `radar sql` never needs it. polars too (about 0.1 s): only the frame readers and writers
    # import it, so the file checks and listings that `radar sql`'s views need start without it.
    import polars as pl
    import pyarrow as pa

DEFAULT_LAKE_ROOT = Path("data/lake")
TEMP_MARK = ".tmp-"
TEMP_SUFFIX = ".partial"
QUARANTINE = "_quarantine"
NOTE_SUFFIX = ".quarantine.json"
REPLACES_KEY = "radar.replaces"
"""Parquet metadata of an object-store compaction's merged file: the JSON list of file names it replaces."""
TABLE_KEY = "radar.table"
"""Parquet metadata naming the table the radar wrote a file for (every writer since the first lake)."""
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_MAGIC = b"PAR1"
log = logging.getLogger("jobs.lake.io")
T = TypeVar("T")


@cache
def read_errors() -> tuple[type[BaseException], ...]:
    """Errors a read of lake files can raise (a panic in the Parquet reader is a BaseException in Python);
    a function so that importing this module does not import polars."""
    import polars as pl

    return (pl.exceptions.PolarsError, OSError, pl.exceptions.PanicException)


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


def partition_dir(root: LakePath, table: str | TableSchema, partitions: Mapping[str, str]) -> LakePath:
    schema = table_schema(table)
    missing = [k for k in schema.partition_by if k not in partitions]
    if missing:
        raise LakeError(f"table {schema.name}: missing partition values {missing}")
    path = lake_path(root) / schema.name
    for key in schema.partition_by:
        value = str(partitions[key])
        if not _SAFE_VALUE.match(value):
            raise LakeError(f"table {schema.name}: partition {key}={value!r} is not a safe folder name")
        path = path / f"{key}={value}"
    return path


# ---------------------------------------------------------------------------------------------------------
# Writing


def write_table(
    root: LakePath,
    table: str | TableSchema,
    frame: pl.DataFrame,
    partitions: Mapping[str, str],
    stem: str,
    *,
    config: LakeConfig | None = None,
) -> LakePath:
    """Write one file atomically (temp file + fsync + rename) and return its final path."""
    schema = table_schema(table)
    folder = partition_dir(root, schema, partitions)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LakeStorageError(folder, exc) from exc
    return write_file(folder / f"{stem}.parquet", schema, frame, config=config)


def write_file(
    final: LakePath,
    schema: TableSchema,
    frame: pl.DataFrame,
    *,
    config: LakeConfig | None = None,
    metadata: Mapping[str, str] | None = None,
) -> LakePath:
    """Conform ``frame`` to ``schema`` and write it to ``final`` through a temp file in the same folder.

    The temp name is unique to this writer; the folder's temp files older than the stale threshold are
    removed first (a younger one may be another writer's, even of the same stem). On an object store the
    file is one PUT of the whole Parquet file (atomic by itself; no temp object, nothing to sweep).
    """
    config = config or LakeConfig()
    folder, stem = final.parent, final.stem
    arrow = schema.conform(frame).to_arrow()
    file_metadata = dict(arrow.schema.metadata or {})
    file_metadata.update(
        {
            TABLE_KEY.encode(): schema.name.encode(),
            b"radar.schema_version": str(SCHEMA_VERSION).encode(),
            **{k.encode(): v.encode() for k, v in (metadata or {}).items()},
        }
    )
    arrow = arrow.replace_schema_metadata(file_metadata)
    if isinstance(final, ObjectPath):
        try:
            put_parquet(final, arrow)
        except Exception as exc:
            raise LakeError(f"could not write {final}: {type(exc).__name__}: {exc}") from exc
        return final
    sweep_stale_temp_files(folder, config.stale_temp_after_s)
    tmp = folder / f"{TEMP_MARK}{stem}.{uuid.uuid4().hex}{TEMP_SUFFIX}"
    try:
        import pyarrow.parquet as pq

        with open(tmp, "wb") as handle:
            pq.write_table(arrow, handle, **parquet_options(arrow))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise LakeStorageError(final, exc) from exc
        if isinstance(exc, Exception):
            raise LakeError(f"could not write {final}: {exc}") from exc
        raise
    return final


def parquet_options(arrow: pa.Table) -> dict[str, object]:
    """How the lake's Parquet files are written: zstd, dictionary pages for every column but floats.

    Why not for floats: measured latencies and times seldom repeat, so their dictionaries are built and
    then abandoned page by page; skipping them halved the write of 720,000 samples (0.44 -> 0.17 s) and
    the files came out smaller. Ids, names and timestamps repeat and keep their dictionaries."""
    import pyarrow as pa

    dictionary = [f.name for f in arrow.schema if not pa.types.is_floating(f.type)]
    return {"compression": "zstd", "use_dictionary": dictionary}


def put_parquet(final: ObjectPath, arrow: pa.Table) -> None:
    """The lake's Parquet bytes (zstd) as one PUT: an object is whole or absent, never partial."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = pa.BufferOutputStream()
    pq.write_table(arrow, buffer, **parquet_options(arrow))
    final.write_bytes(buffer.getvalue().to_pybytes())


def sweep_stale_temp_files(folder: LakePath, older_than_s: float, now: float | None = None) -> list[LakePath]:
    """Remove the folder's ``.tmp-*.partial`` files last modified more than ``older_than_s`` ago (an object
    store has none: its writes are single PUTs)."""
    if isinstance(folder, ObjectPath):
        return []
    now = time.time() if now is None else now
    removed: list[LakePath] = []
    for tmp in Path(folder).glob(f"{TEMP_MARK}*{TEMP_SUFFIX}"):
        try:
            age = now - tmp.stat().st_mtime
        except FileNotFoundError:
            continue
        if age > older_than_s:
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def sweep_lake_temp_files(root: LakePath, config: LakeConfig | None = None) -> list[LakePath]:
    """The whole-lake sweep (run by compaction): stale temp files of every partition folder of every table."""
    config = config or LakeConfig()
    removed: list[LakePath] = []
    if isinstance(root, ObjectPath):
        return removed
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
    path: LakePath
    reason: str
    action: str  # "quarantined" | "skipped"
    moved_to: LakePath | None
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
# Per process and per (root, table): files that passed ``file_problem``, the full-read check, and bad
# files that could not be moved (skipped by every later scan while unchanged).
_CHECKED_OK: dict[tuple[str, str], dict[str, Signature]] = {}
_READ_OK: dict[tuple[str, str], dict[str, Signature]] = {}
_SKIPPED: dict[tuple[str, str], dict[str, Signature]] = {}


def _signature(path: LakePath) -> Signature | None:
    try:
        st = path.listed_stat() if isinstance(path, ObjectPath) else path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def envelope_problem(path: LakePath) -> str | None:
    """Why ``path`` is not a whole Parquet file (magic bytes at both ends, a footer length that fits);
    None if whole."""
    return _envelope_and_footer(path)[0]


def _envelope_verdict(head: bytes, tail: bytes, size: int) -> str | None:
    if head != _MAGIC:
        return "not a Parquet file (no PAR1 magic at its start)"
    if tail[4:] != _MAGIC:
        return "truncated or not Parquet (no PAR1 magic at its end)"
    (footer_length,) = struct.unpack("<I", tail[:4])
    if footer_length + 12 > size:
        return f"footer length {footer_length} does not fit in {size} bytes"
    return None


_OBJECT_TAIL_BYTES = 64 << 10
"""Bytes read from an object's end in one request by ``file_problem``: a lake file's footer (a few KiB)
fits, and a file this small is read whole."""
_MARK = b"\x18" + bytes([len(TABLE_KEY)]) + TABLE_KEY.encode() + b"\x18"
"""A Thrift compact KeyValue whose key is ``radar.table``: field 1 (header 0x18: next field, binary), its
length as a varint, the key, then field 2's header; the value's varint length and bytes follow."""


def file_problem(path: LakePath, table: str | TableSchema) -> str | None:
    """Why ``path`` is not a usable file of ``table``, judged without reading its data; None if it is one.

    Three checks: a whole Parquet file (``PAR1`` at both ends, a footer length that fits), in one of the
    table's partition folders (``<table>/instance=…/date=…``: its hive columns come from them), and written
    by the radar for this table (``radar.table`` in its footer). Whatever fails is not the lake's data: a
    ``statement_snapshots`` file copied into ``query_samples`` would otherwise be read as samples (the scan
    inserts the columns it lacks as nulls and ignores the rest). Reads the first 4 bytes and the footer; on
    an object store one ranged request of the object's end.
    """
    schema = table_schema(table)
    problem = partition_problem(path, schema)
    if problem is not None:
        return problem
    problem, footer = _envelope_and_footer(path)
    if problem is not None:
        return problem
    declared = footer_table(footer)
    if declared == schema.name:
        return None
    if declared is None:
        return f"not written by the radar (no {TABLE_KEY} in its Parquet metadata), so not {schema.name} data"
    return f"a {declared} file (its {TABLE_KEY} metadata), not {schema.name} data"


def partition_problem(path: LakePath, schema: TableSchema) -> str | None:
    """Why ``path`` is not in a partition folder of ``schema`` (``<table>/<key>=<value>/…/<file>``); None
    if it is."""
    folder = path.parent
    for key in reversed(schema.partition_by):
        if not folder.name.startswith(f"{key}="):
            layout = "/".join([schema.name, *(f"{k}=…" for k in schema.partition_by)])
            return f"not in a partition folder of {schema.name} ({layout}): {folder.name!r} is not {key}=…"
        folder = folder.parent
    if folder.name != schema.name:
        return f"not in the {schema.name} folder"
    return None


def footer_table(footer: bytes) -> str | None:
    """The table a Parquet footer's ``radar.table`` metadata names; None when it has none.

    A search for the key-value entry's bytes (``_MARK``), not a Thrift parse: pyarrow's parse of a lake
    file's footer (its Arrow schema included) costs 200-300 µs, 20 times the footer's read, which the first
    read of an uncompacted day (thousands of files) would pay in every process. The last match counts: the
    file's key-value metadata follows its row groups, whose statistics could hold any bytes.
    """
    at = footer.rfind(_MARK)
    if at < 0:
        return None
    position, length, shift = at + len(_MARK), 0, 0
    while position < len(footer):
        byte = footer[position]
        position += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    else:
        return None
    value = footer[position : position + length]
    if len(value) != length:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _envelope_and_footer(path: LakePath) -> tuple[str | None, bytes]:
    """(why ``path`` is not a whole Parquet file, or None; its footer's bytes when it is)."""
    if isinstance(path, ObjectPath):
        return _object_envelope_and_footer(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 12:
                return f"{size} bytes: too short for a Parquet file", b""
            head = handle.read(4)
            handle.seek(size - 8)
            tail = handle.read(8)
            problem = _envelope_verdict(head, tail, size)
            if problem is not None:
                return problem, b""
            (length,) = struct.unpack("<I", tail[:4])
            handle.seek(size - 8 - length)
            return None, handle.read(length)
    except FileNotFoundError:
        raise
    except OSError as exc:
        return f"cannot be opened: {exc}", b""


def _object_envelope_and_footer(path: ObjectPath) -> tuple[str | None, bytes]:
    """``_envelope_and_footer`` of an object: its size from the listing, then its last 64 KiB (a second
    request only for a larger footer). The leading magic is checked when that read reached it."""
    size = path.listed_stat().st_size
    if size < 12:
        return f"{size} bytes: too short for a Parquet file", b""
    start = max(0, size - _OBJECT_TAIL_BYTES)
    try:
        end = path.read_range(start, size)
        (length,) = struct.unpack("<I", end[-8:-4])
        problem = _envelope_verdict(end[:4] if start == 0 else _MAGIC, end[-8:], size)
        if problem is not None:
            return problem, b""
        if length + 8 > len(end):
            end = path.read_range(size - 8 - length, size)
    except FileNotFoundError:
        raise
    except Exception as exc:
        return f"cannot be read: {type(exc).__name__}", b""
    return None, end[len(end) - 8 - length : len(end) - 8]


def read_problem(path: LakePath, table: str | TableSchema) -> str | None:
    """Why ``path`` cannot be read as a ``table`` file (``file_problem``, then every column read and cast
    to the schema); None if it can."""
    schema = table_schema(table)
    try:
        problem = file_problem(path, schema)
        if problem:
            return problem
        _scan([path], schema, hive=False).collect()
    except FileNotFoundError:
        raise
    except read_errors() as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return None


def _table_key(root: LakePath, schema: TableSchema) -> tuple[str, str]:
    return str(lake_path(root).resolve()), schema.name


# ---------------------------------------------------------------------------------------------------------
# Quarantine


def quarantine_path(root: LakePath, table: str | TableSchema, path: LakePath) -> LakePath:
    """Where a bad file of ``table`` goes: the same relative path under ``<root>/_quarantine/<table>/``."""
    schema = table_schema(table)
    root, path = lake_path(root), lake_path(path)
    base = root / schema.name
    try:
        relative = str(path.relative_to(base))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        relative = path.name
    return root / QUARANTINE / schema.name / relative


@contextmanager
def _compaction_guard(root: LakePath) -> Iterator[str | None]:
    """A shared hold on the compaction lock while a reader moves a file; yields why not when it cannot.
    On an object store (no shared locks) a live compaction lease object means "not now"."""
    if isinstance(root, ObjectPath):
        holder = object_lock_holder(root / LOCKS / f"{COMPACTION_LOCK}.lock")
        yield (
            None
            if holder is None or holder["expired"]
            else ("a compaction is running in this lake; it will deal with the file")
        )
        return
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
    root: LakePath, table: str | TableSchema, path: LakePath, reason: str, *, compaction_held: bool = False
) -> LakeIncident | None:
    """Move a bad file to the quarantine with a note, or skip it when moving is unsafe; None if it vanished.

    ``compaction_held``: the caller holds the compaction lock itself (compaction quarantining its inputs).
    """
    schema = table_schema(table)
    root, path = lake_path(root), lake_path(path)
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
    root: LakePath,
    schema: TableSchema,
    path: LakePath,
    reason: str,
    now: datetime,
    signature: Signature,
    why: str,
) -> LakeIncident:
    _SKIPPED.setdefault(_table_key(root, schema), {})[str(path)] = signature
    return _record(LakeIncident(schema.name, path, reason, "skipped", None, now, note=why))


def _move_to_quarantine(
    root: LakePath, schema: TableSchema, path: LakePath, reason: str, now: datetime, signature: Signature
) -> LakeIncident | None:
    target = quarantine_path(root, schema, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.with_name(target.name + NOTE_SUFFIX).exists():
            target = target.with_name(f"{target.stem}.{uuid.uuid4().hex[:8]}{target.suffix}")
        if isinstance(path, ObjectPath):
            path.rename(target)
        else:
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
        target.with_name(target.name + NOTE_SUFFIX).write_text(json.dumps(note, indent=2) + "\n")
    except Exception as exc:
        log.warning(f"quarantined {path} to {target} but could not write its note: {exc}")
    return _record(LakeIncident(schema.name, path, reason, "quarantined", target, now))


def quarantined_files(root: LakePath) -> list[dict[str, object]]:
    """Every note in the lake's quarantine (what is there, why, since when)."""
    base = lake_path(root) / QUARANTINE
    return [json.loads(p.read_text()) for p in sorted(base.rglob(f"*{NOTE_SUFFIX}"))] if base.exists() else []


# ---------------------------------------------------------------------------------------------------------
# Reading


def table_files(root: LakePath, table: str | TableSchema) -> list[LakePath]:
    """Every ``*.parquet`` file of the table, as listed (no check)."""
    schema = table_schema(table)
    base = lake_path(root) / schema.name
    pattern = "/".join(["*"] * len(schema.partition_by) + ["*.parquet"])
    if isinstance(base, ObjectPath):
        return sorted(base.glob(pattern, files_only=True))  # one listing; an empty table lists nothing
    if not base.exists():
        return []
    return sorted(base.glob(pattern))


def usable_files(
    root: LakePath, table: str | TableSchema, files: Iterable[LakePath] | None = None
) -> list[LakePath]:
    """The table's files (or just ``files`` of it) minus those failing ``file_problem`` (quarantined now)
    or skipped before."""
    schema = table_schema(table)
    key = _table_key(root, schema)
    known = _CHECKED_OK.get(key, {})
    skipped = _SKIPPED.get(key, {})
    checked: dict[str, Signature] = dict(known) if files is not None else {}
    listed = table_files(root, schema) if files is None else sorted(lake_path(f) for f in files)
    signed = [(path, _signature(path)) for path in drop_replaced(listed)]
    signed = [(p, sig) for p, sig in signed if sig is not None and skipped.get(str(p)) != sig]
    problems = _problems_of([p for p, sig in signed if known.get(str(p)) != sig], schema)
    usable = []
    for path, signature in signed:
        problem = problems.get(str(path))
        if problem is _VANISHED:
            continue
        if problem is not None:
            quarantine_file(root, schema, path, problem)
            continue
        checked[str(path)] = signature  # type: ignore[assignment]
        usable.append(path)
    _CHECKED_OK[key] = checked  # a full listing keeps only files listed now: the cache never outgrows it
    return usable


_VANISHED = "vanished"
_OBJECT_CHECKS_AT_ONCE = 16
"""Objects checked concurrently: each check is one request, so a first read of many objects waits for the
store's latency about once per 16 objects, not once per object."""


def _problems_of(paths: list[LakePath], schema: TableSchema) -> dict[str, str | None]:
    """``file_problem`` of each path (``_VANISHED`` for one gone meanwhile), objects checked concurrently."""

    def problem_of(path: LakePath) -> str | None:
        try:
            return file_problem(path, schema)
        except FileNotFoundError:
            return _VANISHED

    if len(paths) > 1 and isinstance(paths[0], ObjectPath):
        with ThreadPoolExecutor(_OBJECT_CHECKS_AT_ONCE) as pool:
            return dict(zip(map(str, paths), pool.map(problem_of, paths), strict=True))
    return {str(path): problem_of(path) for path in paths}


_REPLACES: dict[str, tuple[Signature, frozenset[str]]] = {}


def drop_replaced(paths: list[LakePath]) -> list[LakePath]:
    """On an object store, ``paths`` minus the files that a compacted file in the same folder replaces
    (between an object-store compaction's PUT and its deletes both are listed; see ``jobs.lake.compaction``).
    Local paths pass through: there compaction swaps a whole folder at once."""
    merged = [p for p in paths if isinstance(p, ObjectPath) and p.name.startswith("compacted-")]
    if not merged:
        return paths
    import pyarrow as pa

    replaced: set[tuple[str, str]] = set()
    for path in merged:
        signature = _signature(path)
        if signature is None:
            continue
        cached = _REPLACES.get(str(path))
        if cached is None or cached[0] != signature:
            try:
                listed = json.loads(read_file_metadata(path).get(REPLACES_KEY, "[]"))
                names = (
                    frozenset(n for n in listed if isinstance(n, str))
                    if isinstance(listed, list)
                    else frozenset()
                )
            except (OSError, ValueError, pa.ArrowException):
                names = frozenset()
            cached = _REPLACES[str(path)] = (signature, names)
        replaced |= {(str(path.parent), name) for name in cached[1]}
    return [p for p in paths if (str(p.parent), p.name) not in replaced]


def scan_file_columns(files: list[LakePath], table: str | TableSchema) -> pl.LazyFrame:
    """The files' own columns cast to the table's schema, no hive columns (compaction's merge)."""
    return _scan(files, table_schema(table), hive=False)


@cache
def _cast_options() -> pl.ScanCastOptions:
    """Castable differences between a file and the schema are read, not quarantined (e.g. an int32 column)."""
    import polars as pl

    return pl.ScanCastOptions(
        integer_cast="upcast", float_cast="upcast", datetime_cast=["nanosecond-downcast", "convert-timezone"]
    )


def _scan(files: list[LakePath], schema: TableSchema, *, hive: bool = True) -> pl.LazyFrame:
    import polars as pl

    return pl.scan_parquet(
        [str(f) if isinstance(f, ObjectPath) else f for f in files],
        storage_options=polars_storage_options(files[0]) if files else None,
        schema=schema.polars_schema,
        hive_partitioning=hive,
        hive_schema=(
            pl.Schema({k: kind.polars() for k, kind in schema.partition_kinds().items()}) if hive else None
        ),
        missing_columns="insert",
        extra_columns="ignore",
        cast_options=_cast_options(),
    )


def scan_table(root: LakePath, table: str | TableSchema) -> pl.LazyFrame:
    """The one way to read a lake table with polars: hive columns included, schema enforced.

    Files that fail ``file_problem`` (not whole Parquet files, or not this table's own) are quarantined
    before the scan. What only a read finds (a
    column that cannot be cast, a corrupt page) raises at ``collect()``: collect through ``read_table`` or
    ``with_recovery`` to have those files quarantined and the read retried.
    """
    schema = table_schema(table)
    return _scan_usable(root, schema, usable_files(root, schema))


def scan_files(root: LakePath, table: str | TableSchema, files: Iterable[LakePath]) -> pl.LazyFrame:
    """``scan_table`` restricted to some of the table's files (an incremental reader that knows which
    files are new): the same checks, quarantine, hive columns and schema."""
    schema = table_schema(table)
    return _scan_usable(root, schema, usable_files(root, schema, files))


def _scan_usable(root: LakePath, schema: TableSchema, usable: list[LakePath]) -> pl.LazyFrame:
    if not usable:
        import polars as pl

        return pl.LazyFrame(schema=schema.scan_schema())
    try:
        frame = _scan(usable, schema)
    except read_errors() as exc:
        raise LakeError(f"cannot scan lake table {schema.name} under {root}: {exc}") from exc
    return frame.select(list(schema.scan_schema().names()))


def find_unreadable_files(root: LakePath, table: str | TableSchema) -> tuple[list[LakeIncident], int]:
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
    root: LakePath, tables: Iterable[str | TableSchema], action: Callable[[], T], attempts: int = 3
) -> T:
    """Run ``action`` (which scans ``tables`` with ``scan_table`` and collects); on a read error find the bad
    files of those tables, quarantine them and run it again. A read error no file explains is a LakeError
    naming the tables."""
    schemas = [table_schema(t) for t in tables]
    names = ", ".join(s.name for s in schemas)
    for _ in range(attempts):
        try:
            return action()
        except read_errors() as exc:
            mark = incident_mark()
            vanished = sum(find_unreadable_files(root, schema)[1] for schema in schemas)
            if not vanished and not incidents_since(mark):
                raise LakeError(
                    f"cannot read lake table {names} under {root}: {type(exc).__name__}: {exc}"
                ) from exc
    try:
        return action()
    except read_errors() as exc:
        raise LakeError(
            f"cannot read lake table {names} under {root} after {attempts} recoveries: {exc}"
        ) from exc


def read_table(
    root: LakePath,
    table: str | TableSchema,
    query: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None,
) -> pl.DataFrame:
    """Collect a table (through ``query``, e.g. a filter) with bad files quarantined and the read retried."""

    def run() -> pl.DataFrame:
        frame = scan_table(root, table)
        return (query(frame) if query is not None else frame).collect()

    return with_recovery(root, [table], run)


def read_file(root: LakePath, table: str | TableSchema, path: LakePath) -> pl.DataFrame | None:
    """One file of ``table`` (file columns only, cast to the schema); None when it is unreadable (then
    quarantined or skipped, like any bad file) or gone. For writers that rewrite single files."""
    schema = table_schema(table)
    path = lake_path(path)
    try:
        problem = file_problem(path, schema)
    except FileNotFoundError:
        return None
    if problem is not None:
        quarantine_file(root, schema, path, problem)
        return None
    try:
        return _scan([path], schema, hive=False).collect()
    except FileNotFoundError:
        return None
    except read_errors():
        try:
            problem = read_problem(path, schema)
        except FileNotFoundError:
            return None
        if problem is None:
            if isinstance(path, ObjectPath) and not path.is_file():
                return None  # polars reports a vanished object as a generic read error
            raise
        quarantine_file(root, schema, path, problem)
        return None


def read_file_metadata(path: LakePath) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pa.BufferReader(path.read_bytes()) if isinstance(path, ObjectPath) else path
    meta = pq.read_schema(source).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"radar.")}


def arrow_schema(table: str | TableSchema) -> pa.Schema:
    return table_schema(table).empty().to_arrow().schema
