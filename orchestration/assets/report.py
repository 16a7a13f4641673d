"""weekly_regression_report: markdown + plots per ISO week, published under data/reports/<week>/."""

import dagster as dg

from jobs.weekly import iso_week, write_weekly_report
from orchestration.resources import LakeResource, ReportResource

weekly = dg.WeeklyPartitionsDefinition(start_date="2026-01-05", timezone="UTC", day_offset=1)


@dg.asset(
    partitions_def=weekly,
    deps=["findings"],
    group_name="publish",
    kinds={"markdown"},
    description="What regressed this week, when, why (plan diff), with a latency plot per regression.",
)
def weekly_regression_report(
    context: dg.AssetExecutionContext, lake: LakeResource, reports: ReportResource
) -> dg.MaterializeResult:
    week_start = context.partition_time_window.start
    path = write_weekly_report(lake.path, iso_week(week_start), reports.path)
    text = path.read_text()
    return dg.MaterializeResult(metadata={"path": str(path), "report": dg.MetadataValue.md(text[:20_000])})
