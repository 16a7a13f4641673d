"""The snapshot schedule: every minute by default (RADAR_SNAPSHOT_CRON to change)."""

import os

import dagster as dg

from orchestration.jobs import snapshot_job

SNAPSHOT_CRON = os.environ.get("RADAR_SNAPSHOT_CRON", "* * * * *")


@dg.schedule(job=snapshot_job, cron_schedule=SNAPSHOT_CRON, execution_timezone="UTC")
def snapshot_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """One fleet snapshot into the partition of the tick's UTC day."""
    tick = context.scheduled_execution_time
    return dg.RunRequest(run_key=tick.isoformat(), partition_key=tick.date().isoformat())
