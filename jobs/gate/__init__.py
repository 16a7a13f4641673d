"""The gate: measure a SQL workload on a baseline and a candidate database and say PASS / WARN / BLOCK."""

from jobs.gate.config import GateConfig
from jobs.gate.runner import GateError, run_gate, run_gate_workload
from jobs.gate.verdict import BLOCK, PASS, WARN, GateReport, render_gate_report
from jobs.gate.workload import GateWorkload, WorkloadError, load_workload, parse_workload

__all__ = [
    "BLOCK",
    "PASS",
    "WARN",
    "GateConfig",
    "GateError",
    "GateReport",
    "GateWorkload",
    "WorkloadError",
    "load_workload",
    "parse_workload",
    "render_gate_report",
    "run_gate",
    "run_gate_workload",
]
