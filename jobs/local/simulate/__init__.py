"""A fleet simulator for benchmarks and tests: collector-shaped lakes without running servers."""

from jobs.local.simulate.simulated_fleet import (
    FleetShape,
    InjectedRegression,
    InstanceSimulation,
    InstanceTruth,
    SimulatedEvent,
    SimulatedSnapshot,
    simulate_fleet,
    simulate_instance,
)
from jobs.local.simulate.writer import WriteReport, default_truth_path, load_ground_truth, write_fleet

__all__ = [
    "FleetShape",
    "InjectedRegression",
    "InstanceSimulation",
    "InstanceTruth",
    "SimulatedEvent",
    "SimulatedSnapshot",
    "WriteReport",
    "default_truth_path",
    "load_ground_truth",
    "simulate_fleet",
    "simulate_instance",
    "write_fleet",
]
