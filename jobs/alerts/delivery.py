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

Deadlines. ``timeout_s`` bounds a whole attempt (connect, send, status line, headers and body), not each
read: a watchdog shuts the attempt's socket down when it runs out, so a server that trickles its answer a
byte at a time cannot hold a run (a socket timeout alone restarts at every byte). The status decides: a body
still arriving at the deadline is cut, an answer without a status line by then is a timeout. A run's
deadline (``deliver_with_retries(deadline=...)``) caps every attempt and wait as well: what it cuts is
``retry_later`` (deferred to the next run), never dead-lettered.

Each POST carries ``Idempotency-Key: <alert_id>``: a sink that honours it ignores the one resend a killed
run can make (the alert in flight when it died).

Webhook URLs carry a token: nothing here ever puts one in a message. A sink is named by ``origin(url)``
(scheme and host), and every error text passes through ``redact_url`` before it leaves this module.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import random
import socket
import threading
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


class _Watchdog:
    """Ends one attempt at its deadline by shutting its connection down: whatever is blocked on it (the TLS
    handshake, sending, a read from a server that trickles) returns at once. A socket timeout alone bounds
    each read, not the attempt."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        """Seconds left (a small positive floor: a socket timeout of 0 would mean non-blocking)."""
        return max(0.001, self.deadline - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        """The attempt's connection, as soon as it is made. A duplicate of its file descriptor is kept:
        shutting that down ends the connection whatever wraps the original (TLS) or drops it (urllib lets
        go of the connection's socket once the headers are read, the response still reads from it)."""
        with self._lock:
            self._sock = sock.dup()
            expired = self.expired
        if expired:
            self._shut()

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
        self._shut()

    def _shut(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            if self._sock is not None:
                self._sock.shutdown(socket.SHUT_RDWR)


class _Watched:
    """An http.client connection whose connect uses the attempt's remaining time and hands the new socket
    to its watchdog (mixed into HTTPConnection and HTTPSConnection)."""

    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

        def create_connection(*args: Any, **kwargs: Any) -> socket.socket:
            sock = socket.create_connection(*args, **kwargs)
            watchdog.watch(sock)
            return sock

        self._create_connection = create_connection

    def connect(self) -> None:
        self.timeout = self._watchdog.remaining()
        super().connect()  # type: ignore[misc]


class _WatchedHTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTPConnection, watchdog=self._watchdog), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTPSConnection, watchdog=self._watchdog), req)


def http_post_json(
    url: str, body: dict[str, Any], timeout_s: float, *, idempotency_key: str | None = None
) -> Answer:
    """POST ``body`` as JSON, the whole attempt within ``timeout_s`` (connect, send, the answer to its last
    byte; a body still arriving then is cut, the status decides); never raises for what the network or
    the server does (an Answer says it). Error texts are redacted of the URL here."""
    headers = {"Content-Type": "application/json", "User-Agent": "pg-regression-radar"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    watchdog = _Watchdog(timeout_s)
    timed_out = Answer(None, error=f"no complete answer within {timeout_s:g} s")
    try:
        opener = urllib.request.build_opener(
            _NoRedirects, _WatchedHTTPHandler(watchdog), _WatchedHTTPSHandler(watchdog)
        )
        with opener.open(request, timeout=watchdog.remaining()) as answer:
            return Answer(answer.status, _read_some(answer))
    except urllib.error.HTTPError as exc:
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        return Answer(exc.code, redact_url(_read_some(exc), url), retry_after)
    except urllib.error.URLError as exc:
        if watchdog.expired or isinstance(exc.reason, TimeoutError):
            return timed_out
        return Answer(None, error=redact_url(f"network error: {exc.reason}", url))
    except TimeoutError:
        return timed_out
    # A reset connection, http.client.InvalidURL, a bad status line, an answer cut by the watchdog.
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if watchdog.expired:
            return timed_out
        return Answer(None, error=redact_url(f"{type(exc).__name__}: {exc}", url))
    finally:
        watchdog.cancel()


def _read_some(answer: Any) -> str:
    """The body's first 4 KiB, or what came of it before the attempt's deadline cut the connection."""
    try:
        data = answer.read(4096)
    except (OSError, http.client.HTTPException) as exc:
        data = getattr(exc, "partial", b"") or b""
    return data.decode("utf-8", "replace")


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
    post: Callable[[float], Answer],
    settings: RetrySettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Attempt ``post(seconds)`` until it is accepted, fails for good, or runs out of attempts. Each attempt
    gets ``timeout_s``, less when the run's ``deadline`` (a ``clock`` time) comes first; an attempt or wait
    the deadline cuts makes the alert ``retry_later`` (the next run sends it), not a dead letter."""
    rng = rng or random.Random()
    attempts = max(1, settings.max_attempts)
    delays: list[float] = []
    answer = Answer(None, error="not attempted")

    def left() -> float:
        return float("inf") if deadline is None else deadline - clock()

    def cut(made: int) -> Outcome:
        return Outcome(
            RETRY_LATER,
            made,
            "the run's deadline (run_deadline_s) passed",
            answer.status,
            sink_down=True,
            delays_s=tuple(delays),
        )

    for attempt in range(1, attempts + 1):
        if left() <= 0:
            return cut(attempt - 1)
        answer = post(min(settings.timeout_s, left()))
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
        if answer.status is None and left() <= 0:
            return cut(attempt)  # cut by the run's deadline, not the sink's fault
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
        if delay >= left():
            return cut(attempt)  # the next attempt would start after the deadline
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
