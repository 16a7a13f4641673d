"""weekly_regression_report: markdown + plots per ISO week, published under data/reports/<week>/."""

import dagster as dg

from jobs.publish.weekly import write_weekly_report
from jobs.publish.weekly_summary import iso_week
from orchestration.resources import LakeResource, ReportResource
from orchestration.run_config import section_config, section_from_config

# [report] of the config file; where reports go ([report] out) is ReportResource's.
ReportRunConfig = section_config("report", exclude=("out",))

weekly = dg.WeeklyPartitionsDefinition(start_date="2026-01-05", timezone="UTC", day_offset=1)


@dg.asset(
    partitions_def=weekly,
    deps=["findings"],
    group_name="publish",
    kinds={"markdown"},
    description="What regressed this week, when, why (plan diff), with a latency plot per regression.",
)
def weekly_regression_report(
    context: dg.AssetExecutionContext,
    config: ReportRunConfig,  # type: ignore[valid-type]
    lake: LakeResource,
    reports: ReportResource,
) -> dg.MaterializeResult:
    week_start = context.partition_time_window.start
    report = section_from_config("report", config, "weekly_regression_report")
    path = write_weekly_report(lake.path, iso_week(week_start), reports.path, report).markdown
    text = path.read_text()
    return dg.MaterializeResult(metadata={"path": str(path), "report": dg.MetadataValue.md(text[:20_000])})
