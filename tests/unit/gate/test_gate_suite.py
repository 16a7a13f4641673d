"""The scenario gate's pure parts on inline data: the per-execution counters, the scenario's judgement over
its cycles (selection, plan renames, INCONCLUSIVE), the report's rows, JSON contract and table."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, GateConfig
from jobs.gate.cycle import (
    TAIL,
    WALLCLOCK,
    compare_samples,
    compare_values,
    select_interleaved,
    tail_verdict,
)
from jobs.gate.measure import ServerFacts, StatementCounters
from jobs.gate.scenario import Scenario, ScenarioStatement
from jobs.gate.selection import Asymmetry
from jobs.gate.suite import (
    CalibrationReport,
    ScenarioCycle,
    SuiteReport,
    _judge,
    _per_execution,
    _plan_changes,
)
from jobs.gate.suite_report import (
    gate_results_frame,
    gate_suite_contract,
    render_suite_report,
    scenario_rows,
    suite_report_dict,
)
from jobs.schemas.analysed import GATE_RESULTS

CONFIG = GateConfig(calibration="off")
SCENARIO = Scenario(
    name="lookup",
    benchmark=(ScenarioStatement("SELECT 1", True, 1, True, True),),
)


def counters(calls: int, temp: float, shared: float = 0.0) -> StatementCounters:
    return StatementCounters(
        calls=calls,
        shared_blocks=shared,
        shared_blocks_read=0.0,
        temp_blocks_written=temp,
        wal_bytes=0.0,
        plan_ms=0.0,
        plans=0,
        exec_ms=float(calls),
    )


def test_counters_become_per_execution_values() -> None:
    got = _per_execution(counters(10, 100.0, 50.0), counters(40, 700.0, 350.0), executions=10, repeat=3)
    assert got is not None
    assert got.temp_blocks_written == 600.0 / 30 and got.shared_blocks == 300.0 / 30
    assert _per_execution(None, counters(1, 0.0), 1, 1) is None


def cycle(
    k: int, wall_ratio: float, temp: tuple[float, float] = (0.0, 0.0), complete: bool = True
) -> ScenarioCycle:
    base = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0]
    cand = [wall_ratio * v for v in base]
    comparisons = {
        WALLCLOCK: compare_samples(WALLCLOCK, base, cand, CONFIG),
        TAIL: tail_verdict(base, cand, CONFIG),
        "temp_blocks": compare_values("temp_blocks", *temp, CONFIG),
    }
    return ScenarioCycle(
        k,
        "baseline" if k % 3 == 0 else "candidate",
        {"baseline": 8, "candidate": 8},
        {"baseline": "normal_overlap", "candidate": "decisive_block"},
        comparisons,
        complete,
    )


def test_the_median_cycle_decides_and_one_bad_cycle_does_not() -> None:
    one_bad = _judge(SCENARIO, [cycle(0, 1.0), cycle(1, 1.6), cycle(2, 1.01)], (), {}, CONFIG, [])
    assert one_bad.verdict == PASS
    two_bad = _judge(SCENARIO, [cycle(0, 1.5), cycle(1, 1.6)], (), {}, CONFIG, [])
    assert two_bad.verdict == BLOCK
    assert any(r.startswith("BLOCK: wallclock") for r in two_bad.reasons)


def test_temp_blocks_regress_on_their_own() -> None:
    result = _judge(SCENARIO, [cycle(k, 1.0, (0.0, 900.0)) for k in range(3)], (), {}, CONFIG, [])
    assert result.verdict == BLOCK
    assert [r for r in result.reasons if "temp_blocks" in r]
    assert not [r for r in result.reasons if r.startswith("BLOCK: wallclock")]


def test_a_cycle_cut_by_the_budget_is_inconclusive_unless_blocked_by_the_design_rule() -> None:
    design = replace(CONFIG, verdict_rule="design")
    cut = _judge(SCENARIO, [cycle(0, 1.0), cycle(1, 1.0, complete=False)], (), {}, design, [])
    assert cut.verdict == INCONCLUSIVE
    blocked = _judge(SCENARIO, [cycle(0, 1.5), cycle(1, 1.5, complete=False)], (), {}, design, [])
    assert blocked.verdict == BLOCK
    # bounded: the cut cycle's measurements count, and the CI decides (here narrow: PASS is ruled in)
    bounded = _judge(SCENARIO, [cycle(0, 1.0), cycle(1, 1.0, complete=False)], (), {}, CONFIG, [])
    assert bounded.verdict == PASS and "the budget ran out inside a cycle" in bounded.notes


def test_the_tail_row_is_corrected_by_its_own_asymmetry() -> None:
    """A contended server inflates the mean more than the median: identical databases measure p50 x1.3 and
    mean x1.74 there. Corrected each by the A/A asymmetry of its own statistic they PASS; the tail row
    corrected by the median's asymmetry would read x1.34 and fail."""
    base = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0, 1.01, 0.99] * 4
    cand = [1.3 * v for v in base[:32]] + [3.5] * 8  # a fifth stalled: the mean x1.74, the median x1.3

    def stalled(k: int) -> ScenarioCycle:
        comparisons = {
            WALLCLOCK: compare_samples(WALLCLOCK, base, cand, CONFIG, salt=k),
            TAIL: tail_verdict(base, cand, CONFIG, salt=k),
        }
        return ScenarioCycle(k, "baseline", {"baseline": 40, "candidate": 40}, {}, comparisons)

    cycles = [stalled(k) for k in range(3)]
    wall_ratio, tail_ratio = cycles[0].comparisons[WALLCLOCK].ratio, cycles[0].comparisons[TAIL].ratio
    assert wall_ratio == pytest.approx(1.3, rel=0.02) and tail_ratio > 1.7

    def aa(ratio: float) -> Asymmetry:
        return Asymmetry("aa", ratio, (ratio * 0.97, ratio * 1.03), 0.03, 5, True, "aa over 5 cycles")

    own = _judge(SCENARIO, cycles, (), {WALLCLOCK: aa(wall_ratio), TAIL: aa(tail_ratio)}, CONFIG, [])
    assert own.verdict == PASS, own.reasons
    assert own.tail_asymmetry is not None and own.tail_asymmetry.ratio == tail_ratio
    shared = _judge(SCENARIO, cycles, (), {WALLCLOCK: aa(wall_ratio), TAIL: aa(wall_ratio)}, CONFIG, [])
    assert shared.verdict != PASS and any("wallclock_mean" in r for r in shared.reasons)


def interleaved_cycle(k: int, server_ratio: float, regression: float) -> ScenarioCycle:
    """One interleaved A/A cycle: the candidate's server runs everything ``server_ratio`` slower (the copy
    too), and the candidate itself is ``regression`` slower than the copy."""
    base = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0]
    copy = [server_ratio * v for v in base]
    cand = [regression * v for v in copy]
    raw = {
        WALLCLOCK: compare_samples(WALLCLOCK, base, cand, CONFIG, salt=k),
        TAIL: tail_verdict(base, cand, CONFIG, salt=k),
    }
    calibration = {
        WALLCLOCK: compare_samples(WALLCLOCK, base, copy, CONFIG, salt=k),
        TAIL: tail_verdict(base, copy, CONFIG, salt=k),
    }
    corrected = {
        WALLCLOCK: compare_samples(WALLCLOCK, copy, cand, CONFIG, salt=k),
        TAIL: tail_verdict(copy, cand, CONFIG, salt=k),
    }
    return ScenarioCycle(
        k,
        "baseline",
        {"baseline": 8, "candidate": 8, "calibration": 8},
        {},
        raw,
        True,
        calibration,
        corrected,
    )


def test_interleaved_cycles_are_judged_against_the_copy_on_the_candidates_server() -> None:
    """A server 1.6x slower for everything: raw BLOCK, judged against the copy PASS; a real 1.6x regression
    on that server BLOCKs. The row keeps the measured values and the raw ratio, and the pooled asymmetry
    is reported."""
    slow_server = [interleaved_cycle(k, server_ratio, 1.0) for k, server_ratio in enumerate((1.6, 1.9, 1.4))]
    assert all(c.comparisons[WALLCLOCK].verdict == BLOCK for c in slow_server)
    result = _judge(SCENARIO, slow_server, (), {}, CONFIG, [])
    assert result.verdict == PASS, result.reasons
    wall = next(m for m in result.selected if m.measurement == WALLCLOCK)
    assert wall.chosen.ratio == pytest.approx(1.0, abs=0.01) and wall.raw_ratio > 1.3
    assert wall.chosen.candidate / wall.chosen.baseline == pytest.approx(wall.raw_ratio)
    assert "interleaved A/A" in wall.correction
    regressed = [interleaved_cycle(k, 1.6, 1.6) for k in range(3)]
    blocked = _judge(SCENARIO, regressed, (), {}, CONFIG, [])
    assert blocked.verdict == BLOCK and any(r.startswith("BLOCK: wallclock") for r in blocked.reasons)
    assert regressed[0].judged(WALLCLOCK) is regressed[0].corrected[WALLCLOCK]
    assert regressed[0].judged(WALLCLOCK).ratio == pytest.approx(1.6)


def test_select_interleaved_needs_one_comparison_of_each_kind_per_cycle() -> None:
    cycles = [interleaved_cycle(k, 1.2, 1.0) for k in range(3)]
    raw = [c.comparisons[WALLCLOCK] for c in cycles]
    corrected = [c.corrected[WALLCLOCK] for c in cycles]
    with pytest.raises(ValueError, match="one of each per cycle"):
        select_interleaved(WALLCLOCK, raw, corrected[:2], corrected, CONFIG)
    chosen = select_interleaved(WALLCLOCK, raw, corrected, [c.calibration[WALLCLOCK] for c in cycles], CONFIG)
    assert chosen.verdict == PASS and chosen.raw_ratio == pytest.approx(1.2, rel=0.01)


def plan(index: str, node: str = "Index Scan") -> list[dict[str, object]]:
    return [{"Plan": {"Node Type": node, "Relation Name": "t", "Index Name": index, "Plans": []}}]


def test_an_index_rename_is_noted_and_a_plan_change_warns() -> None:
    renamed = _plan_changes([plan("a_idx")], [plan("b_idx")])
    assert renamed[0].changed and renamed[0].index_rename_only
    result = _judge(SCENARIO, [cycle(k, 1.0) for k in range(3)], renamed, {}, CONFIG, [])
    assert result.verdict == PASS and any("only in index names" in n for n in result.notes)
    changed = _plan_changes([plan("a_idx")], [plan("a_idx", "Bitmap Heap Scan")])
    assert changed[0].changed and not changed[0].index_rename_only
    assert _judge(SCENARIO, [cycle(k, 1.0) for k in range(3)], changed, {}, CONFIG, []).verdict == "WARN"


def facts(role: str) -> ServerFacts:
    return ServerFacts(
        role=role,
        version="PostgreSQL 18.1 on x86_64",
        version_num=180001,
        system_identifier="7",
        address="127.0.0.1:5432",
        settings=(("work_mem", "4MB"),),
        statements_note=None,
        track_planning=True,
        memory_contexts=True,
        local_proc=True,
    )


def test_the_report_rows_json_contract_table_and_lake_frame() -> None:
    result = _judge(SCENARIO, [cycle(0, 1.5, (0.0, 900.0)), cycle(1, 1.6, (0.0, 900.0))], (), {}, CONFIG, [])
    report = SuiteReport(
        verdict=BLOCK,
        scenarios=(result,),
        calibration=CalibrationReport("auto", "off", None, note="one server"),
        servers=(facts("baseline"), facts("candidate")),
        config=CONFIG,
        baseline="postgresql://u@h/db",
        candidate="postgresql://u@h/db2",
        source="inline.sql",
        started_at="2026-12-01T10:00:00+00:00",
        seconds=3.0,
        measure_seconds=2.5,
        stop_reason="decided",
    )
    assert report.exit_code == 2
    rows = scenario_rows(report)
    assert {r["measurement"] for r in rows} == {WALLCLOCK, TAIL, "temp_blocks"}
    wall = next(r for r in rows if r["measurement"] == WALLCLOCK)
    assert wall["ratio"] == pytest.approx(1.5) and wall["stopped_by_candidate"] == "decisive_block"
    payload = suite_report_dict(report)
    jsonschema.validate(json.loads(json.dumps(payload)), gate_suite_contract())
    table = render_suite_report(report)
    assert "lookup" in table and "strong" in table and "Verdict BLOCK (exit 2)" in table
    assert "work_mem=4MB" in table
    frame = gate_results_frame(report)
    assert frame.schema == GATE_RESULTS.polars_schema and frame.height == len(rows)
    inconclusive = SuiteReport(**{**report.__dict__, "verdict": INCONCLUSIVE})
    assert inconclusive.exit_code == 4
