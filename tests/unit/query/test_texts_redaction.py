"""Query texts and plans without literal values (jobs.query.texts): what may reach the lake."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from jobs.collect.collector import texts_frame
from jobs.plans.auto_explain import auto_explain_row, decode_auto_explain_record
from jobs.plans.shape import plan_root, plan_shape_hash
from jobs.query.identity import fingerprint_text
from jobs.query.texts import (
    RADAR_COMMENT,
    QueryTextModeError,
    is_radar_text,
    redact_literals_fallback,
    redact_plan,
    redact_plan_expression,
    redact_query_parameters,
    storable_query_text,
)

MARKER = re.compile(r"^<(withheld|unparseable) query text: \d+ chars, sha256:[0-9a-f]{12}>")

# (raw text as pg_stat_statements keeps it, the secrets in it, what must survive)
UTILITY_TEXTS = [
    ("ALTER ROLE app PASSWORD 'S3cr3t-Alter-1'", ["S3cr3t-Alter-1"], "ALTER ROLE app PASSWORD $1"),
    ("CREATE ROLE bob LOGIN PASSWORD 'Cr3ate-Pw-2'", ["Cr3ate-Pw-2"], "CREATE ROLE bob LOGIN PASSWORD $1"),
    (
        "CREATE USER MAPPING FOR app SERVER fs OPTIONS (user 'remote_u', password 'Fdw-Pw-3')",
        ["Fdw-Pw-3", "remote_u"],
        "CREATE USER MAPPING FOR app SERVER fs OPTIONS (user $1, password $2)",
    ),
    (
        "ALTER USER MAPPING FOR app SERVER fs OPTIONS (SET password 'Fdw-Pw-4')",
        ["Fdw-Pw-4"],
        "OPTIONS (SET password $1)",
    ),
    (
        "CREATE SERVER fs FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host 'db.internal', password 'Srv-5')",
        ["Srv-5", "db.internal"],
        "OPTIONS (host $1, password $2)",
    ),
    ("SET app.token = 'tok-6f5e4d'", ["tok-6f5e4d"], "SET app.token = $1"),
    ("ALTER SYSTEM SET app.key = 'sys-key-7'", ["sys-key-7"], "ALTER SYSTEM SET app.key = $1"),
    ("COPY customers FROM '/secret/dump-8.csv' WITH (FORMAT csv)", ["dump-8"], "COPY customers FROM $1"),
    ("DO $$BEGIN PERFORM 'carol@example.org'; END$$", ["carol@example.org"], "DO $1"),
    ("COMMENT ON TABLE t IS 'pin 9911'", ["9911"], "COMMENT ON TABLE t IS $1"),
    ("PREPARE p AS SELECT * FROM t WHERE e = 'dave@example.org'", ["dave@example.org"], "PREPARE p AS"),
    ("SELECT 1; ALTER ROLE x PASSWORD 'multi-10'", ["multi-10"], "ALTER ROLE x PASSWORD $2"),
    (
        "/* pg-regression-radar */ SELECT * FROM t WHERE email = 'erin@example.org' -- token 'tk-11'",
        ["erin@example.org", "tk-11"],
        "/* pg-regression-radar */ SELECT * FROM t WHERE email = $1",
    ),
    ("SELECT 1 /* user=bob password=Cmt-12 */", ["Cmt-12"], "SELECT $1"),
]


@pytest.mark.parametrize(("raw", "secrets", "kept"), UTILITY_TEXTS)
def test_every_literal_of_every_statement_becomes_a_placeholder(
    raw: str, secrets: list[str], kept: str
) -> None:
    stored = storable_query_text(raw)
    assert stored is not None and kept in stored
    for secret in secrets:
        assert secret not in stored
    assert storable_query_text(stored) == stored, "normalizing twice changes nothing"


def test_the_radar_marker_comment_survives_and_other_comments_lose_their_content() -> None:
    stored = storable_query_text("/* pg-regression-radar */ SELECT 'x' /* card 4111-1111 */")
    assert stored == f"{RADAR_COMMENT} SELECT $1 /* comment */"
    assert is_radar_text(stored)


def test_a_text_that_does_not_parse_is_a_marker_never_raw() -> None:
    raw = "ALTER ROLE app PASSWORD 'S3cr3t-unterminated"
    stored = storable_query_text(raw)
    assert stored is not None and MARKER.match(stored) and "unparseable" in stored
    assert f"{len(raw)} chars" in stored and "S3cr3t" not in stored
    # An unquoted secret parses nowhere either: a marker, not the text.
    assert MARKER.match(storable_query_text("CREATE ROLE x PASSWORD Unquoted-Pw") or "")
    # The hash is of the text without literals: two texts differing only in a secret share it.
    other = storable_query_text("ALTER ROLE app PASSWORD 'another-guess-0")
    assert stored.split("sha256:")[1] == (other or "").split("sha256:")[1]


def test_pg_normalized_texts_that_do_not_parse_as_is_are_kept() -> None:
    # pg_stat_statements writes `interval $1`, which libpg_query refuses: parsed with $n as constants.
    raw = "SELECT * FROM events WHERE at > now() - interval $1 AND kind = $2 AND note::varchar(10) = $3"
    assert storable_query_text(raw) == raw


def test_withheld_stores_only_the_marker() -> None:
    stored = storable_query_text("SELECT * FROM customers WHERE id = $1", "withheld")
    assert stored is not None and MARKER.match(stored) and "customers" not in stored
    radar = storable_query_text(f"{RADAR_COMMENT} SELECT pg_stat_statements_reset()", "withheld")
    assert radar is not None and is_radar_text(radar) and "reset" not in radar
    with pytest.raises(QueryTextModeError, match="normalized, withheld"):
        storable_query_text("SELECT 1", "raw")


def test_texts_frame_flags_from_the_raw_text_then_stores_the_normalized_one() -> None:
    rows = [
        {"queryid": 1, "dbid": 5, "userid": 10, "query": "EXPLAIN SELECT * FROM t WHERE e = 'f@x.org'"},
        {"queryid": 2, "dbid": 5, "userid": 10, "query": "ALTER ROLE app PASSWORD 'Frame-Pw-1'"},
    ]
    frame = texts_frame(rows, datetime.now(UTC))
    assert frame["is_explain"].to_list() == [True, False]
    assert frame["query"].to_list() == ["EXPLAIN SELECT * FROM t WHERE e = $1", "ALTER ROLE app PASSWORD $1"]
    withheld = texts_frame(rows, datetime.now(UTC), "withheld")
    assert withheld["is_explain"].to_list() == [True, False], "flags come from the raw text, not the marker"
    assert all(MARKER.match(q) for q in withheld["query"])


def test_fingerprints_of_normalized_texts_do_not_move() -> None:
    raw = "SELECT * FROM t WHERE a = $1 AND b IN ($2, $3)"
    assert fingerprint_text(storable_query_text(raw) or "") == fingerprint_text(raw)


# ---------------------------------------------------------------------------------------------------------
# Plans

PLAN_WITH_LITERALS = {
    "Query Text": "SELECT * FROM customers c JOIN orders o ON o.cid = c.id WHERE c.email = 'gina@example.org'"
    " AND o.total > 31337.5",
    "Query Parameters": "$1 = 'tok-plan-77', $2 = '42'",
    "Plan": {
        "Node Type": "Hash Join",
        "Join Type": "Inner",
        "Hash Cond": "(o.cid = c.id)",
        "Join Filter": "(o.note <> 'join-lit-1'::text)",
        "Output": ["c.id", "'out-lit-2'::text", "(o.total * 1.0725)"],
        "One-Time Filter": "($1 = 'one-time-lit-3'::text)",
        "Plans": [
            {
                "Node Type": "Bitmap Heap Scan",
                "Parent Relationship": "Outer",
                "Relation Name": "orders",
                "Alias": "o",
                "Recheck Cond": "(o.code = 'recheck-lit-4'::text)",
                "Filter": "(o.total > 31337.5)",
                "Plans": [
                    {
                        "Node Type": "Bitmap Index Scan",
                        "Parent Relationship": "Outer",
                        "Index Name": "orders_code_idx",
                        "Index Cond": "(o.code = 'recheck-lit-4'::text)",
                    }
                ],
            },
            {
                "Node Type": "Hash",
                "Parent Relationship": "Inner",
                "Plans": [
                    {
                        "Node Type": "Seq Scan",
                        "Parent Relationship": "Outer",
                        "Relation Name": "customers",
                        "Alias": "c",
                        "Filter": "((c.email)::text = 'gina@example.org'::text) AND (NOT (hashed SubPlan 1))",
                        "Subplan Name": "SubPlan 1",
                    }
                ],
            },
        ],
    },
}
PLAN_LITERALS = [
    "gina@example.org",
    "tok-plan-77",
    "join-lit-1",
    "out-lit-2",
    "one-time-lit-3",
    "recheck-lit-4",
    "31337",
    "1.0725",
]


def test_plan_json_keeps_no_literal_and_its_shape_hash() -> None:
    original = copy.deepcopy(PLAN_WITH_LITERALS)
    redacted = redact_plan(PLAN_WITH_LITERALS)
    assert original == PLAN_WITH_LITERALS, "the input is not modified"
    text = json.dumps(redacted)
    for literal in PLAN_LITERALS:
        assert literal not in text
    assert "Query Text" not in redacted and "Query Parameters" not in redacted
    root = plan_root(redacted)
    assert plan_shape_hash(root) == plan_shape_hash(plan_root(original))
    assert root["Plans"][0]["Recheck Cond"] == "(o.code = $1::text)"
    assert root["Output"] == ["c.id", "$1::text", "(o.total * $1)"]
    scan = root["Plans"][1]["Plans"][0]
    assert scan["Subplan Name"] == "SubPlan 1" and scan["Relation Name"] == "customers"
    assert "hashed SubPlan 1" in scan["Filter"], "the fallback keeps plan references"
    withheld = redact_plan(PLAN_WITH_LITERALS, "withheld")
    assert plan_root(withheld)["Hash Cond"] == "<withheld>"
    assert plan_shape_hash(plan_root(withheld)) == plan_shape_hash(plan_root(original))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("((email)::text = 'a@b.org'::text)", "((email)::text = $1::text)"),
        ("(id = ANY ('{1,2,3}'::integer[]))", "(id = ANY ($1::integer[]))"),
        ("(x = $1)", "(x = $1)"),
        ("t.created DESC", "t.created DESC"),
        ("(x = E'it\\'s' AND y = $$dollar-lit$$ AND z = 0x1F)", "(x = $1 AND y = $2 AND z = $3)"),
    ],
)
def test_plan_expressions(expression: str, expected: str) -> None:
    assert redact_plan_expression(expression) == expected


def test_the_fallback_redacts_strings_numbers_and_cuts_unterminated_ones() -> None:
    assert redact_literals_fallback("PARTIAL f('x''y', 42, col2)") == "PARTIAL f($1, $2, col2)"
    assert redact_literals_fallback("(a = 'never closed and secret") == "(a = $1"
    assert redact_literals_fallback('("Col 1" = 7)') == '("Col 1" = $1)'


def test_query_parameters_keep_names_only() -> None:
    params = "$1 = 'h@example.org', $2 = 'x, $3 = y', $3 = NULL"
    assert redact_query_parameters(params) == "$1 = ?, $2 = ?, $3 = ?"
    assert redact_query_parameters(params, "withheld") is None
    assert redact_query_parameters(None) is None


def test_an_auto_explain_record_reaches_the_row_without_literals() -> None:
    document = copy.deepcopy(PLAN_WITH_LITERALS)
    record = {
        "timestamp": "2026-11-29 15:16:52.341 UTC",
        "dbname": "app",
        "query_id": 77,
        "message": "duration: 1.5 ms  plan:\n" + json.dumps(document),
    }
    decoded = decode_auto_explain_record(record)
    assert not isinstance(decoded, str) and decoded is not None
    row = auto_explain_row(decoded)
    stored = json.dumps(row, default=str)
    for literal in PLAN_LITERALS:
        assert literal not in stored
    assert row["query_parameters"] == "$1 = ?, $2 = ?"
    assert row["shape_hash"] == plan_shape_hash(plan_root(document))
    assert plan_shape_hash(plan_root(row["plan_json"])) == row["shape_hash"]
    withheld = auto_explain_row(decoded, query_text="withheld")
    assert withheld["query_parameters"] is None and "<withheld>" in withheld["plan_json"]


def test_alert_payloads_never_carry_a_literal_even_from_a_lake_written_before(lake_root: Path) -> None:
    from jobs.alerts.payloads import alert_payloads
    from jobs.alerts.run import read_findings
    from jobs.lake import io as lake
    from jobs.pipeline.detection import run_detection
    from jobs.schemas.collected import QUERY_TEXTS
    from tests.support.lakes import write_step_change_lake

    write_step_change_lake(lake_root)
    (texts_file,) = (lake_root / "query_texts").rglob("*.parquet")
    raw = "select * from orders where customer_id = 4711 and email = 'old.lake@example.org'"
    frame = pl.read_parquet(texts_file, hive_partitioning=False)
    older = frame.with_columns(
        pl.when(pl.col("queryid") == 111).then(pl.lit(raw)).otherwise("query").alias("query")
    )
    lake.write_file(texts_file, QUERY_TEXTS, older)  # as the radar wrote it then: its file, a raw text
    run_detection(lake_root)
    payloads = alert_payloads(read_findings(lake_root), {})
    assert payloads, "the step change is detected"
    for payload in payloads:
        assert "old.lake@example.org" not in payload["query"] and "4711" not in payload["query"]
    assert any(p["query"] == "select * from orders where customer_id = $1 and email = $2" for p in payloads)


def test_plan_redaction_keeps_every_shape_key() -> None:
    """Redaction never touches a key the shape hash reads, so a plan's shape survives redaction."""
    from jobs.plans.shape import SHAPE_KEYS
    from jobs.query.texts import PLAN_IDENTIFIER_KEYS

    assert set(SHAPE_KEYS) <= PLAN_IDENTIFIER_KEYS
