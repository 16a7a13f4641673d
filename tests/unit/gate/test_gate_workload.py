"""Gate workload files: parsing, typed parameters, and errors that name the file, line and query."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from psycopg.types.numeric import Float8, Int4, Int8

from jobs.gate.workload import WorkloadError, load_workload, parse_workload, placeholder_numbers

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gate_workload.toml"


def one_query(body: str) -> str:
    return f'# header\n\n[[queries]]\nname = "q1"\nsql = "SELECT 1"\n\n[[queries]]\nname = "q2"\n{body}\n'


def test_fixture_parses_with_typed_parameters() -> None:
    workload = load_workload(FIXTURE)
    assert [q.name for q in workload.queries] == [
        "orders_by_customer",
        "customer_by_id",
        "recent_orders_by_status",
    ]
    assert workload.calls_per_round(20) == {
        "orders_by_customer": 20,
        "customer_by_id": 10,
        "recent_orders_by_status": 10,
    }
    rng = random.Random(1)
    status, region = workload.queries[2].draw(rng)
    assert status in {"new", "paid", "shipped"} and isinstance(region, Int4)
    first = [workload.queries[0].draw(random.Random(7)) for _ in range(3)]
    assert first == [workload.queries[0].draw(random.Random(7)) for _ in range(3)]  # seeded


def test_generators_pick_the_sql_type() -> None:
    workload = parse_workload(
        one_query(
            'sql = "SELECT $1, $2, $3, $4"\n'
            "params = [{ int_range = [1, 5000000000] }, { int8_range = [1, 2] },"
            " { float_range = [0.5, 1.5] }, { choice = [1, 2] }]"
        )
    )
    values = workload.queries[1].draw(random.Random(3))
    assert [type(v) for v in values] == [Int8, Int8, Float8, Int4]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('sql = "SELECT 1; DROP TABLE t"', "2 statements in one text"),
        ('sql = "DROP TABLE t"', "DropStmt is not a plain SELECT"),
        ('sql = "SELEC 1"', "does not parse"),
        ('sql = ""', "'sql' must be a non-empty string"),
        ('sql = "SELECT $1"', "uses placeholders $1 but 0 parameter generator"),
        ('sql = "SELECT $2"\nparams = [{ int_range = [1, 2] }]', "need exactly $1..$1"),
        ('sql = "SELECT $1"\nparams = [{ normal = [1, 2] }]', "unknown generator 'normal'"),
        ('sql = "SELECT $1"\nparams = [{ int_range = [5, 1] }]', "int_range needs [low, high] ints"),
        ('sql = "SELECT $1"\nparams = [{ choice = [1, "a"] }]', "choice values must all be"),
        ('sql = "SELECT $1"\nparams = [{ choice = [] }]', "non-empty list"),
        ('sql = "SELECT 1"\nweight = 0', "'weight' must be a positive number"),
        ('sql = "SELECT 1"\nsetup = "CREATE TABLE t ()"', "unknown key(s) setup"),
    ],
)
def test_bad_entries_name_file_line_and_query(body: str, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(one_query(body), source="ci/gate.toml")
    text = str(caught.value)
    assert text.startswith("ci/gate.toml:7: query #2 'q2': "), text
    assert message in text


def test_file_level_errors() -> None:
    with pytest.raises(WorkloadError, match=r"w.toml: invalid TOML: .*line 2"):
        parse_workload('[[queries]]\nname = "unterminated\n', source="w.toml")
    with pytest.raises(WorkloadError, match=r"w.toml: no \[\[queries\]\] entries"):
        parse_workload("", source="w.toml")
    with pytest.raises(
        WorkloadError, match=r"w.toml:5: query #2 'q1': duplicate name \(first defined at w.toml:1\)"
    ):
        parse_workload(
            '[[queries]]\nname = "q1"\nsql = "SELECT 1"\n\n[[queries]]\nname = "q1"\nsql = "SELECT 2"\n',
            "w.toml",
        )
    with pytest.raises(WorkloadError, match="cannot read the workload file"):
        load_workload("/nonexistent/gate.toml")


def test_placeholders_inside_strings_are_not_parameters() -> None:
    assert placeholder_numbers("SELECT '$1', $2 FROM t WHERE a = $1") == [1, 2]
