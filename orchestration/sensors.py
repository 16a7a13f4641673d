"""The deploy inbox sensor: a new file under data/deploys/ triggers deploy_events (which checks its
instance names against the fleet). With [schedules] shard_count above 1, the shard analysis sensor: phase 2
of the sharded detection once every shard recorded its candidates, then the fleet-wide assets."""

import json
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from jobs.collect.deploys import inbox_state_key
from jobs.collect.shards import shard_keys
from jobs.pipeline.sharded import analysis_round, latest_candidate_runs
from orchestration.jobs import deploy_job, fleet_analysis_job, shard_analysis_job
from orchestration.partitions import SHARD_COUNT
from orchestration.resources import DeployInboxResource, LakeResource
from orchestration.run_config import definitions_settings

ROUND_TAG = "radar/analysis_round"
"""Tags a sharded analysis round's runs (its id: the newest phase-1 run id it consumed)."""


@dg.sensor(job=deploy_job, minimum_interval_seconds=30)
def deploy_inbox_sensor(
    context: dg.SensorEvaluationContext, inbox: DeployInboxResource
) -> dg.RunRequest | dg.SkipReason:
    key = inbox_state_key(inbox.path)
    if key is None:
        return dg.SkipReason(f"no deploy files in {inbox.path}")
    return dg.RunRequest(run_key=key)


def build_shard_analysis_sensor(
    shard_count: int, wait_s: float, shard_job: Any, fleet_job: Any
) -> dg.SensorDefinition:
    """Phase 2 of the sharded detection (jobs.pipeline.sharded.analysis_round decides when), one run per
    shard tagged with the round; once every run of the round has finished (failed ones too: a shard's
    failure stops no other), the fleet-wide assets (alerts, drift) in one run."""

    @dg.sensor(
        name="shard_analysis_sensor",
        jobs=[shard_job, fleet_job],
        minimum_interval_seconds=30,
    )
    def shard_analysis_sensor(
        context: dg.SensorEvaluationContext, lake: LakeResource
    ) -> list[dg.RunRequest] | dg.SkipReason:
        cursor = json.loads(context.cursor) if context.cursor else {}
        requests = []
        round_ = cursor.get("round")
        if round_ and not cursor.get("fleet_requested"):
            runs = context.instance.get_runs(filters=dg.RunsFilter(tags={ROUND_TAG: round_}))
            if len(runs) >= shard_count and all(run.is_finished for run in runs):
                requests.append(
                    dg.RunRequest(
                        run_key=f"fleet:{round_}", job_name=fleet_job.name, tags={ROUND_TAG: round_}
                    )
                )
                cursor["fleet_requested"] = True
        latest = latest_candidate_runs(lake.path, shard_count)
        consumed = cursor.get("consumed", {})
        new_round = analysis_round(latest, consumed, shard_count, datetime.now(UTC), wait_s)
        if new_round is not None:
            requests += [
                dg.RunRequest(
                    run_key=f"{new_round}:{key}",
                    job_name=shard_job.name,
                    partition_key=key,
                    tags={ROUND_TAG: new_round},
                )
                for key in shard_keys(shard_count)
            ]
            cursor = {"consumed": {**consumed, **latest}, "round": new_round, "fleet_requested": False}
        context.update_cursor(json.dumps(cursor, sort_keys=True))
        if requests:
            return requests
        waiting = sorted(
            set(shard_keys(shard_count)) - {k for k, v in latest.items() if v > consumed.get(k, "")}
        )
        return dg.SkipReason(f"waiting for the candidates of {', '.join(waiting) or 'a new round'}")

    return shard_analysis_sensor


shard_analysis_sensor = (
    build_shard_analysis_sensor(
        SHARD_COUNT,
        definitions_settings().settings.schedules.shard_wait_s,
        shard_analysis_job,
        fleet_analysis_job,
    )
    if SHARD_COUNT > 1
    else None
)
