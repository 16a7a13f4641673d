"""auto_explain records → execution_samples rows: the pure row logic, hostile records, and the ingest's
dedupe on (session_id, line_num) over jsonlog files written here (the same format PostgreSQL writes; the
real-server tests are in tests/integration/plans/test_execution_samples_pg.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.drift.scorer import query_hash
from jobs.lake.io import scan_table
from jobs.plans.auto_explain import IngestResult, ingest_auto_explain_logs, parse_jsonlog_lines, state_path
from jobs.plans.config import AutoExplainConfig, AutoExplainSamplerConfig
from jobs.plans.execution_samples import (
    SampleFormatError,
    execution_samples_frame,
    new_samples,
    q_error,
    worst_q_error,
)
from jobs.query.identity import fingerprint_text
from jobs.schemas.collected import EXECUTION_SAMPLES


def node(
    kind: str, est: Any, act: Any, loops: Any = 1, children: list[Any] | None = None, **extra: Any
) -> Any:
    out = {"Node Type": kind, "Plan Rows": est, "Actual Rows": act, "Actual Loops": loops, **extra}
    if children:
        out["Plans"] = children
    return out


def line(
    plan: dict[str, Any],
    *,
    line_num: int,
    session: str = "6928a1b3.1a2b",
    text: str = "SELECT * FROM t WHERE a = 1",
    duration: float = 1.5,
    query_id: int | None = 42,
    timestamp: str = "2026-12-01 10:00:00.123 UTC",
) -> bytes:
    document = {"Query Text": text, "Plan": plan}
    record: dict[str, Any] = {
        "timestamp": timestamp,
        "user": "postgres",
        "dbname": "app",
        "pid": 4242,
        "session_id": session,
        "line_num": line_num,
        "error_severity": "LOG",
        "message": f"duration: {duration} ms  plan:\n{json.dumps(document)}",
    }
    if query_id is not None:
        record["query_id"] = query_id
    return json.dumps(record).encode() + b"\n"


SCAN = node("Seq Scan", 10, 1000, **{"Relation Name": "t", "Total Cost": 35.5})


def test_q_error_is_symmetric_and_floored_at_one_row() -> None:
    assert q_error(10, 1000) == q_error(1000, 10) == 100.0
    assert q_error(0, 0) == 1.0, "0 estimated, 0 actual: both floored at 1 → a perfect estimate"
    assert q_error(0.2, 5) == 5.0


def test_worst_node_wins_and_never_executed_nodes_do_not_count() -> None:
    root = node(
        "Hash Join",
        100,
        100,
        children=[
            node("Seq Scan", 50, 2000, **{"Relation Name": "orders"}),  # q = 40
            node(
                "Hash",
                900,
                0,
                loops=0,
                children=[node("Seq Scan", 900, 0, loops=0, **{"Relation Name": "x"})],
            ),
            node("Index Scan", 1, 30, loops=5, **{"Relation Name": "items", "Index Name": "items_pkey"}),
        ],
    )
    q, label = worst_q_error(root)
    assert q == 40.0 and label == "Seq Scan on orders"
    never = node("Seq Scan", 5000, 0, loops=0, **{"Relation Name": "x"})
    assert worst_q_error(node("Result", 1, 1, children=[never])) == (1.0, "Result")
    assert worst_q_error({"Node Type": "Seq Scan", "Plan Rows": 5}) == (None, None), "no ANALYZE: null"


def test_row_of_a_record_carries_every_metric_and_the_record_key(tmp_path: Path) -> None:
    result = IngestResult("i")
    samples: list[dict[str, Any]] = []
    parse_jsonlog_lines([line(SCAN, line_num=7).rstrip()], "postgresql.json", result, samples=samples)
    (row,) = samples
    fingerprint = fingerprint_text("SELECT * FROM t WHERE a = $1")[0]
    assert row["fingerprint"] == fingerprint, "the logged text's literals do not change the fingerprint"
    assert row["query_hash"] == query_hash(fingerprint) and len(row["query_hash"]) == 64
    assert (row["session_id"], row["line_num"], row["queryid"], row["dbname"]) == (
        "6928a1b3.1a2b",
        7,
        42,
        "app",
    )
    assert (row["latency_ms"], row["total_cost"], row["cardinality"]) == (1.5, 35.5, 100.0)
    assert row["cardinality_node"] == "Seq Scan on t" and row["relations"] == ["t"]
    assert row["log_file"] == "postgresql.json" and result.sample_records == 1
    frame = execution_samples_frame(samples)
    assert frame.schema == EXECUTION_SAMPLES.polars_schema


def test_without_text_the_queryid_identifies_and_without_both_the_record_is_skipped() -> None:
    result = IngestResult("i")
    samples: list[dict[str, Any]] = []
    parse_jsonlog_lines([line(SCAN, line_num=1, text="")], "f.json", result, samples=samples)
    assert samples[0]["fingerprint"] == "qid:42"
    parse_jsonlog_lines([line(SCAN, line_num=2, text="", query_id=None)], "f.json", result, samples=samples)
    assert len(samples) == 1 and result.sample_errors == 1 and "f.json: line 1" in result.errors[0]


@pytest.mark.parametrize(
    "bad",
    [
        node("Seq Scan", "ten", 5),
        node("Seq Scan", 5, True),
        node("Seq Scan", 5, float("nan")),
        node("Seq Scan", -1, 5),
        node("Seq Scan", 5, 5, loops="1"),
    ],
)
def test_a_non_numeric_row_count_skips_the_sample_and_names_the_file(bad: dict[str, Any]) -> None:
    with pytest.raises(SampleFormatError):
        worst_q_error(bad)
    result = IngestResult("i")
    samples: list[dict[str, Any]] = []
    lines = [line(SCAN, line_num=1), line(bad, line_num=2), line(SCAN, line_num=3)]
    parse_jsonlog_lines(lines, "pg.json", result, samples=samples)
    assert [s["line_num"] for s in samples] == [1, 3], "the rows before and after are kept"
    assert result.sample_errors == 1 and result.errors[0].startswith("pg.json: line 2")


def test_hostile_lines_never_stop_the_read() -> None:
    opening = '{"Node Type": "Result", "Plan Rows": 1, "Actual Rows": 1, "Actual Loops": 1, "Plans": ['
    depth = 5000  # deeper than Python's recursion limit
    deep_plan = opening * depth + json.dumps(SCAN) + "]}" * depth
    deep_message = f'duration: 1 ms  plan:\n{{"Query Text": "SELECT 1", "Plan": {deep_plan}}}'
    deep_line = json.dumps(
        {"timestamp": "2026-12-01 10:00:00.1 UTC", "session_id": "s", "line_num": 3, "message": "@"}
    ).replace('"@"', json.dumps(deep_message))
    hostile = [
        b'{"message": "duration: 1 ms  plan:\\n{not json',
        b'["duration: 1 ms  plan:\\n"]',
        line(SCAN, line_num=2, duration="fast"),  # type: ignore[arg-type]
        deep_line.encode(),
        line(SCAN, line_num=4, timestamp="yesterday"),
        json.dumps(
            {
                "message": "duration: 1 ms  plan:\n" + json.dumps({"Plan": SCAN}),
                "timestamp": "2026-12-01 10:00:00.1 UTC",
            }
        ).encode(),
    ]
    result = IngestResult("i")
    samples: list[dict[str, Any]] = []
    parse_jsonlog_lines(
        [line(SCAN, line_num=1), *hostile, line(SCAN, line_num=9)], "h.json", result, samples=samples
    )
    assert [s["line_num"] for s in samples] == [1, 9]
    assert result.error_count == len(hostile) and all(e.startswith("h.json: line") for e in result.errors)


def test_radar_own_statements_and_explain_give_no_sample() -> None:
    result = IngestResult("i")
    samples: list[dict[str, Any]] = []
    own = line(SCAN, line_num=1, text="SELECT /* pg-regression-radar */ 1")
    explain = line(SCAN, line_num=2, text="EXPLAIN ANALYZE SELECT 1")
    parse_jsonlog_lines([own, explain], "f.json", result, samples=samples)
    assert not samples and result.own_records == 1 and result.explain_records == 1


def test_new_samples_drops_stored_keys() -> None:
    rows = [
        {"session_id": "a", "line_num": 1, "latency_ms": 1.0},
        {"session_id": "a", "line_num": 2, "latency_ms": 2.0},
        {"session_id": "a", "line_num": 2, "latency_ms": 9.0},
    ]
    frame = execution_samples_frame(rows)
    assert frame["latency_ms"].to_list() == [1.0, 2.0], "one row per key, the first read"
    stored = pl.DataFrame({"session_id": ["a"], "line_num": [1]})
    assert new_samples(frame, stored)["line_num"].to_list() == [2]


def write_log(folder: Path, lines: list[bytes], name: str = "postgresql.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with open(path, "ab") as handle:
        handle.write(b"".join(lines))
    return path


def test_rereading_after_a_crash_adds_no_duplicate_sample(tmp_path: Path) -> None:
    logs, lake = tmp_path / "log", tmp_path / "lake"
    write_log(logs, [line(SCAN, line_num=n) for n in range(1, 6)])
    first = ingest_auto_explain_logs(logs, "i", lake)
    assert first.sample_rows_written == 5 and first.duplicate_samples == 0
    state_path(lake, "i").unlink()  # a crash after the lake write, before the offsets file
    write_log(logs, [line(SCAN, line_num=n) for n in range(6, 8)])
    again = ingest_auto_explain_logs(logs, "i", lake)
    assert again.sample_records == 7 and again.duplicate_samples == 5 and again.sample_rows_written == 2
    samples = scan_table(lake, "execution_samples").collect()
    assert samples.height == 7 and samples.select("session_id", "line_num").is_unique().all()
    assert samples["instance"].unique().to_list() == ["i"] and samples["date"].unique().to_list() == [
        "2026-12-01"
    ]
    quiet = ingest_auto_explain_logs(logs, "i", lake)
    assert quiet.sample_records == 0 and scan_table(lake, "execution_samples").collect().height == 7


def test_every_execution_is_a_sample_while_plans_keep_one_row_per_shape(tmp_path: Path) -> None:
    logs, lake = tmp_path / "log", tmp_path / "lake"
    write_log(logs, [line(SCAN, line_num=n, duration=float(n)) for n in range(1, 11)])
    result = ingest_auto_explain_logs(logs, "i", lake)
    assert result.sample_rows_written == 10 and result.snapshot_rows_written == 1
    latencies = sorted(scan_table(lake, "execution_samples").collect()["latency_ms"].to_list())
    assert latencies == [float(n) for n in range(1, 11)]
    off = tmp_path / "lake-off"
    shutil.copytree(logs, tmp_path / "log2")
    ingest_auto_explain_logs(tmp_path / "log2", "i", off, AutoExplainConfig(execution_samples=False))
    assert scan_table(off, "execution_samples").collect().height == 0


def test_sampler_settings_are_the_designed_ones_and_validated() -> None:
    settings = AutoExplainSamplerConfig().server_settings()
    assert settings == {
        "auto_explain.sample_rate": "0.1",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_timing": "off",
        "auto_explain.log_buffers": "off",
        "auto_explain.log_format": "json",
    }
    for bad in ({"sample_rate": 0}, {"sample_rate": 1.5}, {"log_format": "text"}):
        with pytest.raises(ValueError, match="sampler"):
            AutoExplainSamplerConfig(**bad)  # type: ignore[arg-type]
