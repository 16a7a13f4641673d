"""The CLI's runs visible to Dagster: with DAGSTER_HOME set, `radar samples` / `radar snapshot` record a
runless materialization the UI shows (orchestration/cli_events.py); without it nothing; a broken instance
is one warning line, never a failed command. Real DagsterInstance, real lake, real embedded server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest

from jobs.cli.main import main
from orchestration.partitions import COLLECTION_DAYS
from tests.conftest import FleetFactory
from tests.support.lakes import snapshot_frame, snapshot_row, write_snapshot_files


def latest(home: Path, asset: str) -> dg.EventLogEntry | None:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return instance.get_latest_materialization_event(dg.AssetKey(asset))


def write_two_snapshots(lake_root: Path, day: datetime) -> None:
    rows = [snapshot_row("db1", day, 1, 10, 1.0), snapshot_row("db1", day + timedelta(minutes=1), 1, 20, 2.0)]
    snapshots = snapshot_frame(rows)
    runs = snapshots.select("instance", "captured_at").unique().with_columns(pl.lit("ok").alias("status"))
    write_snapshot_files(lake_root, snapshots, runs)


@pytest.mark.slow  # a fresh SQLite Dagster instance takes ~2.5 s to create
def test_radar_samples_reports_a_materialization_of_its_days(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    write_two_snapshots(lake_root, datetime(2026, 11, 29, 10, 0, tzinfo=UTC))
    rebuild = ["--lake", str(lake_root), "samples", "--rebuild", "--from", "2026-11-29", "--to", "2026-11-29"]
    assert main(rebuild) == 0
    assert "warning" not in capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("query_samples"))
        assert instance.get_dynamic_partitions(COLLECTION_DAYS) == ["2026-11-29"]
    assert event is not None and event.asset_materialization is not None
    materialization = event.asset_materialization
    assert materialization.partition == "2026-11-29"
    assert materialization.metadata["source"].value == "radar CLI"
    assert materialization.metadata["sample_rows"].value == 1


def test_no_dagster_home_records_nothing_and_a_broken_one_is_one_warning(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.dagster_home here either
    assert main(["--lake", str(lake_root), "samples"]) == 0
    assert "Dagster" not in capsys.readouterr().out
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "no such folder"))
    assert main(["--lake", str(lake_root), "samples"]) == 0  # the samples ran; telling Dagster failed
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if "not recorded in Dagster" in line]
    assert len(warnings) == 1 and "Traceback" not in out


@pytest.mark.slow
@pytest.mark.postgres
def test_radar_snapshot_against_a_real_server_is_a_materialization_in_dagster(
    fleet_factory: FleetFactory,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleet = fleet_factory(["dgcli"])
    with psycopg.connect(fleet.server("dgcli").dsn) as conn:
        conn.execute("select 1")
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(fleet.fleet_config_toml())
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert latest(home, "statement_snapshots") is None
    assert main(["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot"]) == 0
    assert "not recorded in Dagster" not in capsys.readouterr().out
    event = latest(home, "statement_snapshots")
    assert event is not None and event.asset_materialization is not None
    assert event.run_id == ""  # runless: no Dagster run wrote it
    metadata = event.asset_materialization.metadata
    assert metadata["source"].value == "radar CLI" and metadata["instances_ok"].value == 1
    assert latest(home, "plan_snapshots") is None  # plan capture was off: no plans were written
    today = datetime.now(UTC).date().isoformat()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert today in instance.get_dynamic_partitions(COLLECTION_DAYS)


@pytest.mark.slow  # a fresh SQLite Dagster instance takes ~2.5 s to create
def test_without_dagster_home_the_cli_reports_to_the_folder_make_dev_uses(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21: `radar` and Dagster disagreed unless DAGSTER_HOME was set everywhere. Unset, the CLI
    reports to ./.dagster_home, the instance `make dev` runs (DAGSTER_HOME=$(CURDIR)/.dagster_home)."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".dagster_home").mkdir()
    write_two_snapshots(lake_root, datetime(2026, 11, 29, 10, 0, tzinfo=UTC))
    assert main(["--lake", str(lake_root), "samples", "--rebuild"]) == 0
    assert "warning" not in capsys.readouterr().out
    event = latest(tmp_path / ".dagster_home", "query_samples")
    assert event is not None and event.asset_materialization is not None
    assert event.asset_materialization.metadata["source"].value == "radar CLI"
