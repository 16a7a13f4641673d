"""Snapshot collector: one consistent, version-aware read of pg_stat_statements per instance.

Per instance and snapshot: server identity and settings, ``pg_stat_statements_info``, every row of
``pg_stat_statements(showtext := false)`` mapped onto the canonical schema by the installed extension
version, and texts only for queryids the lake has not seen. Rows whose text starts with EXPLAIN, the
collector's own rows (their text carries the radar's marker) and rows hidden by missing privilege are
dropped and counted. How the collector connects (least privilege, startup options, the deadline watchdog)
lives in ``jobs.collect.session``. One unreachable or hanging instance never fails or stalls the fleet run:
it is recorded as a failed row in ``snapshot_runs`` naming the phase it failed in.

No transaction is opened: pg_stat_statements lives in shared memory and is not MVCC, so a REPEATABLE READ
snapshot would make nothing about it consistent, and its BEGIN/COMMIT would be tracked under the
application's own BEGIN/COMMIT queryids. ``default_transaction_read_only`` is a startup option instead.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import queue
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import psycopg

from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.collect.session import (
    RolePrivileges,
    Watchdog,
    load_privileges,
    open_session,
    save_privileges,
)
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.query.identity import fingerprint_text
from jobs.query.texts import is_explain_text, is_radar_text, storable_query_text
from jobs.redaction import scrub
from jobs.schemas.collected import (
    ACTIVITY_QUERIES,
    ACTIVITY_SNAPSHOTS,
    QUERY_TEXTS,
    SNAPSHOT_RUNS,
    STATEMENT_SNAPSHOTS,
)
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
    privileges: RolePrivileges | None = None
    activity: pl.DataFrame | None = None
    """The activity_snapshots row (None: not read, or the read failed: a warning says why)."""
    running: pl.DataFrame | None = None
    """activity_queries rows: statements running now by query id (None or empty: none to record)."""


@dataclass
class InstanceResult:
    instance: str
    status: str  # "ok" | "failed"
    captured_at: datetime
    error: str | None = None
    health: str = "ok"  # "ok" | "degraded" (read, but the server records less than it should)
    warnings: list[str] = field(default_factory=list)
    failed_phase: str | None = None
    statement_rows: int = 0
    new_texts: int = 0
    explain_rows_dropped: int = 0
    own_rows_dropped: int = 0
    insufficient_privilege_rows: int = 0
    files: list[Path] = field(default_factory=list)
    bytes_written: int = 0
    server_ms: float = 0.0
    wall_ms: float = 0.0

    @property
    def reason(self) -> str:
        """Why it failed or is degraded, in one line ('' when healthy)."""
        if self.status != "ok":
            return self.error or "failed"
        return "; ".join(self.warnings)


@dataclass
class FleetSnapshotResult:
    results: list[InstanceResult]

    @property
    def failed(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status != "ok"]

    @property
    def ok(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status == "ok"]

    @property
    def degraded(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status == "ok" and r.health != "ok"]

    def summary_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "instance": r.instance,
                "status": r.status,
                "health": r.health if r.status == "ok" else "",
                "statements": r.statement_rows,
                "new_texts": r.new_texts,
                "explain_dropped": r.explain_rows_dropped,
                "own_dropped": r.own_rows_dropped,
                "hidden_rows": r.insufficient_privilege_rows,
                "bytes": r.bytes_written,
                "server_ms": round(r.server_ms, 1),
                "reason": r.reason,
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
        pl.col("query").map_elements(is_radar_text, return_dtype=pl.Boolean()).alias("is_radar"),
    )
    stored = [storable_query_text(text, query_text) for text in frame["query"].to_list()]
    frame = frame.with_columns(pl.Series("query", stored, dtype=pl.String()))
    return QUERY_TEXTS.conform(frame)


def count_own_explains(rows: list[dict[str, Any]], own_queryids: set[int], explain_queryids: set[int]) -> int:
    """Rows of the plan capture's own EXPLAINs (the radar's marker and EXPLAIN both): what the detector
    design's "EXPLAIN statements skipped" counter counts. ``explain_rows_dropped`` counts the others' (the
    collector's own rows are dropped first, so an EXPLAIN row left is somebody else's)."""
    both = own_queryids & explain_queryids
    return sum(1 for r in rows if r["queryid"] in both) if both else 0


def drop_own_rows(rows: list[dict[str, Any]], own_queryids: set[int]) -> tuple[list[dict[str, Any]], int]:
    """The statement rows without the collector's own statements, and how many were dropped."""
    if not own_queryids:
        return rows, 0
    kept = [r for r in rows if r["queryid"] not in own_queryids]
    return kept, len(rows) - len(kept)


def health_warnings(identity: dict[str, Any], track_configured: str | None, hidden_rows: int) -> list[str]:
    """Why a snapshot that was read is still degraded: the server records less than the radar needs."""
    warnings = []
    if str(identity.get("compute_query_id") or "").lower() == "off":
        warnings.append(
            "compute_query_id = off: pg_stat_statements records no new statements (set it to auto or on)"
        )
    if str(track_configured or "").lower() == "none":
        warnings.append("pg_stat_statements.track = none: the server records no statements")
    if hidden_rows and not identity.get("can_read_all_stats"):
        warnings.append(f"{hidden_rows} rows hidden by missing privilege: {INSUFFICIENT_PRIVILEGE_HINT}")
    return warnings


def snapshot_stem(captured_at: datetime, run: dict[str, Any]) -> str:
    """File stem: the capture time plus a digest of the run row, so two different snapshots with one
    captured_at never replace each other, while writing the very same snapshot again stays idempotent."""
    content = json.dumps(run, sort_keys=True, default=str).encode()
    return f"{lake.stem_for(captured_at)}-{hashlib.sha256(content).hexdigest()[:10]}"


# ---------------------------------------------------------------------------------------------------------
# Edges: the server and the lake


def known_queries(lake_root: Path, instance: str) -> pl.DataFrame:
    """(queryid, is_explain, is_radar) for every text the lake already holds for this instance."""
    return lake.read_table(
        lake_root,
        QUERY_TEXTS,
        lambda texts: (
            texts.filter(pl.col("instance") == instance)
            .select("queryid", pl.col("is_explain").fill_null(False), pl.col("is_radar").fill_null(False))
            .unique("queryid")
        ),
    )


def privileges_sql_for(server_version: int) -> str:
    """``has_parameter_privilege`` exists from PostgreSQL 15; before, only a superuser may set track."""
    return load_sql("collector_privileges" if server_version >= 150000 else "collector_privileges_pg13")


BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def collector_boot() -> int | None:
    """This host's boot: the first 64 bits of Linux's random boot_id, as a signed integer (8 bytes per
    snapshot row, not a 36-character string). Boot clock readings compare only within one boot; None where
    there is no boot id (then no boot clock is recorded)."""
    try:
        boot_id = BOOT_ID_FILE.read_text().strip().replace("-", "")
        return int.from_bytes(bytes.fromhex(boot_id[:16]), "big", signed=True)
    except (OSError, ValueError):
        return None


def boot_clock_s() -> float | None:
    """Seconds since this host booted, on a clock nothing steps (CLOCK_BOOTTIME, suspend included): a
    wall-clock step shows as the two clocks' difference moving. None without a boot id or such a clock."""
    if collector_boot() is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_instance_snapshot(
    instance: InstanceConfig,
    known: pl.DataFrame,
    config: CollectorConfig,
    *,
    dsn: str | None = None,
    remembered: RolePrivileges | None = None,
    watchdog: Watchdog | None = None,
) -> tuple[InstanceSnapshot, float]:
    """Read one instance (autocommit, read-only session); returns the snapshot and server-side milliseconds.

    Order: identity with the server clock, then pg_stat_statements right after it, then
    pg_stat_statements_info (a reset between the two reads makes the interval *into* this snapshot look
    reset, so it is dropped rather than differenced against post-reset counters), then new texts.
    """
    dsn = dsn or instance.resolve_dsn()
    dog = watchdog or Watchdog(config.instance_deadline_s)
    conn, untracked = open_session(dsn, config, remembered, dog)
    try:
        dog.enter("identity")
        started = time.perf_counter()
        before = datetime.now(UTC)
        boot_before = boot_clock_s()
        identity = conn.execute(load_sql("server_identity")).fetchone()
        boot_after = boot_clock_s()
        after = datetime.now(UTC)
        assert identity is not None
        collector_clock = before + (after - before) / 2
        # The boot clock at the same midpoint: if both the server's and this host's clocks are stepped
        # together, their offset stays put and only this clock tells (samples drop such an interval).
        uptime_s = (
            (boot_before + boot_after) / 2 if boot_before is not None and boot_after is not None else None
        )
        version = identity["extension_version"]
        if version is None:
            raise CollectorError(
                f"instance {instance.name}: pg_stat_statements is not installed in database "
                f"{identity['current_database']} (CREATE EXTENSION pg_stat_statements; it must also be "
                "in shared_preload_libraries)"
            )
        statements_sql = statements_sql_for(version)
        dog.enter("statements")
        rows = conn.execute(statements_sql).fetchall()
        activity_row, activity_warning = (
            read_activity(conn, instance.name) if config.activity else (None, None)
        )
        running_rows = (
            running_groups(read_running(conn, int(identity["server_version_num"])), config.query_text)
            if config.activity and activity_row is not None
            else []
        )
        info = None
        if version not in ("1.8",):
            info = conn.execute(load_sql("statements_info")).fetchone()
        dog.enter("identity")
        privileges = conn.execute(privileges_sql_for(conn.info.server_version)).fetchone()
        assert privileges is not None
        track_configured = identity["track"]
        if identity["track_source"] == "client":  # our own startup option (or the DSN's): not the server's
            track_configured = remembered.track_configured if remembered else None
            if identity["is_superuser"]:
                row = conn.execute(load_sql("collector_track_configured")).fetchone()
                track_configured = row["track_configured"] if row else None
        dog.enter("texts")
        seen = set(known["queryid"].to_list())
        unseen = sorted({r["queryid"] for r in rows if r["queryid"] is not None} - seen)
        text_rows: list[dict[str, Any]] = []
        if unseen:
            text_rows = conn.execute(load_sql("query_texts"), {"queryids": unseen}).fetchall()
        server_ms = (time.perf_counter() - started) * 1000
    finally:
        dog.detach()
        conn.close()
    learned = RolePrivileges(
        system_identifier=int(identity["system_identifier"]),
        may_set_track=bool(privileges["may_set_track"]),
        is_superuser=bool(identity["is_superuser"]),
        can_read_all_stats=bool(identity["can_read_all_stats"]),
        server_version_num=int(identity["server_version_num"]),
        track_configured=track_configured,
    )
    captured_at = identity["captured_at"].astimezone(UTC)
    identity["captured_at"] = captured_at
    texts = texts_frame(text_rows, captured_at, config.query_text)
    explain_ids = set(known.filter(pl.col("is_explain"))["queryid"].to_list())
    explain_ids |= set(texts.filter(pl.col("is_explain"))["queryid"].to_list())
    own_ids = set(known.filter(pl.col("is_radar"))["queryid"].to_list())
    own_ids |= set(texts.filter(pl.col("is_radar"))["queryid"].to_list())
    own_explain_dropped = count_own_explains(rows, own_ids, explain_ids)
    rows, own_dropped = drop_own_rows(rows, own_ids)
    statements, explain_dropped, hidden = statements_frame(rows, identity, info, explain_ids)
    statements = statements.with_columns(
        pl.lit(collector_clock).cast(lake_ts()).alias("collector_clock"),
        pl.lit(collector_boot() if uptime_s is not None else None, dtype=pl.Int64).alias("collector_boot"),
        pl.lit(uptime_s, dtype=pl.Float64).alias("collector_uptime_s"),
    )
    warnings = health_warnings(identity, track_configured, hidden)
    if activity_warning:
        warnings.append(activity_warning)
    run = {
        "captured_at": captured_at,
        "collector_clock": collector_clock,
        "status": "ok",
        "error": (
            f"{hidden} rows hidden by missing privilege: {INSUFFICIENT_PRIVILEGE_HINT}"
            if hidden and not identity["can_read_all_stats"]
            else None
        ),
        "health": "degraded" if warnings else "ok",
        "warnings": "; ".join(warnings) or None,
        "system_identifier": identity["system_identifier"],
        "postmaster_start": identity["postmaster_start"],
        "server_version_num": identity["server_version_num"],
        "extension_version": version,
        "compute_query_id": identity["compute_query_id"],
        "track": track_configured if untracked else identity["track"],
        "track_planning": identity["track_planning"],
        "track_io_timing": identity["track_io_timing"],
        "pgss_max": identity["pgss_max"],
        "dealloc": info["dealloc"] if info else None,
        "stats_reset": info["stats_reset"] if info else None,
        "statement_rows": statements.height,
        "explain_rows_dropped": explain_dropped,
        "own_rows_dropped": own_dropped,
        "own_explain_rows_dropped": own_explain_dropped,
        "insufficient_privilege_rows": hidden,
        "new_texts": texts.height,
        "server_ms": server_ms,
    }
    activity = None
    if activity_row is not None:
        activity = ACTIVITY_SNAPSHOTS.conform(
            pl.DataFrame(
                [{**activity_row, "captured_at": captured_at, "cores": instance.cores, "host": instance.host}]
            )
        )
    running = (
        ACTIVITY_QUERIES.conform(pl.DataFrame([{**r, "captured_at": captured_at} for r in running_rows]))
        if running_rows
        else None
    )
    snap = InstanceSnapshot(
        instance.name,
        captured_at,
        run,
        statements,
        texts,
        privileges=learned,
        activity=activity,
        running=running,
    )
    return snap, server_ms


def read_activity(conn: Any, instance: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the instance's sessions aggregated in one row, or None and why not). A failed read is a warning:
    the statements already read must still reach the lake. Sessions whose state this role may not see
    (no pg_read_all_stats) make the counts wrong, so none are recorded then."""
    try:
        row = conn.execute(load_sql("activity")).fetchone()
    except psycopg.errors.QueryCanceled as exc:  # statement_timeout: said, not fatal
        return None, f"activity not read: {type(exc).__name__}: {exc}".strip()
    except (
        psycopg.errors.InsufficientPrivilege,
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedColumn,
    ) as exc:
        return None, f"activity not read: {type(exc).__name__}: {exc}".strip()
    if row is None:
        return None, "activity not read: no row"
    hidden = int(row.pop("hidden") or 0)
    if hidden:
        return (
            None,
            f"activity not recorded: {hidden} sessions hidden from this role ({INSUFFICIENT_PRIVILEGE_HINT})",
        )
    return dict(row), None


def read_running(conn: Any, server_version: int) -> list[dict[str, Any]]:
    """Backends that could be part of a pile-up (``activity_queries.sql``: raw texts, never stored as they
    are; ``running_groups`` groups them). Only read where pg_stat_activity has query_id (PostgreSQL 14+)
    and with the activity row (its privilege check passed); a failed read loses nothing else (the
    statements are read already)."""
    if server_version < 140000:
        return []
    try:
        return [dict(r) for r in conn.execute(load_sql("activity_queries")).fetchall()]
    except (
        psycopg.errors.QueryCanceled,
        psycopg.errors.InsufficientPrivilege,
        psycopg.errors.UndefinedColumn,
    ):
        return []


MAX_RUNNING_GROUPS = 50


def running_groups(rows: list[dict[str, Any]], query_text: str = "normalized") -> list[dict[str, Any]]:
    """The backends of ``read_running`` grouped by (dbid, userid, statement): the ``activity_queries`` rows.

    A statement is its text's fingerprint (literals do not change it), not its query_id: a statement
    queued on a lock taken during parse analysis has no query_id yet. Only groups of two or more backends
    or one running a second or more are kept, at most ``MAX_RUNNING_GROUPS`` (largest, then longest,
    first); texts are stored as ``query_text`` allows (normalized: no literal value)."""
    groups: dict[tuple[Any, Any, str], list[dict[str, Any]]] = {}
    for row in rows:
        normalized = storable_query_text(row.get("query") or "", "normalized") or ""
        key = (row["dbid"], row["userid"], fingerprint_text(normalized)[0])
        groups.setdefault(key, []).append(row)
    out = []
    for (dbid, userid, fingerprint), members in groups.items():
        running = [float(m["running_s"]) for m in members]
        if len(members) < 2 and max(running) < 1.0:
            continue
        waits = Counter(
            f"{m['wait_event_type']}:{m['wait_event']}" if m["wait_event_type"] else "CPU" for m in members
        )
        blockers = Counter(m["blocker_pid"] for m in members if m["blocker_pid"] is not None)
        blocker_pid = blockers.most_common(1)[0][0] if blockers else None
        blocker = next((m for m in members if m["blocker_pid"] == blocker_pid), None) if blockers else None
        queryids = Counter(m["queryid"] for m in members if m["queryid"] is not None)
        out.append(
            {
                "dbid": dbid,
                "userid": userid,
                "fingerprint": fingerprint,
                "queryid": queryids.most_common(1)[0][0] if queryids else None,
                "query": storable_query_text(members[0].get("query") or "", query_text),
                "backends": len(members),
                "waiting_lock": sum(m["wait_event_type"] == "Lock" for m in members),
                "longest_s": max(running),
                "median_s": statistics.median(running),
                "wait_event": waits.most_common(1)[0][0],
                "blocker_pid": blocker_pid,
                "blocker_state": blocker["blocker_state"] if blocker else None,
                "blocker_queryid": blocker["blocker_queryid"] if blocker else None,
                "blocker_query": (
                    storable_query_text(blocker["blocker_query"], query_text)
                    if blocker and blocker["blocker_query"]
                    else None
                ),
                "blocker_xact_s": blocker["blocker_xact_s"] if blocker else None,
            }
        )
    out.sort(key=lambda g: (-g["backends"], -g["longest_s"]))
    return out[:MAX_RUNNING_GROUPS]


def lake_ts() -> pl.DataType:
    return STATEMENT_SNAPSHOTS.polars_schema["collector_clock"]


def write_instance_snapshot(lake_root: Path, snap: InstanceSnapshot) -> list[Path]:
    """Texts and statements first, the run row last: a run row means its statements are in the lake."""
    parts = {"instance": snap.instance, "date": snap.captured_at.date().isoformat()}
    stem = snapshot_stem(snap.captured_at, {"instance": snap.instance, **snap.run})
    files = []
    if snap.texts.height:
        files.append(lake.write_table(lake_root, QUERY_TEXTS, snap.texts, parts, stem))
    files.append(lake.write_table(lake_root, STATEMENT_SNAPSHOTS, snap.statements, parts, stem))
    if snap.activity is not None:
        files.append(lake.write_table(lake_root, ACTIVITY_SNAPSHOTS, snap.activity, parts, stem))
    if snap.running is not None and snap.running.height:
        files.append(lake.write_table(lake_root, ACTIVITY_QUERIES, snap.running, parts, stem))
    files.append(lake.write_table(lake_root, SNAPSHOT_RUNS, pl.DataFrame([snap.run]), parts, stem))
    return files


def write_failed_run(
    lake_root: Path, instance: str, captured_at: datetime, error: str, phase: str | None = None
) -> Path:
    parts = {"instance": instance, "date": captured_at.date().isoformat()}
    run = {"captured_at": captured_at, "status": "failed", "error": error, "failed_phase": phase}
    stem = snapshot_stem(captured_at, {"instance": instance, **run})
    return lake.write_table(lake_root, SNAPSHOT_RUNS, pl.DataFrame([run]), parts, stem)


def _failure(
    lake_root: Path, instance: str, message: str, phase: str | None, started: float
) -> InstanceResult:
    captured_at = datetime.now(UTC)
    files = []
    with contextlib.suppress(locks.LakeError, OSError):
        files.append(write_failed_run(lake_root, instance, captured_at, message, phase))
    return InstanceResult(
        instance=instance,
        status="failed",
        captured_at=captured_at,
        error=message,
        failed_phase=phase,
        files=files,
        wall_ms=(time.perf_counter() - started) * 1000,
    )


def snapshot_instance(
    lake_root: Path, instance: InstanceConfig, config: CollectorConfig, watchdog: Watchdog | None = None
) -> InstanceResult:
    """Snapshot one instance into the lake within ``instance_deadline_s``; never raises for its problems."""
    started = time.perf_counter()
    dog = watchdog or Watchdog(config.instance_deadline_s)
    dsn: str | None = None
    with dog:
        try:
            dsn = instance.resolve_dsn()
            known = known_queries(lake_root, instance.name)
            remembered = load_privileges(lake_root, instance.name)
            snap, server_ms = read_instance_snapshot(
                instance, known, config, dsn=dsn, remembered=remembered, watchdog=dog
            )
            dog.enter("write")
            files = write_instance_snapshot(lake_root, snap)
            if snap.privileges is not None and not snap.privileges.same_as(remembered):
                # The snapshot is already in the lake: an unwritable state folder must not fail it (the
                # next run connects plainly and learns again, which costs nothing on the server).
                with contextlib.suppress(OSError):
                    save_privileges(lake_root, instance.name, snap.privileges)
            warnings = snap.run["warnings"].split("; ") if snap.run["warnings"] else []
            return InstanceResult(
                instance=instance.name,
                status="ok",
                captured_at=snap.captured_at,
                error=snap.run["error"],
                health=snap.run["health"],
                warnings=warnings,
                statement_rows=snap.statements.height,
                new_texts=snap.texts.height,
                explain_rows_dropped=snap.run["explain_rows_dropped"],
                own_rows_dropped=snap.run["own_rows_dropped"],
                insufficient_privilege_rows=snap.run["insufficient_privilege_rows"],
                files=files,
                bytes_written=sum(f.stat().st_size for f in files),
                server_ms=server_ms,
                wall_ms=(time.perf_counter() - started) * 1000,
            )
        except Exception as exc:  # one instance never fails the fleet run, whatever went wrong with it
            phase = dog.fired_in or dog.phase
            if dog.fired_in is not None:
                message = f"instance {instance.name}: {dog.message()}"
            else:
                message = scrub(f"{type(exc).__name__}: {exc}".strip(), dsn, instance.dsn)
                if not message.startswith(f"instance {instance.name}"):
                    message = f"instance {instance.name}: {message}"
                message = f"{message} (phase {phase})"
            return _failure(lake_root, instance.name, message, phase, started)


def snapshot_fleet(
    fleet: FleetConfig,
    lake_root: Path,
    *,
    on_instance_done: Callable[[InstanceResult], None] | None = None,
) -> FleetSnapshotResult:
    """Snapshot every instance of the fleet concurrently; failures are per instance, in the result.

    Each instance is bounded by its watchdog. As a backstop, an instance still running
    ``deadline_grace_s`` after its deadline (stuck somewhere no socket shutdown reaches) is given up: it
    gets a failed row naming its phase, a fresh worker takes its place, and the fleet run finishes. The
    workers are daemon threads, so a stuck one never keeps the process from exiting.
    """
    config = fleet.collector
    instances = list(fleet.instances)
    results: list[InstanceResult | None] = [None] * len(instances)
    running: dict[int, tuple[Watchdog, float]] = {}
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for position in range(len(instances)):
        pending.put(position)
    changed = threading.Condition()

    def worker() -> None:
        while True:
            try:
                position = pending.get_nowait()
            except queue.Empty:
                return
            dog = Watchdog(config.instance_deadline_s)
            with changed:
                running[position] = (dog, time.perf_counter())
            result = snapshot_instance(lake_root, instances[position], config, watchdog=dog)
            with changed:
                running.pop(position, None)
                if results[position] is not None:  # given up meanwhile: its failed row stands
                    continue
                results[position] = result
                changed.notify_all()
            if on_instance_done is not None:
                on_instance_done(result)

    def start_worker() -> None:
        threading.Thread(target=worker, name="snapshot", daemon=True).start()

    for _ in range(max(1, min(config.max_parallel_instances, len(instances)))):
        start_worker()
    give_up_after = config.instance_deadline_s + config.deadline_grace_s
    with changed:
        while any(r is None for r in results):
            now = time.monotonic()
            for position, (dog, began) in list(running.items()):
                if results[position] is None and now - dog.started > give_up_after:
                    running.pop(position)
                    name = instances[position].name
                    message = f"instance {name}: {dog.message()}; gave up after {give_up_after} s"
                    phase = dog.fired_in or dog.phase
                    results[position] = _failure(lake_root, name, message, phase, began)
                    if on_instance_done is not None:
                        on_instance_done(results[position])  # type: ignore[arg-type]
                    start_worker()
            changed.wait(timeout=0.2)
    return FleetSnapshotResult(results=[r for r in results if r is not None])
