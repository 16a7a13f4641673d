"""Table statistics with each snapshot: ``pg_stat_user_tables`` of the databases the snapshot saw.

A plan that changes right after its table was analysed is a statistics refresh, not a code change; and a
drift baseline anchored before an ANALYZE is stale after it. So each collection cycle also keeps, per
instance, ``last_analyze``, ``last_autoanalyze``, ``n_mod_since_analyze``, ``n_live_tup``,
``analyze_count`` and ``autoanalyze_count`` of every user table into ``table_stats_snapshots``, stamped
with the snapshot's ``captured_at`` (the server clock of that snapshot), so it joins to it.

``pg_stat_user_tables`` is per database: the reader connects to each database that the snapshot's
pg_stat_statements rows ran in (their dbids, plus the database of the DSN, which comes first), at most
``CollectorConfig.table_stats_max_databases`` of them, with the collector's own session rules
(``jobs.collect.session``: read-only, statement and lock timeouts as startup options, keepalives, tracking
off where the role may set it, the instance deadline enforced by a watchdog). A database that refuses the
connection, does not allow connections, or fails its read is *noted* (named in ``problems``) and the
others are still read: table statistics never fail a snapshot. Every column read exists from PostgreSQL 13
to 18 (checked on 18.6; n_mod_since_analyze since 9.4), so one SQL file serves every supported version.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
from psycopg.conninfo import make_conninfo

from jobs.collect.collector import FleetSnapshotResult
from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.collect.session import (
    MIN_CONNECT_TIMEOUT_S,
    DeadlineExceeded,
    Watchdog,
    connection_kwargs,
    load_privileges,
)
from jobs.lake import io as lake
from jobs.redaction import scrub
from jobs.schemas.collected import STATEMENT_SNAPSHOTS, TABLE_STATS_SNAPSHOTS
from jobs.sqlfiles import load_sql

MIN_SERVER_VERSION_NUM = 130000
PHASE = "table_stats"


@dataclass
class TableStatsResult:
    """One instance's table statistics read: rows, databases read, and every database that was not."""

    instance: str
    captured_at: datetime
    frame: pl.DataFrame
    databases_read: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    file: Path | None = None


def table_stats_sql_for(server_version_num: int) -> str:
    """The pg_stat_user_tables read for a server version (one text for PostgreSQL 13 to 18)."""
    if server_version_num < MIN_SERVER_VERSION_NUM:
        raise ValueError(f"PostgreSQL {server_version_num} is older than 13: table statistics not read")
    return load_sql("table_stats")


def _utc(value: Any) -> datetime | None:
    return value.astimezone(UTC) if isinstance(value, datetime) else None


def table_stats_frame(rows: Iterable[dict[str, Any]], captured_at: datetime) -> pl.DataFrame:
    """pg_stat_user_tables rows (any database) → table_stats_snapshots rows stamped ``captured_at``."""
    shaped = [
        {
            **{k: row.get(k) for k in TABLE_STATS_SNAPSHOTS.column_names if k != "captured_at"},
            "captured_at": captured_at.astimezone(UTC),
            "last_analyze": _utc(row.get("last_analyze")),
            "last_autoanalyze": _utc(row.get("last_autoanalyze")),
        }
        for row in rows
    ]
    return TABLE_STATS_SNAPSHOTS.conform(pl.DataFrame(shaped, schema=TABLE_STATS_SNAPSHOTS.polars_schema))


def choose_databases(listed: list[dict[str, Any]], max_databases: int) -> tuple[list[str], list[str]]:
    """(databases to read, problems) from table_stats_databases rows (connected one first, then by name):
    databases that do not allow connections are named, those beyond ``max_databases`` too."""
    problems: list[str] = []
    usable = []
    for row in listed:
        if row["datallowconn"]:
            usable.append(str(row["datname"]))
        else:
            problems.append(f"database {row['datname']}: does not allow connections (datallowconn = false)")
    if len(usable) > max_databases:
        skipped = usable[max_databases:]
        problems.append(
            f"{len(skipped)} databases beyond table_stats_max_databases = {max_databases} not read: "
            + ", ".join(skipped[:10])
            + (" ..." if len(skipped) > 10 else "")
        )
    return usable[:max_databases], problems


def _connect(dsn: str, config: CollectorConfig, untracked: bool, dog: Watchdog) -> psycopg.Connection[Any]:
    remaining = dog.remaining()
    if remaining <= 0:
        raise DeadlineExceeded(dog.message())
    timeout = max(MIN_CONNECT_TIMEOUT_S, min(config.connect_timeout_s, math.ceil(remaining)))
    conn = psycopg.connect(dsn, **connection_kwargs(dsn, config, untracked, timeout))
    dog.attach(conn)
    return conn


def read_table_stats(
    dsn: str,
    instance: str,
    dbids: Iterable[int],
    captured_at: datetime,
    config: CollectorConfig,
    *,
    untracked: bool = False,
) -> TableStatsResult:
    """Read pg_stat_user_tables of the DSN's database and of the databases ``dbids`` (the snapshot's);
    never raises for a server problem: whatever failed is in ``problems``, naming the database."""
    rows: list[dict[str, Any]] = []
    result = TableStatsResult(instance, captured_at, TABLE_STATS_SNAPSHOTS.empty())
    with Watchdog(config.instance_deadline_s) as dog:
        dog.enter(PHASE)
        try:
            conn = _connect(dsn, config, untracked, dog)
        except Exception as exc:
            result.problems.append(_problem(f"instance {instance}: table statistics not read", exc, dsn))
            return result
        try:
            sql = table_stats_sql_for(conn.info.server_version)
            listed = conn.execute(load_sql("table_stats_databases"), {"dbids": sorted(set(dbids))}).fetchall()
            names, problems = choose_databases(listed, config.table_stats_max_databases)
            result.problems.extend(problems)
            current = conn.info.dbname
            for name in names:
                try:
                    dog.enter(PHASE)
                    if name == current:
                        found = conn.execute(sql, {"max_tables": config.table_stats_max_tables}).fetchall()
                    else:
                        with _connect(make_conninfo(dsn, dbname=name), config, untracked, dog) as other:
                            found = other.execute(
                                sql, {"max_tables": config.table_stats_max_tables}
                            ).fetchall()
                        dog.attach(conn)
                except Exception as exc:  # one database never stops the others
                    result.problems.append(_problem(f"database {name}", exc, dsn))
                    if isinstance(exc, DeadlineExceeded) or dog.fired_in is not None:
                        break
                    continue
                rows.extend(found)
                result.databases_read.append(name)
                if len(found) >= config.table_stats_max_tables:
                    result.problems.append(
                        f"database {name}: more than table_stats_max_tables = "
                        f"{config.table_stats_max_tables} tables; the most recently analysed were kept"
                    )
        except Exception as exc:
            result.problems.append(_problem(f"instance {instance}: table statistics", exc, dsn))
        finally:
            dog.detach()
            conn.close()
    result.frame = table_stats_frame(rows, captured_at)
    return result


def _problem(prefix: str, exc: BaseException, dsn: str) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return scrub(f"{prefix}: {text[:300]}", dsn)


def write_table_stats(lake_root: Path, result: TableStatsResult) -> Path | None:
    """One file per instance and snapshot (stem = the snapshot's time: writing it again replaces it)."""
    if result.frame.is_empty():
        return None
    parts = {"instance": result.instance, "date": result.captured_at.astimezone(UTC).date().isoformat()}
    stem = f"{lake.stem_for(result.captured_at)}-table-stats"
    return lake.write_table(lake_root, TABLE_STATS_SNAPSHOTS, result.frame, parts, stem)


def snapshot_dbids(lake_root: Path, instance: str, captured_at: datetime) -> list[int]:
    """The databases (dbids) of an instance's statement rows at one snapshot."""
    frame = lake.read_table(
        lake_root,
        STATEMENT_SNAPSHOTS,
        lambda s: (
            s.filter((pl.col("instance") == instance) & (pl.col("captured_at") == captured_at))
            .select("dbid")
            .unique()
        ),
    )
    return sorted(int(d) for d in frame["dbid"].drop_nulls().to_list())


def collect_fleet_table_stats(
    fleet: FleetConfig, lake_root: Path, snapshot_times: dict[str, datetime]
) -> list[TableStatsResult]:
    """Table statistics of each instance snapshotted at the given times, written to the lake; an instance or
    a database that fails is in its result's ``problems``, never raised."""
    config = fleet.collector
    todo = [(i, snapshot_times[i.name]) for i in fleet.instances if i.name in snapshot_times]

    def one(instance: InstanceConfig, captured_at: datetime) -> TableStatsResult:
        try:
            dsn = instance.resolve_dsn()
            remembered = load_privileges(lake_root, instance.name)
            dbids = snapshot_dbids(lake_root, instance.name, captured_at)
            untracked = bool(remembered and remembered.may_set_track)
            result = read_table_stats(dsn, instance.name, dbids, captured_at, config, untracked=untracked)
            result.file = write_table_stats(lake_root, result)
            return result
        except Exception as exc:  # the snapshot is safe in the lake: table statistics are best effort
            failed = TableStatsResult(instance.name, captured_at, TABLE_STATS_SNAPSHOTS.empty())
            failed.problems.append(
                scrub(f"instance {instance.name}: table statistics failed: {exc}", instance.dsn)
            )
            return failed

    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(config.max_parallel_instances, len(todo)))) as pool:
        return list(pool.map(lambda item: one(*item), todo))


def table_stats_after_snapshot(
    fleet: FleetConfig, lake_root: Path, snapshot: FleetSnapshotResult
) -> list[TableStatsResult]:
    """The table statistics that go with a fleet snapshot ([collector] table_stats): one home for the
    cycle, ``radar snapshot`` and the Dagster snapshot asset, stamped with each instance's snapshot time."""
    if not fleet.collector.table_stats:
        return []
    return collect_fleet_table_stats(fleet, lake_root, {r.instance: r.captured_at for r in snapshot.ok})
