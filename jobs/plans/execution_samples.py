"""One auto_explain record → one ``execution_samples`` row (pure: dicts in, rows and frames out).

The auto_explain sampler (``sample_rate``, ``log_min_duration = 0``, ``log_analyze = on`` with
``log_timing = off``, ``log_format = json``) logs a random share of all executions. Each logged execution
becomes one sample of three metrics:

* **latency** (``latency_ms``): the record's ``duration: X ms``, the execution time auto_explain measured.
* **cost** (``total_cost``): the root node's ``Total Cost``, the planner's estimate of the plan that ran.
* **cardinality** (``cardinality``): the *worst q-error* over the plan's nodes,
  ``q = max(est, act) / min(est, act)`` with ``est = "Plan Rows"`` and ``act = "Actual Rows"`` (both per
  loop, as EXPLAIN reports them), each floored at 1 row, so ``q >= 1`` and ``q = 1`` is a perfect estimate.
  The nodes that count: every node of the tree (the root, its ``Plans`` children at any depth, InitPlans
  and SubPlans included) that has numeric ``Plan Rows``, ``Actual Rows`` and ``Actual Loops`` with
  ``Actual Loops > 0``. Nodes *never executed* (``Actual Loops`` 0: the other branch of a Hash Join whose
  outer side was empty, a skipped InitPlan) have no actual rows and are left out; a record without any
  counted node (``log_analyze`` off) has a null cardinality. ``cardinality_node`` names the worst node
  (``node_label``: type, index, relation; the first one in plan order on ties).

The row's identity is the jsonlog record's ``(session_id, line_num)`` (with the instance): re-reading a log
after a crash yields the same keys, and the writer drops keys the lake already holds (``new_samples``).
The query is identified by the fingerprint of its text (``jobs.query.identity.fingerprint_text``: literals
do not change it, so the logged text with its constants fingerprints like pg_stat_statements' normalized
one), else by ``qid:<queryid>``; ``query_hash`` is ``jobs.drift.scorer.query_hash`` of that fingerprint.
The query text itself is never stored.

Bad input raises ``SampleFormatError`` naming what is wrong (the ingest counts and reports the record and
goes on); plans are walked without recursion, so a deep plan cannot exhaust the stack.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import polars as pl

from jobs.drift.scorer import query_hash
from jobs.plans.shape import node_label, walk_nodes
from jobs.query.identity import fingerprint_text
from jobs.schemas.collected import EXECUTION_SAMPLES

SAMPLE_KEY: tuple[str, ...] = ("session_id", "line_num")
ROW_FLOOR = 1.0


class SampleFormatError(ValueError):
    """A logged execution that cannot become a sample; the message says which field is wrong."""


def _number(value: Any, field: str, *, required: bool = True) -> float | None:
    """A finite, non-negative number; bools and strings are not numbers."""
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SampleFormatError(f"{field} is not a number: {value!r}"[:200])
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise SampleFormatError(f"{field} must be a finite number >= 0, not {value!r}")
    return number


def q_error(estimated: float, actual: float) -> float:
    """max(est, act) / min(est, act), both floored at one row: 1 is a perfect estimate."""
    est, act = max(estimated, ROW_FLOOR), max(actual, ROW_FLOOR)
    return max(est, act) / min(est, act)


def worst_q_error(root: dict[str, Any]) -> tuple[float | None, str | None]:
    """(worst q-error, label of that node) over the executed nodes of the plan (see the module doc);
    (None, None) when no node has actual rows. Raises SampleFormatError for a non-numeric row count."""
    worst: float | None = None
    label: str | None = None
    for node in walk_nodes(root):
        loops = node.get("Actual Loops")
        if loops is None or "Actual Rows" not in node or "Plan Rows" not in node:
            continue  # no ANALYZE data for this node
        name = str(node.get("Node Type"))
        if _number(loops, f"{name} Actual Loops") == 0:
            continue  # never executed
        estimated = _number(node["Plan Rows"], f"{name} Plan Rows")
        actual = _number(node["Actual Rows"], f"{name} Actual Rows")
        assert estimated is not None and actual is not None
        q = q_error(estimated, actual)
        if worst is None or q > worst:
            worst, label = q, node_label(node)
    return worst, label


def sample_fingerprint(
    query_text: object, queryid: int | None, fingerprint_of: Callable[[str], str] | None = None
) -> str | None:
    """The project's fingerprint of the statement: of its text, else ``qid:<queryid>``, else None."""
    if isinstance(query_text, str) and query_text.strip():
        return fingerprint_of(query_text) if fingerprint_of is not None else fingerprint_text(query_text)[0]
    return f"qid:{queryid}" if queryid is not None else None


def execution_sample_row(
    record: dict[str, Any],
    document: dict[str, Any],
    root: dict[str, Any],
    *,
    logged_at: datetime,
    queryid: int | None,
    duration_ms: float | None,
    shape_hash: str,
    log_file: str | None,
    fingerprint_of: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """The execution_samples row of one decoded auto_explain record (``document`` is the logged plan
    object, ``root`` its root node). Raises SampleFormatError when the record cannot be a sample."""
    session_id = record.get("session_id")
    line_num = record.get("line_num")
    if not isinstance(session_id, str) or not session_id:
        raise SampleFormatError(f"no session_id in the record: {session_id!r}"[:200])
    if isinstance(line_num, bool) or not isinstance(line_num, int):
        raise SampleFormatError(f"line_num is not an integer: {line_num!r}"[:200])
    fingerprint = sample_fingerprint(document.get("Query Text"), queryid, fingerprint_of)
    if fingerprint is None:
        raise SampleFormatError("neither a Query Text nor a query id: the execution cannot be keyed")
    cardinality, worst_node = worst_q_error(root)
    dbname = record.get("dbname")
    return {
        "logged_at": logged_at,
        "session_id": session_id,
        "line_num": line_num,
        "dbname": dbname if isinstance(dbname, str) else None,
        "queryid": queryid,
        "fingerprint": fingerprint,
        "query_hash": query_hash(fingerprint),
        "shape_hash": shape_hash,
        "latency_ms": _number(duration_ms, "duration"),
        "total_cost": _number(root.get("Total Cost"), "Total Cost", required=False),
        "cardinality": cardinality,
        "cardinality_node": worst_node,
        "relations": sorted({str(n["Relation Name"]) for n in walk_nodes(root) if "Relation Name" in n}),
        "log_file": log_file,
    }


def execution_samples_frame(rows: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """Rows → the execution_samples shape, one row per key (the first one read wins)."""
    frame = pl.DataFrame(list(rows), schema=EXECUTION_SAMPLES.polars_schema)
    return frame.unique(list(SAMPLE_KEY), keep="first", maintain_order=True)


def new_samples(samples: pl.DataFrame, stored_keys: pl.DataFrame) -> pl.DataFrame:
    """The samples whose (session_id, line_num) is not among ``stored_keys`` (the lake's, same instance)."""
    if samples.is_empty() or stored_keys.is_empty():
        return samples
    keys = stored_keys.select(pl.col("session_id").cast(pl.String), pl.col("line_num").cast(pl.Int64))
    return samples.join(keys.unique(), on=list(SAMPLE_KEY), how="anti", nulls_equal=True)
