"""The gate: measure a SQL workload on a baseline and a candidate database and say PASS / WARN / BLOCK.

The names below load on first use (PEP 562), so importing ``jobs.gate.config`` (the thresholds, read by the
config file loader and the CLI) does not import the runner and its statistics.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jobs.gate' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
