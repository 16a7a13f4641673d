"""`radar detect` (whole fleet or one shard)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, lake_root, say, settings_of, show_rows, tell_dagster


def cmd_detect(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.detect.findings import OPEN
    from jobs.drift.finding_flags import DRIFT_FLAG_COLUMNS, with_drift_flags
    from jobs.lake import io as lake
    from jobs.pipeline.budgeted import run_detection_in_budget
    from jobs.pipeline.detection import DETECTION_ASSETS
    from jobs.publish.console import print_detection
    from jobs.schemas.analysed import EXECUTION_DRIFT, FINDING_STATES

    config = settings_of(args).detection_config(incremental=not args.full)
    if args.shard is not None:  # one shard's pass of a sharded detection (jobs.pipeline.sharded)
        return detect_shard(args, config)
    run = run_detection_in_budget(lake_root(args), config)
    outcome = run.outcome
    if len(run.chunks) > 1:
        say(
            args,
            f"within the memory budget of {config.memory.budget_mib} MiB: {len(run.chunks)} chunks of "
            f"{', '.join(str(len(c)) for c in run.chunks)} instances (peak RSS {run.peak_rss_mib:,.0f} MiB)",
        )
    drift = lake.read_table(lake_root(args), EXECUTION_DRIFT)  # each finding's per-execution drift flags
    if args.format == "table":
        print_detection(
            outcome,
            console,
            show_all=args.all,
            drift=drift,
            same_moment_within=config.regression.contention.same_moment_within,
        )
    else:
        shown = with_drift_flags(outcome.shown_findings.sort("onset", "finding_id"), drift)
        show_rows(args, shown.select(*FINDING_STATES.columns_of(shown), *DRIFT_FLAG_COLUMNS))
    open_findings = outcome.findings.filter(pl.col("status") == OPEN).height
    tell_dagster(args, list(DETECTION_ASSETS), {"open_findings": open_findings})
    if args.fail_on_detect and open_findings:
        say(args, f"{open_findings} open findings (--fail-on-detect: exit 1)")
        return 1
    return 0


def shard_flag(value: str) -> tuple[int, int]:
    """``--shard K/N``: shard K (0-based) of N."""
    shard, _, count = value.partition("/")
    if not (shard.isdigit() and count.isdigit() and 0 <= int(shard) < int(count)):
        raise argparse.ArgumentTypeError(f"--shard takes K/N with 0 <= K < N (e.g. 2/8), not {value!r}")
    return int(shard), int(count)


def detect_shard(args: argparse.Namespace, config: Any) -> int:
    """``radar detect --shard K/N``: phase 1 (``--phase candidates``) or phase 2 (the default) of shard K's
    pass; phase 2 after every shard's phase 1 (any order within a phase). Not recorded in Dagster."""
    import polars as pl

    from jobs.detect.findings import OPEN
    from jobs.pipeline.sharded import record_shard_candidates, run_shard_detection
    from jobs.publish.console import print_detection
    from jobs.schemas.analysed import FINDING_STATES

    shard, count = args.shard
    if args.phase == "candidates":
        recorded = record_shard_candidates(lake_root(args), config, shard, count)
        row = {"shard": recorded.shard, "instances": recorded.instances, **recorded.candidates}
        if args.format == "table":
            console.print(
                f"{recorded.shard} of {count}: {recorded.instances} instances, candidate steps "
                + ", ".join(f"{family} {n}" for family, n in recorded.candidates.items())
            )
        else:
            show_rows(args, pl.DataFrame([row]))
        return 0
    result = run_shard_detection(lake_root(args), config, shard, count)
    if result.candidates.missing:
        say(
            args,
            f"[yellow]warning:[/yellow] no recorded candidates of {', '.join(result.candidates.missing)} "
            "(run their --phase candidates first): the false discovery rate covers the others only",
        )
    outcome = result.outcome
    if args.format == "table":
        print_detection(
            outcome,
            console,
            show_all=args.all,
            same_moment_within=config.regression.contention.same_moment_within,
        )
    else:
        shown = outcome.shown_findings.sort("onset", "finding_id")
        show_rows(args, shown.select(*FINDING_STATES.columns_of(shown)))
    open_findings = outcome.findings.filter(pl.col("status") == OPEN).height
    if args.fail_on_detect and open_findings:
        say(args, f"{open_findings} open findings (--fail-on-detect: exit 1)")
        return 1
    return 0
