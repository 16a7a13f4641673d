"""`radar sql` and `radar views`: one-line errors, every DuckDB type printable in every format, wide
results readable, and view definitions with no machine's path in them (a real lake, real DuckDB)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from jobs.cli.main import main
from jobs.detect.findings import update_findings
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.schemas.analysed import FINDING_STATES, PERFORMANCE_REGRESSIONS
from tests.support.lakes import write_step_change_lake

TYPES_SQL = (
    "select interval 1 day + interval 90 minute as pause, [1, 2, 3] as ids, {'a': 1, 'b': 'x'} as pair, "
    "map([1], ['one']) as names, '6f1c9a5e-3c1f-4b6e-9d62-0c2b8a4f1e11'::uuid as u, "
    "1.25::decimal(10, 2) as d, "
    "'ab'::blob as raw, 170141183460469231731687303715884105727::hugeint as huge, time '10:11:12' as t, "
    "[interval 2 hour] as pauses"
)
OLD_LAKE_AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_typo_is_one_line_and_exit_code_2(lake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("table", "json"):
        code, out, err = run(
            capsys, "--lake", str(lake_root), "sql", "selec * from query_samples", "--format", fmt
        )
        message = (out + err).strip()
        assert code == 2 and "Traceback" not in message
        assert len(message.splitlines()) == 1, message
        assert message.startswith("error: DuckDB query failed: Parser Error: syntax error at or near")
        assert "LINE 1: selec" in message
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", "select nope from query_samples")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "Binder Error" in out


def test_every_duckdb_type_prints_in_table_csv_and_json(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", TYPES_SQL, "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["pause"] == 86400 + 90 * 60  # durations are seconds (docs/scripting.md)
    assert row["ids"] == [1, 2, 3] and row["pair"] == {"a": 1, "b": "x"} and row["names"] == {"1": "one"}
    assert row["u"] == "6f1c9a5e-3c1f-4b6e-9d62-0c2b8a4f1e11" and row["d"] == 1.25 and row["raw"] == "6162"
    assert row["huge"] == 170141183460469231731687303715884105727 and row["t"] == "10:11:12.000000"
    assert row["pauses"] == [7200.0]
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", TYPES_SQL, "--format", "csv")
    assert code == 0
    (parsed,) = list(csv.DictReader(io.StringIO(out)))
    assert parsed["pause"] == "91800.0" and json.loads(parsed["ids"]) == [1, 2, 3]
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", TYPES_SQL, "--max-width", "0")
    assert code == 0 and "91800" in out and "[1, 2, 3]" in out and "6f1c9a5e" in out


def test_wide_results_cut_cells_and_fold_to_records(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    narrow = "select repeat('x', 200) as long_text, 'a|b' as piped, 1 as n"
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", narrow)
    assert code == 0 and "x" * 39 + "…" in out and "x" * 41 not in out and "a|b" in out
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", narrow, "--max-width", "0")
    assert code == 0 and "x" * 200 in out.replace("\n", "").replace("│", "").replace(" ", "")
    wide = "select " + ", ".join(f"repeat('{c}', 60) as column_{c}" for c in "abcdefgh")
    code, out, _ = run(capsys, "--lake", str(lake_root), "sql", wide)
    assert code == 0 and "─[ row 1 ]" in out
    lines = out.splitlines()
    assert any(line.startswith("column_h │ " + "h" * 39 + "…") for line in lines)
    assert max(len(line) for line in lines) <= 180


def test_view_definitions_hold_no_absolute_path_and_move_with_the_lake(
    lake_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_step_change_lake(lake_root)
    statements = duckdb_views.view_statements(lake_root)
    absolute = str(lake_root.resolve())
    assert not [s for s in statements if absolute in s or "'/" in s]
    code, out, _ = run(capsys, "--lake", str(lake_root), "views")
    assert code == 0 and out.splitlines()[0] == f"SET file_search_path = '{lake_root}';"
    assert out.count(absolute) == 1  # only in the session's search path line
    # A database file holding the views, and the lake, both moved: the views still read the moved lake.
    saved = tmp_path / "views.duckdb"
    duckdb_views.connect(lake_root, str(saved)).close()
    moved = tmp_path / "elsewhere" / "lake"
    shutil.move(str(lake_root), moved)
    with duckdb.connect(str(saved)) as conn:
        definitions = conn.execute("select sql from duckdb_views() where not internal").fetchall()
        assert definitions and not [d for (d,) in definitions if absolute in d or str(moved) in d]
        conn.execute(duckdb_views.search_path_sql(moved))
        assert conn.execute("select count(*) from query_samples").fetchone() == (120,)


def _findings_lake(lake_root: Path) -> list[Path]:
    """Two runs' finding_states files (one finding each), written the way run_detection writes them."""
    paths = []
    for n, (instance, at) in enumerate([("alpha", OLD_LAKE_AT), ("beta", OLD_LAKE_AT + timedelta(hours=1))]):
        found = PERFORMANCE_REGRESSIONS.conform(
            pl.DataFrame(
                {
                    "analysis": ["deploy"],
                    "instance": [instance],
                    "queryid": [7 + n],
                    "queryids": [str(7 + n)],
                    "fingerprint": [f"fp{n}"],
                    "query": ["select 1"],
                    "status": ["detected"],
                    "detected_change_at": [at],
                    "before_mean_ms": [1.0],
                    "after_mean_ms": [10.0],
                    "p_value": [1e-6],
                    "added_load_ms_per_s": [50.0],
                    "kind": ["plan_or_work"],
                }
            )
        )
        changed = update_findings(FINDING_STATES.empty(), found, computed_at=at + timedelta(minutes=5))
        assert changed.height == 1
        paths.append(lake.write_table(lake_root, FINDING_STATES, changed, {"date": "2026-11-29"}, f"run{n}"))
    return paths


def _rewrite_without(path: Path, column: str) -> None:
    """The file as an older radar wrote it: the same rows and envelope metadata, one column fewer."""
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([column]), path, compression="zstd")


def test_views_of_a_lake_written_before_a_column_existed_show_it_as_null(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in _findings_lake(lake_root):
        _rewrite_without(path, "kind")
        assert lake.envelope_problem(path) is None and lake.read_problem(path, FINDING_STATES) is None
        assert lake.read_file_metadata(path)["radar.table"] == "finding_states"
        assert "kind" not in pq.read_schema(path).names
    assert lake.read_table(lake_root, FINDING_STATES)["kind"].to_list() == [None, None]  # polars: nulls

    findings = duckdb_views.query(lake_root, "select * from findings order by instance")
    assert findings["instance"].to_list() == ["alpha", "beta"]
    assert findings["kind"].to_list() == [None, None] and findings.schema["kind"] == pl.String
    assert findings["after_mean_ms"].to_list() == [10.0, 10.0]  # the columns the files have are read

    code, out, err = run(
        capsys,
        "--lake",
        str(lake_root),
        "sql",
        "select instance, kind from findings order by 1",
        "--format",
        "json",
    )
    assert code == 0, out + err
    assert json.loads(out) == [{"instance": "alpha", "kind": None}, {"instance": "beta", "kind": None}]

    statements = duckdb_views.view_statements(lake_root)  # `radar views` prints what works on this lake
    (finding_states,) = [s for s in statements if "VIEW finding_states" in s]
    assert 'CAST(NULL AS VARCHAR) AS "kind"' in finding_states
    conn = duckdb.connect()
    conn.execute(duckdb_views.search_path_sql(lake_root))
    for statement in statements:
        conn.execute(statement)
    assert conn.execute("select count(*), count(kind) from findings").fetchone() == (2, 0)


# ---------------------------------------------------------------------------------------------------------
# `radar sql` defines only the views its query needs (issue 29, item 4): the same result or message as on a
# connection with every view

SAME_AS_EVERY_VIEW = [
    "select 1",
    "select count(*) from query_samples",
    "select * from FINDINGS order by all",
    'select count(*) from main."Lake_Summary"',
    "select * from memory.main.statements_latest order by all",
    "select * from findings_with_drift",
    "with f as (select * from findings) select count(*) from f",
    "select (select count(*) from lake_summary) as n, * from range(2)",
    "select count(*) from query_samples q join query_texts t using (queryid)",
    # the catalogue: every view
    "show tables",
    "select table_name from information_schema.tables order by 1",
    "select view_name from duckdb_views() where not internal order by 1",
    "select count(*) from pg_tables",
    "describe plans_latest",
    "summarize query_samples",
    "select count(*) from query_table('findings')",
    "create view mine as select * from query_samples; select count(*) from mine",
    # errors: DuckDB's message, "did you mean" included
    "selec 1",
    "select nope from query_samples",
    "select * from query_sample",
    "select * from (with f as (select 1) select * from f), f",
]


def _on_every_view(lake_root: Path, sql: str) -> tuple[str, object]:
    conn = duckdb_views.connect(lake_root)
    try:
        result = conn.sql(sql)
        return "ok", (None if result is None else (result.columns, result.fetchall()))
    except duckdb.Error as exc:
        return "error", f"DuckDB query failed: {duckdb_views.one_line(exc)}"
    finally:
        conn.close()


def _on_views_needed(lake_root: Path, sql: str) -> tuple[str, object]:
    try:
        rows = duckdb_views.query_rows(lake_root, sql)
    except lake.LakeError as exc:
        return "error", str(exc)
    return "ok", (rows.columns, rows.rows) if rows.columns else None


def test_sql_defines_only_the_views_a_query_needs_with_the_same_result(lake_root: Path) -> None:
    write_step_change_lake(lake_root)
    for sql in SAME_AS_EVERY_VIEW:
        assert _on_views_needed(lake_root, sql) == _on_every_view(lake_root, sql), sql
    with duckdb.connect() as conn:
        assert duckdb_views.views_needed(conn, "select 1") == frozenset()
        assert duckdb_views.views_needed(conn, "select * from Lake_Summary") == {
            "lake_summary",
            "snapshot_runs",
            "statement_snapshots",
        }
        for catalogue in (
            "show tables",
            "select * from duckdb_columns()",
            "select * from information_schema.columns",
        ):
            assert duckdb_views.views_needed(conn, catalogue) is None, catalogue
        # every view a derived view reads is defined before it: its dependencies are all views
        names = set(duckdb_views.view_names())
        for view in duckdb_views.view_names():
            needed = duckdb_views.views_needed(conn, f"select * from {view}")
            assert needed is not None and view in needed and needed <= names


def test_sql_start_up_imports_neither_pyarrow_nor_polars(lake_root: Path) -> None:
    """pyarrow (0.1-0.2 s) is the lake writer's and polars (about 0.1 s) the frames': `radar sql` reads
    through DuckDB, its views typed from the schemas' own types (jobs.schemas.dtypes)."""
    write_step_change_lake(lake_root)
    code = (
        "import sys; from jobs.cli.main import main; "
        f"code = main(['--lake', {str(lake_root)!r}, 'sql', 'select count(*) from findings', "
        "'--format', 'csv']); "
        "print(code, 'pyarrow' in sys.modules, 'polars' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "0 False False", done.stdout + done.stderr
