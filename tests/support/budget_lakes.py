"""A simulated fleet for the detection within a memory budget (jobs.pipeline.budgeted), and a budget that
packs it into chunks of about two instances: shared by the pipeline and the Dagster tests."""

from __future__ import annotations

from pathlib import Path

from jobs.detect.config import MemoryConfig
from jobs.local.simulate.simulated_fleet import FleetShape
from jobs.pipeline.budgeted import MIB, rows_per_instance

SHAPE = FleetShape(instances=6, statements=20, minutes=150, seed=7, regressions=3)


def budget_of_two_instances(root: Path) -> MemoryConfig:
    """A budget whose room is about two of the fleet's (about equal-sized) instances."""
    largest = max(rows_per_instance(root).values())
    analysis = int(MIB / (2.5 * largest))
    return MemoryConfig(budget_mib=2, base_mib=1, sample_bytes=analysis, rebuild_bytes=1, coordinator_mib=0)
