"""Generic plans for normalized texts: ``EXPLAIN (FORMAT JSON, GENERIC_PLAN)`` [PG16+], safely.

Safety, in layers:
1. ``classify_statement`` (pglast, libpg_query's parser) refuses anything but exactly one plain
   SELECT / INSERT / UPDATE / DELETE / MERGE (WITH … included) statement; ``SELECT … INTO`` is refused.
2. The capture session (see ``jobs.plans.capture.open_capture_session``) has
   ``pg_stat_statements.track = none`` (adds no rows), ``default_transaction_read_only = on`` and a
   ``statement_timeout``.
3. The EXPLAIN text is first sent as an extended-protocol Parse message: the server refuses a text that
   holds more than one command ("cannot insert multiple commands into a prepared statement") before
   anything runs. The same single statement is then executed with the simple protocol, because a Bind
   must supply a value for every ``$n`` and bound values turn the generic plan into a custom one
   (``id = NULL`` folds to ``One-Time Filter: false``).
ANALYZE is never used: the statement itself is never executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import parse_sql
from pglast.parser import ParseError
from psycopg import pq

from jobs.sqlfiles import load_sql

EXPLAINABLE_STATEMENTS: dict[str, str] = {
    "SelectStmt": "SELECT",
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}


@dataclass(frozen=True)
class StatementCheck:
    """Whether a normalized text may be EXPLAINed, and why not."""

    explainable: bool
    kind: str | None
    reason: str | None


def classify_statement(text: str) -> StatementCheck:
    """Exactly one plain DML statement, or a reason naming what was found."""
    try:
        statements = parse_sql(text)
    except ParseError as exc:
        return StatementCheck(False, None, f"does not parse: {exc}")
    if len(statements) != 1:
        kinds = ", ".join(type(s.stmt).__name__ for s in statements) or "nothing"
        return StatementCheck(False, None, f"{len(statements)} statements in one text ({kinds}): refused")
    node = statements[0].stmt
    name = type(node).__name__
    if name not in EXPLAINABLE_STATEMENTS:
        return StatementCheck(False, name, f"{name} is not a plain SELECT/INSERT/UPDATE/DELETE/MERGE")
    if name == "SelectStmt" and getattr(node, "intoClause", None) is not None:
        return StatementCheck(False, name, "SELECT … INTO creates a table: refused")
    return StatementCheck(True, EXPLAINABLE_STATEMENTS[name], None)


def generic_explain_text(statement: str) -> str:
    """The EXPLAIN text sent to the server: the prefix from sql/postgres plus the statement."""
    return load_sql("plans_generic_explain").rstrip() + "\n" + statement.strip()


class ExplainFailed(RuntimeError):
    """The server refused or failed the EXPLAIN; the message is the server's first error line."""


def _error_line(result: pq.abc.PGresult) -> str:
    message = (result.error_message or b"").decode(errors="replace").strip()
    return message.splitlines()[0] if message else f"status {pq.ExecStatus(result.status).name}"


def explain_generic(conn: psycopg.Connection[Any], statement: str) -> list[Any]:
    """EXPLAIN one checked statement in an already-safe session; returns the parsed EXPLAIN JSON."""
    text = generic_explain_text(statement).encode()
    pgconn = conn.pgconn
    parsed = pgconn.prepare(b"", text)
    if parsed.status != pq.ExecStatus.COMMAND_OK:
        raise ExplainFailed(_error_line(parsed))
    result = pgconn.exec_(text)
    if result.status != pq.ExecStatus.TUPLES_OK or result.ntuples != 1:
        raise ExplainFailed(_error_line(result))
    raw = result.get_value(0, 0)
    if raw is None:
        raise ExplainFailed("EXPLAIN returned no plan")
    return json.loads(raw.decode())
