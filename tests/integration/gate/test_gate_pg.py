"""The gate against real PostgreSQL 18 servers: identical databases pass, a dropped index blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from jobs.gate.config import BLOCK, PASS, GateConfig
from jobs.gate.runner import GateError, run_gate, run_gate_workload
from jobs.gate.verdict import gate_report_contract, render_gate_report
from jobs.gate.workload import parse_workload
from jobs.local.embedded import EmbeddedFleet
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
WORKLOAD = FIXTURES / "gate_workload.toml"


@pytest.fixture(scope="module")
def gate_fleet(fleet_factory: FleetFactory) -> dict[str, Any]:
    """Two servers with the same schema and data in ``postgres``; on the candidate server also
    ``gate_copy`` (the same again), ``gate_noindex`` (the same without the index the workload needs), and
    ``gate_empty`` (no tables, no pg_stat_statements) on both.

    The tests that assert a verdict compare two databases of one server: two servers of a busy host run
    the same statements at different speeds (a side difference no statistic inside one run can tell from a
    regression: issue 12's A/A calibration and swapped cycles), and a verdict test must not depend on it."""
    fleet: EmbeddedFleet = fleet_factory(["base", "cand"])
    schema = (FIXTURES / "gate_schema.sql").read_text()
    for server in fleet.servers:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(schema)
            conn.execute("CREATE DATABASE gate_empty")
    cand = fleet.server("cand")
    with psycopg.connect(cand.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE gate_noindex")
        conn.execute("CREATE DATABASE gate_copy")
    with psycopg.connect(cand.dsn_for("gate_copy"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute(schema)
    with psycopg.connect(cand.dsn_for("gate_noindex"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute(schema)
        conn.execute("DROP INDEX gate_orders_customer_id_idx")
    return {"base": fleet.server("base"), "cand": cand}


def test_identical_databases_pass(gate_fleet: dict[str, Any]) -> None:
    cand = gate_fleet["cand"]
    report = run_gate(cand.dsn, cand.dsn_for("gate_copy"), WORKLOAD)
    # Never BLOCK; a p95 WARN is what this engine can give on identical databases of one busy host (CI,
    # 2026-12-02: p95 x1.284, CI 1.080-1.492, after 70 rounds). The scenario engine is issue 12's answer.
    assert report.verdict != BLOCK, render_gate_report(report)
    table = render_gate_report(report)
    # Allowed reasons: what the gate really gives on identical databases of one busy host, below BLOCK: a
    # latency WARN (p50, p95, or the tail's mean of every call) or a PASS note (a move the server's execution
    # time did not confirm). Never a plan, buffers or error reason. (The drift scorer's line, "drift
    # (informational, not in the verdict)", is printed in the table below the reasons, never one of them.)
    allowed = ("WARN: p50 ×", "WARN: p95 ×", "WARN: mean of every call ×", "PASS: ")
    assert all(r.startswith(allowed) for q in report.queries for r in q.reasons), table
    assert report.termination.reason == "all_settled"
    for query in report.queries:
        assert query.plan is not None and not query.plan.changed
        assert query.latency is not None and 0.8 < query.latency.p50_ratio < 1.25
        assert query.baseline_statements is not None and query.candidate_statements is not None
        # Every measured call was counted (plus the discarded warm-up calls after each reconnect).
        assert query.baseline_statements.calls >= query.latency.n_baseline + query.latency.dropped_baseline
        assert query.candidate_statements.rows_per_call == query.baseline_statements.rows_per_call
        # Every measured call's timing went to the drift scorer (informational: the verdict is PASS above).
        assert query.drift is not None and query.drift.flag in (PASS, "WARN", "BLOCK")
        assert query.drift.n_baseline == query.latency.n_baseline + query.latency.dropped_baseline
    jsonschema.validate(json.loads(report.to_json()), gate_report_contract())
    assert "password" not in report.to_json()


@pytest.mark.slow  # about 20-28 s: the slow tier keeps make test under 10 minutes (CI runs both)
def test_candidate_missing_the_index_blocks_with_the_plan_change(gate_fleet: dict[str, Any]) -> None:
    cand = gate_fleet["cand"]
    report = run_gate(cand.dsn, cand.dsn_for("gate_noindex"), WORKLOAD)
    table = render_gate_report(report)
    assert report.verdict == BLOCK, table
    assert report.exit_code == 2
    verdicts = {q.name: q for q in report.queries}
    hit = verdicts["orders_by_customer"]
    assert hit.verdict == BLOCK
    assert hit.latency is not None and hit.latency.p50_ci[0] >= GateConfig().p50_block_ratio
    assert hit.plan is not None and hit.plan.changed
    assert "-gate_orders_customer_id_idx" in hit.plan.summary and "Seq Scan" in hit.plan.summary
    assert hit.buffers_ratio is not None and hit.buffers_ratio >= 2.0
    assert any(r.startswith("BLOCK: shared buffers/call") for r in hit.reasons)
    assert hit.drift is not None and hit.drift.flag != PASS, "a 10x slower plan is a drift (or too few calls)"
    # The unaffected query keeps its plan and its work. Its latency verdict is not asserted here: in this
    # engine every round interleaves all queries, and on a quiet machine (2026-12-02) the lookup measured
    # x1.37 on the candidate, whose rounds also run the 4 ms sequential scan (a side effect of the
    # neighbouring query, not noise a statistic removes). The scenario engine measures one scenario at a
    # time; test_a_missing_index_blocks_its_scenario_early_and_passes_the_others asserts PASS there.
    other = verdicts["customer_by_id"]
    assert other.plan is not None and not other.plan.changed, table
    assert other.buffers_ratio is not None and other.buffers_ratio == pytest.approx(1.0, abs=0.05), table
    assert "Plan changed" in table and "orders_by_customer" in table


def test_without_pg_stat_statements_and_with_a_failing_candidate(gate_fleet: dict[str, Any]) -> None:
    """No extension: latency and plans only, said in a note. A query the candidate cannot run blocks."""
    base, cand = gate_fleet["base"], gate_fleet["cand"]
    simple = parse_workload(
        '[[queries]]\nname = "add"\nsql = "SELECT $1 + 1"\nparams = [{ int_range = [1, 9] }]\n', "inline.toml"
    )
    config = GateConfig(max_rounds=12)
    # One database on both sides: without pg_stat_statements no server time can veto a side difference,
    # and on a busy host 12 rounds of a 0.2 ms query can show a p95 WARN (seen once in CI: p95 x1.30,
    # +0.074 ms). Identical sides must never BLOCK; a gate that also never WARNs there is issue 12.
    report = run_gate_workload(cand.dsn_for("gate_empty"), cand.dsn_for("gate_empty"), simple, config)
    assert report.verdict != BLOCK, render_gate_report(report)
    assert report.queries[0].error is None
    assert "pg_stat_statements is not installed on the baseline" in report.notes
    assert report.queries[0].baseline_statements is None

    tables = parse_workload(
        '[[queries]]\nname = "regions"\nsql = "SELECT count(*) FROM gate_customers WHERE region = $1"\n'
        "params = [{ int_range = [0, 16] }]\n",
        "inline.toml",
    )
    failing = run_gate_workload(base.dsn, cand.dsn_for("gate_empty"), tables, config)
    assert failing.verdict == BLOCK
    assert failing.queries[0].error is not None and "gate_customers" in failing.queries[0].error
    assert failing.termination.reason == "all_failed"
    with pytest.raises(GateError, match="'regions': EXPLAIN fails on the baseline"):
        run_gate_workload(cand.dsn_for("gate_empty"), base.dsn, tables, config)
    with pytest.raises(GateError, match=r"candidate: cannot connect to host=127\.0\.0\.1 port=1 "):
        run_gate_workload(base.dsn, "postgresql://postgres:secret@127.0.0.1:1/x", tables, config)


@pytest.mark.slow  # about 15-22 s: the slow tier keeps make test under 10 minutes (CI runs both)
def test_gate_cli_exit_codes_and_json(gate_fleet: dict[str, Any], tmp_path: Path) -> None:
    """PASS exits 0 and writes the report file (--json); BLOCK (exit 2), the JSON on stdout and a gate that
    cannot run (exit 3) are tests/integration/cli/test_cli_pg.py's gate test."""
    from jobs.cli.main import main

    cand = gate_fleet["cand"]
    out = tmp_path / "gate.json"
    args = ["gate", "--baseline", cand.dsn, "--workload", str(WORKLOAD), "--json", str(out)]
    assert main([*args, "--candidate", cand.dsn_for("gate_copy")]) == 0
    report = json.loads(out.read_text())
    jsonschema.validate(report, gate_report_contract())
    assert report["verdict"] == "PASS"
