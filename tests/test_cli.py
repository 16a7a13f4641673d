"""`radar` commands, run in process against a real embedded fleet and a real lake."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs import lake
from jobs.cli import main
from jobs.fleet import EmbeddedFleet

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


def test_snapshot_exits_nonzero_only_when_every_instance_failed(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text('[[instances]]\nname = "gone"\ndsn = "postgresql://x@127.0.0.1:1/postgres"\n')
    assert radar("--lake", str(tmp_path / "lake"), "--fleet-file", str(fleet_file), "snapshot") == 1
    runs = lake.scan_table(tmp_path / "lake", "snapshot_runs").collect()
    assert runs["status"].to_list() == ["failed"]


def test_views_prints_one_statement_per_view(lake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert radar("--lake", str(lake_root), "views") == 0
    out = capsys.readouterr().out
    assert "CREATE OR REPLACE VIEW statement_snapshots" in out
    assert "CREATE OR REPLACE VIEW regressions_with_plan_diff" in out


def test_fleet_status_without_a_fleet(tmp_path: Path) -> None:
    assert radar("--embedded-root", str(tmp_path / "none"), "fleet", "status") == 1
    assert EmbeddedFleet.load(tmp_path / "none") is None
