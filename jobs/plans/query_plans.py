"""One query's plan history from the lake (`radar plans QUERYID|TEXT`): every stored shape, each with what
changed since the shape before it, and the plan diffs detection attached to its regressions.

``match_queries`` and ``plan_history`` are pure (frames in, frames out); ``read_query_plans`` reads the
lake's ``query_texts``, ``plan_snapshots`` and ``plan_diffs``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from jobs.lake import io as lake
from jobs.plans.config import PlanDiffConfig
from jobs.plans.diff import PlanDiff, diff_plans
from jobs.plans.history import HISTORY_KEY
from jobs.plans.shape import PlanFormatError
from jobs.schemas.analysed import PLAN_DIFFS
from jobs.schemas.collected import PLAN_SNAPSHOTS, QUERY_TEXTS

FIRST_SHAPE = "first plan stored"
_QUERYID = re.compile(r"^-?[0-9]{1,20}$")
MATCH_COLUMNS = ("instance", "queryid", "query")
HISTORY_COLUMNS: tuple[str, ...] = (
    "instance",
    "queryid",
    "query",
    *(c for c in PLAN_SNAPSHOTS.column_names if c != "queryid"),
    "change_summary",
)
"""Columns of `radar plans` rows: the plan_snapshots row, its query text, what changed since the shape
before it (the same instance, queryid and source)."""


def queryid_of(needle: str) -> int | None:
    """The queryid a `radar plans` argument names, or None when it is a text fragment."""
    text = needle.strip()
    if not _QUERYID.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def match_queries(texts: pl.DataFrame, snapshots: pl.DataFrame, needle: str) -> pl.DataFrame:
    """(instance, queryid, query) named by ``needle``: a queryid (with or without a stored text), else the
    queries whose normalized text contains ``needle``, case-insensitive; one row per (instance, queryid)."""
    texts = texts.select("instance", "queryid", "query").unique(["instance", "queryid"], keep="first")
    queryid = queryid_of(needle)
    if queryid is not None:
        ids = pl.concat(
            [
                texts.filter(pl.col("queryid") == queryid).select("instance", "queryid"),
                snapshots.filter(pl.col("queryid") == queryid).select("instance", "queryid"),
            ]
        ).unique()
        matched = ids.join(texts, on=["instance", "queryid"], how="left")
    else:
        fragment = needle.strip().lower()
        if not fragment:
            raise ValueError("radar plans: give a queryid or a fragment of the query text")
        matched = texts.filter(pl.col("query").str.to_lowercase().str.contains(fragment, literal=True))
    return matched.select(MATCH_COLUMNS).sort("instance", "queryid")


def _change_summary(
    before: dict[str, object] | None, after: dict[str, object], config: PlanDiffConfig
) -> str:
    if before is None:
        return FIRST_SHAPE
    try:
        return diff_plans(
            before["plan_json"],
            after["plan_json"],
            before_generic=bool(before.get("is_generic")),
            after_generic=bool(after.get("is_generic")),
            config=config,
        ).summary
    except PlanFormatError as exc:
        return f"not compared: {exc}"


def plan_history(
    snapshots: pl.DataFrame, matched: pl.DataFrame, config: PlanDiffConfig | None = None
) -> pl.DataFrame:
    """The plan_snapshots rows of the matched queries, oldest first per (instance, queryid, source), each
    with its query text and ``change_summary``: the diff from the shape stored before it."""
    config = config or PlanDiffConfig()
    rows = (
        snapshots.join(
            matched.select("instance", "queryid", "query"), on=["instance", "queryid"], how="inner"
        )
        .sort([*HISTORY_KEY, "captured_at"])
        .to_dicts()
    )
    previous: dict[tuple[object, ...], dict[str, object]] = {}
    for row in rows:
        key = tuple(row[k] for k in HISTORY_KEY)
        row["change_summary"] = _change_summary(previous.get(key), row, config)
        previous[key] = row
    schema = {**PLAN_SNAPSHOTS.scan_schema(), "query": pl.String(), "change_summary": pl.String()}
    return pl.DataFrame(rows, schema={c: schema[c] for c in HISTORY_COLUMNS}, orient="row")


def last_change(history: pl.DataFrame, config: PlanDiffConfig | None = None) -> PlanDiff | None:
    """The diff between the two latest shapes of the most recently changed (instance, queryid, source)."""
    changed = history.filter(pl.col("change_summary") != FIRST_SHAPE).sort("captured_at")
    if changed.is_empty():
        return None
    after = changed.row(-1, named=True)
    same = history.filter(
        (pl.col("instance") == after["instance"])
        & (pl.col("queryid") == after["queryid"])
        & (pl.col("source") == after["source"])
        & (pl.col("captured_at") < after["captured_at"])
    ).sort("captured_at")
    if same.is_empty():
        return None
    before = same.row(-1, named=True)
    try:
        return diff_plans(
            before["plan_json"],
            after["plan_json"],
            before_generic=bool(before["is_generic"]),
            after_generic=bool(after["is_generic"]),
            config=config,
        )
    except PlanFormatError:
        return None


@dataclass(frozen=True)
class QueryPlans:
    matched: pl.DataFrame
    """(instance, queryid, query) the argument named."""
    history: pl.DataFrame
    """HISTORY_COLUMNS rows, oldest first per (instance, queryid, source)."""
    regression_diffs: pl.DataFrame
    """plan_diffs rows of the matched queries (detection's before/after at each regression), latest first."""


def read_query_plans(
    lake_root: Path,
    needle: str,
    *,
    instance: str | None = None,
    source: str | None = None,
    config: PlanDiffConfig | None = None,
) -> QueryPlans:
    def scoped(frame: pl.LazyFrame) -> pl.LazyFrame:
        if instance is not None:
            frame = frame.filter(pl.col("instance") == instance)
        return frame

    texts = lake.read_table(lake_root, QUERY_TEXTS, scoped)
    snapshots = lake.read_table(
        lake_root,
        PLAN_SNAPSHOTS,
        lambda s: scoped(s if source is None else s.filter(pl.col("source") == source)),
    )
    matched = match_queries(texts, snapshots, needle)
    history = plan_history(snapshots, matched, config)
    diffs = lake.read_table(lake_root, PLAN_DIFFS, scoped)
    regression_diffs = diffs.join(matched.select("instance", "queryid"), on=["instance", "queryid"]).sort(
        "detected_change_at", descending=True
    )
    return QueryPlans(matched, history, regression_diffs)
