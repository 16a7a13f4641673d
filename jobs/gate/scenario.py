"""Scenario suites (issue 12): the dataclasses the measurement edge (jobs/gate/measure.py) runs.

Only the dataclasses of the shared contract live here on this branch; the parser and the loaders
(``parse_scenario_sql``, ``load_scenarios``, ``builtin_suite``) are written on their own branch and replace
this module when the branches meet.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from jobs.gate.workload import ParamGenerator


@dataclass(frozen=True)
class ScenarioStatement:
    sql: str  # one statement, stripped, without the trailing ';'
    measured: bool  # between the @A and @B markers of the benchmark section (all, without markers)
    line: int | None  # 1-based line in its file
    explainable: bool  # SELECT / INSERT / UPDATE / DELETE / MERGE / VALUES / TABLE (EXPLAIN-able)
    returns_rows: bool  # SELECT / VALUES / TABLE / ... RETURNING


@dataclass(frozen=True)
class Scenario:
    name: str  # 1-64 of [A-Za-z0-9_.-]
    init: tuple[str, ...] = ()  # once per target database before its first measurement
    before: tuple[str, ...] = ()  # before every measurement, untimed ($n allowed: same draw)
    benchmark: tuple[ScenarioStatement, ...] = ()  # >= 1 measured statement
    params: tuple[ParamGenerator, ...] = ()  # drawn once per measurement
    prepared: bool = False  # benchmark statements as server-side prepared statements
    plan_cache_mode: str | None = None  # auto | force_generic_plan | force_custom_plan (session SET)
    settings: tuple[tuple[str, str], ...] = ()  # session settings for this scenario
    repeat: int = 1  # executions of the measured part per measurement
    weight: float = 1.0
    source: str = "<memory>"
    line: int | None = None
    python: object | None = None  # the Python form's scenario object (init / before / benchmark callables)

    def draw(self, rng: random.Random) -> tuple[object, ...]:
        """One value per generator."""
        return tuple(g.draw(rng) for g in self.params)


@dataclass(frozen=True)
class ScenarioSuite:
    scenarios: tuple[Scenario, ...]
    shared: tuple[str, ...] = ()  # once per database before any scenario (schema, data)
    source: str = "<memory>"
