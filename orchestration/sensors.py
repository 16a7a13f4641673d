"""The deploy inbox sensor: a new file under data/deploys/ triggers deploy_events (which checks its
instance names against the fleet)."""

import dagster as dg

from jobs.collect.deploys import inbox_state_key
from orchestration.jobs import deploy_job
from orchestration.resources import DeployInboxResource


@dg.sensor(job=deploy_job, minimum_interval_seconds=30)
def deploy_inbox_sensor(
    context: dg.SensorEvaluationContext, inbox: DeployInboxResource
) -> dg.RunRequest | dg.SkipReason:
    key = inbox_state_key(inbox.path)
    if key is None:
        return dg.SkipReason(f"no deploy files in {inbox.path}")
    return dg.RunRequest(run_key=key)
