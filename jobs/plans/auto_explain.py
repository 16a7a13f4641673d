"""Incremental ingest of auto_explain plans from a server's jsonlog files into plan_snapshots.

auto_explain (``log_format = json``, ``log_destination = jsonlog``) writes one JSON object per line; its
``message`` is ``duration: X ms  plan:\\n{…plan JSON…}``. These are real plans with real parameters and,
with ``log_analyze``, actual rows (and times with ``log_timing``). A record is keyed by the plan's
``"Query Identifier"`` (``log_verbose``; right for nested statements too) or else the record's
``query_id`` (the top-level statement's pg_stat_statements queryid).

The reader takes a directory: the server's own ``log/`` folder for a local fleet, or a mounted or shipped
copy for a remote one. Progress is remembered per file (name, inode, byte offset) in
``<lake_root>/_state/auto_explain/<instance>.json`` (written atomically after the lake write, so a crash
re-reads rather than loses; re-read plans are absorbed by the shape dedupe). A file whose inode changed or
that shrank is read from the start (rotation, truncation); a renamed file keeps its offset; a partial last
line is left for the next run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from jobs.collect.texts import (
    check_query_text_mode,
    is_explain_text,
    redact_plan,
    redact_query_parameters,
)
from jobs.plans.history import snapshot_stem, store_snapshot_rows
from jobs.plans.shape import PlanFormatError, plan_facts, plan_root, plan_shape_hash
from jobs.schemas import PLAN_SNAPSHOTS

SOURCE_AUTO_EXPLAIN = "auto_explain"
_PLAN_MARK = b"  plan:\\n"
_MESSAGE_START = "duration: "
MAX_ERRORS_KEPT = 100
_OFFSET_ZONE = re.compile(r"^([+-])(\d{2}):?(\d{2})?$")


@dataclass(frozen=True)
class AutoExplainConfig:
    """Where files are and how much to read per run."""

    file_glob: str = "*.json"
    max_bytes_per_run: int = 512 * 1024 * 1024
    read_chunk_bytes: int = 8 * 1024 * 1024
    max_shapes_per_query: int = 5
    query_text: str = "normalized"
    """Literal values never reach the lake: "normalized" keeps parameter names and redacted expressions,
    "withheld" keeps no parameter and no expression text (jobs.collect.texts)."""


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
) -> list[dict[str, Any]]:
    """Complete jsonlog lines → plan rows, one per run of a shape per queryid (``last_shapes`` carries the
    previous shape across calls); lines that are not auto_explain plans are skipped before JSON parsing."""
    last_shapes = {} if last_shapes is None else last_shapes
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        result.lines_read += 1
        if _PLAN_MARK not in line:
            continue
        try:
            decoded = decode_auto_explain_record(json.loads(line))
            if decoded is None or isinstance(decoded, str):
                result.explain_records += decoded is not None
                continue
            result.plan_records += 1
            if decoded.queryid is None:
                result.unkeyed_records += 1
                continue
            if last_shapes.get(decoded.queryid) == decoded.shape_hash:
                continue  # same shape as this query's previous record: nothing new to store
            rows.append(auto_explain_row(decoded, log_file, query_text))
            last_shapes[decoded.queryid] = decoded.shape_hash
        except (json.JSONDecodeError, PlanFormatError, LogTimestampError, KeyError, ValueError) as exc:
            result.error_count += 1
            if len(result.errors) < MAX_ERRORS_KEPT:
                result.errors.append(f"{log_file}: line {number} of this read: {exc}")
    return rows


def state_path(lake_root: Path, instance: str) -> Path:
    return Path(lake_root) / "_state" / "auto_explain" / f"{instance}.json"


def load_offsets(lake_root: Path, instance: str) -> dict[str, dict[str, int]]:
    path = state_path(lake_root, instance)
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text())["files"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"instance {instance}: unreadable auto_explain offsets file {path}: {exc}") from exc


def save_offsets(lake_root: Path, instance: str, files: dict[str, dict[str, int]]) -> None:
    """Atomic write (temp + rename) of the per-file offsets."""
    path = state_path(lake_root, instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    os.replace(tmp, path)


def start_offset(name: str, inode: int, size: int, known: dict[str, dict[str, int]]) -> int:
    """Where to resume in a file: same name+inode → its offset; a renamed inode → its offset; else 0."""
    entry = known.get(name)
    if entry is None or entry.get("inode") != inode:
        entry = next((e for e in known.values() if e.get("inode") == inode), None)
    if entry is None:
        return 0
    offset = int(entry.get("offset", 0))
    return offset if offset <= size else 0


def ingest_auto_explain_logs(
    log_dir: Path, instance: str, lake_root: Path, config: AutoExplainConfig | None = None
) -> IngestResult:
    """Read new complete jsonlog lines since the last run, store new plan shapes, remember offsets."""
    config = config or AutoExplainConfig()
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        raise FileNotFoundError(f"instance {instance}: auto_explain log directory {log_dir} does not exist")
    result = IngestResult(instance=instance)
    known = load_offsets(lake_root, instance)
    files = sorted(log_dir.glob(config.file_glob), key=lambda p: (p.stat().st_mtime, p.name))
    new_state: dict[str, dict[str, int]] = {}
    rows: list[dict[str, Any]] = []
    last_shapes: dict[int, str] = {}
    budget = config.max_bytes_per_run
    for path in files:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue  # rotated away between listing and reading
        offset = start_offset(path.name, info.st_ino, info.st_size, known)
        if offset < info.st_size and budget > 0:
            offset, used = _read_file(
                path, offset, min(info.st_size, offset + budget), config, rows, result, last_shapes
            )
            budget -= used
        new_state[path.name] = {"inode": info.st_ino, "offset": offset}
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


def _read_file(
    path: Path,
    offset: int,
    end: int,
    config: AutoExplainConfig,
    rows: list[dict[str, Any]],
    result: IngestResult,
    last_shapes: dict[int, str],
) -> tuple[int, int]:
    """Parse complete lines in [offset, end); returns the new offset (after the last newline) and bytes."""
    consumed = 0
    result.files_read += 1
    with open(path, "rb") as handle:
        handle.seek(offset)
        pending = b""
        position = offset
        while position < end:
            chunk = handle.read(min(config.read_chunk_bytes, end - position))
            if not chunk:
                break
            position += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                continue
            complete, pending = data[: cut + 1], data[cut + 1 :]
            rows.extend(
                parse_jsonlog_lines(complete.splitlines(), path.name, result, last_shapes, config.query_text)
            )
            consumed += len(complete)
    result.bytes_read += consumed
    return offset + consumed, consumed
