"""pg_store_plans: when its queryid can be trusted, and reading the plan it recorded for a queryid.

pg_store_plans (NTT ossc-db) keeps one row per (userid, dbid, queryid, planid) with the plan as text in
the format of ``pg_store_plans.plan_format`` (text by default; json, yaml, xml, raw). The parameter is
user-settable (PGC_USERSET in its source), so the plain monitoring login's read-only capture session
asks for ``json`` at connection start; any other text (or the shortened "raw" JSON) is reported, not
guessed at. Other roles' plans are shown only to members of pg_read_all_stats (pg_monitor has it);
anyone else reads "<insufficient privilege>", which the capture reports as such.
Its ``queryid`` equals pg_stat_statements' only from extension 1.6, on PG14+, with ``compute_query_id``
not off. The reader takes the relation name so the tests can point it at a fixture view
(``radar_fixture.pg_store_plans``) with the documented columns: the extension is not installable here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
import psycopg
from psycopg import sql

from jobs.sqlfiles import load_sql

STORE_PLANS_COLUMNS: dict[str, pl.DataType] = {
    "queryid": pl.Int64(),
    "dbid": pl.Int64(),
    "userid": pl.Int64(),
    "planid": pl.Int64(),
    "plan": pl.String(),
    "calls": pl.Int64(),
    "total_time": pl.Float64(),
    "last_call": pl.Datetime("us", "UTC"),
}


@dataclass(frozen=True)
class StorePlansGate:
    """Whether pg_store_plans' plans can be joined to pg_stat_statements by queryid, and if not, why."""

    trusted: bool
    reason: str | None


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def store_plans_gate(
    server_version_num: int,
    extension_version: str | None,
    compute_query_id: str | None,
    *,
    min_extension_version: str = "1.6",
    min_server_version_num: int = 140000,
) -> StorePlansGate:
    """Trust pg_store_plans only with extension >= 1.6, PG14+ and compute_query_id not off."""
    if extension_version is None:
        return StorePlansGate(False, "pg_store_plans is not installed (no pg_extension row)")
    if _version_tuple(extension_version) < _version_tuple(min_extension_version):
        return StorePlansGate(
            False,
            f"queryid unreliable: pg_store_plans {extension_version} < {min_extension_version} "
            "(its queryid is its own hash, not the core query id)",
        )
    if server_version_num < min_server_version_num:
        return StorePlansGate(
            False,
            f"queryid unreliable: server_version_num {server_version_num} < {min_server_version_num} "
            "(no core query id before PG14)",
        )
    setting = (compute_query_id or "").strip().lower()
    if setting in ("", "off", "false", "no", "0"):
        return StorePlansGate(
            False,
            f"queryid unreliable: compute_query_id = {compute_query_id or 'unknown'} "
            "(pg_store_plans is silently disabled)",
        )
    return StorePlansGate(True, None)


def _relation_identifier(relation: str) -> sql.Composable:
    parts = relation.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"pg_store_plans relation {relation!r} must be 'name' or 'schema.name'")
    return sql.Identifier(*parts)


def read_store_plans(
    conn: psycopg.Connection[Any], queryids: list[int], relation: str = "pg_store_plans"
) -> pl.DataFrame:
    """The most recently used plan per (dbid, queryid) for the wanted queryids, with its raw plan text."""
    if not queryids:
        return pl.DataFrame(schema=STORE_PLANS_COLUMNS)
    query = sql.SQL(load_sql("plans_store_plans")).format(relation=_relation_identifier(relation))
    with conn.cursor() as cur:
        cur.execute(query, {"queryids": list(queryids)})
        rows = cur.fetchall()
        names = [d.name for d in cur.description or []]
    frame = pl.DataFrame([dict(zip(names, row, strict=True)) for row in rows], schema=STORE_PLANS_COLUMNS)
    return frame
