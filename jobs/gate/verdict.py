"""The order of the gate's verdicts: what the worst of several is (a run's of its scenarios', a scenario's of
its measurements')."""

from __future__ import annotations

from jobs.gate.config import BLOCK, INCONCLUSIVE, PASS, WARN

SEVERITY = {PASS: 0, WARN: 1, INCONCLUSIVE: 2, BLOCK: 3}


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.__getitem__, default=PASS)
