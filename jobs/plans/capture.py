"""The plan capture facade: once per snapshot cycle, for that cycle's top-N queries, try each source.

Order: pg_store_plans (the real plan, only when its queryid is trustworthy) → EXPLAIN GENERIC_PLAN
(PG16+, an estimate). auto_explain is passive and ingested from the server logs
(``jobs.plans.auto_explain``). Every source tried for every candidate leaves one ``plan_capture_log``
row (captured / failed / refused / unsupported / untrusted / no_plan, with the reason); a failure on one
query is recorded and the next one goes on. Problems of a whole instance or database (a session that
cannot be opened, an EXPLAIN role that is refused) are also returned in ``PlanCaptureResult.problems``
and logged once per instance. How the sessions and the EXPLAIN role are made safe: ``jobs.plans.safety``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import psycopg

from jobs.lake.io import stem_for, write_table
from jobs.plans.config import PlanCaptureConfig
from jobs.plans.generic import ExplainFailed, classify_statement
from jobs.plans.history import SnapshotWrite, snapshot_stem, store_snapshot_rows
from jobs.plans.safety import (
    ExplainTarget,
    explain_in_target,
    explain_target,
    open_capture_session,
    search_path_for,
)
from jobs.plans.shape import PlanFormatError, plan_facts, plan_root
from jobs.plans.store_plans import StorePlansGate, read_store_plans, store_plans_gate
from jobs.query.texts import is_radar_text, redact_plan
from jobs.redaction import scrub
from jobs.schemas.collected import PLAN_CAPTURE_LOG, PLAN_SNAPSHOTS
from jobs.sqlfiles import load_sql

log = logging.getLogger(__name__)

SOURCE_STORE_PLANS = "pg_store_plans"
SOURCE_GENERIC = "generic_explain"
SOURCE_AUTO_EXPLAIN = "auto_explain"
# What pg_store_plans shows instead of another role's plan to a login without pg_read_all_stats.
STORE_PLANS_HIDDEN = "<insufficient privilege>"

_UNSUPPORTED_LOGGED: set[str] = set()
_PROBLEMS_LOGGED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class PlanCaptureResult:
    """Plans captured this cycle (plan_snapshots columns + instance) and one log row per source tried."""

    plans: pl.DataFrame
    log: pl.DataFrame
    problems: tuple[str, ...] = ()
    """Instance- or database-wide reasons no plan could be taken (cannot connect, refused EXPLAIN role)."""


def select_plan_candidates(statements: pl.DataFrame, texts: pl.DataFrame, top_n: int = 500) -> pl.DataFrame:
    """The cycle's top-N (dbid, queryid) by cumulative total_exec_time, with their normalized text.

    ``statements`` is one instance's statement snapshot (if it holds several ``captured_at``, the latest
    is used); EXPLAIN texts and rows hidden by privilege (null queryid) are not candidates.
    """
    if "instance" in statements.columns and statements["instance"].n_unique() > 1:
        raise ValueError(
            f"select_plan_candidates takes one instance, got {sorted(statements['instance'].unique())}"
        )
    frame = statements
    if "captured_at" in frame.columns and not frame.is_empty():
        frame = frame.filter(pl.col("captured_at") == pl.col("captured_at").max())
    ranked = (
        frame.filter(pl.col("queryid").is_not_null())
        .group_by("dbid", "queryid")
        .agg(pl.col("userid").first(), pl.col("total_exec_time").sum())
    )
    usable = texts.filter(~pl.col("is_explain").fill_null(False)) if "is_explain" in texts.columns else texts
    text_cols = (
        usable.select("queryid", "query").filter(pl.col("query").is_not_null()).unique("queryid", keep="last")
    )
    joined = ranked.join(text_cols, on="queryid", how="inner").filter(
        ~pl.col("query").str.strip_chars_start().str.to_lowercase().str.starts_with("explain"),
        ~pl.col("query").map_elements(is_radar_text, return_dtype=pl.Boolean),
    )
    return (
        joined.sort(["total_exec_time", "queryid"], descending=[True, False])
        .head(top_n)
        .select(
            pl.col("queryid").cast(pl.Int64),
            pl.col("dbid").cast(pl.Int64),
            pl.col("userid").cast(pl.Int64),
            pl.col("query").cast(pl.String),
            pl.col("total_exec_time").cast(pl.Float64),
        )
    )


def _snapshot_row(
    captured_at: datetime,
    candidate: dict[str, Any],
    source: str,
    root: dict[str, Any],
    *,
    dbname: str | None,
    planid: int | None = None,
    query_text: str = "normalized",
) -> dict[str, Any]:
    facts = plan_facts(root)  # shape and facts of the plan as the server gave it: redaction keeps both
    return {
        "captured_at": captured_at,
        "queryid": candidate["queryid"],
        "dbid": candidate.get("dbid"),
        "dbname": dbname,
        "userid": candidate.get("userid"),
        "source": source,
        "is_generic": source == SOURCE_GENERIC,
        "shape_hash": facts.shape_hash,
        "root_node": facts.root_node,
        "total_cost": facts.total_cost,
        "plan_rows": facts.plan_rows,
        "actual_rows": facts.actual_rows,
        "actual_total_time_ms": facts.actual_total_time_ms,
        "node_types": facts.node_types,
        "relations": facts.relations,
        "indexes": facts.indexes,
        "planid": planid,
        "plan_json": json.dumps(redact_plan(root, query_text), separators=(",", ":")),
    }


def _frames(
    instance: str,
    plans: list[dict[str, Any]],
    log_rows: list[dict[str, Any]],
    problems: list[str] | None = None,
) -> PlanCaptureResult:
    plan_schema = {"instance": pl.String(), **dict(PLAN_SNAPSHOTS.polars_schema)}
    log_schema = {"instance": pl.String(), **dict(PLAN_CAPTURE_LOG.polars_schema)}
    plan_frame = pl.DataFrame([{**p, "instance": instance} for p in plans], schema=plan_schema)
    log_frame = pl.DataFrame([{**r, "instance": instance} for r in log_rows], schema=log_schema)
    unique = tuple(dict.fromkeys(problems or []))
    for problem in unique:
        if (instance, problem) not in _PROBLEMS_LOGGED:
            _PROBLEMS_LOGGED.add((instance, problem))
            log.warning("instance %s: plan capture: %s", instance, problem)
    return PlanCaptureResult(plans=plan_frame, log=log_frame, problems=unique)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def capture_plans(
    dsn: str,
    instance: str,
    candidates: pl.DataFrame,
    captured_at: datetime,
    config: PlanCaptureConfig | None = None,
) -> PlanCaptureResult:
    """Try pg_store_plans then EXPLAIN GENERIC_PLAN for each candidate; never raises for one query."""
    config = config or PlanCaptureConfig()
    wanted = candidates.head(config.top_n).to_dicts()
    plans: list[dict[str, Any]] = []
    log_rows: list[dict[str, Any]] = []

    def record(
        cand: dict[str, Any],
        source: str,
        status: str,
        reason: str | None,
        started: float,
        shape: str | None = None,
    ) -> None:
        log_rows.append(
            {
                "captured_at": captured_at,
                "queryid": cand.get("queryid"),
                "dbid": cand.get("dbid"),
                "source": source,
                "status": status,
                "reason": scrub(reason, dsn) if reason else reason,
                "shape_hash": shape,
                "elapsed_ms": (time.perf_counter() - started) * 1000.0,
            }
        )

    if not wanted:
        return _frames(instance, plans, log_rows)
    problems: list[str] = []
    with ExitStack() as stack:
        try:
            main = stack.enter_context(open_capture_session(dsn, config, instance=instance))
            info = main.execute(load_sql("plans_server_info")).fetchone()
            databases = dict(main.execute(load_sql("plans_databases")).fetchall())
            userids = sorted({c["userid"] for c in wanted if c.get("userid") is not None})
            rolnames = dict(main.execute(load_sql("plans_roles"), {"userids": userids}).fetchall())
        except psycopg.Error as exc:
            # Filed under every source this session was needed for: both read through it.
            reason = scrub(
                f"instance {instance}: cannot open the plan capture session: {_first_line(exc)}", dsn
            )
            now = time.perf_counter()
            sources = [SOURCE_STORE_PLANS] * config.use_store_plans + [
                SOURCE_GENERIC
            ] * config.use_generic_explain
            for cand in wanted:
                for source in sources:
                    record(cand, source, "failed", reason, now)
            return _frames(instance, plans, log_rows, [reason])
        assert info is not None
        server_version_num, compute_query_id, store_version, store_format = info
        main_db = main.info.dbname
        sessions: dict[str, psycopg.Connection[Any]] = {main_db: main}
        targets: dict[str, ExplainTarget] = {}
        session_errors: dict[str, str] = {}

        gate = store_plans_gate(
            int(server_version_num),
            store_version,
            compute_query_id,
            min_extension_version=config.store_plans_min_version,
            min_server_version_num=config.store_plans_min_server_version_num,
        )
        if config.store_plans_assume_trusted:
            gate = StorePlansGate(True, None)
        stored, store_error = _read_store_plans_safely(main, wanted, gate, config, store_format)
        generic_supported = int(server_version_num) >= config.generic_plan_min_server_version_num
        unsupported = config.use_generic_explain and not generic_supported and not gate.trusted
        if unsupported and instance not in _UNSUPPORTED_LOGGED:
            _UNSUPPORTED_LOGGED.add(instance)
            log.info(
                "instance %s: plan capture unsupported (server_version_num %s < %s for GENERIC_PLAN, "
                "no usable pg_store_plans: %s); statement collection is unchanged",
                instance,
                server_version_num,
                config.generic_plan_min_server_version_num,
                gate.reason,
            )

        def session_for(dbid: int | None) -> tuple[psycopg.Connection[Any], ExplainTarget]:
            """The database's session and who its EXPLAINs run as (checked once per database)."""
            dbname = databases.get(dbid, main_db) if dbid is not None else main_db
            if dbname in session_errors:
                raise ExplainFailed(session_errors[dbname])
            conn = sessions.get(dbname)
            if conn is None or conn.closed or conn.broken:
                try:
                    conn = stack.enter_context(
                        open_capture_session(dsn, config, dbname=dbname, instance=instance)
                    )
                except psycopg.Error as exc:
                    session_errors[dbname] = f"database {dbname}: cannot connect: {_first_line(exc)}"
                    problems.append(session_errors[dbname])
                    raise ExplainFailed(session_errors[dbname]) from None
                sessions[dbname] = conn
            if dbname not in targets:
                try:
                    targets[dbname] = explain_target(conn, config)
                except psycopg.Error as exc:
                    session_errors[dbname] = (
                        f"database {dbname}: cannot check the EXPLAIN role: {_first_line(exc)}"
                    )
                    problems.append(session_errors[dbname])
                    raise ExplainFailed(session_errors[dbname]) from None
                if targets[dbname].refused is not None:
                    problems.append(str(targets[dbname].refused))
            return conn, targets[dbname]

        for cand in wanted:
            started = time.perf_counter()
            dbname = databases.get(cand.get("dbid"))
            if config.use_store_plans:
                answered = _try_store_plans(
                    cand, gate, stored, store_error, captured_at, dbname, plans, record, started, config
                )
                if answered:
                    continue
            if not config.use_generic_explain:
                continue
            started = time.perf_counter()
            if not generic_supported:
                record(
                    cand,
                    SOURCE_GENERIC,
                    "unsupported",
                    f"GENERIC_PLAN needs server_version_num >= {config.generic_plan_min_server_version_num},"
                    f" server has {server_version_num}",
                    started,
                )
                continue
            text = cand.get("query")
            if not text:
                record(cand, SOURCE_GENERIC, "refused", "no query text for this queryid", started)
                continue
            check = classify_statement(text)
            if not check.explainable:
                record(cand, SOURCE_GENERIC, "refused", check.reason, started)
                continue
            try:
                conn, target = session_for(cand.get("dbid"))
            except ExplainFailed as exc:
                record(cand, SOURCE_GENERIC, "failed", str(exc), started)
                continue
            if target.refused is not None:
                record(cand, SOURCE_GENERIC, "refused", target.refused, started)
                continue
            search_path = search_path_for(config.explain_search_path, rolnames.get(cand.get("userid")))
            try:
                explained = explain_in_target(conn, target, config, text, search_path, dsn=dsn)
                root = plan_root(explained)
            except (ExplainFailed, PlanFormatError, psycopg.Error) as exc:
                record(cand, SOURCE_GENERIC, "failed", _first_line(exc), started)
                continue
            row = _snapshot_row(
                captured_at,
                cand,
                SOURCE_GENERIC,
                root,
                dbname=dbname or conn.info.dbname,
                query_text=config.query_text,
            )
            plans.append(row)
            record(cand, SOURCE_GENERIC, "captured", None, started, row["shape_hash"])
    return _frames(instance, plans, log_rows, [scrub(problem, dsn) for problem in problems])


def _read_store_plans_safely(
    conn: psycopg.Connection[Any],
    wanted: list[dict[str, Any]],
    gate: StorePlansGate,
    config: PlanCaptureConfig,
    plan_format: str | None = None,
) -> tuple[dict[tuple[int | None, int], dict[str, Any]], str | None]:
    if not (config.use_store_plans and gate.trusted):
        return {}, None
    if plan_format is not None and plan_format.lower() != "json":
        # The session asks for json at startup (user-settable); a server forcing another format is named.
        return {}, (
            f"pg_store_plans.plan_format is {plan_format} in the capture session, not json: "
            "text/yaml/xml/raw plans are not parsed"
        )
    try:
        frame = read_store_plans(conn, [c["queryid"] for c in wanted], config.store_plans_relation)
    except (psycopg.Error, ValueError) as exc:
        return {}, f"reading {config.store_plans_relation} failed: {_first_line(exc)}"
    found: dict[tuple[int | None, int], dict[str, Any]] = {}
    for row in frame.to_dicts():
        found[(row["dbid"], row["queryid"])] = row
    return found, None


def _try_store_plans(
    cand: dict[str, Any],
    gate: StorePlansGate,
    stored: dict[tuple[int | None, int], dict[str, Any]],
    store_error: str | None,
    captured_at: datetime,
    dbname: str | None,
    plans: list[dict[str, Any]],
    record: Callable[..., None],
    started: float,
    config: PlanCaptureConfig,
) -> bool:
    if not gate.trusted:
        record(cand, SOURCE_STORE_PLANS, "untrusted", gate.reason, started)
        return False
    if store_error is not None:
        record(cand, SOURCE_STORE_PLANS, "failed", store_error, started)
        return False
    row = stored.get((cand.get("dbid"), cand["queryid"]))
    if row is None:
        record(cand, SOURCE_STORE_PLANS, "no_plan", "no pg_store_plans row for this (dbid, queryid)", started)
        return False
    if (row["plan"] or "").strip() == STORE_PLANS_HIDDEN:
        reason = (
            "pg_store_plans hides this plan from the capture login: grant it pg_read_all_stats (pg_monitor)"
        )
        record(cand, SOURCE_STORE_PLANS, "failed", reason, started)
        return False
    try:
        root = plan_root(row["plan"])
    except PlanFormatError as exc:
        reason = f"{exc}; pg_store_plans.plan_format must be json (text/yaml/xml/raw are not parsed)"
        record(cand, SOURCE_STORE_PLANS, "failed", reason, started)
        return False
    snap = _snapshot_row(
        captured_at,
        cand,
        SOURCE_STORE_PLANS,
        root,
        dbname=dbname,
        planid=row["planid"],
        query_text=config.query_text,
    )
    plans.append(snap)
    record(cand, SOURCE_STORE_PLANS, "captured", None, started, snap["shape_hash"])
    return True


def write_plan_snapshots(
    lake_root: Path,
    instance: str,
    captured_at: datetime,
    result: PlanCaptureResult,
    config: PlanCaptureConfig | None = None,
) -> SnapshotWrite:
    """Write this cycle's capture log and the plans whose shape (or, beyond ``cost_change_ratio``, estimated
    cost) changed; apply the bounded history."""
    config = config or PlanCaptureConfig()
    if not result.log.is_empty():
        write_table(
            lake_root,
            PLAN_CAPTURE_LOG,
            result.log.drop("instance", strict=False),
            {"instance": instance, "date": captured_at.strftime("%Y-%m-%d")},
            stem_for(captured_at),
        )
    plans = result.plans.drop("instance", strict=False)
    return store_snapshot_rows(
        lake_root,
        instance,
        plans,
        snapshot_stem(captured_at, "capture"),
        config.max_shapes_per_query,
        config.cost_change_ratio,
    )
