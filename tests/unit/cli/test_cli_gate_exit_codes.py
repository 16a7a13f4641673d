"""radar gate's usage errors exit 64 (EX_USAGE): its 2 is BLOCK and its 1 WARN, so a typo must not read as a
verdict; other commands keep argparse's 2. No server: every case fails before connecting."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.cli.common import EXIT_GATE_USAGE, EXIT_USAGE
from jobs.cli.main import main
from jobs.cli.parser import EXIT_CODES

GATE = ["gate", "--baseline", "postgresql:///a", "--candidate", "postgresql:///b", "--workload", "w.toml"]


def exit_code(argv: list[str]) -> int:
    """main()'s code, or argparse's (it ends the process, as `radar` does)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(
    "argv",
    [
        [*GATE, "--no-such-flag"],
        [*GATE, "--cycles", "three"],
        [*GATE, "--threshold", "memory=lots"],  # was a SystemExit with a message: exit 1 = WARN
        [*GATE, "--threshold", "nosuch=0.2"],
        ["gate", "--workload", "w.toml"],  # no --baseline / --candidate
        ["gate", "--baseline", "postgresql:///a", "--candidate", "postgresql:///b"],  # nothing to measure
        ["gate", "--replay", "run.json", "--baseline", "postgresql:///a"],  # a replay measures nothing
        ["gate", "--replay", "run.json", "--lake-write"],
        ["gate", "--baseline", "postgresql:///a", "--candidate", "postgresql:///b", "--workload", "w.sql"],
    ],
)
def test_gate_usage_errors_exit_64(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code([*argv, "--format", "json"]) == EXIT_GATE_USAGE == 64
    assert capsys.readouterr().out == ""  # no verdict printed


def test_other_commands_keep_usage_code_2() -> None:
    assert exit_code(["detect", "--no-such-flag"]) == EXIT_USAGE == 2


def test_gate_epilog_documents_every_code() -> None:
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "64 ", "70 "):
        assert f"\n  {code}" in EXIT_CODES["gate"] or EXIT_CODES["gate"].lstrip().startswith(code), code


def test_gate_bad_config_file_exits_64(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "radar.toml"
    config.write_text("[gate]\ncycles = 'many'\n")
    assert exit_code(["--config", str(config), *GATE, "--format", "json"]) == EXIT_GATE_USAGE
    assert "cycles" in capsys.readouterr().err
    removed = tmp_path / "old.toml"
    removed.write_text("[gate]\nmax_rounds = 40\n")  # a key of the deleted paired-rounds engine
    assert exit_code(["--config", str(removed), *GATE, "--format", "json"]) == EXIT_GATE_USAGE
    assert "max_rounds" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2",  # not JSON
        '{"kind": "something_else"}',
        '{"kind": "gate_suite_report", "config": {"cycles": "x"}}',
        '{"kind": "gate_suite_report", "config": {}, "scenarios": [{"name": "x", "verdict": "PASS", '
        '"cycles": [{"cycle": 0, "raw": {"samples": {"baseline": [1, 2]}, "counters": {}, "memory": {}}}]}]}',
    ],
)
def test_a_stored_run_that_cannot_be_replayed_exits_3(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reports are files people edit and send: a broken one is a gate that could not run, never a bug (70)
    or a verdict."""
    stored = tmp_path / "run.json"
    stored.write_text(text)
    assert exit_code(["gate", "--replay", str(stored), "--format", "json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "gate could not replay" in captured.err
