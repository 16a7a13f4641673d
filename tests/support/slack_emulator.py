"""A local HTTP server that behaves like a Slack incoming webhook: it answers 400 `no_text` to a body
without `text`, 400 `invalid_blocks` to blocks over Block Kit's limits (``slack_problems``), 404 to another
path, and lets a test script other answers (429 with Retry-After, 500, slow answers)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobs.alerts.payloads import alert_id
from tests.support.slack_rules import slack_problems

TOKEN = "T0SECRET/B0SECRET/xoxTOKENs3cr3tV4lue"


@dataclass
class Emulator:
    """What the fake Slack received and how it answers. ``script`` answers first, in order: (status,
    headers, body[, seconds to wait first]); then ``rule(body)`` may answer; else Slack's own checks."""

    url: str = ""
    requests: list[Any] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    script: list[tuple[Any, ...]] = field(default_factory=list)
    rule: Callable[[dict[str, Any]], tuple[int, dict[str, str], str] | None] = lambda body: None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keys(self, bodies: list[Any] | None = None) -> Counter[str]:
        """alert_id per body received (a Slack body names its finding; the state is its first word)."""
        out: Counter[str] = Counter()
        for body in self.requests if bodies is None else bodies:
            out[key_of(body)] += 1
        return out


def key_of(body: dict[str, Any]) -> str:
    if "alert_id" in body:
        return body["alert_id"]
    found = re.search(r"alert ([0-9a-f]{16})", json.dumps(body))
    if found:
        return found.group(1)
    finding = re.search(r"finding ([0-9a-f]{16})\)", body["text"]).group(1)  # an update names its finding
    return alert_id(finding, body["text"].split(" ", 1)[0].lower())


@contextlib.contextmanager
def serve_slack() -> Iterator[Emulator]:
    """A fake Slack incoming webhook on loopback for the ``with`` block."""
    emulator = Emulator()
    path = f"/services/{TOKEN}"

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != path:
                return self.answer(404, {}, "no_service")
            try:
                body = json.loads(raw)
            except ValueError:
                return self.answer(400, {}, "invalid_payload")
            with emulator.lock:
                emulator.requests.append(body)
                scripted = emulator.script.pop(0) if emulator.script else None
            if scripted is not None:
                if len(scripted) > 3:
                    time.sleep(scripted[3])
                return self.answer(*scripted[:3])
            ruled = emulator.rule(body)
            if ruled is not None:
                return self.answer(*ruled)
            problems = slack_problems(body)
            if problems:
                return self.answer(400, {}, problems[0].split(":")[0])
            emulator.accepted.append(body)
            return self.answer(200, {}, "ok")

        def answer(self, status: int, headers: dict[str, str], text: str) -> None:
            data = text.encode()
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client timed out and left
                self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    emulator.url = f"http://127.0.0.1:{server.server_port}{path}"
    try:
        yield emulator
    finally:
        server.shutdown()
        server.server_close()
