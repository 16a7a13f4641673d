"""The gate's per-execution timings scored by the drift stage's scorer (pure): a drift flag per query.

Every measured call's client latency (baseline side as ``baseline``, candidate side as ``candidate``) goes
to ``jobs.drift.scorer.score_drift_arrays`` with metric ``latency``, keyed by ``query_hash`` = SHA-256 of the
query's fingerprint (``jobs.query.identity.fingerprint_text`` of the workload SQL: the fingerprint the lake
gives the same statement, so a gate's query_hash lines up with ``execution_drift``). Informational only:
the flag is reported next to the verdict and never changes it (issue 12 decides whether it should).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import query_hash, score_drift_arrays
from jobs.query.identity import fingerprint_text

GATE_DRIFT_METRIC = "latency"


@dataclass(frozen=True)
class GateDrift:
    """The scorer's DriftScore of one gate query's latency (candidate against baseline)."""

    query_hash: str
    flag: str
    reason: str
    js: float | None
    psi: float | None
    wasserstein: float | None
    n_baseline: int
    n_candidate: int
    profile: str

    def to_dict(self) -> dict[str, Any]:
        def finite(value: float | None) -> float | None:
            return None if value is None or not np.isfinite(value) else float(value)

        return {
            "query_hash": self.query_hash,
            "metric": GATE_DRIFT_METRIC,
            "flag": self.flag,
            "reason": self.reason,
            "js": finite(self.js),
            "psi": finite(self.psi),
            "wasserstein": finite(self.wasserstein),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "profile": self.profile,
        }


def gate_query_hash(sql: str) -> str:
    """query_hash of a workload query: SHA-256 of its fingerprint (as the lake's identity computes it)."""
    return query_hash(fingerprint_text(sql)[0])


def gate_drift(
    timings: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    hashes: Mapping[str, str],
    config: DriftScoreConfig = DriftScoreConfig(),
) -> dict[str, GateDrift]:
    """Per query name with timings on both sides: (baseline ms, candidate ms) scored batched. A query with
    no timing on a side is left out (no flag: it failed before any call). Two queries of one fingerprint
    (the same SQL under two names) are scored in separate calls, so each keeps its own samples."""
    batches: list[dict[str, str]] = []  # name -> hash, hashes unique within a batch
    for name, (baseline, candidate) in timings.items():
        if not len(baseline) or not len(candidate):
            continue
        batch = next((b for b in batches if hashes[name] not in b.values()), None)
        if batch is None:
            batch = {}
            batches.append(batch)
        batch[name] = hashes[name]
    out = {}
    for batch in batches:
        names = list(batch)
        sides = [[np.asarray(timings[name][side], dtype=np.float64) for name in names] for side in (0, 1)]
        offsets = [np.concatenate(([0], np.cumsum([v.size for v in values]))) for values in sides]
        keys = pl.DataFrame({"query_hash": [batch[n] for n in names], "metric": GATE_DRIFT_METRIC})
        scored = score_drift_arrays(
            keys, np.concatenate(sides[0]), offsets[0], np.concatenate(sides[1]), offsets[1], config
        )  # the batched kernel on flat arrays: no frame of one row per timing
        scores = {r["query_hash"]: r for r in scored.iter_rows(named=True)}
        for name, digest in batch.items():
            row = scores[digest]
            out[name] = GateDrift(
                query_hash=digest,
                flag=row["flag"],
                reason=row["reason"],
                js=row["js"],
                psi=row["psi"],
                wasserstein=row["wasserstein"],
                n_baseline=row["n_baseline"],
                n_candidate=row["n_candidate"],
                profile=row["profile"],
            )
    return out
