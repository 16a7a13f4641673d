"""Pure parts of the plan capture: shape hash, statement checks, pg_store_plans gating, history bounds,
auto_explain record parsing and log offsets (no server needed)."""

from __future__ import annotations

import itertools
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs.plans.auto_explain import (
    ingest_auto_explain_logs,
    load_offsets,
    parse_auto_explain_record,
    parse_log_timestamp,
)
from jobs.plans.capture import select_plan_candidates
from jobs.plans.config import AutoExplainConfig, PlanCaptureConfig
from jobs.plans.generic import classify_statement
from jobs.plans.history import ROWS_PER_SHAPE, bound_plan_history, new_shape_rows
from jobs.plans.shape import PlanFormatError, plan_facts, plan_root, plan_shape_hash
from jobs.plans.store_plans import store_plans_gate


def index_plan(cost: float = 8.3, rows: int = 1, value: str = "5") -> dict:
    return {
        "Node Type": "Aggregate",
        "Strategy": "Plain",
        "Total Cost": cost,
        "Plan Rows": 1,
        "Plans": [
            {
                "Node Type": "Index Scan",
                "Parent Relationship": "Outer",
                "Relation Name": "orders",
                "Index Name": "orders_customer_idx",
                "Index Cond": f"(customer_id = {value})",
                "Total Cost": cost,
                "Plan Rows": rows,
            }
        ],
    }


def seq_plan() -> dict:
    return {
        "Node Type": "Aggregate",
        "Strategy": "Plain",
        "Total Cost": 18554.0,
        "Plans": [{"Node Type": "Seq Scan", "Parent Relationship": "Outer", "Relation Name": "orders"}],
    }


def test_shape_hash_ignores_costs_rows_and_constants_but_not_structure() -> None:
    base = plan_shape_hash(index_plan())
    assert plan_shape_hash(index_plan(cost=99.0, rows=500, value="$1")) == base
    assert plan_shape_hash(seq_plan()) != base
    swapped = {
        "Node Type": "Hash Join",
        "Join Type": "Inner",
        "Plans": [
            {"Node Type": "Seq Scan", "Relation Name": "a"},
            {"Node Type": "Seq Scan", "Relation Name": "b"},
        ],
    }
    reordered = {**swapped, "Plans": list(reversed(swapped["Plans"]))}
    assert plan_shape_hash(swapped) != plan_shape_hash(reordered), "join order is part of the shape"
    assert len(base) == 16 and int(base, 16) >= 0


def test_plan_root_accepts_every_wrapper_and_rejects_non_plans() -> None:
    node = index_plan()
    for wrapped in ([{"Plan": node}], {"Plan": node, "Query Text": "x"}, node, json.dumps([{"Plan": node}])):
        assert plan_root(wrapped)["Node Type"] == "Aggregate"
    for bad in ("Seq Scan on t  (cost=0.00..1.00)", {"p": {"t": "Seq Scan"}}, [1, 2]):
        with pytest.raises(PlanFormatError):
            plan_root(bad)
    facts = plan_facts(node)
    assert facts.root_node == "Aggregate" and facts.indexes == ["orders_customer_idx"]
    assert facts.node_types == ["Aggregate", "Index Scan"] and facts.relations == ["orders"]


@pytest.mark.parametrize(
    ("text", "explainable"),
    [
        ("select * from t where id = $1", True),
        ("with x as (select $1) select * from x", True),
        # Writes need write privilege to be EXPLAINed at all; the explain role has none: refused up front.
        ("insert into t values ($1, $2)", False),
        ("update t set v = $1 where id = $2", False),
        ("delete from t where id = $1", False),
        ("merge into t using s on t.id = s.id when matched then delete", False),
        ("with x as (delete from t returning *) select * from x", False),
        ("select * from t where id = $1 for update", False),
        ("select * from t where id = $1 for key share", False),
        ("select 1; drop table t", False),
        ("drop table t", False),
        ("explain analyze select 1", False),
        ("select * into t2 from t", False),
        ("vacuum t", False),
        ("select (", False),
    ],
)
def test_classify_statement(text: str, explainable: bool) -> None:
    check = classify_statement(text)
    assert check.explainable is explainable
    assert (check.reason is None) is explainable


@pytest.mark.parametrize(
    ("server", "version", "cqid", "trusted", "needle"),
    [
        (170000, "1.9", "on", True, None),
        (160000, "1.8", "auto", True, None),
        (140000, "1.6", "regress", True, None),
        (150000, "1.5", "on", False, "1.5 < 1.6"),
        (130000, "1.6", "on", False, "server_version_num 130000"),
        (170000, "1.9", "off", False, "compute_query_id = off"),
        (170000, None, "on", False, "not installed"),
    ],
)
def test_store_plans_gate(
    server: int, version: str | None, cqid: str, trusted: bool, needle: str | None
) -> None:
    gate = store_plans_gate(server, version, cqid)
    assert gate.trusted is trusted
    if needle:
        assert gate.reason is not None and needle in gate.reason


def _snap(queryid: int, shape: str, minute: int, source: str = "generic_explain") -> dict:
    return {
        "instance": "a",
        "queryid": queryid,
        "source": source,
        "shape_hash": shape,
        "captured_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minute),
    }


def test_new_shape_rows_writes_only_changes() -> None:
    stored = pl.DataFrame([_snap(1, "A", 0), _snap(2, "B", 0)])
    offered = pl.DataFrame(
        [_snap(1, "A", 5), _snap(2, "C", 5), _snap(3, "D", 5), _snap(1, "A", 5, "auto_explain")]
    )
    fresh = new_shape_rows(offered, stored)
    assert sorted(zip(fresh["queryid"], fresh["shape_hash"], strict=True)) == [(1, "A"), (2, "C"), (3, "D")]
    assert fresh.filter(pl.col("queryid") == 1)["source"].to_list() == ["auto_explain"]
    # within one batch A → A → B → A keeps the run starts only
    batch = pl.DataFrame([_snap(9, s, i) for i, s in enumerate("AABA")])
    assert new_shape_rows(batch, stored.clear())["shape_hash"].to_list() == ["A", "B", "A"]


def test_bound_plan_history_keeps_an_unbroken_run_of_the_last_distinct_shapes() -> None:
    rows = [_snap(1, shape, i) for i, shape in enumerate("ABCDEFGA")] + [_snap(2, "Z", 0)]
    kept = bound_plan_history(pl.DataFrame(rows), max_shapes=5)
    q1 = kept.filter(pl.col("queryid") == 1).sort("captured_at")
    # the first A goes with B and C: kept, it would read as A → D, a change that never happened
    assert q1["shape_hash"].to_list() == list("DEFGA")
    assert kept.filter(pl.col("queryid") == 2).height == 1


def test_a_return_to_an_earlier_shape_is_stored_and_survives_the_bound() -> None:
    """A → B → A is three rows, written one cycle at a time against the lake, and the bound keeps B."""
    stored = pl.DataFrame([_snap(1, "A", 0)])
    for minute, shape in ((10, "B"), (18, "A")):
        fresh = new_shape_rows(pl.DataFrame([_snap(1, shape, minute)]), stored)
        assert fresh["shape_hash"].to_list() == [shape]
        stored = bound_plan_history(pl.concat([stored, fresh]), max_shapes=2)
    assert stored.sort("captured_at")["shape_hash"].to_list() == ["A", "B", "A"]
    assert new_shape_rows(pl.DataFrame([_snap(1, "A", 19)]), stored).is_empty(), "unchanged: nothing new"
    # one shape only: the unbroken run is the last row
    assert bound_plan_history(stored, max_shapes=1)["captured_at"].to_list() == [
        _snap(1, "A", 18)["captured_at"]
    ]


def test_bound_plan_history_caps_the_rows_of_a_flip_flopping_plan() -> None:
    rows = [_snap(1, "AB"[i % 2], i) for i in range(100)]
    kept = bound_plan_history(pl.DataFrame(rows), max_shapes=5)
    assert kept.height == 5 * ROWS_PER_SHAPE
    assert kept["captured_at"].max() == rows[-1]["captured_at"]


def test_select_plan_candidates_top_n_latest_snapshot_without_explain() -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    statements = pl.DataFrame(
        {
            "captured_at": [t0, t1, t1, t1, t1],
            "queryid": [1, 1, 2, 3, None],
            "dbid": [5, 5, 5, 5, 5],
            "userid": [10, 10, 10, 10, 10],
            "total_exec_time": [1e9, 10.0, 30.0, 20.0, 99.0],
        }
    )
    texts = pl.DataFrame({"queryid": [1, 2, 3], "query": ["select 1", "EXPLAIN select 2", "select 3"]})
    picked = select_plan_candidates(statements, texts, top_n=1)
    assert picked["queryid"].to_list() == [3]
    assert select_plan_candidates(statements, texts)["queryid"].to_list() == [3, 1]


_LINE_NUMBERS = itertools.count(1)


def _log_line(message: str, query_id: int = 7, ts: str = "2026-11-29 15:16:52.341 UTC") -> bytes:
    record = {
        "timestamp": ts,
        "dbname": "app",
        "session_id": "6928a1b3.1a2b",  # every jsonlog record has these two (the sample's identity)
        "line_num": next(_LINE_NUMBERS),
        "error_severity": "LOG",
        "message": message,
        "query_id": query_id,
    }
    return (json.dumps(record) + "\n").encode()


def _plan_message(plan: dict, qid: int | None = None) -> str:
    doc = {"Query Text": "select …", "Plan": plan}
    if qid is not None:
        doc["Query Identifier"] = qid
    return "duration: 12.500 ms  plan:\n" + json.dumps(doc, indent=2)


def test_parse_auto_explain_record_prefers_query_identifier() -> None:
    row = parse_auto_explain_record(json.loads(_log_line(_plan_message(index_plan(), qid=-42), query_id=7)))
    assert row is not None and row["queryid"] == -42 and row["duration_ms"] == 12.5
    row = parse_auto_explain_record(json.loads(_log_line(_plan_message(index_plan()), query_id=7)))
    assert row is not None and row["queryid"] == 7
    assert parse_auto_explain_record(json.loads(_log_line("connection authorized"))) is None
    assert parse_log_timestamp("2026-11-29 17:16:52.341 +02") == datetime(
        2026, 11, 29, 15, 16, 52, 341000, UTC
    )


def test_ingest_offsets_partial_line_rotation_and_truncation(tmp_path: Path) -> None:
    logs, lake = tmp_path / "log", tmp_path / "lake"
    logs.mkdir()
    first = logs / "postgresql-1.json"
    line_a = _log_line(_plan_message(index_plan(), qid=1))
    line_b = _log_line(_plan_message(seq_plan(), qid=1), ts="2026-11-29 15:20:00.000 UTC")
    first.write_bytes(line_a + line_b[:50])  # the server is in the middle of writing line_b
    result = ingest_auto_explain_logs(logs, "a", lake)
    assert result.plan_records == 1 and not result.errors
    assert load_offsets(lake, "a")["postgresql-1.json"]["offset"] == len(line_a)
    with first.open("ab") as handle:
        handle.write(line_b[50:])
    result = ingest_auto_explain_logs(logs, "a", lake)
    assert result.plan_records == 1 and result.snapshot_rows_written == 1, "completed line read once"
    assert ingest_auto_explain_logs(logs, "a", lake).plan_records == 0, "nothing new, nothing re-read"
    # rotation: the old file renamed away keeps its offset, a new file starts at 0
    first.rename(logs / "postgresql-0-rotated.json")
    (logs / "postgresql-2.json").write_bytes(_log_line(_plan_message(index_plan(), qid=2)))
    assert ingest_auto_explain_logs(logs, "a", lake).plan_records == 1
    # truncation: a file that shrank below its offset is read again from the start
    (logs / "postgresql-2.json").write_bytes(b"")
    (logs / "postgresql-2.json").write_bytes(_log_line("checkpoint complete"))
    result = ingest_auto_explain_logs(logs, "a", lake)
    assert result.lines_read == 1 and result.plan_records == 0
    bad = logs / "postgresql-3.json"
    bad.write_bytes(b'{"message":"duration: 1 ms  plan:\\n{not json"}\n')
    result = ingest_auto_explain_logs(logs, "a", lake)
    assert result.errors and "postgresql-3.json" in result.errors[0]


def test_a_same_shape_cost_change_beyond_the_ratio_is_stored() -> None:
    """Same shape, estimated cost ×3 since the stored row: stored again (a grown table, stale statistics);
    ×1.5 is not, nor is anything with the rule off (0)."""

    def costed(minute: int, cost: float) -> dict:
        return {**_snap(1, "A", minute), "total_cost": cost}

    stored = pl.DataFrame([costed(0, 100.0)])
    tripled, half_more = pl.DataFrame([costed(5, 300.0)]), pl.DataFrame([costed(5, 150.0)])
    assert new_shape_rows(tripled, stored, cost_change_ratio=2.0)["total_cost"].to_list() == [300.0]
    assert new_shape_rows(pl.DataFrame([costed(5, 40.0)]), stored, cost_change_ratio=2.0).height == 1, "down"
    assert new_shape_rows(half_more, stored, cost_change_ratio=2.0).is_empty()
    assert new_shape_rows(tripled, stored, cost_change_ratio=0).is_empty(), "0: shape changes only"
    assert new_shape_rows(tripled, stored).is_empty(), "off unless asked"
    # each cycle is compared with the last stored row, so a slow drift is caught once it adds up
    written = []
    for minute in range(1, 5):
        fresh = new_shape_rows(pl.DataFrame([costed(minute, 100.0 * 1.3**minute)]), stored, 2.0)
        written += fresh["captured_at"].to_list()
        stored = pl.concat([stored, fresh])
    assert written == [costed(3, 0)["captured_at"]]


def test_cost_change_ratio_must_be_off_or_above_one() -> None:
    assert PlanCaptureConfig(cost_change_ratio=0).cost_change_ratio == 0
    with pytest.raises(ValueError, match=r"\[plans\] cost_change_ratio must be 0 \(off\) or greater than 1"):
        PlanCaptureConfig(cost_change_ratio=0.5)


@pytest.mark.timeout(30)  # a FIFO opened for reading without O_NONBLOCK waits for a writer forever
def test_log_folder_links_out_and_fifos_are_named_not_read(tmp_path: Path) -> None:
    """The server's log folder is the monitored side's: a FIFO matching the glob must not hang the
    ingest, a link out of the folder must not be read (it could point at a secret), a link to one of the
    folder's own files is that file (read once, by its inode)."""
    logs, lake, outside = tmp_path / "log", tmp_path / "lake", tmp_path / "outside"
    logs.mkdir()
    outside.mkdir()
    (logs / "postgresql-1.json").write_bytes(_log_line(_plan_message(index_plan(), qid=1)))
    (outside / "secret.json").write_bytes(_log_line(_plan_message(seq_plan(), qid=2)))
    (logs / "postgresql-2.json").symlink_to(outside / "secret.json")
    (logs / "current.json").symlink_to(logs / "postgresql-1.json")
    os.mkfifo(logs / "postgresql-3.json")
    (logs / "archive.json").mkdir()  # a folder matching the glob is no log file, and no error
    result = ingest_auto_explain_logs(logs, "a", lake)
    assert result.plan_records == 1, "the real file once, not its link, not the file outside"
    assert sorted(e.split(":")[0] for e in result.errors) == ["postgresql-2.json", "postgresql-3.json"]
    assert "outside its folder" in " ".join(result.errors) and "FIFO" in " ".join(result.errors)


def test_a_line_longer_than_the_limit_is_skipped_and_the_lines_after_it_read(tmp_path: Path) -> None:
    """A huge record (a monitored server's user can log one) used to hold the file's offset: every run read
    the same budget's bytes into memory and never reached the lines after it."""
    logs, lake = tmp_path / "log", tmp_path / "lake"
    logs.mkdir()
    config = AutoExplainConfig(max_bytes_per_run=1 << 20, read_chunk_bytes=1 << 14, max_line_bytes=1 << 16)
    huge = b'{"message": "' + b"x" * (3 << 20) + b'"}\n'
    before = _log_line(_plan_message(index_plan(), qid=1))
    after = _log_line(_plan_message(seq_plan(), qid=2), ts="2026-11-29 15:20:00.000 UTC")
    (logs / "postgresql-1.json").write_bytes(before + huge + after)
    records, errors = 0, []
    for _ in range(5):  # the huge line is 3 MiB, the budget 1 MiB a run
        result = ingest_auto_explain_logs(logs, "a", lake, config)
        records, errors = records + result.plan_records, errors + result.errors
    assert records == 2, "the lines before and after the huge one"
    assert [e for e in errors if "more than 65536 bytes, skipped" in e] == [
        f"postgresql-1.json: byte {len(before)}: a line of more than 65536 bytes, skipped"
    ]
    assert load_offsets(lake, "a")["postgresql-1.json"]["offset"] == len(before + huge + after)
