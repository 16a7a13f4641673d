"""`radar report`: the weekly report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import lake_root, say, settings_of, show_rows

REPORT_TABLE_COLUMNS = [
    "instance",
    "query",
    "status",
    "onset",
    "before_mean_ms",
    "after_mean_ms",
    "deploy_version",
    "drift_latency",
]


def cmd_report(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from jobs.detect.findings import latest_states
    from jobs.drift.finding_flags import DRIFT_FLAG_COLUMNS, with_drift_flags
    from jobs.lake import io as lake
    from jobs.publish.weekly import write_weekly_report
    from jobs.publish.weekly_summary import iso_week, weekly_summary
    from jobs.schemas.analysed import EXECUTION_DRIFT, FINDING_STATES

    settings = settings_of(args)
    week = args.week or iso_week(datetime.now(UTC))  # the week so far: what on-call asks about
    written = write_weekly_report(lake_root(args), week, Path(settings.report.out), settings.report_config())
    # The rows: the week's findings the report lists (weekly_summary, the same rule as the markdown).
    findings = latest_states(lake.read_table(lake_root(args), FINDING_STATES))
    runs, deploys = (
        lake.read_table(lake_root(args), "snapshot_runs"),
        lake.read_table(lake_root(args), "deploy_events"),
    )
    regressions = with_drift_flags(  # each query's latest per-execution drift flags, null when not scored
        weekly_summary(week, findings, runs, deploys).regressions,
        lake.read_table(lake_root(args), EXECUTION_DRIFT),
    )
    if regressions.height or args.format != "table":
        show_rows(
            args,
            regressions.select(*FINDING_STATES.columns_of(regressions), *DRIFT_FLAG_COLUMNS),
            f"regressions of {week}",
            columns=REPORT_TABLE_COLUMNS,
        )
    say(
        args, f"weekly report of {week}: {written.html} (open in a browser), {written.markdown}", markup=False
    )
    return 0
