"""`radar` commands, run in process against a real embedded fleet and a real lake."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.cli.main import main
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet

pytestmark = pytest.mark.postgres


def radar(*args: str) -> int:
    return main(list(args))


def test_snapshot_deploy_detect_and_sql(pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(pg_fleet.fleet_config_toml())
    common = ["--lake", str(lake_root), "--fleet-file", str(fleet_file)]
    for round_ in range(3):
        with psycopg.connect(pg_fleet.server("alpha").dsn) as conn:
            for i in range(3 + round_):
                conn.execute("select %s::int + 40", [Int4(i)])
        assert radar(*common, "snapshot") == 0
    assert radar(*common, "deploy", "mark", "--instance", "alpha", "--version", "v7") == 0
    assert radar(*common, "deploy", "mark", "--fleet", "--version", "v8", "--at", "2026-11-01T10:00:00Z") == 0
    assert radar(*common, "detect") == 0
    assert radar(*common, "sql", "select instance, snapshots from lake_summary order by 1") == 0
    runs = lake.scan_table(lake_root, "snapshot_runs").collect()
    assert runs.group_by("instance").len().sort("instance")["len"].to_list() == [3, 3]
    deploys = lake.scan_table(lake_root, "deploy_events").collect()
    assert sorted(deploys["version"].to_list()) == ["v7", "v8"]
    assert lake.scan_table(lake_root, "query_samples").select(pl.len()).collect().item() > 0


def test_bad_input_is_a_clear_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "fleet.toml"
    bad.write_text('[[instances]]\nname = "x"\n')
    assert radar("--lake", str(tmp_path / "lake"), "--fleet-file", str(bad), "snapshot") == 2
    assert "exactly one of 'dsn' or 'dsn_env'" in capsys.readouterr().out
    assert radar("--lake", str(tmp_path / "lake"), "deploy", "mark", "--version", "v1") == 2
    assert (
        radar(
            "--lake",
            str(tmp_path / "lake"),
            "deploy",
            "mark",
            "--instance",
            "a",
            "--version",
            "v1",
            "--at",
            "yesterday-ish",
        )
        == 2
    )


UNREACHABLE = '[[instances]]\nname = "gone"\ndsn = "postgresql://x@127.0.0.1:1/postgres"\n'


def test_snapshot_exit_codes_0_1_3_and_each_failure_printed_with_its_reason(
    pg_fleet: EmbeddedFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = f'[[instances]]\nname = "alpha"\ndsn = "{pg_fleet.server("alpha").dsn}"\n'
    cases = {"all_read": (good, 0), "some_failed": (good + UNREACHABLE, 1), "all_failed": (UNREACHABLE, 3)}
    for label, (text, code) in cases.items():
        fleet_file = tmp_path / f"{label}.toml"
        fleet_file.write_text(text)
        capsys.readouterr()
        assert radar("--lake", str(tmp_path / label), "--fleet-file", str(fleet_file), "snapshot") == code, (
            label
        )
        out = capsys.readouterr().out
        assert ("failed gone: instance gone:" in out) is (code != 0), out
        assert "(phase connect)" in out or code == 0
    runs = lake.scan_table(tmp_path / "all_failed", "snapshot_runs").collect()
    assert runs["status"].to_list() == ["failed"]
    assert runs["failed_phase"].to_list() == ["connect"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[colector]\n" + UNREACHABLE, "unknown tables or keys [colector] (did you mean 'collector'?)"),
        ('[[instances]]\nname = "a"\ndns = "x"\n', "unknown keys 'dns' (did you mean 'dsn'?)"),
        ('[[instances]]\nname = "a"\ndsn = 5432\n', "dsn must be a string"),
        ("[collector]\nstatement_timeout_ms = -1\n" + UNREACHABLE, "statement_timeout_ms must be between"),
    ],
)
def test_a_bad_fleet_file_is_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(text)
    assert radar("--lake", str(tmp_path / "lake"), "--fleet-file", str(fleet_file), "snapshot") == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert len(lines) == 1, captured.out
    assert lines[0].startswith("error: fleet file") and str(fleet_file) in lines[0]
    assert message in lines[0]
    assert "Traceback" not in captured.out + captured.err
    assert not (tmp_path / "lake").exists()


def test_a_missing_explicit_fleet_file_is_an_error_not_a_fallback(
    pg_fleet: EmbeddedFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo-fleet.toml"
    args = [
        "--lake",
        str(tmp_path / "lake"),
        "--embedded-root",
        str(pg_fleet.root),
        "--fleet-file",
        str(missing),
    ]
    assert radar(*args, "snapshot") == 2
    assert f"fleet file not found: {missing}" in capsys.readouterr().out
    assert not (tmp_path / "lake").exists()  # the embedded fleet was not snapshotted instead


def test_snapshot_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        radar("snapshot", "--help")
    out = capsys.readouterr().out
    for line in (
        "0  every instance was read",
        "1  some instances failed",
        "2  usage or configuration",
        "3  every",
    ):
        assert line in out


def test_views_prints_one_statement_per_view(lake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert radar("--lake", str(lake_root), "views") == 0
    out = capsys.readouterr().out
    assert "CREATE OR REPLACE VIEW statement_snapshots" in out
    assert "CREATE OR REPLACE VIEW regressions_with_plan_diff" in out


def test_fleet_status_without_a_fleet(tmp_path: Path) -> None:
    assert radar("--embedded-root", str(tmp_path / "none"), "fleet", "status") == 1
    assert EmbeddedFleet.load(tmp_path / "none") is None


def test_an_unexpected_exception_is_one_line_and_exit_70_never_a_verdict_code(
    lake_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (here a TypeError raised where detection runs) is not "a finding is open" (--fail-on-detect's
    1) nor a usage error: exit 70, one line on stderr naming the exception, an empty stdout for `jq`."""
    import jobs.pipeline.budgeted

    def broken(*_: object, **__: object) -> None:
        raise TypeError("'>' not supported between instances of 'NoneType' and 'NoneType'")

    monkeypatch.setattr(jobs.pipeline.budgeted, "run_detection_in_budget", broken)
    capsys.readouterr()
    code = main(["--lake", str(lake_root), "detect", "--fail-on-detect", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 70 and out == ""
    assert err.count("\n") == 1 and err.startswith("internal error: TypeError at jobs.cli.detect:")
    assert "TypeError" in err and "not supported" in err and "Traceback" not in err
    monkeypatch.setenv("RADAR_DEBUG", "1")
    with pytest.raises(TypeError):
        main(["--lake", str(lake_root), "detect", "--format", "json"])


@pytest.mark.parametrize(
    "command",
    [
        ["detect", "--format", "json"],
        ["alerts", "--format", "json"],
        ["report", "--format", "json"],
        ["sql", "select 1", "--format", "json"],
        ["plans", "x", "--format", "json"],
        ["views"],
        ["samples"],
    ],
)
def test_a_lake_root_that_does_not_exist_is_an_error_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Issue 21: `radar --lake <typo> detect` printed "No open regression", exited 0 and created
    <typo>/_locks. Every command that reads the lake stops with one line naming the path, exit 2."""
    typo = tmp_path / "lkae"
    capsys.readouterr()
    assert main(["--lake", str(typo), *command]) == 2
    out, err = capsys.readouterr()
    said = err if "--format" in command else out  # JSON: messages on stderr, stdout stays empty
    assert said.count("\n") == 1 and (out == "" or "--format" not in command)
    assert f"lake root {typo} does not exist" in said.replace("\n", "")
    assert not typo.exists()
