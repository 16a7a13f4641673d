"""Generic plans for normalized texts: ``EXPLAIN (FORMAT JSON, GENERIC_PLAN)`` [PG16+], safely.

The planner evaluates IMMUTABLE functions with constant arguments and STABLE ones for estimates, with the
privileges of the role running EXPLAIN: planning a captured text runs code its owner wrote. Safety, in
layers (see ``jobs.plans.safety`` for the session and the role):
1. ``classify_statement`` (pglast, libpg_query's parser) refuses anything but exactly one plain SELECT
   (WITH … included): ``SELECT … INTO`` creates a table; INSERT / UPDATE / DELETE / MERGE, a
   data-modifying WITH and ``FOR UPDATE/SHARE`` need write privilege to be EXPLAINed at all (the
   executor's permission check runs for EXPLAIN too), which the read-only explain role does not have.
2. Each EXPLAIN runs in its own READ ONLY transaction with ``statement_timeout`` and ``lock_timeout``
   re-asserted, always rolled back, as a role without write or server-program privileges: by default
   inside the SECURITY DEFINER helper ``radar.explain_generic`` owned by ``radar_explain``
   (``explain_via_helper``), which refuses more than one statement itself.
3. ``explain_mode = "session"`` (``explain_generic``): the EXPLAIN text is first sent as an
   extended-protocol Parse message: the server refuses a text that holds more than one command ("cannot
   insert multiple commands into a prepared statement") before anything runs. The same single statement
   is then executed with the simple protocol, because a Bind must supply a value for every ``$n`` and
   bound values turn the generic plan into a custom one (``id = NULL`` folds to ``One-Time Filter:
   false``).
ANALYZE is never used: the statement itself is never executed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import parse_sql
from pglast.parser import ParseError, parse_sql_json
from psycopg import pq, sql

from jobs.sqlfiles import load_sql

EXPLAINABLE_STATEMENTS: dict[str, str] = {
    "SelectStmt": "SELECT",
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}


WRITE_NODES: dict[str, str] = {
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}

READ_ONLY_EXPLAIN_REASON = (
    "needs write privilege to be EXPLAINed (the permission check runs for EXPLAIN too) and the radar "
    "EXPLAINs only as a read-only role: refused"
)


def _walk_keys(node: Any) -> Iterator[str]:
    """Every key of every mapping in a parse tree given as JSON (node names and field names)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield key
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


@dataclass(frozen=True)
class StatementCheck:
    """Whether a normalized text may be EXPLAINed, and why not."""

    explainable: bool
    kind: str | None
    reason: str | None


def classify_statement(text: str) -> StatementCheck:
    """Exactly one plain SELECT that needs only read privilege, or a reason naming what was found."""
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
        return StatementCheck(False, name, f"{name} is not a plain SELECT: only SELECTs are EXPLAINed")
    kind = EXPLAINABLE_STATEMENTS[name]
    if name == "SelectStmt" and getattr(node, "intoClause", None) is not None:
        return StatementCheck(False, kind, "SELECT … INTO creates a table: refused")
    if name in WRITE_NODES:
        return StatementCheck(False, kind, f"{kind} {READ_ONLY_EXPLAIN_REASON}")
    keys = set(_walk_keys(json.loads(parse_sql_json(text))))
    writes = sorted(WRITE_NODES[k] for k in keys & WRITE_NODES.keys())
    if writes:
        return StatementCheck(
            False, kind, f"SELECT with a data-modifying WITH ({', '.join(writes)}) {READ_ONLY_EXPLAIN_REASON}"
        )
    if "lockingClause" in keys:
        return StatementCheck(False, kind, f"SELECT … FOR UPDATE/SHARE {READ_ONLY_EXPLAIN_REASON}")
    return StatementCheck(True, kind, None)


def generic_explain_text(statement: str) -> str:
    """The EXPLAIN text sent to the server: the prefix from sql/postgres plus the statement."""
    return load_sql("plans_generic_explain").rstrip() + "\n" + statement.strip()


class ExplainFailed(RuntimeError):
    """The server refused or failed the EXPLAIN; the message is the server's first error line."""


def _error_line(result: pq.abc.PGresult) -> str:
    message = (result.error_message or b"").decode(errors="replace").strip()
    return message.splitlines()[0] if message else f"status {pq.ExecStatus(result.status).name}"


def explain_generic(conn: psycopg.Connection[Any], statement: str) -> list[Any]:
    """EXPLAIN one checked statement as the session's role; returns the parsed EXPLAIN JSON.

    The caller runs it inside a READ ONLY transaction it rolls back (``jobs.plans.safety``), and only
    for a session role that passed the privilege check.
    """
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


HELPER_ERROR_KEY = "radar_explain_error"


def helper_call_sql(helper: str) -> sql.Composed:
    """``SELECT schema.function(%(query)s, %(search_path)s)`` with the helper name as an identifier."""
    parts = helper.split(".")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"explain helper {helper!r} must be 'schema.function'")
    return sql.SQL(load_sql("plans_explain_helper_call")).format(helper=sql.Identifier(*parts))


def explain_via_helper(
    conn: psycopg.Connection[Any], helper: str, statement: str, search_path: str | None
) -> list[Any]:
    """EXPLAIN one checked statement through the SECURITY DEFINER helper; returns the EXPLAIN JSON.

    The helper catches the EXPLAIN's own errors (a lock timeout, a syntax error) and returns them as
    ``{"radar_explain_error": {"sqlstate", "message"}}``, so they are not server log lines; they are
    raised here as ``ExplainFailed``. A cancellation (statement_timeout) is raised by psycopg.
    """
    row = conn.execute(helper_call_sql(helper), {"query": statement, "search_path": search_path}).fetchone()
    value = row[0] if row else None
    if isinstance(value, str):
        value = json.loads(value)
    if value is None:
        raise ExplainFailed(f"{helper} returned no plan")
    if isinstance(value, dict) and HELPER_ERROR_KEY in value:
        error = value[HELPER_ERROR_KEY] or {}
        raise ExplainFailed(f"{error.get('message')} (SQLSTATE {error.get('sqlstate')})")
    if not isinstance(value, list):
        raise ExplainFailed(f"{helper} returned {type(value).__name__}, not EXPLAIN JSON")
    return value
