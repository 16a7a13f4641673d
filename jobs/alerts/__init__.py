"""Alerts people receive: each finding once (and one update when it recovers or is superseded) to a
JSONL file, a Slack incoming webhook and/or a generic JSON webhook.

- ``payloads``: the contract payload per (finding, state) (``regression_alert.schema.json``), pure.
- ``slack``: the Slack message (``text`` plus Block Kit blocks) of a payload, pure.
- ``delivery``: one POST, its answer classified, retries with exponential backoff and jitter, bounded.
- ``sinks``: the JSONL file, Slack and generic webhook sinks.
- ``run``: a run: per-sink bookkeeping in the lake (``alerts_sent``, ``alert_dead_letters``), each sink
  gets each alert at most once, whatever the other sinks do.

Webhook URLs carry tokens: only their scheme and host are ever shown (``delivery.origin``)."""
