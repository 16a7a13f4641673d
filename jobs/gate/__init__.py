"""The gate: measure a SQL workload on a baseline and a candidate database and say PASS / WARN / BLOCK.

The names below load on first use (PEP 562), so importing ``jobs.gate.config`` (the thresholds, read by the
config file loader and the CLI) does not import the runner and its statistics.
"""

from __future__ import annotations

from jobs.lazy import lazy_exports

_EXPORTS = {
    "BLOCK": "jobs.gate.verdict",
    "PASS": "jobs.gate.verdict",
    "WARN": "jobs.gate.verdict",
    "GateConfig": "jobs.gate.config",
    "GateError": "jobs.gate.runner",
    "GateReport": "jobs.gate.verdict",
    "GateWorkload": "jobs.gate.workload",
    "WorkloadError": "jobs.gate.workload",
    "load_workload": "jobs.gate.workload",
    "parse_workload": "jobs.gate.workload",
    "render_gate_report": "jobs.gate.verdict",
    "run_gate": "jobs.gate.runner",
    "run_gate_workload": "jobs.gate.runner",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
