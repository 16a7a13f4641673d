"""One collection cycle: snapshot the fleet, then plans for that cycle's top queries, then auto_explain.

Plans are captured for the queries of the snapshot just taken (the top N by total time: bounded, no
separate query universe). Plan capture is off unless asked for; a plan failure never fails the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from jobs import lake
from jobs.collector import FleetSnapshotResult, snapshot_fleet
from jobs.config import FleetConfig
from jobs.plans.auto_explain import ingest_auto_explain_logs
from jobs.plans.capture import PlanCaptureConfig, capture_plans, select_plan_candidates, write_plan_snapshots
from jobs.schemas import QUERY_TEXTS, STATEMENT_SNAPSHOTS


@dataclass(frozen=True)
class CycleConfig:
    capture_plans: bool = False
    """Capture plans each cycle (pg_store_plans / EXPLAIN GENERIC_PLAN); off by default, as designed."""
    ingest_auto_explain: bool = False
    """Read new auto_explain records from each instance's log_dir."""
    plans: PlanCaptureConfig = field(default_factory=PlanCaptureConfig)


@dataclass
class CycleResult:
    snapshot: FleetSnapshotResult
    plans_captured: dict[str, int] = field(default_factory=dict)
    plan_errors: dict[str, str] = field(default_factory=dict)
    auto_explain_records: dict[str, int] = field(default_factory=dict)


def _cycle_statements(
    lake_root: Path, instance: str, captured_at: object
) -> tuple[pl.DataFrame, pl.DataFrame]:
    statements = (
        lake.scan_table(lake_root, STATEMENT_SNAPSHOTS)
        .filter((pl.col("instance") == instance) & (pl.col("captured_at") == captured_at))
        .collect()
    )
    texts = lake.scan_table(lake_root, QUERY_TEXTS).filter(pl.col("instance") == instance).collect()
    return statements, texts


def run_cycle(fleet: FleetConfig, lake_root: Path, config: CycleConfig = CycleConfig()) -> CycleResult:
    result = CycleResult(snapshot=snapshot_fleet(fleet, lake_root))
    by_name = {i.name: i for i in fleet.instances}
    for done in result.snapshot.ok:
        instance = by_name[done.instance]
        if config.capture_plans:
            try:
                statements, texts = _cycle_statements(lake_root, done.instance, done.captured_at)
                candidates = select_plan_candidates(statements, texts, top_n=config.plans.top_n)
                captured = capture_plans(
                    instance.resolve_dsn(), done.instance, candidates, done.captured_at, config.plans
                )
                write_plan_snapshots(lake_root, done.instance, done.captured_at, captured, config.plans)
                result.plans_captured[done.instance] = captured.plans.height
            except Exception as exc:  # plans are best effort: the snapshot is already safe in the lake
                result.plan_errors[done.instance] = f"instance {done.instance}: plan capture failed: {exc}"
        if config.ingest_auto_explain and instance.log_dir:
            try:
                ingested = ingest_auto_explain_logs(Path(instance.log_dir), done.instance, lake_root)
                result.auto_explain_records[done.instance] = ingested.plan_records
            except Exception as exc:
                result.plan_errors[done.instance] = (
                    f"instance {done.instance}: auto_explain ingest failed: {exc}"
                )
    return result
