"""The alerts section of the config file: sinks, their URLs (secrets), retries and what is sent."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jobs.alerts.delivery import check_url
from jobs.errors import ConfigError

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class AlertsConfig:
    """[alerts]: where alerts go and how hard delivery is tried."""

    file: str = "data/alerts.jsonl"
    """JSONL sink: one line per finding alert (and per update), each written once."""
    dead_letter_file: str = "data/alerts.dead-letter.jsonl"
    """One line per alert a sink refused for good or did not take within max_attempts, naming why."""
    slack_webhook_url: str = ""
    """Slack incoming-webhook URL (a secret: prefer the environment variable named by slack_webhook_env;
    never printed)."""
    slack_webhook_env: str = "RADAR_SLACK_WEBHOOK"
    """Environment variable holding the Slack incoming-webhook URL, read when alerts are sent."""
    webhook_url: str = ""
    """Generic JSON webhook URL (regression_alert.schema.json payloads; a secret, never printed)."""
    webhook_env: str = "RADAR_ALERT_WEBHOOK"
    """Environment variable holding the generic webhook URL, read when alerts are sent."""
    severity: str = "critical"
    """Severity of a latency regression's alert (critical | warning | info): the payload's ``severity``."""
    work_severity: str = "warning"
    """Severity of a work regression's alert (a finding of kind work: work per call grew, latency did not
    regress), lower than a latency regression's by default."""
    send_resolved: bool = True
    """Also send one update when a finding recovers or is superseded."""
    max_attempts: int = 5
    """Attempts per alert per sink in one run before it is dead-lettered."""
    backoff_initial_s: float = 1.0
    """Delay before the first retry."""
    backoff_multiplier: float = 2.0
    """Each further retry waits this many times longer..."""
    backoff_max_s: float = 30.0
    """...but never longer than this."""
    jitter: float = 0.5
    """Fraction of each delay drawn at random (0 = exact exponential delays)."""
    max_retry_after_s: float = 60.0
    """A Retry-After longer than this is not waited for: the alert is dead-lettered instead."""
    timeout_s: float = 10.0
    """Deadline of one HTTP delivery attempt: connect, send and the whole answer (a server that trickles
    its answer is cut off then; the status decides, an answer without one is a timeout)."""
    run_deadline_s: float = 120.0
    """Deadline of one alerts run, from taking the alerts lock: no attempt or retry wait goes past it, the
    alerts not sent by then are deferred to the next run, and the lock is released."""

    def __post_init__(self) -> None:
        for name in ("severity", "work_severity"):
            if getattr(self, name) not in SEVERITIES:
                raise ConfigError(
                    f"[alerts] {name} must be one of {', '.join(SEVERITIES)}, not {getattr(self, name)!r}"
                )
        if self.max_attempts < 1:
            raise ConfigError("[alerts] max_attempts must be >= 1")
        if self.backoff_multiplier < 1.0:
            raise ConfigError("[alerts] backoff_multiplier must be >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError("[alerts] jitter must be between 0 and 1")
        if self.timeout_s <= 0:
            raise ConfigError("[alerts] timeout_s must be > 0")
        if self.run_deadline_s <= 0:
            raise ConfigError("[alerts] run_deadline_s must be > 0")
        for name in ("slack_webhook_url", "webhook_url"):
            if getattr(self, name):  # an ftp:// or hostless URL is refused now, not at the first alert
                check_url(getattr(self, name), f"[alerts] {name}")

    def check_urls(self, env: Mapping[str, str] | None = None) -> None:
        """Every URL alerts would be sent to now (the file's, else its environment variable's) is an
        http(s) URL with a host: what `radar config check` verifies; WebhookURLError names the source."""
        urls = (
            ("slack_webhook_url", self.slack_webhook_env, self.resolved_slack_url(env)),
            ("webhook_url", self.webhook_env, self.resolved_webhook_url(env)),
        )
        for key, variable, url in urls:
            if url:
                check_url(url, f"[alerts] {key}" if getattr(self, key) else f"env {variable}")

    def resolved_slack_url(self, env: Mapping[str, str] | None = None) -> str:
        """The Slack URL: the file's, else the environment variable's, else "" (no Slack sink)."""
        source = os.environ if env is None else env
        return self.slack_webhook_url or source.get(self.slack_webhook_env, "")

    def resolved_webhook_url(self, env: Mapping[str, str] | None = None) -> str:
        source = os.environ if env is None else env
        return self.webhook_url or source.get(self.webhook_env, "")
