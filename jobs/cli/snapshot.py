"""`radar snapshot`: one collection cycle of the fleet into the lake."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import (
    escaped,
    lake_root,
    load_fleet,
    say,
    settings_of,
    show_rows,
    status,
    tell_dagster,
)

SNAPSHOT_COLUMNS = (
    "instance",
    "status",
    "health",
    "statements",
    "new_texts",
    "explain_dropped",
    "own_dropped",
    "hidden_rows",
    "bytes",
    "server_ms",
    "reason",
)
PLAN_COLUMNS = ("plans_captured", "auto_explain_records", "plan_error")


def cmd_snapshot(args: argparse.Namespace) -> int:
    """One collection cycle: the snapshot, then (when asked) plans and auto_explain records for it."""
    import polars as pl

    from jobs.redaction import scrub

    fleet = load_fleet(args)
    plans = settings_of(args).plans
    on_collect = fleet.collector.samples_on_collect
    table_stats_problems: dict[str, list[str]] = {}
    with status(f"snapshotting {len(fleet.instances)} instances"):
        if plans.capture_plans or plans.ingest_auto_explain or on_collect:  # only then the cycle's imports
            from jobs.pipeline.collection import run_cycle

            outcome = run_cycle(fleet, lake_root(args), settings_of(args).cycle_config(fleet.collector))
            result = outcome.snapshot
        else:
            from jobs.collect.collector import snapshot_fleet

            result, outcome = snapshot_fleet(fleet, lake_root(args)), None
            from jobs.collect.table_stats import table_stats_after_snapshot  # run_cycle does this itself

            stats = table_stats_after_snapshot(fleet, lake_root(args), result)
            table_stats_problems = {s.instance: s.problems for s in stats if s.problems}
    if outcome is not None:
        table_stats_problems = outcome.table_stats_problems
    rows = result.summary_rows()
    plans_on = outcome is not None and (plans.capture_plans or plans.ingest_auto_explain)
    if plans_on:
        for row in rows:
            name = row["instance"]
            row["plans_captured"] = outcome.plans_captured.get(name) if plans.capture_plans else None
            row["auto_explain_records"] = (
                outcome.auto_explain_records.get(name) if plans.ingest_auto_explain else None
            )
            row["plan_error"] = outcome.plan_errors.get(name)
    columns = [*SNAPSHOT_COLUMNS, *(PLAN_COLUMNS if plans_on else ())]
    frame = pl.DataFrame([{c: row.get(c) for c in columns} for row in rows], infer_schema_length=None)
    table_columns = [c for c in columns if c not in ("reason", "plan_error")]
    show_rows(args, frame, "snapshot", columns=table_columns)
    for label, failed in (
        ("[red]failed[/red]", result.failed),
        ("[yellow]degraded[/yellow]", result.degraded),
    ):
        for row in failed:
            say(args, f"{label} {escaped(row.instance)}: {escaped(row.reason)}")
    for problems in table_stats_problems.values():
        for problem in problems:
            say(args, f"[yellow]table stats[/yellow] {escaped(scrub(problem, *fleet.dsns()))}")
    if outcome is not None:
        for error in outcome.plan_errors.values():
            say(args, f"[yellow]plans[/yellow] {escaped(scrub(error, *fleet.dsns()))}")
        if outcome.samples is not None:
            say(
                args,
                f"samples appended ([collector] samples_on_collect): {outcome.samples.sample_rows} rows "
                f"from {outcome.samples.snapshot_rows} snapshot rows",
            )
        if outcome.samples_error is not None:
            say(args, f"[yellow]samples[/yellow] {escaped(scrub(outcome.samples_error, *fleet.dsns()))}")
        if plans.ingest_auto_explain and not any(i.log_dir for i in fleet.instances):
            say(
                args,
                "[yellow]--auto-explain[/yellow]: no instance has a log_dir in the fleet file: nothing read",
            )
    if result.ok:
        assets = [
            "statement_snapshots",
            *(["plan_snapshots"] if plans_on else []),
            *(["query_samples"] if outcome is not None and outcome.samples is not None else []),
        ]
        metadata = {
            "instances_ok": len(result.ok),
            "instances_failed": len(result.failed),
            "statement_rows": sum(r.statement_rows for r in result.results),
        }
        tell_dagster(args, assets, metadata)
    return snapshot_exit_code(len(result.ok), len(result.failed))


def snapshot_exit_code(ok: int, failed: int) -> int:
    if failed == 0:
        return 0
    return 3 if ok == 0 else 1
