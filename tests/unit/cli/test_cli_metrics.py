"""`radar metrics` and `radar serve-metrics`: the exposition on stdout or in a textfile, the rules, and bad
input as one line with exit 2 (never a traceback)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from jobs.cli.main import main
from jobs.publish.metrics import EXPOSED_TYPES
from tests.unit.publish.test_metrics import small_lake  # noqa: F401 (a fixture)


def test_metrics_prints_the_exposition(small_lake: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main(["--lake", str(small_lake), "metrics", "--format", "prom"]) == 0
    out = capsys.readouterr().out
    for name, kind in EXPOSED_TYPES.items():
        assert f"# TYPE {name} {kind}\n" in out


def test_metrics_as_json_and_jsonl_name_every_sample(
    small_lake: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:

    assert main(["--lake", str(small_lake), "metrics", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"family", "type", "name", "labels", "value"} <= set(rows[0])
    assert any(r["family"] == "pg_regression_radar_collector_explain_statements_skipped" for r in rows)
    assert main(["--lake", str(small_lake), "metrics", "--format", "jsonl"]) == 0
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["labels"]) for r in again] == [(r["name"], r["labels"]) for r in rows]  # lag moves


def test_metrics_textfile_from_the_flag_or_the_config(
    small_lake: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "radar.prom"
    assert main(["--lake", str(small_lake), "metrics", "--textfile", str(target)]) == 0
    assert "plan_drift_verdict_total" in target.read_text()
    assert capsys.readouterr().out == ""  # quiet in cron
    other = tmp_path / "other.prom"
    assert (
        main(["--lake", str(small_lake), "--set", f"metrics.textfile={other}", "metrics", "--textfile"]) == 0
    )
    assert other.is_file()


@pytest.mark.parametrize(
    ("textfile", "says"),
    [
        ("{tmp}/no/such/folder/radar.prom", "does not exist"),
        ("{tmp}", "is a folder"),
        ("", "give a path, or set [metrics] textfile"),
    ],
)
def test_a_bad_textfile_is_one_line_and_exit_2(
    small_lake: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    textfile: str,
    says: str,
) -> None:
    flag = ["--textfile", textfile.format(tmp=tmp_path)] if textfile else ["--textfile"]
    assert main(["--lake", str(small_lake), "metrics", *flag]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and says in out and "Traceback" not in out


def test_metrics_on_a_missing_lake_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lake", str(tmp_path / "typo"), "metrics"]) == 2
    assert "does not exist" in capsys.readouterr().out


def test_rules_need_no_lake_and_follow_the_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--lake",
        str(tmp_path / "none"),
        "--set",
        "drift.samples.degenerate_share=0.25",
        "metrics",
        "--rules",
    ]
    assert main(args) == 0
    rules = yaml.safe_load(capsys.readouterr().out)["groups"][0]["rules"]
    assert rules[1]["alert"] == "PlanDriftDegenerateShare" and rules[1]["expr"].endswith("> 0.25")


def test_serve_metrics_on_a_port_in_use_is_one_line_and_exit_2(
    small_lake: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--lake", str(small_lake), "serve-metrics", "--port", str(port)]) == 2
    out = capsys.readouterr().out.strip()
    assert out == f"error: radar serve-metrics: cannot listen on 127.0.0.1:{port}: in use"


def test_serve_metrics_rejects_a_port_out_of_range(
    small_lake: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--lake", str(small_lake), "serve-metrics", "--port", "70000"]) == 2
    assert "give a port in 0..65535" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["--lake", str(small_lake), "serve-metrics", "--port", "http"])
    assert exited.value.code == 2
