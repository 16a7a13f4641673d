"""`radar samples`: interval samples from the snapshots (append or rebuild)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from jobs.cli.common import (
    console,
    lake_root,
    render,
    settings_of,
    show_rows,
    tell_dagster,
)


def cmd_samples(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from jobs.detect.samples_job import run_samples_job

    if (args.date_from or args.date_to) and not args.rebuild:
        raise ValueError("radar samples: --from/--to choose the days of a rebuild; add --rebuild")
    dates = None
    if args.date_from or args.date_to:
        dates = (args.date_from or args.date_to, args.date_to or args.date_from)
        if dates[0] > dates[1]:
            raise ValueError(f"radar samples: --from {dates[0]} is after --to {dates[1]}")
    settings = settings_of(args)
    report = run_samples_job(
        lake_root(args),
        settings.samples,
        lake_config=settings.lake_config(),
        dates=dates,
        mode="rebuild" if args.rebuild else "append",
    )
    if args.format == "table":
        _print_samples_report(report)
    else:  # one row: what the run read and wrote
        show_rows(args, _report_row(report))
    days = None
    if dates is not None:
        span = (dates[1] - dates[0]).days
        days = [(dates[0] + timedelta(days=i)).isoformat() for i in range(span + 1)]
    metadata = {"snapshot_rows": report.snapshot_rows, "sample_rows": report.sample_rows}
    tell_dagster(args, ["query_samples"], metadata, days)
    return 0


def _print_samples_report(report: Any) -> None:
    console.print(
        f"{report.snapshot_rows} snapshot rows → {report.sample_rows} samples "
        f"({report.instances} instances, {report.seconds:.2f} s)"
    )
    if report.rebuilt_for_settings:
        console.print(
            "rebuilt, not appended (built with other [samples] settings before): "
            + ", ".join(report.rebuilt_for_settings),
            markup=False,
        )
    if report.dropped_counts.height:
        render(report.dropped_counts, "dropped intervals")


def _report_row(report: Any) -> Any:
    """The samples job's report (jobs.detect.samples_job.SamplesJobReport) as one row."""
    import polars as pl

    dropped = report.dropped_counts
    count = [c for c in dropped.columns if c not in ("instance", "reason")]
    return pl.DataFrame(
        [
            {
                "instances": report.instances,
                "snapshot_rows": report.snapshot_rows,
                "sample_rows": report.sample_rows,
                "dropped_intervals": int(dropped[count[0]].sum()) if dropped.height and count else 0,
                "files_written": report.files_written,
                "seconds": report.seconds,
                "rebuilt_for_settings": list(report.rebuilt_for_settings),
            }
        ],
        schema_overrides={"rebuilt_for_settings": pl.List(pl.String)},
    )
