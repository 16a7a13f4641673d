"""The per-minute detection job (issue 26): one in-process Dagster run appends the samples of the snapshots
the collector wrote, finds a large step three samples after it, records the finding and alerts it; the
schedule fires every minute and skips a tick while a run is still going."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
from dagster._core.storage.dagster_run import DagsterRun

from jobs.lake import io as lake
from orchestration.assets.alerts import regression_alerts
from orchestration.assets.regressions import regressions_and_plan_diffs
from orchestration.definitions import defs
from orchestration.jobs import detection_job
from orchestration.resources import AlertResource, LakeResource
from orchestration.schedules import detection_schedule
from tests.benchmarks.bench_time_to_alert import START, STEP, generate, write_minute

SERIES = 10


def test_the_detection_job_runs_in_one_process_every_minute_and_skips_while_busy() -> None:
    job = defs.resolve_job_def("detection_job")
    assert job.executor_def.name == "in_process"
    assert {"findings", "regression_alerts"} <= set(job.graph.node_names()) | {
        key.to_user_string() for key in job.asset_layer.executable_asset_keys
    }
    assert detection_schedule is not None and detection_schedule.cron_schedule == "* * * * *"
    tick = datetime(2026, 12, 6, 8, 1, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        assert isinstance(detection_schedule(context), dg.RunRequest)
        instance.add_run(
            DagsterRun(job_name="detection_job", run_id="busy", status=dg.DagsterRunStatus.STARTED)
        )
        skipped = detection_schedule(context)
        assert isinstance(skipped, dg.SkipReason) and "still going" in str(skipped.skip_message)


def test_one_run_appends_the_samples_finds_a_large_step_on_its_third_sample_and_alerts_it(
    lake_root: Path, tmp_path: Path
) -> None:
    fleet = generate(instances=1, series=SERIES, minutes=130, steps=1)
    step = fleet.steps[0]
    for minute in range(step.minute + 4):  # three samples end after the step
        write_minute(lake_root, fleet, minute, SERIES)
    alerts_file = tmp_path / "alerts.jsonl"
    definitions = dg.Definitions(
        assets=[regressions_and_plan_diffs, regression_alerts],
        jobs=[detection_job],
        resources={
            "lake": LakeResource(root=str(lake_root)),
            "alerting": AlertResource(file=str(alerts_file), dead_letter_file=str(tmp_path / "dead.jsonl")),
        },
    )
    with dg.instance_for_test() as instance:
        result = definitions.resolve_job_def("detection_job").execute_in_process(instance=instance)
    assert result.success
    samples = lake.scan_table(lake_root, "query_samples").collect()
    assert samples["interval_end"].max() == START + (step.minute + 3) * STEP  # appended by the run itself
    states = lake.scan_table(lake_root, "finding_states").collect()
    queryid = int(fleet.queryids[0, step.statement])
    found = states.filter(pl.col("queryid") == queryid)
    assert found.select("status", "opened_by", "opened_on_samples").rows() == [("open", "large_step", 3)], (
        states
    )
    assert abs(found["onset"][0] - (START + step.minute * STEP)).total_seconds() <= 60
    sent = [json.loads(line) for line in alerts_file.read_text().splitlines()]
    assert [str(a.get("queryid")) for a in sent] == [str(queryid)], sent  # int64 as text in JSON
