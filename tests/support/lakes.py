"""Small lakes for tests: real Parquet files written through jobs.lake.io, with a known answer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.collect.deploys import mark_deploy
from jobs.lake import io as lake
from jobs.plans.shape import plan_facts, plan_root
from jobs.schemas.collected import SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS


def write_step_change_lake(
    lake_root: Path,
    query: str = "select * from orders where customer_id = $1",
    version: str = "v9",
) -> datetime:
    """query_samples + texts + a deploy: a query 10x slower from the deploy on (and ×10 shared blocks per
    call, its plan changed), one unchanged. ``query``: the slow one's text, ``version``: the deploy's."""
    start = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    deploy_at = start + timedelta(minutes=30)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        end = start + timedelta(minutes=i + 1)
        for queryid, slow in ((111, end > deploy_at), (222, False)):
            mean = (10.0 if slow else 1.0) * float(rng.lognormal(0, 0.1))
            blocks = 500 if slow else 50  # shared blocks per call: ×10 with the slowdown (a plan change)
            rows.append(
                {
                    "interval_start": end - timedelta(minutes=1),
                    "interval_end": end,
                    "interval_seconds": 60.0,
                    "userid": 10,
                    "dbid": 5,
                    "toplevel": True,
                    "queryid": queryid,
                    "calls": 100,
                    "total_exec_time": mean * 100,
                    "mean_exec_time": mean,
                    "shared_blks_hit": blocks * 100 * (1 + i % 2),
                    "shared_blks_read": 0,
                    "temp_blks_written": 0,
                    "rows": 100,
                    "wal_bytes": 0,
                }
            )
    samples = pl.DataFrame(rows)
    lake.write_table(lake_root, "query_samples", samples, {"instance": "db1", "date": "2026-11-02"}, "s")
    texts = pl.DataFrame(
        {
            "captured_at": [start, start],
            "queryid": [111, 222],
            "dbid": [5, 5],
            "userid": [10, 10],
            "query": [query, "select 1"],
            "is_explain": [False, False],
        }
    )
    lake.write_table(lake_root, "query_texts", texts, {"instance": "db1", "date": "2026-11-02"}, "t")
    mark_deploy(lake_root, version=version, instances=["db1"], at=deploy_at.isoformat())
    return deploy_at


# Inline interval series for the detector's pure tests (tests/unit/detect/test_regressions.py,
# test_regression_gates.py)
SERIES_DEPLOY_AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SERIES_STEP = timedelta(seconds=10)
SERIES_CALLS = 1000  # per 10 s sample: 100 calls/s, so every step of these tests is material unless said


def series_samples(
    values: np.ndarray,
    *,
    calls: int | np.ndarray = SERIES_CALLS,
    instance: str = "alpha",
    queryid: int = 7,
    first: int = -30,
    work: dict[str, np.ndarray | list[float] | float] | None = None,
    step: timedelta = SERIES_STEP,
    origin: datetime = SERIES_DEPLOY_AT,
) -> pl.DataFrame:
    """One sample per ``step`` (10 s) interval ending at origin + (first + i + 1) * step, mean values[i]
    (``calls`` per interval: one number, or one per sample).

    ``work``: per-call values of query_samples delta columns (``{"temp_blks_written": [...]}``), stored as
    Σ per interval (value x calls); columns not given are absent (the detector treats them as untracked).
    """
    ends = [origin + (first + i + 1) * step for i in range(len(values))]
    per_call = {
        column: np.broadcast_to(np.asarray(v, dtype=np.float64), (len(values),)) * calls
        for column, v in (work or {}).items()
    }
    return pl.DataFrame(
        {
            "instance": instance,
            "queryid": queryid,
            "interval_start": [e - step for e in ends],
            "interval_end": ends,
            "calls": calls,
            "total_exec_time": np.asarray(values, dtype=np.float64) * calls,
            **per_call,
        },
        schema_overrides={
            "interval_start": pl.Datetime("us", "UTC"),
            "interval_end": pl.Datetime("us", "UTC"),
        },
    )


def detected_regression(
    change_at: datetime,
    *,
    queryid: int,
    fingerprint: str = "fp",
    instance: str = "alpha",
    query: str | None = None,
    queryids: str | None = None,
) -> pl.DataFrame:
    """One detected regression changing at ``change_at``: the columns plan_diffs_for_regressions reads."""
    row: dict[str, list[object]] = {
        "instance": [instance],
        "queryid": [queryid],
        "fingerprint": [fingerprint],
        "status": ["detected"],
        "detected_change_at": [change_at],
    }
    if query is not None:
        row["query"] = [query]
    if queryids is not None:
        row["queryids"] = [queryids]
    return pl.DataFrame(row)


def series_texts(pairs: list[tuple[str, int, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        pairs, schema={"instance": pl.String, "queryid": pl.Int64, "query": pl.String}, orient="row"
    )


SNAPSHOT_BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def snapshot_row(
    instance: str,
    captured_at: datetime,
    queryid: int | None,
    calls: int,
    total_exec_time: float,
    *,
    collector_clock: datetime | None = None,
    boot: datetime = SNAPSHOT_BOOT,
    blocks_per_call: int = 3,
    **over: Any,
) -> dict[str, Any]:
    """One statement_snapshots row of an entry (system 7, user 10, db 5, top level) whose server, stats
    and entry all began at ``boot``, one row and ``blocks_per_call`` buffer hits per call; ``over``
    replaces any value in place. Without ``collector_clock`` the row has no such column."""
    row: dict[str, Any] = {
        "instance": instance,
        "captured_at": captured_at,
        "collector_clock": collector_clock,
        "system_identifier": 7,
        "postmaster_start": boot,
        "stats_reset": boot,
        "stats_since": boot,
        "userid": 10,
        "dbid": 5,
        "toplevel": True,
        "queryid": queryid,
        "calls": calls,
        "total_exec_time": total_exec_time,
        "rows": calls,
        "shared_blks_hit": calls * blocks_per_call,
    }
    if collector_clock is None:
        del row["collector_clock"]
    row.update(over)
    return row


def snapshot_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """snapshot_row rows typed as the lake's statement_snapshots (the columns of the first row; all of
    snapshot_row's when there is none)."""
    schema = STATEMENT_SNAPSHOTS.scan_schema()
    if not rows:
        every_column = snapshot_row("", SNAPSHOT_BOOT, 0, 0, 0.0, collector_clock=SNAPSHOT_BOOT)
        return pl.DataFrame(schema={k: schema[k] for k in every_column})
    return pl.DataFrame(rows, schema_overrides={k: schema[k] for k in rows[0] if k in schema})


def write_snapshot_files(lake_root: Path, snapshots: pl.DataFrame, runs: pl.DataFrame) -> None:
    """One statement_snapshots and one snapshot_runs file per (instance, snapshot), named like the
    collector's (capture time + digest)."""
    for (instance, captured), part in snapshots.group_by("instance", "captured_at"):
        parts = {"instance": str(instance), "date": captured.date().isoformat()}  # type: ignore[union-attr]
        stem = f"{lake.stem_for(captured)}-0123456789"  # type: ignore[arg-type]
        lake.write_table(lake_root, STATEMENT_SNAPSHOTS, part.drop("instance"), parts, stem)
        run = runs.filter((pl.col("instance") == instance) & (pl.col("captured_at") == captured))
        lake.write_table(lake_root, SNAPSHOT_RUNS, run.drop("instance"), parts, stem)


# A week as the demo shows it, through the real pipeline (snapshots → samples job → detection → report)
WEEK_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # Monday of 2026-W45
WEEK_QUERY = "select * from events where account_id = $1 AND kind < $2"
WEEK_PLAN_BEFORE = {"Node Type": "Index Scan", "Relation Name": "events", "Index Name": "events_account_idx",
                    "Total Cost": 8.3}  # fmt: skip
WEEK_PLAN_AFTER = {"Node Type": "Seq Scan", "Relation Name": "events", "Total Cost": 4339.0}


@dataclass(frozen=True)
class WeekLake:
    """What ``write_week_lake`` put in: the moments a report must show."""

    deploy_at: datetime
    recovered_from: datetime
    restart_at: datetime
    down_from: datetime
    second_step_at: datetime
    evicted_at: datetime


def write_week_lake(lake_root: Path) -> WeekLake:
    """One instance, two queries, a snapshot a minute for 5 hours: query 111 is 10x slower from deploy v4
    (an index scan became a seq scan) and back after 60 minutes (a fix); the server is down 12 minutes
    and restarts (a gap, one failed snapshot, counters from zero); query 111 then steps up ×4 without a
    deploy; query 222 is evicted and made again once. Snapshots and runs as the collector writes them,
    texts, a deploy and the two plans (one file per table, as compaction leaves them: 300 snapshot files
    would take seconds to write); samples and findings are the caller's to run."""
    rng = np.random.default_rng(13)
    deploy_at = WEEK_START + timedelta(minutes=60)
    recovered_from = WEEK_START + timedelta(minutes=120)
    down_from, restart_at = WEEK_START + timedelta(minutes=168), WEEK_START + timedelta(minutes=180)
    second_step_at = WEEK_START + timedelta(minutes=231)
    evicted_at = WEEK_START + timedelta(minutes=90)
    boot = WEEK_START - timedelta(days=1)
    totals = {111: [0, 0.0, 0], 222: [0, 0.0, 0]}
    rows, runs = [], []
    for minute in range(300):
        at = WEEK_START + timedelta(minutes=minute)
        if down_from <= at < restart_at:
            if at == down_from + timedelta(minutes=6):
                runs.append({"instance": "db1", "captured_at": at, "status": "failed",
                             "error": "connection refused", "failed_phase": "connect"})  # fmt: skip
            continue
        if at == restart_at:
            boot = restart_at - timedelta(seconds=30)
            totals = {111: [0, 0.0, 0], 222: [0, 0.0, 0]}
        slow = (deploy_at < at <= recovered_from) or at > second_step_at
        level = {111: (10.0 if deploy_at < at <= recovered_from else 4.0 if slow else 1.0), 222: 0.5}
        for queryid in (111, 222):
            totals[queryid][0] += 100
            totals[queryid][1] += 100 * level[queryid] * float(rng.lognormal(0, 0.1))
            totals[queryid][2] += 100 * (400 if (queryid == 111 and slow) else 4)
            since = boot
            if queryid == 222 and evicted_at <= at and boot < evicted_at:
                since = evicted_at
                if at == evicted_at:
                    totals[222] = [100, 50.0, 400]
            rows.append(
                snapshot_row(
                    "db1", at, queryid, int(totals[queryid][0]), totals[queryid][1], boot=boot,
                    stats_since=since, shared_blks_hit=int(totals[queryid][2]), shared_blks_read=0,
                )
            )  # fmt: skip
        runs.append({"instance": "db1", "captured_at": at, "status": "ok", "dealloc": 0,
                     "system_identifier": 7, "statement_rows": 2})  # fmt: skip
    run_frame = pl.DataFrame(
        runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")}, infer_schema_length=None
    )
    parts = {"instance": "db1", "date": WEEK_START.date().isoformat()}
    stem = f"compacted-{lake.stem_for(WEEK_START)}-{lake.stem_for(WEEK_START + timedelta(minutes=299))}"
    lake.write_table(lake_root, STATEMENT_SNAPSHOTS, snapshot_frame(rows).drop("instance"), parts, stem)
    lake.write_table(lake_root, SNAPSHOT_RUNS, run_frame.drop("instance"), parts, stem)
    texts = pl.DataFrame(
        {
            "captured_at": [WEEK_START, WEEK_START],
            "queryid": [111, 222],
            "dbid": [5, 5],
            "userid": [10, 10],
            "query": [WEEK_QUERY, "select count(*) from accounts"],
            "is_explain": [False, False],
        }
    )
    lake.write_table(lake_root, "query_texts", texts, {"instance": "db1", "date": "2026-11-02"}, "t")
    plans = []
    for at, plan in (
        (deploy_at - timedelta(minutes=30), WEEK_PLAN_BEFORE),
        (deploy_at + timedelta(minutes=5), WEEK_PLAN_AFTER),
    ):
        facts = plan_facts(plan_root(plan))
        plans.append({"captured_at": at, "queryid": 111, "dbid": 5, "userid": 10, "source": "generic_explain",
                      "is_generic": True, "shape_hash": facts.shape_hash, "root_node": facts.root_node,
                      "total_cost": facts.total_cost, "plan_json": json.dumps(plan)})  # fmt: skip
    plan_frame = pl.DataFrame(plans, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})
    lake.write_table(lake_root, "plan_snapshots", plan_frame, {"instance": "db1", "date": "2026-11-02"}, "p")
    mark_deploy(lake_root, version="v4", instances=["db1"], at=deploy_at.isoformat())
    return WeekLake(deploy_at, recovered_from, restart_at, down_from, second_step_at, evicted_at)
