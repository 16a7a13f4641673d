"""Pure parts of the scenario measurement edge: counter deltas, smaps_rollup parsing, server identity."""

from __future__ import annotations

import pytest
from pglast import split

from jobs.gate.measure import ServerFacts, StatementCounters, _cursor_capable, parse_smaps_rollup
from jobs.query.texts import is_marked_where_kept
from jobs.sqlfiles import load_sql

SMAPS = """\
55d0c8a4e000-7ffd2b5f9000 ---p 00000000 00:00 0                          [rollup]
Rss:               30604 kB
Pss:               21968 kB
Private_Clean:      2564 kB
Private_Dirty:     16832 kB
Anonymous:          4580 kB
KSM:                   0 kB
"""


def test_minus_subtracts_every_counter() -> None:
    later = StatementCounters(12, 300.0, 20.0, 64.0, 9000.0, 1.5, 3, 40.0)
    earlier = StatementCounters(2, 100.0, 5.0, 0.0, 1000.0, 0.5, 1, 10.0)
    assert later.minus(earlier) == StatementCounters(10, 200.0, 15.0, 64.0, 8000.0, 1.0, 2, 30.0)
    assert later.minus(later) == StatementCounters(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0)


def test_smaps_rollup_is_read_in_bytes_without_the_header() -> None:
    parsed = parse_smaps_rollup(SMAPS)
    assert parsed["Anonymous"] == 4580 * 1024
    assert parsed["Private_Dirty"] == 16832 * 1024
    assert parsed["KSM"] == 0
    assert len(parsed) == 6  # the [rollup] header line is no field


def facts(address: str, system_identifier: str | None) -> ServerFacts:
    return ServerFacts(
        "baseline", "PostgreSQL 18.6", 180006, system_identifier, address, (), None, True, True, True
    )


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (("127.0.0.1:5432", "7"), ("127.0.0.1:5432", "7"), True),
        (("127.0.0.1:5432", "7"), ("127.0.0.1:5433", "7"), False),  # a replica: same identifier
        (("127.0.0.1:5432", "7"), ("127.0.0.1:5432", "8"), False),  # rebuilt behind the same address
        (("127.0.0.1:5432", None), ("127.0.0.1:5432", "8"), True),  # identifier refused: the address
    ],
)
def test_same_server(a: tuple[str, str | None], b: tuple[str, str | None], same: bool) -> None:
    assert facts(*a).same_server(facts(*b)) is same


def test_only_plain_selects_get_a_memory_cursor() -> None:
    assert _cursor_capable("SELECT 1")
    assert _cursor_capable("VALUES (1)")
    assert _cursor_capable("WITH x AS (SELECT 1) SELECT * FROM x")
    assert not _cursor_capable("INSERT INTO t VALUES (1) RETURNING *")
    assert not _cursor_capable("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x")


MEASURE_SQL = (
    "gate_begin", "gate_cursor_fraction", "gate_explain", "gate_memory_contexts", "gate_memory_declare",
    "gate_memory_fetch", "gate_parallel_workers", "gate_probe", "gate_rollback", "gate_scenario_statements",
    "gate_server_facts", "gate_server_settings", "gate_set_config", "gate_statements_available",
    "gate_system_identifier",
)  # fmt: skip


@pytest.mark.parametrize("name", MEASURE_SQL)
def test_every_statement_the_session_sends_carries_the_marker(name: str) -> None:
    text = load_sql(name)
    if name in ("gate_explain", "gate_memory_declare"):
        text = text.rstrip() + "\nSELECT 1"  # the statement follows the prefix
    statements = [s for s in split(text) if s.strip()]
    assert statements, name
    for statement in statements:
        assert is_marked_where_kept(statement), (name, statement)
