"""Inline scenario gate runs for the pure tests: cycles from raw samples, a report around them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from jobs.gate.config import GateConfig
from jobs.gate.measure import ServerFacts
from jobs.gate.scenario import Scenario, ScenarioStatement
from jobs.gate.suite import (
    CalibrationReport,
    CycleRaw,
    ScenarioCycle,
    SuiteReport,
    cycle_comparisons,
    judge_scenario,
    run_verdict,
)

CONFIG = GateConfig(calibration="off")
SCENARIO = Scenario(name="lookup", benchmark=(ScenarioStatement("SELECT 1", True, 1, True, True),))


def raw_cycle(k: int, base: np.ndarray, cand: np.ndarray) -> ScenarioCycle:
    raw = CycleRaw(
        samples={"baseline": tuple(base), "candidate": tuple(cand)},
        counters={"baseline": None, "candidate": None},
        memory={"baseline": (), "candidate": ()},
    )
    comparisons, calibration, corrected = cycle_comparisons(raw, CONFIG, k)
    n = {"baseline": len(base), "candidate": len(cand)}
    return ScenarioCycle(k, "baseline", n, {}, comparisons, True, calibration, corrected, raw)


def noisy_cycles(config: GateConfig, sigma: float, factor: float, seed: int = 1) -> list[ScenarioCycle]:
    """Three cycles of 25 lognormal measurements a side (sigma per measurement), the candidate x factor."""
    rng = np.random.default_rng(seed)
    return [
        raw_cycle(
            k,
            np.exp(rng.normal(0.0, sigma, 25)),
            factor * np.exp(rng.normal(0.0, sigma, 25)),
        )
        for k in range(3)
    ]


FACTS = ServerFacts("baseline", "PostgreSQL 18", 180000, None, "127.0.0.1:5432", (), None, False, True, False)


def suite_report(cycles: list[ScenarioCycle], config: GateConfig) -> SuiteReport:
    result = judge_scenario(SCENARIO, cycles, (), {}, config)
    return SuiteReport(
        verdict=run_verdict([result], "complete", config),
        scenarios=(result,),
        calibration=CalibrationReport("off", "off", None, note="not calibrated (one server)"),
        servers=(FACTS, replace(FACTS, role="candidate")),
        config=config,
        baseline="postgresql://u:***@h/db",
        candidate="postgresql://u:***@h/db2",
        source="inline.sql",
        started_at="2026-12-05T10:00:00+00:00",
        seconds=1.0,
        measure_seconds=1.0,
        stop_reason="complete",
    )
