"""One collection cycle: snapshot the fleet, then table statistics, then plans for that cycle's top queries,
then auto_explain.

Table statistics (``[collector] table_stats``, on by default) are read right after each instance's
snapshot into ``table_stats_snapshots`` with that snapshot's ``captured_at`` (``jobs.collect.table_stats``);
a database or instance that fails there is noted in ``CycleResult.table_stats_problems``, never fatal.

Plans are captured for the queries of the snapshot just taken (the top N by total time: bounded, no
separate query universe). Plan capture is off unless asked for; a plan failure never fails the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from jobs.collect.collector import FleetSnapshotResult, snapshot_fleet
from jobs.collect.fleet import FleetConfig, InstanceConfig
from jobs.collect.table_stats import table_stats_after_snapshot
from jobs.detect.config import SampleConfig
from jobs.detect.samples_job import SamplesJobReport, run_samples_per_instance
from jobs.errors import ConfigError
from jobs.lake import io as lake
from jobs.lake.locks import LakeConfig, LakeError
from jobs.plans.auto_explain import ingest_auto_explain_logs
from jobs.plans.capture import capture_plans, select_plan_candidates, write_plan_snapshots
from jobs.plans.config import AutoExplainConfig, PlanCaptureConfig
from jobs.query.texts import strictest_query_text
from jobs.redaction import scrub
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS


@dataclass(frozen=True)
class CycleConfig:
    capture_plans: bool = False
    """Capture plans each cycle (pg_store_plans / EXPLAIN GENERIC_PLAN); off by default, as designed."""
    ingest_auto_explain: bool = False
    """Read new auto_explain records from each instance's log_dir."""
    plans: PlanCaptureConfig = field(default_factory=PlanCaptureConfig)
    auto_explain: AutoExplainConfig = field(default_factory=AutoExplainConfig)
    """Limits of the auto_explain log reader."""
    samples: SampleConfig | None = None
    """With a config (``[collector] samples_on_collect``): append the samples of the instances this cycle
    snapshotted, right after their snapshots (jobs.detect.samples append mode); None: the samples job does
    it."""
    lake: LakeConfig | None = None


@dataclass
class CycleResult:
    snapshot: FleetSnapshotResult | None
    plans_captured: dict[str, int] = field(default_factory=dict)
    plan_errors: dict[str, str] = field(default_factory=dict)
    auto_explain_records: dict[str, int] = field(default_factory=dict)
    table_stats_rows: dict[str, int] = field(default_factory=dict)
    """table_stats_snapshots rows written per instance."""
    table_stats_problems: dict[str, list[str]] = field(default_factory=dict)
    """Per instance: each database (or the instance) whose table statistics were not read, and why."""
    samples: SamplesJobReport | None = None
    """The samples appended after the snapshot (samples_on_collect), else None."""
    samples_error: str | None = None
    """Why appending the samples failed (the snapshot itself is kept)."""


def _cycle_statements(
    lake_root: Path, instance: str, captured_at: object
) -> tuple[pl.DataFrame, pl.DataFrame]:
    statements = lake.read_table(
        lake_root,
        STATEMENT_SNAPSHOTS,
        lambda s: s.filter((pl.col("instance") == instance) & (pl.col("captured_at") == captured_at)),
    )
    texts = lake.read_table(lake_root, QUERY_TEXTS, lambda t: t.filter(pl.col("instance") == instance))
    return statements, texts


def latest_snapshot_times(lake_root: Path) -> dict[str, datetime]:
    """captured_at of each instance's latest successful snapshot."""
    runs = lake.read_table(
        lake_root,
        SNAPSHOT_RUNS,
        lambda r: r.filter(pl.col("status") == "ok").group_by("instance").agg(pl.col("captured_at").max()),
    )
    return dict(zip(runs["instance"].to_list(), runs["captured_at"].to_list(), strict=True))


def _resolved(instance: InstanceConfig) -> str | None:
    try:
        return instance.resolve_dsn()
    except ConfigError:
        return None


def capture_fleet_plans(
    fleet: FleetConfig, lake_root: Path, snapshot_times: dict[str, datetime], config: CycleConfig
) -> CycleResult:
    """Plans for each instance's snapshot at the given time; failures are kept per instance, not raised."""
    result = CycleResult(snapshot=None)
    collector_text = fleet.collector.query_text
    plans_config = replace(
        config.plans, query_text=strictest_query_text(config.plans.query_text, collector_text)
    )
    auto_explain_config = replace(
        config.auto_explain, query_text=strictest_query_text(config.auto_explain.query_text, collector_text)
    )
    for instance in fleet.instances:
        captured_at = snapshot_times.get(instance.name)
        if captured_at is None:
            continue
        if config.capture_plans:
            try:
                statements, texts = _cycle_statements(lake_root, instance.name, captured_at)
                candidates = select_plan_candidates(statements, texts, top_n=plans_config.top_n)
                captured = capture_plans(
                    instance.resolve_dsn(), instance.name, candidates, captured_at, plans_config
                )
                write_plan_snapshots(lake_root, instance.name, captured_at, captured, plans_config)
                result.plans_captured[instance.name] = captured.plans.height
                if captured.problems:  # every candidate also has its plan_capture_log row saying so
                    result.plan_errors[instance.name] = (
                        f"instance {instance.name}: plan capture: " + "; ".join(captured.problems)
                    )
            except Exception as exc:  # plans are best effort: the snapshot is already safe in the lake
                result.plan_errors[instance.name] = scrub(
                    f"instance {instance.name}: plan capture failed: {exc}", instance.dsn, _resolved(instance)
                )
        if config.ingest_auto_explain and instance.log_dir:
            try:
                ingested = ingest_auto_explain_logs(
                    Path(instance.log_dir), instance.name, lake_root, auto_explain_config
                )
                result.auto_explain_records[instance.name] = ingested.plan_records
            except Exception as exc:
                result.plan_errors[instance.name] = (
                    f"instance {instance.name}: auto_explain ingest failed: {exc}"
                )
    return result


def run_cycle(fleet: FleetConfig, lake_root: Path, config: CycleConfig = CycleConfig()) -> CycleResult:
    """Snapshot the fleet, then capture plans for the queries of that very snapshot."""
    snapshot = snapshot_fleet(fleet, lake_root)
    times = {r.instance: r.captured_at for r in snapshot.ok}
    stats = table_stats_after_snapshot(fleet, lake_root, snapshot)
    result = capture_fleet_plans(fleet, lake_root, times, config)
    result.snapshot = snapshot
    for item in stats:
        result.table_stats_rows[item.instance] = item.frame.height
        if item.problems:
            result.table_stats_problems[item.instance] = item.problems
    if config.samples is not None and snapshot.ok:
        collected = sorted({r.instance for r in snapshot.ok})
        try:
            result.samples = run_samples_per_instance(
                lake_root, config.samples, collected, lake_config=config.lake, mode="append"
            )
        except (LakeError, OSError, pl.exceptions.PolarsError) as exc:  # the snapshot is already written
            result.samples_error = scrub(f"samples not appended for {', '.join(collected)}: {exc}")
    return result
