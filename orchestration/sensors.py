"""The deploy inbox sensor: a new file under data/deploys/ triggers deploy_events."""

import hashlib

import dagster as dg

from orchestration.jobs import deploy_job
from orchestration.resources import DeployInboxResource


@dg.sensor(job=deploy_job, minimum_interval_seconds=30)
def deploy_inbox_sensor(
    context: dg.SensorEvaluationContext, inbox: DeployInboxResource
) -> dg.RunRequest | dg.SkipReason:
    folder = inbox.path
    files = sorted(p for p in folder.glob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        return dg.SkipReason(f"no deploy files in {folder}")
    key = hashlib.sha1("|".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in files).encode()).hexdigest()
    return dg.RunRequest(run_key=key)
