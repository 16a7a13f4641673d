"""Incremental ingest of auto_explain plans from a server's jsonlog files into plan_snapshots.

auto_explain (``log_format = json``, ``log_destination = jsonlog``) writes one JSON object per line; its
``message`` is ``duration: X ms  plan:\\n{…plan JSON…}``. These are real plans with real parameters and,
with ``log_analyze``, actual rows (and times with ``log_timing``). A record is keyed by the plan's
``"Query Identifier"`` (``log_verbose``; right for nested statements too) or else the record's
``query_id`` (the top-level statement's pg_stat_statements queryid).

The reader takes a directory: the server's own ``log/`` folder for a local fleet, or a mounted or shipped
copy for a remote one. Progress is remembered per file in ``<lake_root>/_state/auto_explain/<instance>.json``
(written atomically after the lake write, so a crash re-reads rather than loses; re-read plans are absorbed
by the shape dedupe): the byte offset read up to, the file's (device, inode) and a fingerprint of its head
(the SHA-256 of its first ``fingerprint_bytes`` bytes, and how many bytes it covers). A file is the same
file as a remembered one when (device, inode) and head agree, wherever it was renamed to (create-mode
rotation); a file with another inode whose head matches a remembered file is a copy of it (copytruncate's
``X.1``: read from the old offset, so lines logged after the last read and before the copy are kept);
a remembered inode whose head no longer matches (inode reuse, truncate-and-rewrite) or a file that
shrank below its offset is read from the start. A partial last line is left for the next run.

The same read also turns every logged execution into one ``execution_samples`` row (latency, cost and
cardinality of that execution; ``jobs.plans.execution_samples`` builds the row), keyed by the record's
``(session_id, line_num)``: the writer drops keys the lake already holds, so a re-read after a crash adds
no duplicate. The radar's own statements (the marker comment) and EXPLAIN statements give no sample. A
record that cannot be read (bad JSON, a non-numeric field, a plan nested too deep) is skipped, counted and
named with its file in ``IngestResult.errors``; it never stops the read or loses rows already collected.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from jobs.collect.foreign_files import ForeignFileRefused, open_foreign_file
from jobs.lake.io import partition_dir, scan_files, stem_for, with_recovery, write_table
from jobs.lake.storage import LakePath, lake_path, write_atomically
from jobs.plans.config import AutoExplainConfig
from jobs.plans.execution_samples import (
    SAMPLE_KEY,
    execution_sample_row,
    execution_samples_frame,
    new_samples,
)
from jobs.plans.history import snapshot_stem, store_snapshot_rows
from jobs.plans.shape import PlanFormatError, plan_facts, plan_root, plan_shape_hash
from jobs.query.identity import fingerprint_text
from jobs.query.texts import (
    check_query_text_mode,
    is_explain_text,
    is_radar_text,
    redact_plan,
    redact_query_parameters,
)
from jobs.schemas.collected import EXECUTION_SAMPLES, PLAN_SNAPSHOTS

SOURCE_AUTO_EXPLAIN = "auto_explain"
_PLAN_MARK = b"  plan:\\n"
_MESSAGE_START = "duration: "
MAX_ERRORS_KEPT = 100
# Distinct query texts whose fingerprint is remembered within one read (bounded memory).
FINGERPRINT_CACHE_SIZE = 10_000
_OFFSET_ZONE = re.compile(r"^([+-])(\d{2}):?(\d{2})?$")


@dataclass
class IngestResult:
    """What one ingest run did; ``errors`` name the file and line of every record that was skipped."""

    instance: str
    files_read: int = 0
    bytes_read: int = 0
    lines_read: int = 0
    plan_records: int = 0
    unkeyed_records: int = 0
    explain_records: int = 0
    error_count: int = 0
    snapshot_rows_written: int = 0
    errors: list[str] = field(default_factory=list)
    sample_records: int = 0
    """Logged executions that became an execution_samples row (before the lake's dedupe)."""
    own_records: int = 0
    """The radar's own statements (marker comment): no sample."""
    sample_errors: int = 0
    """Plan records that gave no sample (also counted in error_count and named in errors)."""
    sample_rows_written: int = 0
    """execution_samples rows written (keys the lake already held are not written again)."""
    duplicate_samples: int = 0
    """Samples read again whose (session_id, line_num) the lake already held."""

    def note_error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)


class LogTimestampError(ValueError):
    """A jsonlog timestamp whose zone is neither UTC/GMT nor a numeric offset."""


def parse_log_timestamp(text: str) -> datetime:
    """'2026-11-29 15:16:52.341 UTC' (PostgreSQL's log format) → aware UTC datetime."""
    stamp, _, zone = text.rpartition(" ")
    parsed = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")
    if zone in ("UTC", "GMT", "Z"):
        return parsed.replace(tzinfo=UTC)
    match = _OFFSET_ZONE.match(zone)
    if match is None:
        raise LogTimestampError(f"timestamp zone {zone!r} is not UTC or an offset (set log_timezone = UTC)")
    sign = -1 if match.group(1) == "-" else 1
    offset = timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0)) * sign
    return parsed.replace(tzinfo=timezone(offset)).astimezone(UTC)


@dataclass(frozen=True)
class DecodedPlan:
    """An auto_explain record decoded just far enough to key it and hash its shape."""

    record: dict[str, Any]
    document: dict[str, Any]
    root: dict[str, Any]
    queryid: int | None
    duration_ms: float | None
    shape_hash: str


def decode_auto_explain_record(record: dict[str, Any]) -> DecodedPlan | str | None:
    """None if not an auto_explain plan, "explain" for the plan of an EXPLAIN statement, else the plan."""
    message = record.get("message")
    if not isinstance(message, str) or not message.startswith(_MESSAGE_START):
        return None
    head, sep, body = message.partition("plan:\n")
    if not sep:
        return None
    parts = head.split()
    duration = float(parts[1]) if len(parts) >= 2 else None
    document = json.loads(body)
    if not isinstance(document, dict):
        raise PlanFormatError("auto_explain plan is not a JSON object (auto_explain.log_format must be json)")
    if is_explain_text(document.get("Query Text")):
        return "explain"
    root = plan_root(document)
    queryid = document.get("Query Identifier") or record.get("query_id") or None
    return DecodedPlan(
        record, document, root, int(queryid) if queryid else None, duration, plan_shape_hash(root)
    )


def auto_explain_row(
    plan: DecodedPlan, log_file: str | None = None, query_text: str = "normalized"
) -> dict[str, Any]:
    """The plan_snapshots row for one decoded auto_explain plan: facts and shape from the plan as logged,
    the stored plan and parameters without any literal value (``Query Text`` is never stored)."""
    check_query_text_mode(query_text)
    facts = plan_facts(plan.root)
    return {
        "captured_at": parse_log_timestamp(str(plan.record["timestamp"])),
        "queryid": plan.queryid,
        "dbid": None,
        "dbname": plan.record.get("dbname"),
        "userid": None,
        "source": SOURCE_AUTO_EXPLAIN,
        "is_generic": False,
        "shape_hash": plan.shape_hash,
        "root_node": facts.root_node,
        "total_cost": facts.total_cost,
        "plan_rows": facts.plan_rows,
        "actual_rows": facts.actual_rows,
        "actual_total_time_ms": facts.actual_total_time_ms,
        "duration_ms": plan.duration_ms,
        "node_types": facts.node_types,
        "relations": facts.relations,
        "indexes": facts.indexes,
        "query_parameters": redact_query_parameters(plan.document.get("Query Parameters"), query_text),
        "log_file": log_file,
        "plan_json": json.dumps(redact_plan(plan.root, query_text), separators=(",", ":")),
    }


def parse_auto_explain_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """One jsonlog record → a plan_snapshots row (queryid may be None); None if not an auto_explain plan.

    Plans of EXPLAIN statements (auto_explain logs those too) come back as ``{"skip": "explain"}``.
    """
    decoded = decode_auto_explain_record(record)
    if decoded is None or isinstance(decoded, str):
        return None if decoded is None else {"skip": decoded}
    return auto_explain_row(decoded)


def parse_jsonlog_lines(
    lines: Iterable[bytes],
    log_file: str,
    result: IngestResult,
    last_shapes: dict[int, str] | None = None,
    query_text: str = "normalized",
    samples: list[dict[str, Any]] | None = None,
    fingerprints: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Complete jsonlog lines → plan rows, one per run of a shape per queryid (``last_shapes`` carries the
    previous shape across calls); lines that are not auto_explain plans are skipped before JSON parsing.

    With ``samples`` given, every logged execution (not only new shapes) also appends its execution_samples
    row there; ``fingerprints`` caches text → fingerprint across calls. A record that fails is counted and
    named (file and line of this read) and the next one is read: nothing a log line holds stops the read.
    """
    last_shapes = {} if last_shapes is None else last_shapes
    cache = {} if fingerprints is None else fingerprints

    def fingerprint_of(text: str) -> str:
        found = cache.get(text)
        if found is None:
            found = fingerprint_text(text)[0]
            if len(cache) >= FINGERPRINT_CACHE_SIZE:
                cache.clear()
            cache[text] = found
        return found

    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        result.lines_read += 1
        if _PLAN_MARK not in line:
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise PlanFormatError(f"a jsonlog line must be a JSON object, not {type(record).__name__}")
            decoded = decode_auto_explain_record(record)
            if decoded is None or isinstance(decoded, str):
                result.explain_records += decoded is not None
                continue
            result.plan_records += 1
            logged_at = parse_log_timestamp(str(record["timestamp"]))
        except Exception as exc:  # one hostile line (bad JSON, depth, types) never stops the read
            result.note_error(f"{log_file}: line {number} of this read: {_describe(exc)}")
            continue
        if samples is not None:
            if is_radar_text(decoded.document.get("Query Text")):
                result.own_records += 1
            else:
                try:
                    samples.append(
                        execution_sample_row(
                            record,
                            decoded.document,
                            decoded.root,
                            logged_at=logged_at,
                            queryid=decoded.queryid,
                            duration_ms=decoded.duration_ms,
                            shape_hash=decoded.shape_hash,
                            log_file=log_file,
                            fingerprint_of=fingerprint_of,
                        )
                    )
                    result.sample_records += 1
                except Exception as exc:  # a SampleFormatError or worse: counted and named, never raised
                    result.sample_errors += 1
                    result.note_error(
                        f"{log_file}: line {number} of this read: no execution sample: {_describe(exc)}"
                    )
        if decoded.queryid is None:
            result.unkeyed_records += 1
            continue
        if last_shapes.get(decoded.queryid) == decoded.shape_hash:
            continue  # same shape as this query's previous record: nothing new to store
        try:
            rows.append(auto_explain_row(decoded, log_file, query_text))
        except Exception as exc:  # counted and named; the record's sample is kept
            result.note_error(f"{log_file}: line {number} of this read: {_describe(exc)}")
            continue
        last_shapes[decoded.queryid] = decoded.shape_hash
    return rows


def _describe(exc: BaseException) -> str:
    """An exception in one short line (a RecursionError says the plan is nested too deep)."""
    if isinstance(exc, RecursionError):
        return "plan nested too deep to read"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def state_path(lake_root: LakePath, instance: str) -> LakePath:
    return lake_path(lake_root) / "_state" / "auto_explain" / f"{instance}.json"


def load_offsets(lake_root: LakePath, instance: str) -> dict[str, dict[str, Any]]:
    path = state_path(lake_root, instance)
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text())["files"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"instance {instance}: unreadable auto_explain offsets file {path}: {exc}") from exc


def save_offsets(lake_root: LakePath, instance: str, files: dict[str, dict[str, Any]]) -> None:
    """Atomic write (temp + rename, or one PUT) of the per-file offsets."""
    path = state_path(lake_root, instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"files": files}, indent=1, sort_keys=True).encode())


@dataclass(frozen=True)
class LogFile:
    """One log file as found now: its name, (device, inode), size and first ``fingerprint_bytes`` bytes."""

    path: Path
    device: int
    inode: int
    size: int
    head: bytes

    @property
    def key(self) -> tuple[int, int]:
        return (self.device, self.inode)

    def state(self, offset: int) -> dict[str, Any]:
        return {
            "device": self.device,
            "inode": self.inode,
            "offset": offset,
            "head_len": len(self.head),
            "head_sha": hashlib.sha256(self.head).hexdigest(),
        }


def head_matches(entry: dict[str, Any], head: bytes, digests: dict[int, str] | None = None) -> bool:
    """Does a file whose first bytes are ``head`` start like the remembered file? An entry without a
    fingerprint (written by an older radar) matches any head: its inode is all there is to go on.
    ``digests`` caches this head's hashes by length covered."""
    if "head_sha" not in entry:
        return True
    covered = int(entry.get("head_len", 0))
    if len(head) < covered:
        return False
    cache = {} if digests is None else digests
    if covered not in cache:
        cache[covered] = hashlib.sha256(head[:covered]).hexdigest()
    return cache[covered] == entry["head_sha"]


def _same_inode(entry: dict[str, Any], found: LogFile) -> bool:
    device = entry.get("device")
    return entry.get("inode") == found.inode and (device is None or device == found.device)


def resume_offsets(found: list[LogFile], known: dict[str, dict[str, Any]]) -> list[int]:
    """Where to resume in each file found (pure). Each remembered entry is used at most once:

    1. same (device, inode) and the same head, not shrunk below the offset: the same file, perhaps
       renamed (create-mode rotation) → its offset;
    2. else another inode whose head matches a remembered, unclaimed entry: a copy of that file
       (copytruncate's ``X.1``) → its offset;
    3. else 0: a new file, a reused inode, a truncated or shrunk file.
    """
    entries = list(known.values())
    digests: list[dict[int, str]] = [{} for _ in found]
    claimed: set[int] = set()
    offsets: list[int | None] = [None] * len(found)

    def fits(number: int, index: int) -> bool:
        entry, file = entries[number], found[index]
        return (
            number not in claimed
            and int(entry.get("offset", 0)) <= file.size
            and head_matches(entry, file.head, digests[index])
        )

    for index, file in enumerate(found):
        number = next((n for n, e in enumerate(entries) if _same_inode(e, file) and fits(n, index)), None)
        if number is not None:
            offsets[index] = int(entries[number].get("offset", 0))
            claimed.add(number)
    for index in range(len(found)):
        if offsets[index] is not None:
            continue
        copies = [
            (int(entry.get("offset", 0)), number)
            for number, entry in enumerate(entries)
            if "head_sha" in entry and int(entry.get("head_len", 0)) > 0 and fits(number, index)
        ]
        if copies:
            offset, number = max(copies)
            offsets[index] = offset
            claimed.add(number)
    return [offset or 0 for offset in offsets]


def find_log_files(log_dir: Path, config: AutoExplainConfig, result: IngestResult) -> list[LogFile]:
    """The files matching the glob, oldest first, each once (a second name of one inode is skipped);
    files that vanish while listed (rotated away) are skipped, unreadable ones are named in the errors, and
    so are links that lead out of the folder, FIFOs and devices, which are not read (``open_foreign_file``:
    a FIFO would block the open, a link could point at a secret)."""
    found: dict[tuple[int, int], tuple[float, LogFile]] = {}
    for path in log_dir.glob(config.file_glob):
        try:
            with open_foreign_file(path, links_within=log_dir) as handle:
                info = os.fstat(handle.fileno())
                head = handle.read(config.fingerprint_bytes)
        except FileNotFoundError:
            continue
        except ForeignFileRefused as exc:
            if path.is_dir() and not path.is_symlink():
                continue  # a folder matching the glob: not a log file
            result.note_error(f"{path.name}: {exc}")
            continue
        except OSError as exc:
            result.error_count += 1
            result.errors.append(f"{path.name}: cannot be read: {exc}")
            continue
        file = LogFile(path, info.st_dev, info.st_ino, info.st_size, head)
        if file.key not in found or path.name < found[file.key][1].path.name:
            found[file.key] = (info.st_mtime, file)
    return [file for _, file in sorted(found.values(), key=lambda item: (item[0], item[1].path.name))]


def ingest_auto_explain_logs(
    log_dir: Path, instance: str, lake_root: LakePath, config: AutoExplainConfig | None = None
) -> IngestResult:
    """Read new complete jsonlog lines since the last run, store new plan shapes, remember offsets."""
    config = config or AutoExplainConfig()
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        raise FileNotFoundError(f"instance {instance}: auto_explain log directory {log_dir} does not exist")
    result = IngestResult(instance=instance)
    known = load_offsets(lake_root, instance)
    found = find_log_files(log_dir, config, result)
    new_state: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] | None = [] if config.execution_samples else None
    last_shapes: dict[int, str] = {}
    budget = config.max_bytes_per_run
    for file, offset in zip(found, resume_offsets(found, known), strict=True):
        if budget > 0:
            file, offset, used = _read_file(file, offset, budget, config, rows, result, last_shapes, samples)
            budget -= used
        new_state[file.path.name] = file.state(offset)
    if samples:
        write = store_execution_samples(lake_root, instance, execution_samples_frame(samples))
        result.sample_rows_written, result.duplicate_samples = write
    if rows:
        frame = pl.DataFrame(rows, schema=PLAN_SNAPSHOTS.polars_schema)
        ingest_time = datetime.now(UTC)
        write = store_snapshot_rows(
            lake_root,
            instance,
            frame,
            snapshot_stem(ingest_time, "auto_explain"),
            config.max_shapes_per_query,
        )
        result.snapshot_rows_written = write.written_rows
    save_offsets(lake_root, instance, new_state)
    return result


def stored_sample_keys(lake_root: LakePath, instance: str, dates: list[str]) -> pl.DataFrame:
    """(session_id, line_num) of the samples the lake holds for an instance on the given dates (a sample's
    date is its logged_at's, so a re-read record can only collide inside its own date partition)."""
    files = [
        path
        for date in dates
        for path in sorted(
            partition_dir(lake_root, EXECUTION_SAMPLES, {"instance": instance, "date": date}).glob(
                "*.parquet"
            )
        )
    ]
    if not files:
        return pl.DataFrame(schema={"session_id": pl.String, "line_num": pl.Int64})
    return with_recovery(
        lake_root,
        [EXECUTION_SAMPLES],
        lambda: scan_files(lake_root, EXECUTION_SAMPLES, files).select(*SAMPLE_KEY).collect(),
    )


def store_execution_samples(lake_root: LakePath, instance: str, samples: pl.DataFrame) -> tuple[int, int]:
    """Write the samples whose key the lake does not hold yet, one file per date; (written, duplicates).

    The file stem is the ingest time plus a digest of the keys written, so writing the very same samples
    twice (a crash between this write and the offsets file) is dropped by the key check, not doubled."""
    if samples.is_empty():
        return 0, 0
    dated = samples.with_columns(pl.col("logged_at").dt.strftime("%Y-%m-%d").alias("date"))
    dates = sorted(set(dated["date"].to_list()))
    stored = stored_sample_keys(lake_root, instance, dates).select(*SAMPLE_KEY)
    fresh = new_samples(dated, stored)
    stamp = stem_for(datetime.now(UTC))
    for (date,), part in fresh.group_by("date", maintain_order=True):
        keys = "|".join(f"{s}:{n}" for s, n in zip(part["session_id"], part["line_num"], strict=True))
        digest = hashlib.sha256(keys.encode()).hexdigest()[:10]
        write_table(
            lake_root,
            EXECUTION_SAMPLES,
            part.drop("date"),
            {"instance": instance, "date": str(date)},
            f"{stamp}-samples-{digest}",
        )
    return fresh.height, samples.height - fresh.height


def _note_long_line(file: LogFile, at: int, longest: int, result: IngestResult) -> None:
    """Name a line over ``longest`` bytes (starting at byte ``at``) in the run's errors."""
    result.note_error(f"{file.path.name}: byte {at}: a line of more than {longest} bytes, skipped")


def _read_file(
    file: LogFile,
    offset: int,
    budget: int,
    config: AutoExplainConfig,
    rows: list[dict[str, Any]],
    result: IngestResult,
    last_shapes: dict[int, str],
    samples: list[dict[str, Any]] | None = None,
) -> tuple[LogFile, int, int]:
    """Parse complete lines from ``offset`` on, at most ``budget`` bytes of them; returns the file (its
    head fingerprint extended if it was short and has grown), the new offset (after the last newline) and
    the bytes consumed. Reads the file found, not whatever now has its name: a file renamed or replaced
    since it was listed is left for the next run."""
    consumed = 0
    fingerprints: dict[str, str] = {}
    try:
        handle = open_foreign_file(file.path, links_within=file.path.parent)
    except FileNotFoundError:
        return file, offset, 0  # renamed away since it was listed: found by its inode and head next run
    except ForeignFileRefused:
        return file, offset, 0  # replaced by a link out or a FIFO since it was listed: named next run
    with handle:
        info = os.fstat(handle.fileno())
        if (info.st_dev, info.st_ino) != file.key or info.st_size < offset:
            return file, offset, 0
        end = min(info.st_size, offset + budget)
        if offset >= end:
            return file, offset, 0
        result.files_read += 1
        handle.seek(offset)
        pending = b""
        position = offset
        # A line longer than this could never be read whole within a run's budget: it is skipped, said,
        # and the lines after it are read (it used to hold the file's offset, read again every run).
        longest = min(config.max_line_bytes, config.max_bytes_per_run)
        # Offsets are saved after a newline, except where the last run's budget ended inside a line it was
        # skipping: the rest of that line is skipped too, not read as a line of its own.
        skipping = offset > 0 and os.pread(handle.fileno(), 1, offset - 1) != b"\n"
        while position < end:
            chunk = handle.read(min(config.read_chunk_bytes, end - position))
            if not chunk:
                break
            position += len(chunk)
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    consumed += len(chunk)
                    continue
                consumed += newline + 1
                chunk, skipping = chunk[newline + 1 :], False
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
            else:
                complete, pending = data[: cut + 1], data[cut + 1 :]
                rows.extend(
                    parse_jsonlog_lines(
                        complete.splitlines(),
                        file.path.name,
                        result,
                        last_shapes,
                        config.query_text,
                        samples,
                        fingerprints,
                    )
                )
                consumed += len(complete)
            if len(pending) > longest:  # the line being read is over the limit: skip to its end
                _note_long_line(file, offset + consumed, longest, result)
                consumed, pending, skipping = consumed + len(pending), b"", True
        if len(file.head) < config.fingerprint_bytes:
            head = os.pread(handle.fileno(), config.fingerprint_bytes, 0)
            if head.startswith(file.head):  # grown, not rewritten, since it was listed
                file = replace(file, head=head, size=max(file.size, len(head)))
    result.bytes_read += consumed
    return file, offset + consumed, consumed
