"""regression_alerts: each finding once (and one update when it recovers or is superseded) to every sink
of [alerts]: the JSONL file, Slack, the generic webhook. Per-sink bookkeeping (jobs.alerts.run) makes a
re-run safe: nothing a sink accepted is sent to it again."""

import dagster as dg

from jobs.alerts import send_alerts
from orchestration.resources import AlertResource, LakeResource


@dg.asset(
    deps=["findings"],
    group_name="publish",
    kinds={"json"},
    description="Each finding once (and one update on recovery or supersession) to the JSONL file, Slack "
    "and/or a JSON webhook; transient failures are retried with backoff, then dead-lettered.",
)
def regression_alerts(
    context: dg.AssetExecutionContext, lake: LakeResource, alerting: AlertResource
) -> dg.MaterializeResult:
    report = send_alerts(lake.path, alerting.settings())
    metadata: dict[str, int | str] = {
        "alerts_sent": len(report.sent),
        "pending": report.pending,
        "dead_lettered": len(report.dead_lettered),
        "deferred": sum(s.deferred for s in report.sinks),
        "sinks": ", ".join(s.name for s in report.sinks) or "none",
    }
    for note in report.notes:
        context.log.warning(note)
    if not report.ok:
        problems = "; ".join(f"{name}: {why}" for name, why in report.failures.items())
        raise dg.Failure(description=f"not every alert was delivered: {problems}", metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)
