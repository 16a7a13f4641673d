"""regression_alerts: every finding once (and one update when it recovers or is superseded) to the sinks."""

import dagster as dg

from jobs.alerts import AlertSink, JsonlFileSink, WebhookSink, send_new_alerts
from orchestration.resources import AlertResource, LakeResource


@dg.asset(
    deps=["findings"],
    group_name="publish",
    kinds={"json"},
    description="Each finding once (and one update on recovery or supersession) to a JSONL file and/or a "
    "webhook; failures are retried next run.",
)
def regression_alerts(
    context: dg.AssetExecutionContext, lake: LakeResource, alerting: AlertResource
) -> dg.MaterializeResult:
    sinks: list[AlertSink] = [JsonlFileSink(alerting.file_path)]
    if alerting.webhook_url:
        sinks.append(WebhookSink(alerting.webhook_url))
    report = send_new_alerts(lake.path, sinks)
    if report.failures:
        raise dg.Failure(
            f"{report.pending} alerts not delivered (they will be retried): "
            + "; ".join(f"{k}: {v}" for k, v in report.failures.items())
        )
    return dg.MaterializeResult(
        metadata={"alerts_sent": len(report.sent), "sinks": ", ".join(s.name for s in sinks)}
    )
