"""The scenario gate against real PostgreSQL 18 servers: a missing index BLOCKs early and only its
scenario, a work_mem cut shows as temp blocks, a bigger sort as memory, and identical databases on two
servers, one of them slowed by a CPU-heavy neighbour, PASS once calibrated (the calibration shown)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, GateConfig
from jobs.gate.scenario import parse_scenario_sql
from jobs.gate.suite import NOT_RUN, run_scenario_gate
from jobs.gate.suite_report import gate_suite_contract, render_suite_report, suite_report_dict
from jobs.local.embedded import EmbeddedFleet
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FAST = GateConfig(
    cycles=3,
    max_measurements=30,
    memory_executions=2,
    warmup_calls=2,
    calibration_cycles=5,
    bootstrap_resamples=500,
    suite_max_seconds=240.0,
)

LOOKUPS = (FIXTURES / "gate_lookups.sql").read_text()

SORT = """
-- @shared
CREATE TABLE IF NOT EXISTS suite_facts AS
SELECT g AS id, md5(g::text) AS payload, g % 1000 AS grp FROM generate_series(1, 120000) g;
ANALYZE suite_facts;
-- @scenario big_sort
-- @benchmark
SELECT id, payload FROM suite_facts ORDER BY payload OFFSET 119990;
"""


@pytest.fixture(scope="module")
def suite_fleet(fleet_factory: FleetFactory) -> dict[str, Any]:
    fleet: EmbeddedFleet = fleet_factory(["sbase", "scand"], {"pg_stat_statements.track_planning": "on"})
    schema = (FIXTURES / "gate_schema.sql").read_text()
    for server in fleet.servers:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(schema)
            for db in ("suite_noindex", "suite_lowmem", "suite_mem4", "suite_bigmem", "suite_copy"):
                conn.execute(f"CREATE DATABASE {db}")
        for db in ("suite_noindex", "suite_lowmem", "suite_mem4", "suite_bigmem", "suite_copy"):
            with psycopg.connect(server.dsn_for(db), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                conn.execute(schema)
        with psycopg.connect(server.dsn_for("suite_noindex"), autocommit=True) as conn:
            conn.execute("DROP INDEX gate_orders_customer_id_idx")
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("ALTER DATABASE suite_lowmem SET work_mem = '64kB'")
            conn.execute("ALTER DATABASE suite_bigmem SET work_mem = '256MB'")
            conn.execute("ALTER DATABASE suite_mem4 SET work_mem = '4MB'")
            conn.execute("ALTER DATABASE postgres SET work_mem = '64MB'")  # the sort fits: no temp blocks
    return {"fleet": fleet, "base": fleet.server("sbase"), "cand": fleet.server("scand")}


def test_a_missing_index_blocks_its_scenario_early_and_passes_the_others(suite_fleet: dict[str, Any]) -> None:
    server = suite_fleet["base"]
    suite = parse_scenario_sql(LOOKUPS, "lookups.sql")
    report = run_scenario_gate(server.dsn, server.dsn_for("suite_noindex"), suite, FAST)
    table = render_suite_report(report)
    by_name = {s.name: s for s in report.scenarios}
    assert report.verdict == BLOCK and report.exit_code == 2, table
    # One cycle of it was measured before the BLOCK decided the run: PASS if that cycle's CI rules out a
    # regression, else INCONCLUSIVE; never a regression.
    assert by_name["customer_by_id"].verdict in (PASS, INCONCLUSIVE), table
    blocked = by_name["orders_by_customer"]
    assert blocked.verdict == BLOCK, table
    assert any(r.startswith("BLOCK: wallclock") for r in blocked.reasons), table
    assert any(p.changed and not p.index_rename_only for p in blocked.plans), table
    # Stopped early: 2 suite cycles decide it (each cycle runs the whole suite, the order reversed in the
    # second); the CI decided inside each cycle; the scenario last in the second cycle's order had only its
    # first cycle when the run stopped.
    assert len(blocked.cycles) == 2, table
    assert all(c.stopped_by["candidate"] == "decisive_block" for c in blocked.cycles), table
    assert len(by_name["customer_by_id"].cycles) == 1, table
    assert by_name["customer_again"].verdict != NOT_RUN and len(by_name["customer_again"].cycles) == 2
    assert report.stop_reason == "decided"
    assert report.calibration.mode == "off"  # one server: nothing to calibrate
    payload = suite_report_dict(report)
    jsonschema.validate(json.loads(json.dumps(payload)), gate_suite_contract())
    assert {r["measurement"] for r in payload["rows"]} >= {"wallclock", "wallclock_mean", "shared_blocks"}


@pytest.mark.slow  # ~15 s each: the slow tier keeps make test under 10 minutes (CI runs both)
def test_a_work_mem_cut_is_a_temp_blocks_regression(suite_fleet: dict[str, Any]) -> None:
    server = suite_fleet["base"]
    suite = parse_scenario_sql(SORT, "sort.sql")
    report = run_scenario_gate(server.dsn, server.dsn_for("suite_lowmem"), suite, FAST)
    table = render_suite_report(report)
    (sort,) = report.scenarios
    rows = {m.measurement: m for m in sort.selected}
    assert rows["temp_blocks"].verdict == BLOCK, table
    assert rows["temp_blocks"].chosen.baseline == 0 and rows["temp_blocks"].chosen.candidate > 100, table
    assert report.verdict == BLOCK


@pytest.mark.slow  # ~15 s each: the slow tier keeps make test under 10 minutes (CI runs both)
def test_a_bigger_in_memory_sort_is_a_memory_regression(suite_fleet: dict[str, Any]) -> None:
    server = suite_fleet["base"]
    suite = parse_scenario_sql(SORT, "sort.sql")
    report = run_scenario_gate(server.dsn_for("suite_mem4"), server.dsn_for("suite_bigmem"), suite, FAST)
    table = render_suite_report(report)
    (sort,) = report.scenarios
    rows = {m.measurement: m for m in sort.selected}
    assert rows["memory"].verdict == BLOCK, table
    assert rows["memory"].chosen.candidate > 2 * rows["memory"].chosen.baseline, table
    assert rows["temp_blocks"].chosen.kind == "improvement", table  # the baseline spills, the candidate not


def _skip_if_the_hog_changed_after_the_calibration(report: Any, table: str) -> None:
    """The design's A/A cycles run before the scenario's, so they correct the slowdown the hog caused
    then: CI's slow tier once saw x1.33 (CI 1.31-1.35) there and x2.0 in the cycles after, a corrected
    x1.50 BLOCK of identical databases (about 1 run in 7 here). What that timing cannot see is no failure
    of the radar (interleaved, the default, measures it in every cycle): skipped, said. Still red when the
    correction was not applied (the raw ratio is then the calibration's own, inside its CI)."""
    for scenario in report.scenarios:
        asymmetry = scenario.asymmetry
        for m in scenario.selected:
            if m.measurement != "wallclock" or m.verdict != BLOCK:
                continue
            applied = asymmetry is not None and m.chosen.ratio == pytest.approx(
                m.raw_ratio / asymmetry.ratio, rel=1e-6
            )
            if not applied or m.raw_ratio <= asymmetry.ci[1] * (1.0 + m.chosen.threshold):
                return  # a BLOCK the calibration should have prevented: the assertions judge it
    pytest.skip(
        "premise not met: the hog slowed the candidate's server more during the cycles than in the A/A "
        "cycles before them, which the design's timing cannot correct\n" + table
    )


def _pin(pid: int, cpu: int) -> None:
    os.sched_setaffinity(pid, {cpu})


def _postmaster_pid(server: Any) -> int:
    return int((server.data_dir / "postmaster.pid").read_text().splitlines()[0])


@pytest.mark.slow  # about 20 s each: its own tier (make test-slow, run by CI)
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to slow one server only")
@pytest.mark.parametrize("aa_timing", ["interleaved", "before"])
def test_identical_databases_on_two_servers_one_slowed_pass_after_calibration(
    suite_fleet: dict[str, Any], aa_timing: str
) -> None:
    """The candidate's server shares its only CPU with a busy neighbour; the baseline's has its own. The
    A/A calibration (the baseline against its copy on the candidate's server, ``suite_copy``) measures each
    scenario's asymmetry, inside every cycle (interleaved, the default) or before the cycles (the
    design's), and the corrected wallclock verdicts PASS, the calibration shown."""
    base, cand = suite_fleet["base"], suite_fleet["cand"]
    cpus = sorted(os.sched_getaffinity(0))
    _pin(_postmaster_pid(base), cpus[0])
    _pin(_postmaster_pid(cand), cpus[1])
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpus[1]}}})\nwhile True: pass"]
    )
    try:
        suite = parse_scenario_sql(LOOKUPS, "lookups.sql")
        config = replace(FAST, calibration="auto", stop_when_decided=False, aa_timing=aa_timing)
        report = run_scenario_gate(
            base.dsn, cand.dsn, suite, config, calibration_dsn=cand.dsn_for("suite_copy")
        )
    finally:
        hog.kill()
        hog.wait()
        for server in (base, cand):
            _pin(_postmaster_pid(server), cpus[0])
            os.sched_setaffinity(_postmaster_pid(server), set(cpus))
    table = render_suite_report(report)
    print(table)  # shown with -s: the calibration and what it changed
    assert report.calibration.mode == "aa", table  # auto: two servers and a calibration copy
    asymmetries = [s.asymmetry for s in report.scenarios]
    assert all(a is not None and a.method == "aa" for a in asymmetries), table
    if aa_timing == "before" and report.verdict == BLOCK:
        _skip_if_the_hog_changed_after_the_calibration(report, table)
    # Identical databases: never a regression, whether or not the hog slowed the candidate's server.
    assert report.verdict in (PASS, INCONCLUSIVE), table
    raw = [m.raw_ratio for s in report.scenarios for m in s.selected if m.measurement == "wallclock"]
    measured = max(a.ratio for a in asymmetries if a is not None)
    if measured <= 1.1 or max(raw) <= 1.1:
        # The premise, not the radar: the hog pinned beside the candidate's server did not slow it on this
        # host (seen in issue 21's session: A/A asymmetry x0.86 in 3 of 3 runs, on the code before the
        # session too); there is then no slowdown for the calibration to correct. Said, not passed.
        pytest.skip(
            f"premise not met on this host: the CPU hog slowed the candidate's server x{measured:.2f} "
            f"(A/A) and x{max(raw):.2f} (raw wallclock); more than x1.1 needed"
        )
    wallclock = [m for s in report.scenarios for m in s.selected if m.measurement == "wallclock"]
    if aa_timing == "interleaved":
        # The correction, not the host's quiet: every scenario's candidate/copy ratio is back near 1 (the raw
        # one was the hog's x1.4-2). A cycle whose timings the hog made bimodal may leave a CI too wide to
        # rule a regression out (CI once: x0.985, CI 0.323-3.005, 7 cycles): INCONCLUSIVE is then the honest
        # verdict, and its CI holds 1. Every scenario PASSed in 3 of 3 runs on a quieter host.
        for m in wallclock:
            t = m.chosen.threshold
            assert 1.0 / (1.0 + t) < m.chosen.ratio < 1.0 + t, table
            assert m.decided or m.chosen.ci[0] < 1.0 < m.chosen.ci[1], table
        assert report.verdict == PASS or any(not m.decided for m in wallclock), table
    else:
        # The design's A/A cycles before the scenario's: an asymmetry whose CI is wider than its limit is
        # carried with its uncertainty, so the verdict it cannot support is INCONCLUSIVE, never a regression.
        assert report.verdict in (PASS, INCONCLUSIVE), table
        if report.verdict == INCONCLUSIVE:
            assert "with its uncertainty" in table and "undecided" in table, table
    assert "A/A asymmetry" in table
    if aa_timing == "interleaved":
        assert "measured inside each cycle" in table, table
        assert all(
            m.correction.startswith("interleaved A/A")
            for s in report.scenarios
            for m in s.selected
            if m.measurement == "wallclock"
        ), table
        assert all(c.measurements["calibration"] > 0 for s in report.scenarios for c in s.cycles), table
    else:
        assert "applied" in table, table


@pytest.mark.slow  # ~15 s each: the slow tier keeps make test under 10 minutes (CI runs both)
def test_the_cli_runs_scenarios_with_flags_json_and_the_lake(
    suite_fleet: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.cli.main import main
    from jobs.lake.io import read_table

    server = suite_fleet["base"]
    scenarios = tmp_path / "lookups.sql"
    scenarios.write_text(LOOKUPS)
    lake = tmp_path / "lake"
    args = [
        "--lake",
        str(lake),
        "gate",
        "--baseline",
        server.dsn,
        "--candidate",
        server.dsn_for("suite_noindex"),
        "--scenarios",
        str(scenarios),
        "--cycles",
        "3",
        "--seed",
        "11",
        "--filter",
        "running_mean_sigma",
        "--aa-timing",
        "before",
        "--threshold",
        "memory=0.3",
        "--set",
        "gate.max_measurements=25",
        "--lake-write",
        "--format",
        "json",
    ]
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    jsonschema.validate(report, gate_suite_contract())
    assert code == report["exit_code"] == 2 and report["verdict"] == "BLOCK"
    config = report["config"]
    assert (config["seed"], config["sample_filter"], config["memory_threshold"]) == (
        11,
        "running_mean_sigma",
        0.3,
    )
    assert config["max_measurements"] == 25 and config["aa_timing"] == "before"
    rows = read_table(lake, "gate_results")
    assert rows.height == len(report["rows"]) and set(rows["scenario"]) >= {"orders_by_customer"}
    bad = tmp_path / "bad.sql"
    bad.write_text("-- @scenario x\n-- @benchmark\n-- @B\nSELECT 1;\n")
    assert main(["gate", "--baseline", server.dsn, "--candidate", server.dsn, "--scenarios", str(bad)]) == 3
    captured = capsys.readouterr()
    assert "bad.sql" in captured.out + captured.err


# A sleep of 0-4 ms drawn from a hash of the database's name and a counter: a different, fixed sequence
# on each side. With random() a chance 0.7x on the candidate (a few runs in a hundred) ruled a 10% regression
# out and PASSed honestly, failing this test on CI; a fixed sequence makes the premise hold every run.
JITTERY = """
-- @scenario jittery
-- @init
CREATE SEQUENCE IF NOT EXISTS gate_jitter;
-- @benchmark
SELECT pg_sleep((hashtext(current_database() || nextval('gate_jitter')::text) & 1023) / 1023.0 * 0.004);
"""


def test_an_undecided_scenario_gets_more_cycles_then_is_inconclusive(suite_fleet: dict[str, Any]) -> None:
    """A statement whose time is drawn from 0-4 ms: 15 measurements a cycle cannot tell x1.0 from x1.2, so
    the bounded rule runs the extra cycles (up to max_cycles) and ends INCONCLUSIVE (exit 4), saying how
    large a regression it could not rule out; the design's rule stops at its cycles and PASSes."""
    server = suite_fleet["base"]
    suite = parse_scenario_sql(JITTERY, "jittery.sql")
    config = replace(FAST, cycles=2, max_cycles=4, max_measurements=15, memory_executions=0)
    report = run_scenario_gate(server.dsn, server.dsn_for("suite_copy"), suite, config)
    table = render_suite_report(report)
    (jittery,) = report.scenarios
    assert report.verdict == INCONCLUSIVE and report.exit_code == 4, table
    assert len(jittery.cycles) == 4, table
    wall = next(m for m in jittery.selected if m.measurement == "wallclock")
    assert not wall.decided and wall.rules_out is not None and wall.rules_out > 1.1, table
    assert "cannot rule out a regression up to" in table, table
    design = run_scenario_gate(
        server.dsn, server.dsn_for("suite_copy"), suite, replace(config, verdict_rule="design")
    )
    assert design.verdict == PASS and len(design.scenarios[0].cycles) == 2, render_suite_report(design)
