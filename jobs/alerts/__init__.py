"""Alerts people receive: each finding once (and one update when it recovers or is superseded) to a
JSONL file, a Slack incoming webhook and/or a generic JSON webhook.

- ``payloads``: the contract payload per (finding, state) (``regression_alert.schema.json``), pure.
- ``slack``: the Slack message (``text`` plus Block Kit blocks) of a payload, pure.
- ``delivery``: one POST, its answer classified, retries with exponential backoff and jitter, bounded.
- ``sinks``: the JSONL file, Slack and generic webhook sinks.
- ``run``: a run: per-sink bookkeeping in the lake (``alerts_sent``, ``alert_dead_letters``), each sink
  gets each alert at most once, whatever the other sinks do.

Webhook URLs carry tokens: only their scheme and host are ever shown (``delivery.origin``).
"""

from jobs.alerts.delivery import Answer, Outcome, RetrySettings, WebhookURLError, origin, redact_url
from jobs.alerts.payloads import CONTRACT, alert_contract, alert_id, alert_payloads, alert_state
from jobs.alerts.run import (
    AlertReport,
    DeadLetter,
    SinkReport,
    already_sent,
    dead_lettered_states,
    delivered_states,
    read_findings,
    send_alerts,
    send_new_alerts,
)
from jobs.alerts.sinks import AlertSink, JsonlFileSink, SlackSink, WebhookSink, sinks_from_settings
from jobs.alerts.slack import slack_message

__all__ = [
    "CONTRACT",
    "AlertReport",
    "AlertSink",
    "Answer",
    "DeadLetter",
    "JsonlFileSink",
    "Outcome",
    "RetrySettings",
    "SinkReport",
    "SlackSink",
    "WebhookSink",
    "WebhookURLError",
    "alert_contract",
    "alert_id",
    "alert_payloads",
    "alert_state",
    "already_sent",
    "dead_lettered_states",
    "delivered_states",
    "origin",
    "read_findings",
    "redact_url",
    "send_alerts",
    "send_new_alerts",
    "sinks_from_settings",
    "slack_message",
]
