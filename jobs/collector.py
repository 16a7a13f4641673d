"""Snapshot collector: one consistent, version-aware read of pg_stat_statements per instance.

Per instance and snapshot: server identity and settings, ``pg_stat_statements_info``, every row of
``pg_stat_statements(showtext := false)`` mapped onto the canonical schema by the installed extension
version, and texts only for queryids the lake has not seen. Rows whose text starts with EXPLAIN and rows
hidden by missing privilege are dropped and counted. One unreachable instance never fails the fleet run:
it is recorded as a failed row in ``snapshot_runs`` and named in the result.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
from psycopg.rows import dict_row

from jobs import lake
from jobs.collect.texts import is_explain_text, storable_query_text
from jobs.config import CollectorConfig, FleetConfig, InstanceConfig
from jobs.redaction import scrub
from jobs.schemas import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from jobs.sqlfiles import load_sql

# Extension version -> SQL file mapping its columns onto the canonical names (sql/postgres/).
STATEMENT_SQL_BY_VERSION: dict[str, str] = {
    "1.8": "statements_1_8",
    "1.9": "statements_1_9",
    "1.10": "statements_1_10",
    "1.11": "statements_1_11",
    "1.12": "statements_1_12",
}
INSUFFICIENT_PRIVILEGE_HINT = "grant pg_read_all_stats (or pg_monitor) to the collector's role"


class CollectorError(RuntimeError):
    """A snapshot of one instance could not be taken; the message names the instance."""


def statements_sql_for(extension_version: str) -> str:
    """The statements query for an installed pg_stat_statements version (1.8 to 1.12)."""
    try:
        return load_sql(STATEMENT_SQL_BY_VERSION[extension_version])
    except KeyError:
        raise CollectorError(
            f"pg_stat_statements {extension_version} is not supported "
            f"(supported: {', '.join(STATEMENT_SQL_BY_VERSION)}, i.e. PostgreSQL 13-18)"
        ) from None


@dataclass
class InstanceSnapshot:
    """What one instance gave in one snapshot, conformed to the lake schemas."""

    instance: str
    captured_at: datetime
    run: dict[str, Any]
    statements: pl.DataFrame
    texts: pl.DataFrame


@dataclass
class InstanceResult:
    instance: str
    status: str  # "ok" | "failed"
    captured_at: datetime
    error: str | None = None
    statement_rows: int = 0
    new_texts: int = 0
    explain_rows_dropped: int = 0
    insufficient_privilege_rows: int = 0
    files: list[Path] = field(default_factory=list)
    bytes_written: int = 0
    server_ms: float = 0.0
    wall_ms: float = 0.0


@dataclass
class FleetSnapshotResult:
    results: list[InstanceResult]

    @property
    def failed(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status != "ok"]

    @property
    def ok(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status == "ok"]

    def summary_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "instance": r.instance,
                "status": r.status,
                "statements": r.statement_rows,
                "new_texts": r.new_texts,
                "explain_dropped": r.explain_rows_dropped,
                "hidden_rows": r.insufficient_privilege_rows,
                "bytes": r.bytes_written,
                "server_ms": round(r.server_ms, 1),
                "error": r.error or "",
            }
            for r in self.results
        ]


# ---------------------------------------------------------------------------------------------------------
# Pure parts


def statements_frame(
    rows: list[dict[str, Any]],
    identity: dict[str, Any],
    info: dict[str, Any] | None,
    explain_queryids: set[int],
) -> tuple[pl.DataFrame, int, int]:
    """Canonical statement rows, plus the counts of EXPLAIN rows and privilege-hidden rows dropped."""
    frame = pl.DataFrame(rows, infer_schema_length=None) if rows else STATEMENT_SNAPSHOTS.empty()
    hidden = frame.filter(pl.col("queryid").is_null()).height if rows else 0
    explain = frame.filter(pl.col("queryid").is_in(list(explain_queryids))).height if rows else 0
    if rows:
        frame = frame.filter(
            pl.col("queryid").is_not_null() & ~pl.col("queryid").is_in(list(explain_queryids))
        )
    frame = frame.with_columns(
        pl.lit(identity["captured_at"]).alias("captured_at"),
        pl.lit(identity["system_identifier"]).alias("system_identifier"),
        pl.lit(identity["postmaster_start"]).alias("postmaster_start"),
        pl.lit(info["stats_reset"] if info else None).alias("stats_reset"),
    )
    return STATEMENT_SNAPSHOTS.conform(frame), explain, hidden


def texts_frame(
    rows: list[dict[str, Any]], captured_at: datetime, query_text: str = "normalized"
) -> pl.DataFrame:
    """query_texts rows: flags from the raw text, then the text as it may be stored (no literal values)."""
    if not rows:
        return QUERY_TEXTS.empty()
    frame = pl.DataFrame(rows, infer_schema_length=None).with_columns(
        pl.lit(captured_at).alias("captured_at"),
        pl.col("query").map_elements(is_explain_text, return_dtype=pl.Boolean()).alias("is_explain"),
    )
    stored = [storable_query_text(text, query_text) for text in frame["query"].to_list()]
    frame = frame.with_columns(pl.Series("query", stored, dtype=pl.String()))
    return QUERY_TEXTS.conform(frame)


# ---------------------------------------------------------------------------------------------------------
# Edges: the server and the lake


def known_queries(lake_root: Path, instance: str) -> pl.DataFrame:
    """(queryid, is_explain) for every text the lake already holds for this instance."""
    return lake.read_table(
        lake_root,
        QUERY_TEXTS,
        lambda texts: (
            texts.filter(pl.col("instance") == instance).select("queryid", "is_explain").unique("queryid")
        ),
    )


# Instances whose collector role may not set pg_stat_statements.track at connection (not superuser):
# remembered per process so each snapshot does not pay a refused connection first.
_TRACKING_REFUSED: set[str] = set()
UNTRACKED_OPTIONS = "-c pg_stat_statements.track=none"


def connect_untracked(name: str, dsn: str, config: CollectorConfig) -> psycopg.Connection[dict[str, Any]]:
    """Connect with tracking off from the first statement when the role may (superuser), else plainly.

    A ``SET`` inside the session would itself be recorded before it takes effect, and would then drift
    with the server's load like any query; a startup option is never recorded.
    """
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": config.connect_timeout_s,
        "application_name": config.application_name,
        "row_factory": dict_row,
    }
    if name not in _TRACKING_REFUSED:
        try:
            return psycopg.connect(dsn, options=UNTRACKED_OPTIONS, **kwargs)
        except psycopg.OperationalError as exc:
            if "permission denied to set parameter" not in str(exc):
                raise
            _TRACKING_REFUSED.add(name)
    return psycopg.connect(dsn, **kwargs)


def read_instance_snapshot(
    instance: InstanceConfig, known: pl.DataFrame, config: CollectorConfig
) -> tuple[InstanceSnapshot, float]:
    """Read one instance in one read-only transaction; returns the snapshot and server-side milliseconds."""
    dsn = instance.resolve_dsn()
    with connect_untracked(instance.name, dsn, config) as conn:
        server_ms = 0.0
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(f"SET LOCAL statement_timeout = {int(config.statement_timeout_ms)}")
            started = time.perf_counter()
            identity = conn.execute(load_sql("server_identity")).fetchone()
            assert identity is not None
            version = identity["extension_version"]
            if version is None:
                raise CollectorError(
                    f"instance {instance.name}: pg_stat_statements is not installed in database "
                    f"{identity['current_database']} (CREATE EXTENSION pg_stat_statements; it must also be "
                    "in shared_preload_libraries)"
                )
            statements_sql = statements_sql_for(version)
            info = None
            if version not in ("1.8",):
                info = conn.execute(load_sql("statements_info")).fetchone()
            rows = conn.execute(statements_sql).fetchall()
            seen = set(known["queryid"].to_list())
            unseen = sorted({r["queryid"] for r in rows if r["queryid"] is not None} - seen)
            text_rows: list[dict[str, Any]] = []
            if unseen:
                text_rows = conn.execute(load_sql("query_texts"), {"queryids": unseen}).fetchall()
            server_ms = (time.perf_counter() - started) * 1000
    captured_at = identity["captured_at"].astimezone(UTC)
    identity["captured_at"] = captured_at
    texts = texts_frame(text_rows, captured_at, config.query_text)
    explain_ids = set(known.filter(pl.col("is_explain"))["queryid"].to_list())
    explain_ids |= set(texts.filter(pl.col("is_explain"))["queryid"].to_list())
    statements, explain_dropped, hidden = statements_frame(rows, identity, info, explain_ids)
    run = {
        "captured_at": captured_at,
        "status": "ok",
        "error": (
            f"{hidden} rows hidden by missing privilege: {INSUFFICIENT_PRIVILEGE_HINT}"
            if hidden and not identity["can_read_all_stats"]
            else None
        ),
        "system_identifier": identity["system_identifier"],
        "postmaster_start": identity["postmaster_start"],
        "server_version_num": identity["server_version_num"],
        "extension_version": version,
        "compute_query_id": identity["compute_query_id"],
        "track": identity["track"],
        "track_planning": identity["track_planning"],
        "track_io_timing": identity["track_io_timing"],
        "pgss_max": identity["pgss_max"],
        "dealloc": info["dealloc"] if info else None,
        "stats_reset": info["stats_reset"] if info else None,
        "statement_rows": statements.height,
        "explain_rows_dropped": explain_dropped,
        "insufficient_privilege_rows": hidden,
        "new_texts": texts.height,
        "server_ms": server_ms,
    }
    return InstanceSnapshot(instance.name, captured_at, run, statements, texts), server_ms


def write_instance_snapshot(lake_root: Path, snap: InstanceSnapshot) -> list[Path]:
    """Texts and statements first, the run row last: a run row means its statements are in the lake."""
    parts = {"instance": snap.instance, "date": snap.captured_at.date().isoformat()}
    stem = lake.stem_for(snap.captured_at)
    files = []
    if snap.texts.height:
        files.append(lake.write_table(lake_root, QUERY_TEXTS, snap.texts, parts, stem))
    files.append(lake.write_table(lake_root, STATEMENT_SNAPSHOTS, snap.statements, parts, stem))
    files.append(lake.write_table(lake_root, SNAPSHOT_RUNS, pl.DataFrame([snap.run]), parts, stem))
    return files


def write_failed_run(lake_root: Path, instance: str, captured_at: datetime, error: str) -> Path:
    parts = {"instance": instance, "date": captured_at.date().isoformat()}
    row = pl.DataFrame([{"captured_at": captured_at, "status": "failed", "error": error}])
    return lake.write_table(lake_root, SNAPSHOT_RUNS, row, parts, lake.stem_for(captured_at))


def snapshot_instance(lake_root: Path, instance: InstanceConfig, config: CollectorConfig) -> InstanceResult:
    """Snapshot one instance into the lake; never raises for a server-side problem."""
    started = time.perf_counter()
    dsn: str | None = None
    try:
        dsn = instance.resolve_dsn()
        known = known_queries(lake_root, instance.name)
        snap, server_ms = read_instance_snapshot(instance, known, config)
        files = write_instance_snapshot(lake_root, snap)
        return InstanceResult(
            instance=instance.name,
            status="ok",
            captured_at=snap.captured_at,
            error=snap.run["error"],
            statement_rows=snap.statements.height,
            new_texts=snap.texts.height,
            explain_rows_dropped=snap.run["explain_rows_dropped"],
            insufficient_privilege_rows=snap.run["insufficient_privilege_rows"],
            files=files,
            bytes_written=sum(f.stat().st_size for f in files),
            server_ms=server_ms,
            wall_ms=(time.perf_counter() - started) * 1000,
        )
    except (psycopg.Error, CollectorError, lake.LakeError, ValueError, OSError) as exc:
        message = scrub(f"{type(exc).__name__}: {exc}".strip(), dsn, instance.dsn)
        if not message.startswith(f"instance {instance.name}"):
            message = f"instance {instance.name}: {message}"
        captured_at = datetime.now(UTC)
        files = []
        with contextlib.suppress(lake.LakeError):
            files.append(write_failed_run(lake_root, instance.name, captured_at, message))
        return InstanceResult(
            instance=instance.name,
            status="failed",
            captured_at=captured_at,
            error=message,
            files=files,
            wall_ms=(time.perf_counter() - started) * 1000,
        )


def snapshot_fleet(
    fleet: FleetConfig,
    lake_root: Path,
    *,
    on_instance_done: Callable[[InstanceResult], None] | None = None,
) -> FleetSnapshotResult:
    """Snapshot every instance of the fleet concurrently; failures are per instance, in the result."""
    config = fleet.collector
    workers = max(1, min(config.max_parallel_instances, len(fleet.instances)))

    def one(instance: InstanceConfig) -> InstanceResult:
        result = snapshot_instance(lake_root, instance, config)
        if on_instance_done is not None:
            on_instance_done(result)
        return result

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snapshot") as pool:
        results = list(pool.map(one, fleet.instances))
    return FleetSnapshotResult(results=results)
