"""The schedules: a fleet snapshot every minute, samples every 15 minutes, the analysis 5 minutes after
each, the weekly report on Mondays and compaction at night (UTC), unless the config file's [schedules]
says otherwise. A run a schedule starts takes its run config's defaults, i.e. the config file's values."""

import dagster as dg

from orchestration.jobs import analysis_job, compaction_job, report_job, samples_job, snapshot_job
from orchestration.run_config import definitions_settings

CRONS = definitions_settings().settings.schedules


@dg.schedule(job=snapshot_job, cron_schedule=CRONS.snapshot, execution_timezone="UTC")
def snapshot_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """One fleet snapshot into the partition of the tick's UTC day."""
    tick = context.scheduled_execution_time
    return dg.RunRequest(run_key=tick.isoformat(), partition_key=tick.date().isoformat())


@dg.schedule(job=report_job, cron_schedule="0 6 * * 1", execution_timezone="UTC")
def weekly_report_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """Monday 06:00 UTC: the report of the week that just ended."""
    from datetime import timedelta

    week_start = context.scheduled_execution_time - timedelta(days=7)
    key = week_start.date().isoformat()
    return dg.RunRequest(run_key=key, partition_key=key)


@dg.schedule(job=samples_job, cron_schedule=CRONS.samples, execution_timezone="UTC")
def samples_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """Every 15 minutes: today's samples from today's snapshots."""
    tick = context.scheduled_execution_time
    return dg.RunRequest(run_key=tick.isoformat(), partition_key=tick.date().isoformat())


@dg.schedule(job=analysis_job, cron_schedule=CRONS.analysis, execution_timezone="UTC")
def analysis_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """Five minutes after each samples run: detect, diff plans, alert."""
    return dg.RunRequest(run_key=context.scheduled_execution_time.isoformat())


@dg.schedule(job=compaction_job, cron_schedule=CRONS.compaction, execution_timezone="UTC")
def compaction_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """01:30 UTC: yesterday is closed (no snapshot is still being written into it)."""
    return dg.RunRequest(run_key=context.scheduled_execution_time.date().isoformat())
