"""The schedules: a fleet snapshot and a detection (with its alerts) every minute, samples every 15
minutes, the drift analysis 5 minutes after each, the weekly report on Mondays and compaction at night
(UTC), unless the config file's [schedules] says otherwise. A run a schedule starts takes its run
config's defaults, i.e. the config file's values.

Every schedule (and the deploy sensor) starts STOPPED (Dagster's default): loading the code location on a
laptop must not begin polling a fleet. Switch on snapshot_schedule and detection_schedule (and the others
you want: samples_schedule, analysis_schedule) in the UI or with `dagster schedule start`
(docs/dagster.md)."""

from datetime import UTC
from typing import Any

import dagster as dg

from orchestration.jobs import (
    analysis_job,
    compaction_job,
    detection_job,
    report_job,
    samples_job,
    snapshot_job,
)
from orchestration.partitions import COLLECTION_DAYS, SHARD_COUNT, shard_run_requests
from orchestration.run_config import definitions_settings

CRONS = definitions_settings().settings.schedules


def _one_or_per_shard(requests: list[dg.RunRequest]) -> dg.RunRequest | list[dg.RunRequest]:
    return requests[0] if len(requests) == 1 else requests


@dg.schedule(job=snapshot_job, cron_schedule=CRONS.snapshot, execution_timezone="UTC")
def snapshot_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | list[dg.RunRequest]:
    """One fleet snapshot "now" (never a past day: counters cannot be read for the past); with [schedules]
    shard_count above 1, one run per shard (separate runs: a failing shard stops no other)."""
    key = context.scheduled_execution_time.isoformat()
    return _one_or_per_shard(shard_run_requests(SHARD_COUNT, key))


@dg.schedule(job=report_job, cron_schedule="0 6 * * 1", execution_timezone="UTC")
def weekly_report_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """Monday 06:00 UTC: the report of the week that just ended."""
    from datetime import timedelta

    week_start = context.scheduled_execution_time - timedelta(days=7)
    key = week_start.date().isoformat()
    return dg.RunRequest(run_key=key, partition_key=key)


@dg.schedule(job=samples_job, cron_schedule=CRONS.samples, execution_timezone="UTC")
def samples_schedule(
    context: dg.ScheduleEvaluationContext,
) -> dg.RunRequest | list[dg.RunRequest] | dg.SkipReason:
    """Every 15 minutes: the tick's day's samples, once a snapshot made that day a collection day (one run
    per shard with [schedules] shard_count above 1)."""
    day = context.scheduled_execution_time.astimezone(UTC).date().isoformat()
    if not context.instance.has_dynamic_partition(COLLECTION_DAYS, day):
        return dg.SkipReason(f"no snapshot collected on {day} yet: nothing to sample")
    return _one_or_per_shard(
        shard_run_requests(SHARD_COUNT, context.scheduled_execution_time.isoformat(), day)
    )


@dg.schedule(job=analysis_job, cron_schedule=CRONS.analysis, execution_timezone="UTC")
def analysis_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | list[dg.RunRequest]:
    """Five minutes after each samples run: detect, diff plans, alert. With [schedules] shard_count above 1,
    phase 1 of the detection (detection_candidates) once per shard; the shard analysis sensor starts the
    rest when every shard is done."""
    return _one_or_per_shard(shard_run_requests(SHARD_COUNT, context.scheduled_execution_time.isoformat()))


def _detection_schedule(job: Any) -> dg.ScheduleDefinition:
    @dg.schedule(job=job, cron_schedule=CRONS.detection, execution_timezone="UTC", name="detection_schedule")
    def detection_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        """Every minute: append the samples, detect, diff plans, alert. A tick while the previous run is
        still queued or going is skipped (runs would pile up behind a slow one and alert late anyway)."""
        going = context.instance.get_runs_count(
            dg.RunsFilter(
                job_name=job.name,
                statuses=[
                    dg.DagsterRunStatus.QUEUED,
                    dg.DagsterRunStatus.NOT_STARTED,
                    dg.DagsterRunStatus.STARTING,
                    dg.DagsterRunStatus.STARTED,
                ],
            )
        )
        if going:
            return dg.SkipReason(f"{going} {job.name} run(s) still going: this tick is skipped")
        return dg.RunRequest(run_key=context.scheduled_execution_time.isoformat())

    return detection_schedule


detection_schedule = _detection_schedule(detection_job) if detection_job is not None else None


@dg.schedule(job=compaction_job, cron_schedule=CRONS.compaction, execution_timezone="UTC")
def compaction_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """01:30 UTC: yesterday is closed (no snapshot is still being written into it)."""
    return dg.RunRequest(run_key=context.scheduled_execution_time.date().isoformat())
