"""The Benjamini-Hochberg step of the unannounced analyses, over one call's candidates or the fleet's.

A whole-fleet run adjusts the p-values of every candidate step (latency, and work per call) of the call
together. A sharded fleet (issue 14) runs the detection in one pass per shard, so one shard's call holds
only its candidates; the fleet-wide step is two-phase (``jobs.pipeline.sharded``): each shard first records
its candidates' p-values, then each shard's verdicts adjust its own candidates among *every* shard's
(``FleetFdr``). BH-adjusted p-values depend only on the multiset of p-values tested together, so with the
same candidates this gives every candidate the adjusted p (and verdict) a single run over the fleet gives.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

FdrAdjust = Callable[[np.ndarray], np.ndarray]
"""Raw p-values of one call's candidate steps → their BH-adjusted p-values."""

LATENCY, RESOURCE = "latency", "resource"
"""The two families of candidates, each adjusted on its own (as in a single run)."""


def bh_adjusted(p_values: np.ndarray, others: np.ndarray | None = None) -> np.ndarray:
    """BH-adjusted p of each of ``p_values`` when tested together with ``others`` (the other shards'
    candidates); scipy's ``false_discovery_control`` over the union, so a single call's result is the same
    float for float."""
    if others is None or others.size == 0:
        return stats.false_discovery_control(p_values, method="bh")
    union = np.concatenate([p_values, others])
    return stats.false_discovery_control(union, method="bh")[: p_values.shape[0]]


def within_call(p_values: np.ndarray) -> np.ndarray:
    """The default: BH over the call's own candidates (a whole-fleet run, or the unsharded analysis)."""
    return bh_adjusted(p_values)


@dataclass(frozen=True)
class FleetFdr:
    """The other shards' candidate p-values per family: a shard's verdicts adjust among the fleet's."""

    others: dict[str, np.ndarray] = field(default_factory=dict)

    def adjust(self, family: str) -> FdrAdjust:
        others = self.others.get(family)
        return lambda p_values: bh_adjusted(p_values, others)

    def tests(self, family: str) -> int:
        """How many candidates of other shards this shard's candidates are adjusted among."""
        return int(self.others[family].size) if family in self.others else 0


@dataclass
class CandidateRecorder:
    """Keeps each family's raw candidate p-values as the analyses adjust them (the first phase of a shard's
    pass); adjusts within the call, as a single run would."""

    recorded: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def adjust(self, family: str) -> FdrAdjust:
        def record(p_values: np.ndarray) -> np.ndarray:
            self.recorded.setdefault(family, []).append(np.asarray(p_values, dtype=np.float64).copy())
            return within_call(p_values)

        return record

    def p_values(self, family: str) -> np.ndarray:
        parts = self.recorded.get(family, [])
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float64)
