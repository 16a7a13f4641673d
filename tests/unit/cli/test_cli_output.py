"""`radar` for scripts: --format json|csv shapes that parse and match the lake, row cuts that say so, exit
codes, settings and flags, and a start-up that imports nothing heavy. Pure lakes (tests/support/lakes.py)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.cli.main import main
from jobs.cli.parser import EXIT_CODES, build_parser
from jobs.detect.findings import latest_states
from jobs.drift.finding_flags import DRIFT_FLAG_COLUMNS
from jobs.lake import io as lake
from jobs.lake.views import query
from jobs.publish.output import json_value, rows_to_csv, rows_to_json
from jobs.schemas.analysed import FINDING_STATES
from tests.support.drift_frames import drift_row, write_drift
from tests.support.lakes import snapshot_frame, snapshot_row, write_snapshot_files, write_step_change_lake

ROOT = Path(__file__).resolve().parents[3]


def radar(*args: str) -> int:
    return main(list(args))


def json_out(
    capsys: pytest.CaptureFixture[str], *args: str, code: int = 0
) -> tuple[list[dict[str, Any]], str]:
    capsys.readouterr()
    assert radar(*args) == code
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


# ---------------------------------------------------------------------------------------------------------
# The JSON shape


def test_json_values_follow_the_documented_rules() -> None:
    moment = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert json_value(moment) == "2026-11-30T10:00:00.000000Z"
    east = moment.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Tokyo"))
    assert json_value(east) == "2026-11-30T10:00:00.000000Z"  # any zone is printed in UTC
    assert json_value(-4321987654321987654, "queryid") == "-4321987654321987654"
    assert json_value(-4321987654321987654, "calls") == -4321987654321987654
    assert json_value(math.nan) is None and json_value(math.inf) is None
    assert json_value(timedelta(minutes=2)) == 120.0
    assert json_value(["a", None]) == ["a", None]
    assert json_value(True) is True and json_value(None) is None


def test_json_is_an_array_of_same_keyed_objects_one_per_line_and_csv_has_the_same_cells() -> None:
    rows = [{"queryid": "1", "at": "2026-11-30T10:00:00.000000Z", "n": 1.5, "ok": True, "tags": ["x"]}]
    text = rows_to_json(rows * 2)
    assert json.loads(text) == rows * 2 and text.count("\n") == 4
    assert rows_to_json([]) == "[]\n"
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(list(rows[0]), rows))))
    assert parsed == [
        {"queryid": "1", "at": "2026-11-30T10:00:00.000000Z", "n": "1.5", "ok": "true", "tags": '["x"]'}
    ]


# ---------------------------------------------------------------------------------------------------------
# detect


def test_detect_json_is_the_findings_of_the_lake_and_fail_on_detect_exits_1(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_step_change_lake(lake_root)
    rows, _ = json_out(capsys, "--lake", str(lake_root), "detect", "--format", "json")
    lake_findings = latest_states(lake.read_table(lake_root, FINDING_STATES)).sort("onset", "finding_id")
    assert len(rows) == lake_findings.height >= 1
    assert list(rows[0]) == [*FINDING_STATES.columns_of(lake_findings), *DRIFT_FLAG_COLUMNS]
    assert {r["drift_latency"] for r in rows} == {None}, "never scored: null, not an error"
    for row, expected in zip(rows, lake_findings.iter_rows(named=True), strict=True):
        assert row["finding_id"] == expected["finding_id"] and row["status"] == "open"
        assert row["queryid"] == str(expected["queryid"])
        assert datetime.fromisoformat(row["onset"]) == expected["onset"]
        assert row["onset"].endswith("Z")
        assert row["after_mean_ms"] == pytest.approx(expected["after_mean_ms"])
    # The finding is still open on the next run: --fail-on-detect exits 1 (and says why on stderr).
    still_open, err = json_out(
        capsys, "--lake", str(lake_root), "detect", "--format", "json", "--fail-on-detect", code=1
    )
    assert still_open and "open findings (--fail-on-detect" in err
    # Once the drift stage scored the query, each of its findings carries the latest flag per metric.
    write_drift(
        lake_root, [drift_row(rows[0]["fingerprint"], "latency", "BLOCK", instance=rows[0]["instance"])]
    )
    flagged, _ = json_out(capsys, "--lake", str(lake_root), "detect", "--format", "json")
    assert [(r["drift_latency"], r["drift_cost"]) for r in flagged][:1] == [("BLOCK", None)]
    assert radar("--lake", str(lake_root), "detect") == 0  # without the flag: 0


def test_detect_on_a_lake_without_findings_exits_0_even_with_fail_on_detect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()  # an empty lake (a missing one is an error: test_cli.py)
    rows, _ = json_out(
        capsys, "--lake", str(tmp_path / "empty"), "detect", "--format", "json", "--fail-on-detect"
    )
    assert rows == []


def _snapshot_lake(root: Path, calls_per_interval: list[int]) -> None:
    start = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    rows, runs, calls = [], [], 0
    for minute in range(len(calls_per_interval) + 1):
        at = start + timedelta(minutes=minute)
        calls += calls_per_interval[minute - 1] if minute else 0
        rows.append(snapshot_row("db1", at, 42, calls, 2.0 * calls))
        runs.append({"instance": "db1", "captured_at": at, "status": "ok", "dealloc": 0})
    runs_frame = pl.DataFrame(runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})
    write_snapshot_files(root, snapshot_frame(rows), runs_frame)


def test_detect_min_executions_reaches_the_samples_it_builds(lake_root: Path) -> None:
    _snapshot_lake(lake_root, [3, 6, 3, 6, 3])
    assert radar("--lake", str(lake_root), "detect", "--full") == 0
    assert lake.read_table(lake_root, "query_samples")["calls"].to_list() == [3, 6, 3, 6, 3]
    assert radar("--lake", str(lake_root), "detect", "--full", "--min-executions", "4") == 0
    assert lake.read_table(lake_root, "query_samples")["calls"].to_list() == [6, 6]


# ---------------------------------------------------------------------------------------------------------
# sql


def test_sql_says_when_it_cuts_and_json_prints_every_row(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_step_change_lake(lake_root)
    sql = (
        "select instance, queryid, interval_end, mean_exec_time from query_samples "
        "order by interval_end, queryid"
    )
    expected = query(lake_root, sql)
    assert expected.height == 120
    capsys.readouterr()
    assert radar("--lake", str(lake_root), "sql", sql) == 0
    assert "showing 40 of 120 rows" in capsys.readouterr().out
    rows, err = json_out(capsys, "--lake", str(lake_root), "sql", sql, "--format", "json")
    assert len(rows) == 120 and err == ""
    assert rows[0]["queryid"] == str(expected["queryid"][0])
    assert datetime.fromisoformat(rows[0]["interval_end"]) == expected["interval_end"][0]
    assert [r["mean_exec_time"] for r in rows] == pytest.approx(expected["mean_exec_time"].to_list())
    rows, err = json_out(capsys, "--lake", str(lake_root), "sql", sql, "--format", "json", "--max-rows", "5")
    assert len(rows) == 5 and "showing 5 of 120 rows" in err
    capsys.readouterr()
    assert radar("--lake", str(lake_root), "sql", sql, "--format", "csv", "--max-rows", "0") == 0
    parsed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(parsed) == 120 and list(parsed[0]) == ["instance", "queryid", "interval_end", "mean_exec_time"]


def test_a_failing_query_in_json_mode_keeps_stdout_empty(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert radar("--lake", str(lake_root), "sql", "selec nothing", "--format", "json") == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "DuckDB query failed" in captured.err


# ---------------------------------------------------------------------------------------------------------
# fleet: no silent fallback; deploy mark names


UNREACHABLE = '[[instances]]\nname = "{name}"\ndsn = "postgresql://x@127.0.0.1:1/postgres"\n'


def test_a_missing_default_fleet_file_is_an_error_unless_embedded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no data/fleet.toml here
    assert radar("--lake", str(tmp_path / "lake"), "snapshot") == 2
    out = capsys.readouterr().out
    assert "no fleet: data/fleet.toml does not exist" in out and "--embedded" in out
    assert (
        radar(
            "--lake",
            str(tmp_path / "lake"),
            "--embedded-root",
            str(tmp_path / "none"),
            "--embedded",
            "snapshot",
        )
        == 2
    )
    assert f"--embedded: no embedded fleet at {tmp_path / 'none'}" in capsys.readouterr().out
    assert not (tmp_path / "lake").exists()
    fleet_file = tmp_path / "f.toml"
    fleet_file.write_text(UNREACHABLE.format(name="a"))
    assert radar("--fleet-file", str(fleet_file), "--embedded", "snapshot") == 2
    assert "either --fleet-file or --embedded" in capsys.readouterr().out


def test_deploy_mark_rejects_an_unknown_instance_with_the_closest_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(UNREACHABLE.format(name="orders-primary") + UNREACHABLE.format(name="billing"))
    lake_root = tmp_path / "lake"
    mark = ["--lake", str(lake_root), "--fleet-file", str(fleet_file), "deploy", "mark", "--version", "v1"]
    assert radar(*mark, "--instance", "orders-primry") == 2
    out = capsys.readouterr().out
    assert "unknown instance 'orders-primry'" in out and "did you mean 'orders-primary'" in out
    assert not lake_root.exists()
    # Global options after the command work the same.
    assert (
        radar(
            "deploy",
            "mark",
            "--version",
            "v1",
            "--instance",
            "billing",
            "--lake",
            str(lake_root),
            "--fleet-file",
            str(fleet_file),
        )
        == 0
    )
    # No fleet at all: refused (exit 2) unless --allow-unknown-instance.
    monkeypatch.chdir(tmp_path / "lake")
    nofleet = ["--lake", str(lake_root), "deploy", "mark", "--version", "v2", "--instance", "typo"]
    assert radar(*nofleet) == 2
    assert "no fleet to check the name against" in capsys.readouterr().out
    assert radar(*nofleet, "--allow-unknown-instance") == 0
    versions = sorted(lake.read_table(lake_root, "deploy_events")["version"])
    assert versions == ["v1", "v2"]


# ---------------------------------------------------------------------------------------------------------
# settings: config show / check, flags over the file


def test_config_show_says_where_each_value_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RADAR_CONFIG", raising=False)
    config = tmp_path / "radar.toml"
    config.write_text("[samples]\nmin_executions = 3\n[detector]\nlatency_change_threshold = 0.4\n")
    monkeypatch.setenv("RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD", "0.3")
    rows, _ = json_out(
        capsys,
        "--config",
        str(config),
        "config",
        "show",
        "--format",
        "json",
        "--changepoint-tolerance",
        "0.3",
    )
    by_key = {r["key"]: r for r in rows}
    assert by_key["samples.min_executions"]["value"] == 3
    assert by_key["samples.min_executions"]["source"] == f"file {config}"
    assert by_key["detector.latency_change_threshold"] == {
        "key": "detector.latency_change_threshold",
        "value": 0.3,
        "source": "environment variable RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD",
    }
    assert by_key["detector.changepoint_tolerance"] == {
        "key": "detector.changepoint_tolerance",
        "value": 0.3,
        "source": "flag --changepoint-tolerance",
    }
    assert by_key["gate.suite_max_seconds"]["source"] == "default"
    # The flag beats the file and the env.
    rows, _ = json_out(
        capsys,
        "--config",
        str(config),
        "config",
        "show",
        "--format",
        "json",
        "--min-executions",
        "9",
        "--latency-threshold",
        "0.5",
    )
    by_key = {r["key"]: r for r in rows}
    assert by_key["samples.min_executions"]["value"] == 9
    assert by_key["samples.min_executions"]["source"].startswith("flag --min-executions")
    assert by_key["detector.latency_change_threshold"]["value"] == 0.5


def test_config_check_exits_0_valid_and_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RADAR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    good = tmp_path / "good.toml"
    good.write_text("[gate]\nsuite_max_seconds = 30.0\n")
    assert radar("--config", str(good), "config", "check") == 0
    assert "configuration valid" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text("[detector]\nlatency_chnage_threshold = 0.3\n")
    assert radar("--config", str(bad), "config", "check") == 2
    out = capsys.readouterr().out
    assert str(bad) in out and "latency_change_threshold" in out and "Traceback" not in out
    assert radar("--config", str(tmp_path / "missing.toml"), "config", "check") == 2
    assert "missing.toml" in capsys.readouterr().out
    monkeypatch.setenv("RADAR_CONFIG", str(bad))
    assert radar("config", "check") == 2


@pytest.mark.parametrize(
    ("fleet", "env", "expected"),
    [
        ('name = ".."\ndsn = "host=x"', {}, "'name' '..' must not start with '.'"),
        ('name = "-rm"\ndsn = "host=x"', {}, "must not start with '.' or '-'"),
        ('name = "db1"\ndsn_env = "RADAR_TEST_UNSET_DSN"', {}, "environment variable RADAR_TEST_UNSET_DSN"),
        ('name = "db1"\ndsn = "host=x"', {"RADAR_ALERT_WEBHOOK": "ftp://h/x"}, "env RADAR_ALERT_WEBHOOK"),
    ],
)
def test_config_check_refuses_what_a_run_would_regret(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fleet: str,
    env: dict[str, str],
    expected: str,
) -> None:
    """An instance folder named "..", an unset dsn_env and an ftp:// webhook from the environment passed
    `config check` and failed only at run time (issue 28): each is one line and exit 2 now."""
    monkeypatch.delenv("RADAR_CONFIG", raising=False)
    monkeypatch.delenv("RADAR_TEST_UNSET_DSN", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(f"[[instances]]\n{fleet}\n")
    assert radar("--fleet-file", str(fleet_file), "config", "check") == 2
    out = capsys.readouterr().out
    assert expected in out and "Traceback" not in out and "ftp://h/x" not in out, out
    assert len(out.strip().splitlines()) == 1, out


# ---------------------------------------------------------------------------------------------------------
# help, exit codes, start-up


def test_every_command_documents_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    assert set(commands.choices) == set(EXIT_CODES)
    for name, sub in commands.choices.items():
        text = sub.format_help()
        assert f"exit codes of `radar {name}`" in text and "75" in text and "  2  " in text, name


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys; from jobs.cli.main import build_parser; build_parser(None).format_help(); "
        "heavy = [m for m in ('polars', 'rich', 'psycopg', 'pyarrow', 'duckdb', 'scipy', 'numpy', 'dagster', "
        "'pglast') if m in sys.modules]; print(','.join(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", done.stdout
    helped = subprocess.run(
        [sys.executable, "-m", "jobs.cli.main", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "plans" in helped.stdout and "config" in helped.stdout


# ---------------------------------------------------------------------------------------------------------
# drift and report rows


def test_drift_json_matches_the_lake_and_takes_the_drift_settings(
    lake_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RADAR_CONFIG", raising=False)
    write_step_change_lake(lake_root)
    rows, err = json_out(capsys, "--lake", str(lake_root), "drift", "--all", "--format", "json")
    stored = lake.read_table(lake_root, "latency_drift").sort("instance", "series")
    assert sorted((r["instance"], r["series"]) for r in rows) == list(
        stored.select("instance", "series").rows()
    )
    assert rows and set(rows[0]) == set(stored.columns) - {"date"}
    assert "no_drift" in err or "insufficient" in err or "drift" in err  # the counts line, on stderr
    spans = {
        datetime.fromisoformat(r["current_end"]) - datetime.fromisoformat(r["current_start"]) for r in rows
    }
    assert spans == {timedelta(days=1)}
    config = tmp_path / "radar.toml"
    config.write_text('[drift]\ncurrent_window = "30m"\n')
    rows, _ = json_out(
        capsys, "--config", str(config), "--lake", str(lake_root), "drift", "--all", "--format", "json"
    )
    spans = {
        datetime.fromisoformat(r["current_end"]) - datetime.fromisoformat(r["current_start"]) for r in rows
    }
    assert spans == {timedelta(minutes=30)}


def test_report_json_lists_the_findings_of_the_week(
    lake_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_step_change_lake(lake_root)
    assert radar("--lake", str(lake_root), "detect") == 0
    out = tmp_path / "reports"
    rows, err = json_out(
        capsys,
        "--lake",
        str(lake_root),
        "report",
        "--week",
        "2026-W45",
        "--out",
        str(out),
        "--format",
        "json",
    )
    findings = latest_states(lake.read_table(lake_root, FINDING_STATES))
    assert [r["finding_id"] for r in rows] == findings["finding_id"].to_list()
    assert [list(r)[-3:] for r in rows] == [list(DRIFT_FLAG_COLUMNS)] * len(rows)
    assert f"weekly report of 2026-W45: {out / '2026-W45' / 'report.html'}" in err
    assert (out / "2026-W45" / "report.md").exists()
    rows, _ = json_out(
        capsys,
        "--lake",
        str(lake_root),
        "report",
        "--week",
        "2026-W40",
        "--out",
        str(out),
        "--format",
        "json",
    )
    assert rows == []


# ---------------------------------------------------------------------------------------------------------
# scripting (issue 29, item 4): JSON Lines for appended files, JSON from each reporting command, quiet stderr


def test_jsonl_is_one_object_per_line_and_appends_to_a_valid_file(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = ["--lake", str(lake_root), "sql", "select 1 as a, 'x' as b union all select 2, 'y' order by a"]
    capsys.readouterr()
    appended = ""
    for _ in range(2):  # what the README's cron line does: each run's lines after the previous run's
        assert radar(*sql, "--format", "jsonl") == 0
        appended += capsys.readouterr().out
    assert [json.loads(line) for line in appended.splitlines()] == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": "y"},
    ] * 2


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_deploy_mark_and_ingest_report_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    lake_root, inbox = tmp_path / "lake", tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "bad.json").write_text("{not json")
    base = ["--lake", str(lake_root), "--format", fmt]
    capsys.readouterr()
    assert radar("deploy", "mark", "--version", "v7", "--fleet", *base) == 0
    out = capsys.readouterr().out
    rows = json.loads(out) if fmt == "json" else [json.loads(line) for line in out.splitlines()]
    assert [r["version"] for r in rows] == ["v7"] and rows[0]["scope"] == "fleet"
    assert radar("deploy", "ingest", "--inbox", str(inbox), "--allow-unknown-instance", *base) == 1
    captured = capsys.readouterr()
    rows = (
        json.loads(captured.out)
        if fmt == "json"
        else [json.loads(line) for line in captured.out.splitlines()]
    )
    assert [(Path(r["file"]).name, r["outcome"]) for r in rows] == [("bad.json", "rejected")]


def test_every_reporting_command_takes_format_json() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    # views and setup-sql print SQL, demo a show, serve-metrics serves: none of them reports rows.
    for name, command in commands.items():
        if name in ("views", "setup-sql", "demo", "serve-metrics"):
            continue
        formats = next((a.choices for a in command._actions if a.dest == "format"), None)
        assert formats is not None and "json" in formats, f"radar {name} has no --format json"


def test_a_normal_run_with_dagster_home_prints_nothing_on_stderr(lake_root: Path, tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"  # as the README sets it: a folder, no dagster.yaml in it
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli.main", "--lake", str(lake_root), "samples", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)[0]["instances"] >= 0
