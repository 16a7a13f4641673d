"""Gate scenario files: the SQL form, TOML workloads, the Python form and the built-in suite."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from psycopg.types.numeric import Int4

from jobs.gate.config import GateConfig
from jobs.gate.scenario import (
    BUILTIN_FILE,
    BUILTIN_SCENARIOS,
    PythonScenario,
    Scenario,
    ScenarioError,
    builtin_suite,
    classify,
    load_scenarios,
    parse_scenario_sql,
    scenarios_from_workload,
)
from jobs.gate.workload import ParamGenerator, parse_workload
from jobs.query.texts import is_marked_where_kept

EXAMPLE = """\
-- a scenario file
-- @shared
CREATE TABLE IF NOT EXISTS gate_orders (id int PRIMARY KEY, customer_id int, note text);
INSERT INTO gate_orders SELECT g, g % 100, 'a;b' FROM generate_series(1, 10) g
    WHERE NOT EXISTS (SELECT FROM gate_orders);

-- @scenario orders_by_customer
-- @option params = [{ int_range = [1, 20000] }, { choice = ["x", "y"] }]
-- @option prepared = true
-- @option plan_cache_mode = "force_generic_plan"
-- @option settings = { work_mem = "64kB", jit = "off", geqo_threshold = 12, pg_stat_statements.track = "1" }
-- @option repeat = 3
-- @option weight = 2.5
-- @init
ANALYZE gate_orders;
-- @before
UPDATE gate_orders SET note = $2 WHERE id = $1;
-- @benchmark
BEGIN;
-- @A
SELECT count(*) FROM gate_orders WHERE customer_id = $1 AND note <> ';';  -- a comment; with a ';'
SELECT $$ -- @B is not a marker here $$,
       2;
-- @B
COMMIT;

-- @scenario plain
-- @benchmark
VALUES (1)
"""


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_sql(text, source="s.sql")
    return str(caught.value)


def test_example_parses_with_lines_markers_and_options() -> None:
    suite = parse_scenario_sql(EXAMPLE, source="ex.sql")
    assert suite.source == "ex.sql" and suite.names == ("orders_by_customer", "plain")
    assert suite.shared[0].startswith("CREATE TABLE") and suite.shared[1].endswith("FROM gate_orders)")
    assert len(suite.shared) == 2  # the ';' inside the string is no separator
    first, plain = suite.scenarios
    assert first.line == 7 and first.source == "ex.sql"
    assert first.init == ("ANALYZE gate_orders",)
    assert first.before == ("UPDATE gate_orders SET note = $2 WHERE id = $1",)
    assert [(s.line, s.measured) for s in first.benchmark] == [
        (19, False),
        (21, True),
        (22, True),
        (25, False),
    ]
    assert first.benchmark[1].sql == "SELECT count(*) FROM gate_orders WHERE customer_id = $1 AND note <> ';'"
    assert "-- @B is not a marker here" in first.benchmark[2].sql
    assert first.prepared is True and first.plan_cache_mode == "force_generic_plan"
    assert first.settings == (
        ("work_mem", "64kB"),
        ("jit", "off"),
        ("geqo_threshold", "12"),
        ("pg_stat_statements.track", "1"),
    )
    assert first.repeat == 3 and first.weight == 2.5
    assert first.params == (ParamGenerator("int_range", (1, 20000)), ParamGenerator("choice", ("x", "y")))
    drawn = first.draw(random.Random(5))
    assert isinstance(drawn[0], Int4) and drawn[1] in ("x", "y") and drawn == first.draw(random.Random(5))
    assert [s.placeholder_count for s in first.benchmark] == [0, 1, 0, 0]
    # no markers: every benchmark statement is measured; a statement may end at the file's end without ';'
    assert plain.benchmark[0].measured and plain.benchmark[0].sql == "VALUES (1)"
    assert plain.benchmark[0].line == 29
    assert plain.repeat == 1 and plain.weight == 1.0 and not plain.prepared and plain.settings == ()


def test_statement_lines_are_right_after_blank_lines_comments_and_multibyte_text() -> None:
    text = "-- @scenario s\n-- @benchmark\n\n/* é€ */ SELECT 'ü'; \n\n\n  -- x\n  SELECT\n 2;SELECT 3\n"
    lines = [s.line for s in parse_scenario_sql(text).scenarios[0].benchmark]
    assert lines == [4, 8, 9]


@pytest.mark.parametrize(
    ("sql", "explainable", "returns_rows"),
    [
        ("SELECT 1", True, True),
        ("VALUES (1)", True, True),
        ("TABLE t", True, True),
        ("WITH x AS (SELECT 1) SELECT * FROM x", True, True),
        ("SELECT 1 INTO t2", False, False),
        ("INSERT INTO t VALUES (1)", True, False),
        ("INSERT INTO t VALUES (1) RETURNING *", True, True),
        ("UPDATE t SET a = 1 RETURNING a", True, True),
        ("DELETE FROM t", True, False),
        ("MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE", True, False),
        ("MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE RETURNING t.a", True, True),
        ("BEGIN", False, False),
        ("TRUNCATE t", False, False),
        ("SHOW work_mem", False, False),
        ("CREATE TABLE t (a int)", False, False),
    ],
)
def test_statements_are_classified_from_the_parse_tree(
    sql: str, explainable: bool, returns_rows: bool
) -> None:
    assert classify(sql) == (explainable, returns_rows)


def test_cursor_allowed_only_for_plain_queries() -> None:
    text = (
        "-- @scenario s\n-- @benchmark\nSELECT 1;\nINSERT INTO t VALUES (1) RETURNING a;\n"
        "WITH d AS (DELETE FROM t RETURNING a) SELECT * FROM d;\nBEGIN;\n"
    )
    statements = parse_scenario_sql(text).scenarios[0].benchmark
    assert [s.cursor_allowed for s in statements] == [True, False, False, False]
    assert [s.returns_rows for s in statements] == [True, True, True, False]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "-- @scenario s\n-- @benchmrk\nSELECT 1;\n",
            r"s\.sql:2: unknown directive '@benchmrk' .*did you mean 'benchmark'",
        ),
        (
            "-- @scenario s\n-- @option repaet = 3\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': unknown option 'repaet' .*did you mean 'repeat'",
        ),
        (
            "-- @scenario s\n-- @benchmark\n-- @A\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': @A without a following @B",
        ),
        (
            "-- @scenario s\n-- @benchmark\n-- @A\nSELECT 1;\n-- @scenario t\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': @A without a following @B",
        ),
        (
            "-- @scenario s\n-- @benchmark\n-- @A\nSELECT 1;\n-- @before\n",
            r"s\.sql:3: scenario 's': @A without a following @B",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @B\nSELECT 2;\n-- @A\n",
            r"s\.sql:4: scenario 's': @B before @A",
        ),
        (
            "-- @scenario s\n-- @init\n-- @A\nSELECT 1;\n-- @B\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': @A is a marker of the @benchmark section only",
        ),
        ("-- @A\nSELECT 1;\n", r"s\.sql:1: @A outside a @scenario"),
        (
            "-- @scenario s\n-- @benchmark\n-- @A\nSELECT 1;\n-- @B\n-- @A\n",
            r"s\.sql:6: scenario 's': a second @A \(the first is at line 3\)",
        ),
        (
            "-- @scenario s\n-- @benchmark\nBEGIN;\n-- @A\n-- @B\nCOMMIT;\n",
            r"s\.sql:4: scenario 's': the benchmark has no measured statement",
        ),
        (
            "-- @scenario s\n-- @benchmark\n-- only a comment\n",
            r"s\.sql:2: scenario 's': the benchmark has no measured statement",
        ),
        ("-- @scenario s\n-- @init\nSELECT 1;\n", r"s\.sql:1: scenario 's': no @benchmark section"),
        (
            "-- @scenario s\n-- @option params = [{ int_range = [1, 9] }]\n-- @benchmark\nSELECT $1, $2;\n",
            r"s\.sql:4: scenario 's': line 4: @benchmark statement uses \$2; allowed placeholders: \$1..\$1",
        ),
        (
            "-- @scenario s\n-- @before\nSELECT $1;\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': line 3: @before statement uses \$1; allowed placeholders: none",
        ),
        (
            "-- @scenario s\n-- @init\nSELECT $1;\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': .*@init statement uses \$1; allowed placeholders: none \(@init runs",
        ),
        (
            "-- @shared\nSELECT $1;\n-- @scenario s\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: .*@shared statement uses \$1",
        ),
        (
            "-- @scenario s\n-- @option params = [{ choice = [1] }, { choice = [1] }]\n"
            "-- @benchmark\nSELECT $1;",
            r"s\.sql:2: scenario 's': params define \$2 but no @before or @benchmark statement uses it",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @scenario s\n-- @benchmark\nSELECT 2;\n",
            r"s\.sql:4: scenario 's': duplicate name \(first defined at line 1\)",
        ),
        (
            '-- @scenario s\n-- @option plan_cache_mode = "generic"\n-- @benchmark\nSELECT 1;\n',
            r"s\.sql:2: scenario 's': option 'plan_cache_mode' must be one of "
            r"auto, force_generic_plan, force_custom_plan",
        ),
        (
            "-- @scenario s\n-- @option repeat = 0\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': option 'repeat' must be an integer >= 1",
        ),
        (
            "-- @scenario s\n-- @option repeat = 2.5\n-- @benchmark\nSELECT 1;\n",
            r"option 'repeat' must be an integer >= 1",
        ),
        (
            "-- @scenario s\n-- @option weight = 0\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': option 'weight' must be a number > 0",
        ),
        (
            "-- @scenario s\n-- @option weight = true\n-- @benchmark\nSELECT 1;\n",
            r"option 'weight' must be a number > 0",
        ),
        (
            "-- @scenario s\n-- @option prepared = 1\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': option 'prepared' must be true or false",
        ),
        (
            '-- @scenario s\n-- @option settings = "work_mem=1MB"\n-- @benchmark\nSELECT 1;\n',
            r"s\.sql:2: scenario 's': option 'settings' must be a table",
        ),
        (
            '-- @scenario s\n-- @option settings = { Work_Mem = "1MB" }\n-- @benchmark\nSELECT 1;\n',
            r"setting name 'Work_Mem' must match \[a-z_\.\]\+",
        ),
        (
            "-- @scenario s\n-- @option settings = { jit = false }\n-- @benchmark\nSELECT 1;\n",
            r"setting 'jit' must be a string or a number.*'on' or 'off'",
        ),
        (
            "-- @scenario s\n-- @option settings = { work_mem = [1] }\n-- @benchmark\nSELECT 1;\n",
            r"setting 'work_mem' must be a string or a number",
        ),
        (
            '-- @scenario s\n-- @option settings = { plan_cache_mode = "auto" }\n-- @benchmark\nSELECT 1;\n',
            r"set plan_cache_mode with its own option",
        ),
        (
            "-- @scenario s\n-- @option params = [{ int_rang = [1, 2] }]\n-- @benchmark\nSELECT $1;\n",
            r"s\.sql:2: scenario 's': params\[0\] \(\$1\): unknown generator 'int_rang'",
        ),
        (
            "-- @scenario s\n-- @option params = { int_range = [1, 2] }\n-- @benchmark\nSELECT $1;\n",
            r"s\.sql:2: scenario 's': option 'params' must be a list",
        ),
        (
            "-- @scenario s\n-- @option repeat = \n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': option 'repeat': the value is not TOML",
        ),
        (
            "-- @scenario s\n-- @option repeat\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': @option needs KEY = VALUE",
        ),
        (
            "-- @scenario s\n-- @option repeat = 2\n-- @option repeat = 3\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:3: scenario 's': option 'repeat' given twice \(first at line 2\)",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @option repeat = 2\n",
            r"s\.sql:4: scenario 's': @option must come before the scenario's first section",
        ),
        ("-- @scenario bad name\n-- @benchmark\nSELECT 1;\n", r"s\.sql:1: @scenario needs a name of 1-64"),
        ("-- @scenario\n-- @benchmark\nSELECT 1;\n", r"s\.sql:1: @scenario needs a name"),
        (
            "-- @scenario s\n-- @benchmark now\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': @benchmark takes no argument",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @benchmark\nSELECT 2;\n",
            r"s\.sql:4: scenario 's': a second @benchmark section \(the first is at line 2\)",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @shared\nSELECT 2;\n",
            r"s\.sql:4: .*@shared is file level",
        ),
        (
            "-- @shared\nSELECT 1;\n-- @shared\n-- @scenario s\n-- @benchmark\nSELECT 2;\n",
            r"s\.sql:3: a second @shared \(the first is at line 1\)",
        ),
        (
            "SELECT 0;\n-- @scenario s\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:1: SQL outside a section \(before @shared or @scenario\)",
        ),
        (
            "-- @scenario s\nSELECT 0;\n-- @benchmark\nSELECT 1;\n",
            r"s\.sql:2: scenario 's': SQL outside a section",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1;\nSELEC 2;\n",
            r"s\.sql:4: scenario 's': statement does not parse: syntax error at or near \"SELEC\"",
        ),
        (
            "-- @scenario s\n-- @benchmark\nSELECT 1; -- @A\n",
            r"s\.sql:3: directive '-- @A' must be alone on its line",
        ),
        ("-- @scenario s\n-- @benchmark\nSELECT 'unterminated\n", r"s\.sql:3: the file does not scan as SQL"),
        ("-- just a comment\n", r"s\.sql: no @scenario in the file"),
    ],
)
def test_every_error_names_the_file_line_and_scenario(text: str, expected: str) -> None:
    assert re.search(expected, error(text)), error(text)


def test_scenario_without_params_takes_none_and_names_are_checked() -> None:
    suite = parse_scenario_sql("-- @scenario a.b-c_1\n-- @benchmark\nSELECT 1;\n")
    assert suite.scenarios[0].name == "a.b-c_1" and suite.scenarios[0].draw(random.Random(1)) == ()
    assert "1-64" in error(f"-- @scenario {'x' * 65}\n-- @benchmark\nSELECT 1;\n")


WORKLOAD = """\
[[queries]]
name = "heavy"
sql = "SELECT count(*) FROM t WHERE a = $1"
weight = 4
params = [{ int_range = [1, 10] }]

[[queries]]
name = "light"
sql = "SELECT 1"
weight = 1
"""


def test_toml_workload_becomes_one_measured_statement_per_query() -> None:
    suite = scenarios_from_workload(parse_workload(WORKLOAD, source="w.toml"), calls_per_measurement=20)
    heavy, light = suite.scenarios
    assert suite.source == "w.toml" and suite.shared == ()
    assert (heavy.name, heavy.repeat, heavy.weight, heavy.line, heavy.source) == (
        "heavy",
        20,
        4.0,
        1,
        "w.toml",
    )
    assert (light.repeat, light.weight, light.line) == (5, 1.0, 7)
    (statement,) = heavy.benchmark
    assert statement.measured and statement.explainable and statement.returns_rows and statement.line == 1
    assert statement.sql == "SELECT count(*) FROM t WHERE a = $1" and heavy.params[0].kind == "int_range"
    tiny = scenarios_from_workload(parse_workload(WORKLOAD), calls_per_measurement=2)
    assert [s.repeat for s in tiny.scenarios] == [2, 1]  # every query at least once
    with pytest.raises(ScenarioError, match="calls_per_measurement must be >= 1"):
        scenarios_from_workload(parse_workload(WORKLOAD), calls_per_measurement=0)


def test_load_scenarios_by_file_type(tmp_path: Path) -> None:
    toml = tmp_path / "w.toml"
    toml.write_text(WORKLOAD)
    suite = load_scenarios(toml)
    assert suite.scenarios[0].repeat == GateConfig().calls_per_round and suite.source == str(toml)
    sql = tmp_path / "s.sql"
    sql.write_text(EXAMPLE)
    assert load_scenarios(sql).names == ("orders_by_customer", "plain")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[[queries]]\nname = "q"\nsql = "SELECT $1"\n')
    with pytest.raises(ScenarioError, match=r"bad\.toml:1: query #1 'q': the sql uses placeholders \$1"):
        load_scenarios(bad_toml)
    with pytest.raises(ScenarioError, match=r"missing\.sql: no such scenario file"):
        load_scenarios(tmp_path / "missing.sql")
    with pytest.raises(ScenarioError, match=r"x\.yaml: unknown scenario file type '\.yaml'"):
        load_scenarios(tmp_path / "x.yaml")
    broken = tmp_path / "broken.sql"
    broken.write_text("-- @scenario s\n-- @benchmark\nSELECT 1;\n-- @A\n")
    with pytest.raises(ScenarioError, match=rf"{re.escape(str(broken))}:4: scenario 's': @A without"):
        load_scenarios(broken)


PYTHON_FORM = '''\
from __future__ import annotations

from dataclasses import dataclass

SHARED = """
CREATE TABLE IF NOT EXISTS py_t (a int);
INSERT INTO py_t VALUES (1);
"""
CALLS = []


class Lookup:
    name = "py_lookup"
    params = [{"int_range": [1, 5]}]
    repeat = 4
    weight = 2
    settings = {"work_mem": "1MB"}

    def init(self, conn):
        CALLS.append(("init", conn))

    def before(self, conn, params):
        CALLS.append(("before", params))

    def benchmark(self, conn, params, mark):
        mark("A")
        CALLS.append(("benchmark", params))
        mark("B")


def only_benchmark(conn, params, mark):
    CALLS.append(("only", params))


@dataclass
class Tiny:
    name: str
    repeat: int = 2

    def benchmark(self, conn, params, mark) -> None:
        CALLS.append(("tiny", params))


SCENARIOS = [Lookup(), {"name": "py_dict", "benchmark": only_benchmark}, Tiny("py_dataclass")]
'''


def test_python_form_is_loaded_from_a_file_and_runs_the_operators_callables(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.py"
    path.write_text(PYTHON_FORM)
    suite = load_scenarios(path)
    assert suite.names == ("py_lookup", "py_dict", "py_dataclass") and suite.source == str(path)
    assert suite.shared == ("CREATE TABLE IF NOT EXISTS py_t (a int)", "INSERT INTO py_t VALUES (1)")
    lookup, plain, tiny = suite.scenarios
    assert tiny.repeat == 2
    assert (lookup.repeat, lookup.weight, lookup.settings) == (4, 2.0, (("work_mem", "1MB"),))
    assert lookup.benchmark == () and lookup.params[0].kind == "int_range"
    runner = lookup.python
    assert isinstance(runner, PythonScenario) and runner.module == str(path)
    marks: list[str] = []
    params = lookup.draw(random.Random(3))
    runner.init("conn")
    runner.before("conn", params)
    runner.benchmark("conn", params, marks.append)
    assert marks == ["A", "B"]
    calls = runner.benchmark.__globals__["CALLS"]
    assert calls == [("init", "conn"), ("before", params), ("benchmark", params)]
    other = plain.python
    assert isinstance(other, PythonScenario)
    assert other.init("conn") is None and other.before("conn", ()) is None  # optional: no-ops
    other.benchmark("conn", (), marks.append)
    assert calls[-1] == ("only", ())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("X = 1\n", r"needs SCENARIOS, a non-empty list"),
        ("SCENARIOS = []\n", r"needs SCENARIOS, a non-empty list"),
        ("x = 1\nraise RuntimeError('boom')\n", r"m\.py:2: the module failed to load: RuntimeError: boom"),
        ("def f(:\n", r"m\.py:1: the module failed to load: SyntaxError"),
        (
            "SCENARIOS = [{'name': 'bad name', 'benchmark': print}]\n",
            r"SCENARIOS\[0\] 'bad name': name must be",
        ),
        ("SCENARIOS = [{'name': 'a'}]\n", r"SCENARIOS\[0\] 'a': benchmark must be a callable"),
        (
            "SCENARIOS = [{'name': 'a', 'benchmark': lambda conn: None}]\n",
            r"SCENARIOS\[0\] 'a': benchmark must accept 3 positional",
        ),
        (
            "SCENARIOS = [{'name': 'a', 'benchmark': lambda c, p, m: None, 'init': lambda: None}]\n",
            r"SCENARIOS\[0\] 'a': init must accept 1 positional",
        ),
        (
            "b = lambda c, p, m: None\n"
            "SCENARIOS = [{'name': 'a', 'benchmark': b}, dict(name='a', benchmark=b)]",
            r"SCENARIOS\[1\] 'a': duplicate name",
        ),
        (
            "SCENARIOS = [{'name': 'a', 'benchmark': lambda c, p, m: None, 'repeat': 0}]\n",
            r"SCENARIOS\[0\] 'a': repeat: option 'repeat' must be an integer >= 1",
        ),
        (
            "SCENARIOS = [{'name': 'a', 'benchmark': lambda c, p, m: None, 'params': [{'x': 1}]}]\n",
            r"SCENARIOS\[0\] 'a': params: params\[0\] \(\$1\): unknown generator 'x'",
        ),
        (
            "SCENARIOS = [{'name': 'a', 'benchmark': lambda c, p, m: None, 'prepared': True}]\n",
            r"prepared apply to SQL statements only",
        ),
        (
            "SHARED = 'SELEC 1'\nSCENARIOS = [{'name': 'a', 'benchmark': lambda c, p, m: None}]\n",
            r"SHARED line 1",
        ),
    ],
)
def test_python_form_errors_name_the_file_and_scenario(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(body)
    with pytest.raises(ScenarioError) as caught:
        load_scenarios(path)
    assert re.search(expected, str(caught.value)), str(caught.value)
    assert str(path) in str(caught.value)


def test_builtin_suite_matches_its_names_and_is_marked() -> None:
    suite = builtin_suite()
    assert suite.names == BUILTIN_SCENARIOS and suite.source == str(BUILTIN_FILE)
    assert BUILTIN_FILE.parent.name == "gate" and BUILTIN_FILE.parent.parent.name == "sql"
    assert len(suite.shared) >= 3
    for text in suite.shared:
        assert is_marked_where_kept(text), text
    for scenario in suite.scenarios:
        assert any(s.measured for s in scenario.benchmark), scenario.name
        for text in (*scenario.init, *scenario.before, *(s.sql for s in scenario.benchmark)):
            assert is_marked_where_kept(text), (scenario.name, text)
    by_name = {s.name: s for s in suite.scenarios}
    assert by_name["point_lookup"].repeat >= 10
    burst = by_name["write_burst"]
    assert burst.before and burst.before[0].upper().startswith("TRUNCATE")
    measured = [s.measured for s in burst.benchmark]
    assert measured[0] is False and measured[-1] is False and any(measured)
    assert burst.benchmark[0].sql.startswith("BEGIN") and burst.benchmark[-1].sql.startswith("COMMIT")
    assert all(s.explainable for s in burst.benchmark if s.measured)


def test_builtin_suite_selects_by_name() -> None:
    assert builtin_suite(["join", "point_lookup", "join"]).names == ("join", "point_lookup")
    assert builtin_suite(["join"]).shared == builtin_suite().shared
    with pytest.raises(
        ScenarioError, match=r"unknown built-in scenario 'point_lookups'.*did you mean 'point_lookup'"
    ):
        builtin_suite(["point_lookups"])
    with pytest.raises(ScenarioError, match="no built-in scenario selected"):
        builtin_suite([])


def test_scenario_defaults() -> None:
    scenario = Scenario(name="x")
    assert (scenario.python, scenario.source, scenario.line, scenario.repeat) == (None, "<memory>", None, 1)
