"""Local webhook servers for the delivery-guarantee tests: one that counts every POST and whether its 200
reached a live client (the kill -9 test), one that trickles its answer a byte at a time (the deadline
tests)."""

from __future__ import annotations

import contextlib
import json
import random
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Post:
    """One POST the counting server received: when (monotonic), from which run (the URL's last path
    segment), which alert, the Idempotency-Key header, and whether the 200 was written to a client still
    there."""

    arrived: float
    run: str
    alert_id: str
    idempotency_key: str | None
    acknowledged: bool


@dataclass
class CountingWebhook:
    url: str = ""
    posts: list[Post] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posts_of(self, run: str) -> int:
        with self.lock:
            return sum(p.run == run for p in self.posts)

    def snapshot(self) -> list[Post]:
        """Every POST so far, in the order they arrived."""
        with self.lock:
            return sorted(self.posts, key=lambda p: p.arrived)


def _client_gone(connection: socket.socket) -> bool:
    """The client closed its end (a killed process's socket is closed by the kernel): readable at EOF."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@contextlib.contextmanager
def serve_counting_webhook(delay_s: tuple[float, float], seed: int) -> Iterator[CountingWebhook]:
    """A webhook on loopback that answers 200 to every POST after a delay drawn from ``delay_s`` (seeded),
    honouring no idempotency key; a POST whose client left during the delay is recorded unacknowledged."""
    hook = CountingWebhook()
    rng = random.Random(seed)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived = time.monotonic()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with hook.lock:
                delay = rng.uniform(*delay_s)
            time.sleep(delay)
            acknowledged = False
            if not _client_gone(self.connection):
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    self.wfile.flush()
                    acknowledged = True
                except OSError:
                    pass
            post = Post(
                arrived,
                self.path.rsplit("/", 1)[-1],
                body["alert_id"],
                self.headers["Idempotency-Key"],
                acknowledged,
            )
            with hook.lock:
                hook.posts.append(post)

        def log_message(self, *args: object) -> None:
            pass

    with _serving(Handler) as port:
        hook.url = f"http://127.0.0.1:{port}/hook"
        yield hook


@dataclass
class TricklingWebhook:
    """``status``: the status sent at once before the body trickles; None: the status line itself
    trickles. ``requests`` counts the POSTs."""

    url: str = ""
    status: int | None = 200
    interval_s: float = 1.0
    for_s: float = 30.0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def serve_trickling_webhook(
    status: int | None, interval_s: float = 1.0, for_s: float = 30.0
) -> Iterator[TricklingWebhook]:
    """A webhook that answers every POST one byte per ``interval_s`` for ``for_s`` seconds: after the status
    line and headers (a Content-Length it never reaches) when ``status`` is set, else from the first byte of
    the status line."""
    hook = TricklingWebhook(status=status, interval_s=interval_s, for_s=for_s)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            with hook.lock:
                hook.requests += 1
            head = b""
            if status is not None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.flush()
            else:
                head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            stop = time.monotonic() + for_s
            index = 0
            with contextlib.suppress(OSError):
                while time.monotonic() < stop:
                    self.wfile.write(head[index : index + 1] if index < len(head) else b".")
                    self.wfile.flush()
                    index += 1
                    time.sleep(interval_s)
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    with _serving(Handler) as port:
        hook.url = f"http://127.0.0.1:{port}/trickle"
        yield hook


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
