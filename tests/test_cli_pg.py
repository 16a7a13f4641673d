"""`radar snapshot --capture-plans --auto-explain` and `radar plans` against a real PostgreSQL 18 server."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs import lake
from jobs.cli import main
from jobs.fleet import EmbeddedFleet
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def plans_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    fleet = fleet_factory(
        ["cli"], {"auto_explain.log_min_duration": "0", "pg_stat_statements.track": "'all'"}
    )
    with psycopg.connect(fleet.server("cli").dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int, sku int)")
        conn.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 20000) g")
        conn.execute("CREATE INDEX items_sku_idx ON items (sku); ANALYZE items")
    return fleet


def run_json(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(list(args)) == code
    captured = capsys.readouterr()
    return json.loads(captured.out)


def test_snapshot_capture_plans_then_plans_shows_the_history_and_the_change(
    plans_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(plans_fleet.fleet_config_toml())
    common = ["--lake", str(lake_root), "--fleet-file", str(fleet_file)]
    dsn = plans_fleet.server("cli").dsn
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT id FROM items WHERE sku = %s", (Int4(7),))
    rows = run_json(capsys, *common, "snapshot", "--capture-plans", "--auto-explain", "--format", "json")
    assert [r["instance"] for r in rows] == ["cli"] and rows[0]["status"] == "ok"
    plans = lake.read_table(lake_root, "plan_snapshots")
    assert rows[0]["plans_captured"] == plans.filter(plans["source"] == "generic_explain").height > 0
    assert rows[0]["auto_explain_records"] >= 1  # the SELECT above, logged by auto_explain
    assert "auto_explain" in set(plans["source"])

    history = run_json(capsys, *common, "plans", "from items where sku", "--format", "json")
    generic = [r for r in history if r["source"] == "generic_explain"]
    assert len(generic) == 1 and generic[0]["root_node"] == "Index Scan"
    assert generic[0]["change_summary"] == "first plan stored"
    stored = plans.filter(
        (plans["source"] == "generic_explain") & (plans["queryid"] == int(generic[0]["queryid"]))
    )
    assert generic[0]["shape_hash"] == stored["shape_hash"][0]
    assert datetime.fromisoformat(generic[0]["captured_at"]) == stored["captured_at"][0]

    # The index goes: the next cycle stores a second shape and `radar plans` says what changed.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX items_sku_idx")
        conn.execute("SELECT id FROM items WHERE sku = %s", (Int4(8),))
    assert main([*common, "snapshot", "--capture-plans"]) == 0
    history = run_json(
        capsys, *common, "plans", generic[0]["queryid"], "--format", "json", "--source", "generic_explain"
    )
    assert [r["root_node"] for r in history] == ["Index Scan", "Seq Scan"]
    assert "-items_sku_idx" in history[1]["change_summary"]
    capsys.readouterr()
    assert main([*common, "plans", generic[0]["queryid"]]) == 0
    out = capsys.readouterr().out
    assert "last change: Plan changed: Index Scan using items_sku_idx on items" in out

    # Nothing matches: exit 1, said on stderr, stdout still an empty JSON array.
    assert run_json(capsys, *common, "plans", "no such query text", "--format", "json", code=1) == []


def test_snapshot_without_capture_plans_writes_no_plans(
    plans_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(plans_fleet.fleet_config_toml())
    assert main(["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot"]) == 0
    assert lake.read_table(lake_root, "snapshot_runs").height == 1
    assert lake.read_table(lake_root, "plan_snapshots").height == 0
