"""`radar plans` pure parts (jobs.plans.query_plans): which queries an argument names, and the history with
what changed between consecutive shapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl

from jobs.plans.query_plans import (
    FIRST_SHAPE,
    HISTORY_COLUMNS,
    last_change,
    match_queries,
    plan_history,
    queryid_of,
)
from jobs.plans.shape import plan_facts, plan_root
from jobs.schemas.collected import PLAN_SNAPSHOTS

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
INDEX_SCAN = {
    "Node Type": "Index Scan",
    "Relation Name": "items",
    "Index Name": "items_sku_idx",
    "Total Cost": 8.3,
}
SEQ_SCAN = {"Node Type": "Seq Scan", "Relation Name": "items", "Total Cost": 339.0}

TEXTS = pl.DataFrame(
    {
        "instance": ["a", "a", "b"],
        "queryid": [-9000000000000000001, 12, -9000000000000000001],
        "query": ["SELECT id FROM items WHERE sku = $1", "select 1", "SELECT id FROM items WHERE sku = $1"],
    }
)


def snapshot(
    instance: str, queryid: int, at: datetime, plan: dict[str, object], source: str
) -> dict[str, object]:
    facts = plan_facts(plan_root(plan))
    return {
        "instance": instance,
        "queryid": queryid,
        "captured_at": at,
        "source": source,
        "is_generic": source == "generic_explain",
        "shape_hash": facts.shape_hash,
        "root_node": facts.root_node,
        "total_cost": facts.total_cost,
        "plan_json": json.dumps(plan),
    }


def snapshots(rows: list[dict[str, object]]) -> pl.DataFrame:
    schema = PLAN_SNAPSHOTS.scan_schema()
    frame = pl.DataFrame(rows, schema_overrides={k: schema[k] for k in rows[0]})
    return frame.with_columns(
        [pl.lit(None).cast(schema[c]).alias(c) for c in PLAN_SNAPSHOTS.column_names if c not in frame.columns]
    )


def test_an_argument_names_a_queryid_or_a_text_fragment() -> None:
    assert queryid_of("-9000000000000000001") == -9000000000000000001
    assert queryid_of("99999999999999999999") is None  # out of int64: a text fragment
    assert queryid_of("items") is None
    empty = snapshots([snapshot("a", 77, T0, SEQ_SCAN, "auto_explain")])
    by_id = match_queries(TEXTS, empty, "-9000000000000000001")
    assert by_id["instance"].to_list() == ["a", "b"]
    by_text = match_queries(TEXTS, empty, "from ITEMS where")
    assert by_text["queryid"].to_list() == [-9000000000000000001, -9000000000000000001]
    # A queryid with plans but no stored text (an auto_explain Query Identifier) still matches.
    only_plans = match_queries(TEXTS, empty, "77")
    assert only_plans.rows() == [("a", 77, None)]


def test_history_says_what_changed_since_the_shape_before_it_per_source() -> None:
    qid = -9000000000000000001
    rows = [
        snapshot("a", qid, T0, INDEX_SCAN, "generic_explain"),
        snapshot("a", qid, T0 + timedelta(minutes=5), SEQ_SCAN, "generic_explain"),
        snapshot("a", qid, T0 + timedelta(minutes=1), SEQ_SCAN, "auto_explain"),
        snapshot("a", 12, T0, SEQ_SCAN, "generic_explain"),  # another query: not in the history
    ]
    matched = match_queries(TEXTS.filter(pl.col("instance") == "a"), snapshots(rows), str(qid))
    history = plan_history(snapshots(rows), matched)
    assert history.columns == list(HISTORY_COLUMNS)
    assert history.select("source", "root_node").rows() == [
        ("auto_explain", "Seq Scan"),
        ("generic_explain", "Index Scan"),
        ("generic_explain", "Seq Scan"),
    ]
    summaries = history["change_summary"].to_list()
    assert summaries[:2] == [FIRST_SHAPE, FIRST_SHAPE]
    assert "Index Scan using items_sku_idx on items → Seq Scan on items" in summaries[2]
    assert history["query"].to_list() == ["SELECT id FROM items WHERE sku = $1"] * 3
    change = last_change(history)
    assert change is not None and change.indexes_removed == ["items_sku_idx"]
    assert last_change(history.head(2)) is None
