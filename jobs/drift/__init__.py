"""Distribution drift: the design's scorer (``scorer``, per-execution samples, PASS / WARN / BLOCK), its CI
payload contract (``contract``) and the per-interval latency drift of pg_stat_statements means
(``interval``, the labelled cheaper proxy), with their thresholds in ``config`` (stdlib-only).

The names below load on first use (PEP 562), so ``jobs.drift.config`` imports no numpy or polars.
"""

from __future__ import annotations

from jobs.lazy import lazy_exports

_INTERVAL = (
    "DRIFT",
    "IMPROVED",
    "INSUFFICIENT_DATA",
    "NO_DRIFT",
    "WATCH",
    "DriftMetrics",
    "anchor_baseline",
    "assign_baselines",
    "baseline_id",
    "drift_from_samples",
    "drift_kernel",
    "drift_verdicts",
    "load_baselines",
    "run_drift",
)
_EXPORTS = {name: "jobs.drift.interval" for name in _INTERVAL} | {
    "DriftConfig": "jobs.drift.config",
    "DriftScoreConfig": "jobs.drift.config",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
