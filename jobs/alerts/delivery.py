"""Delivering one alert to one HTTP sink: POST, classify the answer, retry with backoff, or give up.

Answers and what they mean:

- 2xx: delivered.
- 429 (rate limited), 408, 5xx, a network error or a timeout: transient. Retried after an exponential
  backoff with jitter (``backoff_initial_s`` × ``backoff_multiplier``^(n-1), at most ``backoff_max_s``, the
  delay drawn uniformly from its last ``jitter`` fraction), or after the server's ``Retry-After`` when it
  sent one with a 429 or 503; at most ``max_attempts`` attempts, then the alert is dead-lettered and the
  sink is stopped for this run (it looks down: the rest of its alerts wait for the next run instead of
  each retrying). A Retry-After longer than ``max_retry_after_s`` is not waited for: dead letter, sink
  stopped.
- Any other answer (400 ``no_text``/``invalid_payload``, 403, 404, 410, a redirect, which is never
  followed): permanent. Dead-lettered at once; 401/403/404/410 say the URL itself is wrong or revoked, so
  the sink is stopped for this run too.

Each POST carries ``Idempotency-Key: <alert_id>``: a sink that honours it ignores the one resend a killed
run can make (the alert in flight when it died).

Webhook URLs carry a token: nothing here ever puts one in a message. A sink is named by ``origin(url)``
(scheme and host), and every error text passes through ``redact_url`` before it leaves this module.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from jobs.redaction import scrub

DELIVERED = "delivered"
DEAD = "dead_lettered"
RETRY_LATER = "retry_later"  # not the alert's fault (a file that cannot be written): the next run again
BODY_SHOWN_MAX = 200
TRANSIENT_STATUSES = frozenset({408, 429})
SINK_BROKEN_STATUSES = frozenset({401, 403, 404, 410})
RETRY_AFTER_STATUSES = frozenset({429, 503})  # the answers whose Retry-After header is honoured


class RetrySettings(Protocol):
    """What the retry loop reads; ``jobs.alerts.config.AlertsConfig`` has these fields (their docs are
    there)."""

    max_attempts: int
    backoff_initial_s: float
    backoff_multiplier: float
    backoff_max_s: float
    jitter: float
    max_retry_after_s: float
    timeout_s: float


class WebhookURLError(ValueError):
    """A webhook URL that cannot be used; the message names where it came from, never the URL."""


def origin(url: str) -> str:
    """``scheme://host`` of a URL: the only part of a webhook URL ever shown."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


def check_url(url: str, source: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host, else WebhookURLError naming ``source``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise WebhookURLError(f"the webhook URL from {source} is not an http(s) URL with a host")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise WebhookURLError(f"the webhook URL from {source} contains spaces or control characters")
    return url


def redact_url(text: str, url: str) -> str:
    """``text`` with the URL, and every piece of its path, query and user info, replaced by its origin or
    ``…``; then the DSN scrubber (a message may quote anything)."""
    parts = urlsplit(url)
    out = text.replace(url, origin(url))
    secrets = [parts.path, parts.query, parts.fragment, parts.username or "", parts.password or ""]
    secrets += [p for p in parts.path.split("/") if len(p) >= 4]
    secrets += [p for p in parts.query.replace("=", "&").split("&") if len(p) >= 4]
    for secret in sorted({s for s in secrets if s and s != "/"}, key=len, reverse=True):
        out = out.replace(secret, "…")
    return scrub(out)


@dataclass(frozen=True)
class Answer:
    """One attempt's result: an HTTP status (None when no answer came) and what it said."""

    status: int | None
    body: str = ""
    retry_after: str | None = None
    error: str = ""

    def describe(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        said = " ".join(self.body.split())[:BODY_SHOWN_MAX]
        return f"HTTP {self.status}" + (f" {said}" if said else "")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (never followed: the alert would go to a host nobody configured)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def http_post_json(
    url: str, body: dict[str, Any], timeout_s: float, *, idempotency_key: str | None = None
) -> Answer:
    """POST ``body`` as JSON; never raises for what the network or the server does (an Answer says it).
    Error texts are redacted of the URL here."""
    headers = {"Content-Type": "application/json", "User-Agent": "pg-regression-radar"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            text = answer.read(4096).decode("utf-8", "replace")
            return Answer(answer.status, text)
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(4096).decode("utf-8", "replace")
        except OSError:
            text = ""
        return Answer(
            exc.code, redact_url(text, url), exc.headers.get("Retry-After") if exc.headers else None
        )
    except urllib.error.URLError as exc:
        return Answer(None, error=redact_url(f"network error: {exc.reason}", url))
    except TimeoutError:
        return Answer(None, error=f"no answer within {timeout_s:g} s")
    except (OSError, ValueError) as exc:  # a reset connection, http.client.InvalidURL, a bad status line
        return Answer(None, error=redact_url(f"{type(exc).__name__}: {exc}", url))


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(attempt: int, settings: RetrySettings, rng: random.Random) -> float:
    """The wait after failed attempt ``attempt`` (1-based): exponential, capped, jittered downwards."""
    base = min(
        settings.backoff_max_s, settings.backoff_initial_s * settings.backoff_multiplier ** (attempt - 1)
    )
    jitter = min(1.0, max(0.0, settings.jitter))
    return base * (1.0 - jitter * rng.random())


@dataclass(frozen=True)
class Outcome:
    """What became of one alert at one sink in this run."""

    status: Literal["delivered", "dead_lettered", "retry_later"]
    attempts: int
    reason: str = ""
    last_status: int | None = None
    sink_down: bool = False  # stop sending to this sink for the rest of the run
    delays_s: tuple[float, ...] = field(default_factory=tuple)


def deliver_with_retries(
    post: Callable[[], Answer],
    settings: RetrySettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> Outcome:
    """Attempt ``post`` until it is accepted, fails for good, or runs out of attempts."""
    rng = rng or random.Random()
    attempts = max(1, settings.max_attempts)
    delays: list[float] = []
    answer = Answer(None, error="not attempted")
    for attempt in range(1, attempts + 1):
        answer = post()
        if answer.status is not None and 200 <= answer.status < 300:
            return Outcome(DELIVERED, attempt, last_status=answer.status, delays_s=tuple(delays))
        transient = answer.status is None or answer.status in TRANSIENT_STATUSES or answer.status >= 500
        if not transient:
            return Outcome(
                DEAD,
                attempt,
                f"permanent failure: {answer.describe()}",
                answer.status,
                sink_down=answer.status in SINK_BROKEN_STATUSES,
                delays_s=tuple(delays),
            )
        if attempt == attempts:
            break
        wait = retry_after_seconds(answer.retry_after) if answer.status in RETRY_AFTER_STATUSES else None
        if wait is not None and wait > settings.max_retry_after_s:
            return Outcome(
                DEAD,
                attempt,
                f"rate limited: Retry-After {wait:g} s is longer than max_retry_after_s "
                f"{settings.max_retry_after_s:g} s ({answer.describe()})",
                answer.status,
                sink_down=True,
                delays_s=tuple(delays),
            )
        delay = wait if wait is not None else backoff_delay(attempt, settings, rng)
        delays.append(delay)
        sleep(delay)
    return Outcome(
        DEAD,
        attempts,
        f"gave up after {attempts} attempts: last {answer.describe()}",
        answer.status,
        sink_down=True,
        delays_s=tuple(delays),
    )
