"""Alert sinks: the JSONL file, Slack's incoming webhook, and the generic JSON webhook.

A sink has a ``key`` (``file``, ``slack``, ``webhook``: what the lake's bookkeeping records, so a moved file
or a rotated webhook token does not send everything again), a ``name`` to show (a webhook shows only its
scheme and host) and ``deliver(payload, deadline) -> Outcome`` for one alert (``deadline``: the run's, a
``time.monotonic()`` time, or None). Only the HTTP sinks retry (``jobs.alerts.delivery``), each POST with
the alert_id as its ``Idempotency-Key``; the file sink appends, fsyncs, and skips an alert_id the file
already holds (so a run that died between writing the line and recording it in the lake writes no second
line).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jobs.alerts.delivery import (
    DELIVERED,
    RETRY_LATER,
    Answer,
    Outcome,
    RetrySettings,
    check_url,
    deliver_with_retries,
    http_post_json,
    origin,
)
from jobs.alerts.slack import slack_message
from jobs.detect.evidence import EvidenceCutoffs

if TYPE_CHECKING:
    from jobs.alerts.config import AlertsConfig

FILE, SLACK, WEBHOOK = "file", "slack", "webhook"


class AlertSink(Protocol):
    key: str
    name: str

    def deliver(self, payload: dict[str, Any], deadline: float | None = None) -> Outcome: ...


@dataclass
class JsonlFileSink:
    """Appends one JSON line per alert (what a log shipper or a chat bot can tail); each alert_id once."""

    path: Path
    key: str = FILE
    _written: set[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @property
    def name(self) -> str:
        return f"file {self.path}"

    def written_ids(self) -> set[str]:
        """The alert_ids the file holds already (read once per sink; unreadable lines are skipped)."""
        if self._written is None:
            self._written = set()
            if self.path.exists():
                with open(self.path, encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        try:
                            self._written.add(json.loads(line)["alert_id"])
                        except (ValueError, KeyError, TypeError):
                            continue
        return self._written

    def deliver(self, payload: dict[str, Any], deadline: float | None = None) -> Outcome:
        """Append the line (a local write: the run's deadline is checked between alerts, not here)."""
        try:
            if payload["alert_id"] not in self.written_ids():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(payload, sort_keys=True) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                self.written_ids().add(payload["alert_id"])
        except OSError as exc:
            # Not the alert's fault: nothing is dead-lettered, the line is written by a later run.
            return Outcome(RETRY_LATER, 1, f"cannot write {self.path}: {exc.strerror or exc}", sink_down=True)
        return Outcome(DELIVERED, 1)


@dataclass
class _HttpSink:
    url: str
    settings: RetrySettings
    source: str = "the configuration"
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    key: str = ""
    kind: str = ""

    def __post_init__(self) -> None:
        check_url(self.url, self.source)

    @property
    def name(self) -> str:
        return f"{self.kind} {origin(self.url)}"

    def __repr__(self) -> str:  # a dataclass repr would show the URL
        return f"{type(self).__name__}({self.name})"

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def deliver(self, payload: dict[str, Any], deadline: float | None = None) -> Outcome:
        body = self.body(payload)

        def post(timeout_s: float) -> Answer:
            return http_post_json(self.url, body, timeout_s, idempotency_key=payload["alert_id"])

        return deliver_with_retries(post, self.settings, sleep=self.sleep, rng=self.rng, deadline=deadline)


@dataclass(repr=False)
class SlackSink(_HttpSink):
    """A Slack incoming webhook: ``text`` plus Block Kit blocks (``jobs.alerts.slack``)."""

    key: str = SLACK
    kind: str = "slack"
    cutoffs: EvidenceCutoffs = EvidenceCutoffs()
    """The evidence words' cut-offs: the weekly report's ([report]), so both say the same."""

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        return slack_message(payload, self.cutoffs)


@dataclass(repr=False)
class WebhookSink(_HttpSink):
    """A generic JSON webhook: the contract payload (regression_alert.schema.json) as it is."""

    key: str = WEBHOOK
    kind: str = "webhook"

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        return payload


def sinks_from_settings(
    alerts: AlertsConfig,
    env: Mapping[str, str] | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    cutoffs: EvidenceCutoffs = EvidenceCutoffs(),
) -> list[AlertSink]:
    """The sinks [alerts] names: the JSONL file (unless ``file`` is empty), Slack when its URL is set (in
    the file or the environment variable ``slack_webhook_env``, read now), the generic webhook likewise.
    A URL that is not http(s) is a WebhookURLError naming where it came from (never the URL)."""
    rng = rng or random.Random()
    sinks: list[AlertSink] = [JsonlFileSink(Path(alerts.file))] if alerts.file else []
    slack_url = alerts.resolved_slack_url(env)
    if slack_url:
        source = (
            "[alerts] slack_webhook_url" if alerts.slack_webhook_url else f"env {alerts.slack_webhook_env}"
        )
        sinks.append(SlackSink(slack_url, alerts, source=source, sleep=sleep, rng=rng, cutoffs=cutoffs))
    webhook_url = alerts.resolved_webhook_url(env)
    if webhook_url:
        source = "[alerts] webhook_url" if alerts.webhook_url else f"env {alerts.webhook_env}"
        sinks.append(WebhookSink(webhook_url, alerts, source=source, sleep=sleep, rng=rng))
    return sinks
