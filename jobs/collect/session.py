"""How the collector talks to one server: least privilege learned once, startup options, bounded time.

Three rules live here:

- **No statement the server would refuse.** Whether the role may set ``pg_stat_statements.track`` is
  *asked* (``has_parameter_privilege`` on PG15+, superuser before), never tried: a refused startup
  option is a FATAL line in the server's log. The answer is remembered per instance in
  ``<lake>/_state/collector/<instance>.json``, keyed by the server's ``system_identifier``, so a cron run
  (a new process each time) does not learn it again. On first contact the collector connects plainly; a
  superuser is recognised from the connection's ``is_superuser`` parameter status before any statement.
- **No SET statement.** ``statement_timeout``, ``lock_timeout``, ``default_transaction_read_only`` (and
  ``pg_stat_statements.track = none`` when permitted) go in as startup options, so nothing of the
  collector's own session setup reaches pg_stat_statements.
- **Bounded time.** libpq keepalives and ``tcp_user_timeout`` notice a dead peer; a watchdog thread
  enforces ``instance_deadline_s`` over the whole snapshot: it sends a cancel request and shuts the socket
  down, which wakes a reader blocked in ``poll``/``recv`` (closing the descriptor alone would not).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from jobs.collect.fleet import CollectorConfig
from jobs.lake.storage import LakePath, lake_path, write_atomically

UNTRACKED_OPTION = "-c pg_stat_statements.track=none"
PHASES: tuple[str, ...] = ("connect", "identity", "statements", "texts", "write")
STATE_DIR = Path("_state") / "collector"
# libpq raises any connect_timeout below 2 s to 2 s.
MIN_CONNECT_TIMEOUT_S = 2


class DeadlineExceeded(RuntimeError):
    """The instance's snapshot ran past ``instance_deadline_s``; the message names the phase."""


# ---------------------------------------------------------------------------------------------------------
# What the role may do, learned once per server


@dataclass(frozen=True)
class RolePrivileges:
    """What the collector's role may do on one server (system_identifier), and the server's own track."""

    system_identifier: int
    may_set_track: bool
    is_superuser: bool
    can_read_all_stats: bool
    server_version_num: int
    track_configured: str | None
    """The server's pg_stat_statements.track as seen outside the collector's session (None: unknown)."""

    def same_as(self, other: RolePrivileges | None) -> bool:
        return other is not None and asdict(self) == asdict(other)


def state_path(lake_root: LakePath, instance: str) -> LakePath:
    return lake_path(lake_root) / str(STATE_DIR) / f"{instance}.json"


def load_privileges(lake_root: LakePath, instance: str) -> RolePrivileges | None:
    """The remembered privileges of an instance; None when never learned or the file is unreadable."""
    path = state_path(lake_root, instance)
    try:
        raw = json.loads(path.read_text())
        return RolePrivileges(**{k: raw[k] for k in RolePrivileges.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unknown: the next snapshot connects plainly and learns again


def save_privileges(lake_root: LakePath, instance: str, privileges: RolePrivileges) -> None:
    """Write atomically (temp file + rename, or one PUT): a crash never leaves a half-written state file."""
    path = state_path(lake_root, instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**asdict(privileges), "learned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomically(path, (json.dumps(body, indent=2) + "\n").encode())


# ---------------------------------------------------------------------------------------------------------
# The watchdog


class Watchdog:
    """Bounds one instance's snapshot to ``deadline_s``: the phase it is in, and a timer that breaks the read.

    Use as a context manager around the snapshot; call ``enter(phase)`` as the snapshot moves on and
    ``attach(conn)`` once connected. When the timer fires it remembers the phase, sends a cancel request
    (the server stops the statement) and shuts the socket down (the blocked reader gets an error at once).
    """

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = float(deadline_s)
        self.started = time.monotonic()
        self.phase = PHASES[0]
        self.fired_in: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.deadline_s, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self.started = time.monotonic()
        self._timer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        return self.deadline_s - (time.monotonic() - self.started)

    def enter(self, phase: str) -> None:
        """Move to ``phase``; raises DeadlineExceeded when the deadline already passed."""
        with self._lock:
            if self.fired_in is not None:
                raise DeadlineExceeded(self.message())
            self.phase = phase

    def attach(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            self._conn = conn
            fired = self.fired_in is not None
        if fired:
            _break_connection(conn)
            raise DeadlineExceeded(self.message())

    def detach(self) -> None:
        with self._lock:
            self._conn = None

    def message(self) -> str:
        return (
            f"no answer within instance_deadline_s = {self.deadline_s:g} s "
            f"(stuck in phase {self.fired_in or self.phase}); the connection was cancelled and closed"
        )

    def _fire(self) -> None:
        with self._lock:
            self.fired_in = self.phase
            conn = self._conn
        if conn is not None:
            _break_connection(conn)


def _break_connection(conn: psycopg.Connection[Any]) -> None:
    """Cancel the running statement (in the background) and shut the socket down (wakes the reader)."""

    def cancel() -> None:
        with contextlib.suppress(Exception):  # best effort: the socket shutdown is what unblocks the reader
            conn.cancel_safe(timeout=2.0)

    threading.Thread(target=cancel, name="snapshot-cancel", daemon=True).start()
    try:
        duplicate = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, psycopg.Error):
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()


# ---------------------------------------------------------------------------------------------------------
# Connecting


def startup_options(dsn: str, config: CollectorConfig, untracked: bool) -> str:
    """The ``options`` startup parameter: the DSN's own options, then the collector's safety settings."""
    try:
        own = conninfo_to_dict(dsn).get("options") or ""
    except psycopg.ProgrammingError:
        own = ""
    ours = [
        f"-c statement_timeout={config.statement_timeout_ms}",
        f"-c lock_timeout={config.lock_timeout_ms}",
        "-c default_transaction_read_only=on",
    ]
    if untracked:
        ours.append(UNTRACKED_OPTION)
    return " ".join([str(own), *ours]).strip()


def connection_kwargs(dsn: str, config: CollectorConfig, untracked: bool, timeout_s: int) -> dict[str, Any]:
    return {
        "autocommit": True,  # no BEGIN/COMMIT: they would be tracked under the application's queryids
        "connect_timeout": timeout_s,
        "application_name": config.application_name,
        "options": startup_options(dsn, config, untracked),
        "keepalives": 1,
        "keepalives_idle": config.keepalives_idle_s,
        "keepalives_interval": config.keepalives_interval_s,
        "keepalives_count": config.keepalives_count,
        "tcp_user_timeout": config.tcp_user_timeout_ms,
        "row_factory": dict_row,
    }


def _connect(dsn: str, config: CollectorConfig, untracked: bool, dog: Watchdog) -> psycopg.Connection[Any]:
    remaining = dog.remaining()
    if remaining <= 0:
        dog.fired_in = dog.fired_in or "connect"
        raise DeadlineExceeded(dog.message())
    timeout = max(MIN_CONNECT_TIMEOUT_S, min(config.connect_timeout_s, math.ceil(remaining)))
    return psycopg.connect(dsn, **connection_kwargs(dsn, config, untracked, timeout))


def open_session(
    dsn: str, config: CollectorConfig, known: RolePrivileges | None, dog: Watchdog
) -> tuple[psycopg.Connection[Any], bool]:
    """A connection with tracking off when the role may set it (else plain), and whether it is untracked.

    Without remembered privileges the first connection is plain; a superuser (seen in the connection's
    parameter status, before any statement) is reconnected untracked at once. When remembered privileges
    say "may set" but the server now refuses (privilege revoked, another server behind the DSN), the
    refusal happens once and the collector reconnects plainly; the caller learns the new answer.
    """
    dog.enter("connect")
    if known is None:
        conn = _connect(dsn, config, False, dog)
        if conn.info.parameter_status("is_superuser") != "on":
            dog.attach(conn)
            return conn, False
        conn.close()
        conn = _connect(dsn, config, True, dog)
        dog.attach(conn)
        return conn, True
    try:
        conn = _connect(dsn, config, known.may_set_track, dog)
    except psycopg.OperationalError as exc:
        if not (known.may_set_track and "permission denied to set parameter" in str(exc)):
            raise
        conn = _connect(dsn, config, False, dog)
        dog.attach(conn)
        return conn, False
    dog.attach(conn)
    return conn, known.may_set_track
