"""A gate report built from two arrays of timings, for the gate's pure tests."""

from __future__ import annotations

import numpy as np

from jobs.gate.config import PASS, GateConfig
from jobs.gate.stats import (
    ALL_SETTLED,
    compare_latencies,
    settle_reason,
)
from jobs.gate.verdict import (
    GateReport,
    PlanComparison,
    QueryResult,
    SideStatements,
    Termination,
)

CONFIG = GateConfig()


def latencies(n: int, median_ms: float, sigma: float, seed: int) -> np.ndarray:
    """Lognormal latencies around ``median_ms`` (client latencies are right-skewed)."""
    return np.random.default_rng(seed).lognormal(np.log(median_ms), sigma, n)


def _report(verdict: str, config: GateConfig = CONFIG) -> GateReport:
    comparison = compare_latencies(latencies(100, 1.0, 0.1, 1), latencies(100, 1.3, 0.1, 2), config)
    query = QueryResult(
        name="q",
        sql="SELECT 1",
        weight=1.0,
        verdict=verdict,
        reasons=(f"{verdict}: because",) if verdict != PASS else (),
        latency=comparison,
        settled_by=settle_reason(comparison, config),
        baseline_statements=SideStatements(10, 3.0, 1.0, 0.1),
        candidate_statements=SideStatements(10, 3.0, 1.0, 0.1),
        plan=PlanComparison("a" * 16, "a" * 16, False, "Plan shape unchanged (Result)."),
    )
    termination = Termination(ALL_SETTLED, 5, 0.2, ("q",), ())
    return GateReport(
        verdict, (query,), termination, config, "host=h", "host=h", "w.toml", "2026-11-29T16:00:00+00:00", 0.3
    )
