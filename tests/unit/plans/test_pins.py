"""Plan pins (issue 30), pure parts: hints derived from plan JSON (scans, joins, leading order, aliases,
hostile names), the producibility check, the apply/remove SQL and the proposal built from a finding and its
plan history. The hints themselves are checked against a real pg_hint_plan in the hint_plan tier
(tests/integration/plans/test_hint_plan_real.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobs.plans.pins import (
    STATUS_IMPOSSIBLE,
    STATUS_NOT_A_PLAN_CHANGE,
    STATUS_PROPOSED,
    PinImpossible,
    PlanCatalogue,
    apply_sql,
    check_producible,
    derive_hints,
    hint_name,
    propose_pin,
    remove_sql,
    sql_text_literal,
)
from jobs.plans.shape import plan_shape_hash

# --- plan builders: the keys EXPLAIN (FORMAT JSON) writes ----------------------------------------------


def scan(
    node_type: str, relation: str, alias: str | None = None, index: str | None = None, **more: Any
) -> dict:
    node: dict[str, Any] = {
        "Node Type": node_type,
        "Relation Name": relation,
        "Alias": relation if alias is None else alias,
    }
    if index is not None:
        node["Index Name"] = index
    node.update(more)
    return node


def bitmap(relation: str, alias: str, *indexes: str) -> dict:
    index_scans = [{"Node Type": "Bitmap Index Scan", "Index Name": i} for i in indexes]
    child = index_scans[0] if len(index_scans) == 1 else {"Node Type": "BitmapOr", "Plans": index_scans}
    return {**scan("Bitmap Heap Scan", relation, alias), "Plans": [child]}


def join(node_type: str, outer: dict, inner: dict) -> dict:
    outer = {**outer, "Parent Relationship": "Outer"}
    inner = {**inner, "Parent Relationship": "Inner"}
    if node_type == "Hash Join":
        inner = {"Node Type": "Hash", "Parent Relationship": "Inner", "Plans": [inner]}
    if node_type == "Merge Join":
        outer = {"Node Type": "Sort", "Parent Relationship": "Outer", "Plans": [outer]}
        inner = {"Node Type": "Sort", "Parent Relationship": "Inner", "Plans": [inner]}
    return {"Node Type": node_type, "Join Type": "Inner", "Plans": [outer, inner]}


def aggregate(child: dict) -> list[dict]:
    """EXPLAIN's own wrapper: a list holding {"Plan": root}."""
    return [{"Plan": {"Node Type": "Aggregate", "Strategy": "Plain", "Plans": [child]}}]


CATALOGUE = PlanCatalogue.from_rows(
    [
        {"schemaname": "public", "relname": "orders", "indexname": "orders_customer_id_idx"},
        {"schemaname": "public", "relname": "orders", "indexname": "orders_pkey"},
        {"schemaname": "public", "relname": "customers", "indexname": "customers_pkey"},
        {"schemaname": "public", "relname": "items", "indexname": None},
    ]
)


# --- scan methods --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (scan("Seq Scan", "orders", "o"), 'SeqScan("o")'),
        (
            scan("Index Scan", "orders", "o", "orders_customer_id_idx"),
            'IndexScan("o" "orders_customer_id_idx")',
        ),
        (scan("Index Only Scan", "orders", "o", "orders_pkey"), 'IndexOnlyScan("o" "orders_pkey")'),
        (bitmap("orders", "o", "orders_customer_id_idx"), 'BitmapScan("o" "orders_customer_id_idx")'),
        (scan("Tid Scan", "orders", "o"), 'TidScan("o")'),
    ],
)
def test_scan_method_and_index_become_the_scan_hint(node: dict, expected: str) -> None:
    assert derive_hints(aggregate(node)).text == expected


def test_bitmap_or_names_every_index_once_in_plan_order() -> None:
    node = bitmap("orders", "o", "orders_pkey", "orders_customer_id_idx", "orders_pkey")
    assert derive_hints(aggregate(node)).text == 'BitmapScan("o" "orders_pkey" "orders_customer_id_idx")'


def test_the_alias_names_the_table_not_the_relation() -> None:
    hints = derive_hints(aggregate(scan("Seq Scan", "orders", "recent")))
    assert hints.text == 'SeqScan("recent")'
    assert hints.relations == [(None, "orders")]


def test_a_plan_without_alias_uses_the_relation_name() -> None:
    node = {"Node Type": "Seq Scan", "Relation Name": "orders"}
    assert derive_hints(aggregate(node)).text == 'SeqScan("orders")'


# --- joins and leading order ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_type", "hint"),
    [("Nested Loop", "NestLoop"), ("Hash Join", "HashJoin"), ("Merge Join", "MergeJoin")],
)
def test_join_method_over_both_aliases_and_leading_keeps_outer_and_inner(node_type: str, hint: str) -> None:
    plan = join(
        node_type, scan("Seq Scan", "customers", "c"), scan("Index Scan", "orders", "o", "orders_pkey")
    )
    assert derive_hints(aggregate(plan)).text == (
        f'SeqScan("c") IndexScan("o" "orders_pkey") {hint}("c" "o") Leading(("c" "o"))'
    )


def test_three_way_join_nests_the_leading_pairs_and_lists_the_inner_join_first() -> None:
    inner_join = join("Hash Join", scan("Seq Scan", "orders", "o"), scan("Seq Scan", "customers", "c"))
    plan = join("Nested Loop", inner_join, scan("Index Scan", "items", "i", "items_pkey"))
    hints = derive_hints(plan)
    assert hints.text == (
        'SeqScan("o") SeqScan("c") IndexScan("i" "items_pkey") '
        'HashJoin("o" "c") NestLoop("o" "c" "i") Leading((("o" "c") "i"))'
    )


def test_inner_side_join_tree_is_nested_on_the_right() -> None:
    right = join("Merge Join", scan("Seq Scan", "orders", "o"), scan("Seq Scan", "items", "i"))
    plan = join("Hash Join", scan("Seq Scan", "customers", "c"), right)
    assert derive_hints(plan).text.endswith('Leading(("c" ("o" "i")))')


def test_self_join_is_told_apart_by_alias() -> None:
    plan = join(
        "Nested Loop", scan("Seq Scan", "orders", "a"), scan("Index Scan", "orders", "b", "orders_pkey")
    )
    assert derive_hints(plan).text == (
        'SeqScan("a") IndexScan("b" "orders_pkey") NestLoop("a" "b") Leading(("a" "b"))'
    )


def test_no_leading_without_joins() -> None:
    assert "Leading" not in derive_hints(aggregate(scan("Seq Scan", "orders", "o"))).text


def test_gather_and_memoize_are_transparent() -> None:
    memo = {"Node Type": "Memoize", "Plans": [scan("Index Scan", "orders", "o", "orders_pkey")]}
    plan = {
        "Node Type": "Gather",
        "Plans": [join("Nested Loop", scan("Seq Scan", "customers", "c", **{"Parallel Aware": True}), memo)],
    }
    assert derive_hints(plan).text.endswith('NestLoop("c" "o") Leading(("c" "o"))')


# --- hostile names -------------------------------------------------------------------------------------


def test_a_double_quote_in_a_name_is_doubled_so_it_cannot_end_the_name() -> None:
    hostile = 'x") SeqScan(y'
    text = derive_hints(aggregate(scan("Index Scan", "orders", hostile, 'i"dx'))).text
    assert text == 'IndexScan("x"") SeqScan(y" "i""dx")'


@pytest.mark.parametrize(
    "name",
    ["a\x1b[31m", "a\nb", "a*/b", "a/*b", "\u202eevil", "", "n" * 64, "é" * 32],
    ids=["escape", "newline", "comment-end", "comment-start", "bidi", "empty", "64-bytes", "64-utf8-bytes"],
)
def test_a_name_a_hint_cannot_carry_makes_the_pin_impossible(name: str) -> None:
    with pytest.raises(PinImpossible, match=r"^pin impossible: "):
        derive_hints(aggregate(scan("Seq Scan", "orders", name)))


def test_names_up_to_63_bytes_are_kept_whole() -> None:
    assert hint_name("n" * 63, "table alias") == '"' + "n" * 63 + '"'


def test_an_unwritable_index_name_is_refused_too() -> None:
    with pytest.raises(PinImpossible, match="index name"):
        derive_hints(aggregate(scan("Index Scan", "orders", "o", "idx\x00")))


def test_a_non_text_alias_is_refused() -> None:
    with pytest.raises(PinImpossible):
        derive_hints(aggregate({"Node Type": "Seq Scan", "Relation Name": "orders", "Alias": ["o"]}))


def test_an_alias_naming_two_tables_makes_the_pin_impossible() -> None:
    plan = join("Hash Join", scan("Seq Scan", "orders", "t"), scan("Seq Scan", "customers", "t"))
    with pytest.raises(PinImpossible, match="alias 't' names two tables"):
        derive_hints(plan)


@pytest.mark.parametrize(
    "plan",
    [
        {"Node Type": "Append", "Plans": [scan("Seq Scan", "p1", "p1"), scan("Seq Scan", "p2", "p2")]},
        {"Node Type": "Subquery Scan", "Alias": "s", "Plans": [scan("Seq Scan", "orders", "o")]},
        {
            "Node Type": "Result",
            "Plans": [{**scan("Seq Scan", "orders", "o"), "Parent Relationship": "InitPlan"}],
        },
        {
            **scan("Seq Scan", "orders", "o"),
            "Plans": [{**scan("Index Scan", "items", "i", "items_pkey"), "Parent Relationship": "SubPlan"}],
        },
    ],
    ids=["append", "subquery", "initplan", "subplan-in-a-scan"],
)
def test_plans_pins_cannot_reproduce_yet_are_refused_with_the_node(plan: dict) -> None:
    with pytest.raises(PinImpossible, match="pins do not reproduce yet"):
        derive_hints(plan)


def test_text_that_is_no_plan_is_refused() -> None:
    with pytest.raises(PinImpossible, match="unreadable"):
        derive_hints("not json")


# --- producibility -------------------------------------------------------------------------------------


def test_a_plan_whose_relations_and_indexes_exist_is_producible() -> None:
    plan = join(
        "Nested Loop", scan("Seq Scan", "customers", "c"), scan("Index Scan", "orders", "o", "orders_pkey")
    )
    check_producible(derive_hints(plan), CATALOGUE)


def test_a_dropped_index_makes_the_pin_impossible_naming_it() -> None:
    hints = derive_hints(aggregate(scan("Index Scan", "orders", "o", "demo_orders_customer_id_idx")))
    with pytest.raises(PinImpossible) as raised:
        check_producible(hints, CATALOGUE)
    assert str(raised.value) == (
        "pin impossible: the last good plan used demo_orders_customer_id_idx, which no longer exists"
    )


def test_an_index_of_the_same_name_on_another_table_does_not_count() -> None:
    hints = derive_hints(aggregate(scan("Index Scan", "items", "i", "orders_pkey")))
    with pytest.raises(PinImpossible, match="used orders_pkey, which no longer exists"):
        check_producible(hints, CATALOGUE)


def test_a_bitmap_scan_needs_every_index_it_combined() -> None:
    hints = derive_hints(aggregate(bitmap("orders", "o", "orders_pkey", "orders_gone_idx")))
    with pytest.raises(PinImpossible, match="orders_gone_idx"):
        check_producible(hints, CATALOGUE)


def test_a_renamed_relation_makes_the_pin_impossible_naming_it_with_its_schema() -> None:
    hints = derive_hints(aggregate(scan("Seq Scan", "orders_old", "o", Schema="public")))
    with pytest.raises(PinImpossible, match=r"used public\.orders_old, which no longer exists"):
        check_producible(hints, CATALOGUE)


def test_the_schema_of_a_verbose_plan_must_match() -> None:
    hints = derive_hints(aggregate(scan("Seq Scan", "orders", "o", Schema="archive")))
    with pytest.raises(PinImpossible, match=r"archive\.orders"):
        check_producible(hints, CATALOGUE)


# --- the SQL -------------------------------------------------------------------------------------------


def test_apply_and_remove_sql_name_the_query_id_and_the_hints() -> None:
    hints = 'SeqScan("o")'
    assert apply_sql(-42, hints).endswith(
        "INSERT INTO hint_plan.hints (query_id, application_name, hints) VALUES (-42, '', 'SeqScan(\"o\")');"
    )
    assert remove_sql(-42, hints).endswith(
        "DELETE FROM hint_plan.hints WHERE query_id = -42 AND application_name = '' "
        "AND hints = 'SeqScan(\"o\")';"
    )


def test_quotes_and_backslashes_in_hints_stay_inside_the_literal() -> None:
    assert sql_text_literal("a'); DROP TABLE t; --") == "'a''); DROP TABLE t; --'"
    assert sql_text_literal("a\\'b") == "E'a\\\\''b'"
    sql = apply_sql(1, 'SeqScan("it\'s")', application_name="app'x")
    assert "VALUES (1, 'app''x', 'SeqScan(\"it''s\")');" in sql


@pytest.mark.parametrize("query_id", ["1; DROP TABLE t", 2**63, 1.5, True, None])
def test_a_query_id_that_is_no_int64_is_refused(query_id: Any) -> None:
    with pytest.raises(PinImpossible, match="64-bit integer"):
        apply_sql(query_id, 'SeqScan("o")')


def test_a_nul_cannot_reach_the_sql() -> None:
    with pytest.raises(PinImpossible, match="NUL"):
        remove_sql(1, "SeqScan(o)\x00")


# --- a proposal from a finding and its plan history ----------------------------------------------------

CHANGE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GOOD = aggregate(bitmap("orders", "o", "orders_customer_id_idx"))[0]["Plan"]
BAD = aggregate(scan("Seq Scan", "orders", "o"))[0]["Plan"]


def snapshot(plan: dict, at: datetime, source: str = "generic_explain") -> dict:
    return {
        "instance": "db1",
        "queryid": 7590971058838490324,
        "source": source,
        "captured_at": at,
        "shape_hash": plan_shape_hash(plan),
        "is_generic": source == "generic_explain",
        "plan_json": json.dumps(plan),
    }


FINDING = {
    "finding_id": "f1",
    "instance": "db1",
    "queryid": 7590971058838490324,
    "detected_change_at": CHANGE,
    "p_value": 1e-6,
    "before_mean_ms": 0.02,
    "after_mean_ms": 50.0,
    "kind": "plan_or_work",
}
HISTORY = [
    snapshot(GOOD, CHANGE - timedelta(hours=1)),
    snapshot(GOOD, CHANGE - timedelta(minutes=30)),
    snapshot(BAD, CHANGE),
]


def test_a_plan_change_finding_gets_the_last_good_plan_as_a_pin_with_its_evidence() -> None:
    proposal = propose_pin(FINDING, HISTORY, CATALOGUE)
    assert proposal.status == STATUS_PROPOSED
    assert proposal.hints == 'BitmapScan("o" "orders_customer_id_idx")'
    assert "VALUES (7590971058838490324, '', 'BitmapScan(\"o\" \"orders_customer_id_idx\")')" in (
        proposal.apply_sql or ""
    )
    assert "DELETE FROM hint_plan.hints WHERE query_id = 7590971058838490324" in (proposal.remove_sql or "")
    assert (proposal.finding_id, proposal.p_value, proposal.before_mean_ms, proposal.after_mean_ms) == (
        "f1",
        1e-6,
        0.02,
        50.0,
    )
    assert proposal.good_captured_at == CHANGE - timedelta(minutes=30)
    assert json.loads(proposal.good_plan_json or "") == GOOD
    assert json.loads(proposal.bad_plan_json or "") == BAD
    assert proposal.good_shape_hash != proposal.bad_shape_hash
    assert proposal.indexes == ["orders_customer_id_idx"]


def test_the_index_dropped_since_makes_it_impossible_with_the_reason() -> None:
    gone = PlanCatalogue.from_rows([{"schemaname": "public", "relname": "orders", "indexname": None}])
    proposal = propose_pin(FINDING, HISTORY, gone)
    assert proposal.status == STATUS_IMPOSSIBLE
    assert proposal.reason == (
        "pin impossible: the last good plan used orders_customer_id_idx, which no longer exists"
    )
    assert proposal.hints is None and proposal.apply_sql is None
    assert proposal.good_plan_json is not None  # the evidence is kept either way


def test_without_a_catalogue_nothing_is_proposed() -> None:
    proposal = propose_pin(FINDING, HISTORY, None)
    assert proposal.status == STATUS_IMPOSSIBLE
    assert "could not be listed" in proposal.reason


@pytest.mark.parametrize(
    ("finding", "history", "reason"),
    [
        ({**FINDING, "kind": "contention"}, HISTORY, "kind is contention"),
        (FINDING, [snapshot(BAD, CHANGE + timedelta(minutes=1))], "no last good plan"),
        (FINDING, [snapshot(GOOD, CHANGE - timedelta(hours=1)), snapshot(GOOD, CHANGE)], "did not change"),
        (FINDING, [snapshot(GOOD, CHANGE - timedelta(hours=1))], "no plan change recorded"),
        ({**FINDING, "detected_change_at": None}, HISTORY, "no change time"),
    ],
    ids=["contention", "no-before", "same-shape", "no-after", "no-change-time"],
)
def test_no_pin_when_the_finding_is_no_plan_change(finding: dict, history: list[dict], reason: str) -> None:
    proposal = propose_pin(finding, history, CATALOGUE)
    assert proposal.status == STATUS_NOT_A_PLAN_CHANGE
    assert reason in proposal.reason
    assert proposal.apply_sql is None
