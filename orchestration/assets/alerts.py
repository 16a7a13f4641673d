"""regression_alerts: each finding once (and one update when it recovers or is superseded) to every sink
of [alerts]: the JSONL file, Slack, the generic webhook. Per-sink bookkeeping (jobs.alerts.run) makes a
re-run safe: nothing a sink accepted is sent to it again."""

import dataclasses

import dagster as dg
import pydantic

from jobs.alerts.run import send_alerts
from jobs.alerts.sinks import SLACK, WEBHOOK
from orchestration.resources import AlertResource, LakeResource
from orchestration.run_config import definitions_settings, section_config, section_from_config

# [alerts] of the config file; where alerts go (file, dead_letter_file) is AlertResource's, and the webhook
# URLs are never run config (section_config leaves secrets out; the file's or the environment's are used).
PileupsRunConfig = section_config("pileups")  # [pileups]: the live pile-up alerts' thresholds
AlertsRunConfig = section_config(
    "alerts",
    exclude=("file", "dead_letter_file"),
    extra={
        "pileups": (
            PileupsRunConfig,
            pydantic.Field(
                default_factory=PileupsRunConfig,
                description="[pileups] of the config file: when a live pile-up (a lock queue, or backends "
                "running one statement far longer than usual) is alerted",
            ),
        )
    },
)


@dg.asset(
    deps=["findings"],
    group_name="publish",
    kinds={"json"},
    description="Each finding once (and one update on recovery or supersession) to the JSONL file, Slack "
    "and/or a JSON webhook; transient failures are retried with backoff, then dead-lettered.",
)
def regression_alerts(
    context: dg.AssetExecutionContext,
    config: AlertsRunConfig,  # type: ignore[valid-type]
    lake: LakeResource,
    alerting: AlertResource,
) -> dg.MaterializeResult:
    alerts = dataclasses.replace(
        section_from_config("alerts", config, "regression_alerts"),
        file=alerting.file,
        dead_letter_file=alerting.dead_letter_file,
    )
    # Webhook URLs: [alerts] or its environment variables, now; the evidence words' cut-offs are the weekly
    # report's, so Slack and the report call one finding the same.
    settings = definitions_settings().settings
    pileups = section_from_config("pileups", config.pileups, "regression_alerts")
    report = send_alerts(lake.path, alerts, cutoffs=settings.report.evidence_cutoffs(), pileups=pileups)
    metadata: dict[str, int | str] = {
        "alerts_sent": len(report.sent),
        "pending": report.pending,
        "dead_lettered": len(report.dead_lettered),
        "deferred": sum(s.deferred for s in report.sinks),
        "sinks": ", ".join(s.name for s in report.sinks) or "none",
    }
    if not any(s.key in (SLACK, WEBHOOK) for s in report.sinks):
        unsent = (
            f"no Slack or webhook sink is configured ([alerts] slack_webhook_url or env "
            f"{alerts.slack_webhook_env}; webhook_url or env {alerts.webhook_env}): alerts go to "
            f"{alerts.file or 'no file'} only"
        )
        metadata["note"] = unsent
        context.log.warning(unsent)
    for note in report.notes:
        context.log.warning(note)
    if not report.ok:
        problems = "; ".join(f"{name}: {why}" for name, why in report.failures.items())
        raise dg.Failure(description=f"not every alert was delivered: {problems}", metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)
