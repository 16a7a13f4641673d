"""`radar snapshot --capture-plans --auto-explain` and `radar plans` against a real PostgreSQL 18 server."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.cli.main import main
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from tests.conftest import FleetFactory
from tests.support.gate_databases import gate_databases

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


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="module")
def gate_server(fleet_factory: FleetFactory) -> Any:
    """One server: ``gate_base`` with the gate schema, ``gate_noindex`` the same without the index."""
    server = fleet_factory(["gatecli"]).server("gatecli")
    gate_databases(server, "gate_base", "gate_noindex")
    return server


def test_gate_workload_runs_the_scenario_engine_with_every_flag_and_exit_codes_that_cannot_be_confused(
    gate_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One engine: a workload file is a scenario suite, and the cycle, threshold, calibration and lake flags
    apply to it. The stored run is judged again by --replay, from the file and from the lake. Usage errors
    exit 64, a gate that could not run 3: never 1 (WARN) or 2 (BLOCK) without a verdict."""
    import jsonschema

    from jobs.gate.suite_report import gate_suite_contract

    config = tmp_path / "radar.toml"
    config.write_text("[gate]\nmax_measurements = 15\nseed = 7\n")
    lake_root = tmp_path / "lake"
    stored = tmp_path / "gate.json"
    args = [
        "--config", str(config), "--lake", str(lake_root), "gate",
        "--baseline", gate_server.dsn_for("gate_base"), "--candidate", gate_server.dsn_for("gate_noindex"),
        "--workload", str(FIXTURES / "gate_workload.toml"), "--cycles", "2", "--max-seconds", "90",
        "--threshold", "memory=0.3", "--calibration", "off", "--filter", "drop_first",
    ]  # fmt: skip
    capsys.readouterr()
    code = main([*args, "--format", "json", "--json", str(stored), "--lake-write"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    jsonschema.validate(report, gate_suite_contract())
    assert code == report["exit_code"] == 2 and report["verdict"] == "BLOCK"
    cfg = report["config"]
    assert (cfg["max_measurements"], cfg["seed"]) == (15, 7)  # from the file
    assert (cfg["cycles"], cfg["suite_max_seconds"], cfg["memory_threshold"]) == (2, 90.0, 0.3)  # flags
    assert (cfg["calibration"], cfg["sample_filter"]) == ("off", "drop_first")
    assert {s["name"] for s in report["scenarios"]} == {
        "orders_by_customer",
        "customer_by_id",
        "recent_orders_by_status",
    }
    assert (
        report["source"].endswith("gate_workload.toml")
        and "postgres" not in captured.out.split('"baseline"')[0]
    )
    # CSV: one row per scenario and measurement.
    assert main([*args, "--format", "csv", "--max-cycles", "2"]) == 2
    parsed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["scenario"] for r in parsed} == {s["name"] for s in report["scenarios"]}
    # Replay: the stored report judged again without a server; a looser threshold changes the verdict of
    # the scenario that regressed on wallclock only if every measurement allows it, so check the figures.
    assert main(["gate", "--replay", str(stored), "--format", "json"]) == 2
    again = json.loads(capsys.readouterr().out)
    assert again["replay_of"] == str(stored) and again["verdict"] == "BLOCK"
    assert [r["ratio"] for r in again["rows"]] == [r["ratio"] for r in report["rows"]]
    assert main(["gate", "--replay", str(stored), "--verdict-rule", "design", "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["config"]["verdict_rule"] == "design"
    from jobs.lake.io import read_table

    run_id = read_table(lake_root, "gate_runs")["run_id"][0]
    assert main(["--lake", str(lake_root), "gate", "--replay", run_id, "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["replay_of"].endswith(f"run {run_id}")
    # Usage errors: 64, no verdict printed.
    for bad_usage in (
        ["gate", "--replay", str(stored), "--baseline", gate_server.dsn],  # replay measures nothing
        ["gate", "--baseline", gate_server.dsn, "--workload", str(FIXTURES / "gate_workload.toml")],
        ["gate", "--bogus"],
        [*args, "--cycles", "many"],
        [*args, "--threshold", "memory=lots"],
        ["--set", "gate.cycles=0", *args[4:]],
    ):
        try:
            code = main([*bad_usage, "--format", "json"])
        except SystemExit as exc:  # argparse's own errors end the process, as `radar` does
            code = int(exc.code or 0)
        assert code == 64, bad_usage
        assert capsys.readouterr().out == ""
    # The gate could not run: exit 3, the reason on stderr, stdout empty (nothing to parse by mistake).
    bad = tmp_path / "bad.toml"
    bad.write_text('[[queries]]\nname = "two"\nsql = "select 1; drop table gate_orders"\n')
    no_mark = tmp_path / "no_mark.py"
    no_mark.write_text(
        "SCENARIOS = [{'name': 'forgot', 'benchmark': lambda conn, params, mark: conn.execute('SELECT 1')}]\n"
    )
    base = ["gate", "--baseline", gate_server.dsn, "--candidate", gate_server.dsn]
    for bad_run in ([*base, "--workload", str(bad)], [*base, "--scenarios", str(no_mark)],
                    ["gate", "--replay", str(tmp_path / "missing.json")]):  # fmt: skip
        assert main([*bad_run, "--format", "json"]) == 3, bad_run
        captured = capsys.readouterr()
        assert captured.out == "" and "gate could not" in captured.err
    assert main([*base, "--scenarios", str(no_mark)]) == 3
    assert "never called mark('A')" in capsys.readouterr().out  # table format: messages on stdout


def test_a_running_embedded_fleet_is_used_only_with_embedded(
    plans_fleet: EmbeddedFleet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # no data/fleet.toml here; an embedded fleet runs at plans_fleet.root
    lake_root = tmp_path / "lake"
    args = ["--lake", str(lake_root), "--embedded-root", str(plans_fleet.root)]
    assert main([*args, "snapshot"]) == 2
    assert "no fleet: data/fleet.toml does not exist" in capsys.readouterr().out
    assert not lake_root.exists()  # nothing was snapshotted instead
    assert main([*args, "snapshot", "--embedded"]) == 0
    assert lake.read_table(lake_root, "snapshot_runs")["instance"].to_list() == ["cli"]


def test_fleet_up_with_the_sampler_runs_auto_explain_as_a_sampler(tmp_path: Path) -> None:
    """`radar fleet up --sampler`: the servers log every sampled execution ([plans.auto_explain.sampler]),
    so per-execution drift can be tried on the embedded fleet; `fleet down --destroy` removes them."""
    import shutil
    import uuid

    from tests.conftest import CLUSTER_BASE

    CLUSTER_BASE.mkdir(parents=True, exist_ok=True)
    CLUSTER_BASE.chmod(0o755)
    root = CLUSTER_BASE / f"cli-sampler-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "radar.toml"
    config.write_text("[plans.auto_explain.sampler]\nsample_rate = 0.25\n")
    try:
        assert (
            main(
                [
                    "--config",
                    str(config),
                    "--embedded-root",
                    str(root),
                    "fleet",
                    "up",
                    "--sampler",
                    "--names",
                    "smp",
                ]
            )
            == 0
        )
        fleet = EmbeddedFleet.load(root)
        assert fleet is not None
        with psycopg.connect(fleet.server("smp").dsn) as conn:
            shown = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in (
                    "auto_explain.sample_rate",
                    "auto_explain.log_min_duration",
                    "auto_explain.log_analyze",
                    "auto_explain.log_timing",
                    "auto_explain.log_format",
                )
            }
        assert shown == {
            "auto_explain.sample_rate": "0.25",
            "auto_explain.log_min_duration": "0",
            "auto_explain.log_analyze": "on",
            "auto_explain.log_timing": "off",
            "auto_explain.log_format": "json",
        }
        assert main(["--embedded-root", str(root), "fleet", "down", "--destroy"]) == 0
        assert EmbeddedFleet.load(root) is None
    finally:
        leftover = EmbeddedFleet.load(root)
        if leftover is not None:
            leftover.destroy()
        shutil.rmtree(root, ignore_errors=True)
