"""Issue 28: `radar alerts` killed with SIGKILL re-sent what it had delivered (the sent records were written
in a ``finally`` after the sending loop, which kill -9 skips: 3 alerts, 6 POSTs). Each alert's record is
now written as soon as its sink answers, so a kill at any moment can send again only the alert in flight.

The test kills `radar alerts` (the CLI, a process of its own) at random moments (seeded) more than twenty
times against a webhook that answers 200 after 50-150 ms and honours no idempotency key, then lets a run
finish: every alert reached the webhook, each POST carried its alert_id as Idempotency-Key, no run re-sent
anything but the one alert in flight when the previous run was killed, and the JSONL sink and the lake's
ledger hold each alert once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs.alerts.payloads import alert_id
from jobs.lake import io as lake
from jobs.schemas.analysed import ALERTS_SENT
from tests.support.findings_lakes import finding_row, write_findings
from tests.support.webhook_servers import Post, serve_counting_webhook

WORKTREE = Path(__file__).resolve().parents[3]
ALERTS = 80
KILLS = 22
SEED = 28


def lock_holder(lake_root: Path) -> int | None:
    """The pid the alerts lock file names (written by the holder once it holds the lock)."""
    try:
        return (
            int(json.loads((lake_root / "_locks" / "alerts.lock").read_text() or "{}").get("pid", 0)) or None
        )
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_kill_9_at_random_moments_sends_each_alert_once_but_the_one_in_flight(
    lake_root: Path, tmp_path: Path
) -> None:
    write_findings(lake_root, [finding_row(n) for n in range(1, ALERTS + 1)])
    expected = {alert_id(f"{n:016x}", "open") for n in range(1, ALERTS + 1)}
    file = tmp_path / "alerts.jsonl"
    config = tmp_path / "radar.toml"
    config.write_text(f'[alerts]\nfile = "{file}"\ndead_letter_file = "{tmp_path / "dead.jsonl"}"\n')
    rng = random.Random(SEED)
    env = {k: v for k, v in os.environ.items() if k not in ("RADAR_SLACK_WEBHOOK", "RADAR_ALERT_WEBHOOK")}
    radar = [sys.executable, "-m", "jobs.cli.main"]
    runs: dict[int, subprocess.Popen[str]] = {}  # by the run's number (the webhook URL's last segment)
    killed: list[int] = []

    with serve_counting_webhook((0.05, 0.15), seed=SEED) as hook:

        def start(number: int) -> None:
            # The next run starts (its imports take seconds) while the current one sends; it waits for
            # the alerts lock.
            runs[number] = subprocess.Popen(
                [*radar, "--lake", str(lake_root), "--lock-wait-s", "300", "alerts", "--format", "json"],
                cwd=WORKTREE,
                env={**env, "RADAR_CONFIG": str(config), "RADAR_ALERT_WEBHOOK": f"{hook.url}/{number}"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )

        def holder() -> int:
            """The live run that holds the lock (waits for one to take it)."""
            give_up = time.monotonic() + 120
            while time.monotonic() < give_up:
                pid = lock_holder(lake_root)
                for number, proc in runs.items():
                    if proc.pid == pid and proc.poll() is None and number not in killed:
                        return number
                time.sleep(0.005)
            ended = {n: p.communicate() for n, p in runs.items() if n not in killed and p.poll() is not None}
            raise AssertionError(f"no run took the alerts lock within 120 s; ended: {ended}")

        start(0)
        start(1)
        while len(killed) < KILLS:
            number = holder()
            proc = runs[number]
            if rng.random() < 0.25:  # anywhere: reading the lake, the JSONL sink, the first POSTs
                time.sleep(rng.uniform(0.0, 1.0))
            else:  # during the n-th POST's answer, or just after it
                wanted = rng.randint(1, 3)
                while hook.posts_of(str(number)) < wanted and proc.poll() is None:
                    time.sleep(0.002)
                time.sleep(rng.uniform(0.0, 0.15))
            assert proc.poll() is None, f"run {number} ended before its kill: too few alerts left"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed.append(number)
            start(max(runs) + 1)
        outputs = {}
        for number, proc in runs.items():
            if number not in killed:
                outputs[number] = proc.communicate(timeout=300)
                assert proc.returncode == 0, outputs[number]
        posts = hook.snapshot()

    for number, proc in runs.items():
        stderr = proc.stderr.read() if number in killed and proc.stderr else outputs.get(number, ("", ""))[1]
        assert "Traceback" not in (stderr or ""), stderr
    sent_again, in_flight = resent_and_in_flight(posts)
    for run, again in sent_again.items():
        assert len(again) <= 1, f"run {run} re-sent {again}"
        assert again <= {in_flight.get(run)}, f"run {run} re-sent {again}, not the alert in flight"
    assert all(p.idempotency_key == p.alert_id for p in posts), "each POST names its alert as its key"
    acknowledged = Counter(p.alert_id for p in posts if p.acknowledged)
    assert set(acknowledged) == expected, "every alert delivered"
    twice = {a for a, n in acknowledged.items() if n > 1}
    assert len(posts) <= ALERTS + len(killed), "at most one extra POST per kill"
    assert twice <= {a for run, a in in_flight.items() if a in sent_again.get(run, set())}, (
        "only an alert in flight at a kill may be acknowledged twice"
    )
    lines = [json.loads(line)["alert_id"] for line in file.read_text().splitlines()]
    assert sorted(lines) == sorted(expected), "the JSONL sink holds each alert once"
    ledger = lake.read_table(lake_root, ALERTS_SENT)
    assert ledger.group_by("alert_id", "sink").len()["len"].max() == 1 and ledger.height == 2 * ALERTS
    print(
        f"{len(killed)} kills, {len(posts)} POSTs for {ALERTS} alerts, "
        f"{sum(len(a) for a in sent_again.values())} re-sent in flight, {len(twice)} acknowledged twice"
    )


def resent_and_in_flight(posts: list[Post]) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Per run (in the order they sent): the alerts it POSTed that an earlier POST had sent already, and
    the alert in flight when it began: the last one POSTed by the run that sent before it (a run killed
    before its first POST leaves the alert in flight as it was)."""
    seen: set[str] = set()
    again: dict[str, set[str]] = {}
    in_flight: dict[str, str] = {}
    run, last = None, None
    for post in posts:
        if post.run != run:
            run = post.run
            if last is not None:
                in_flight[run] = last
        if post.alert_id in seen:
            again.setdefault(run, set()).add(post.alert_id)
        seen.add(post.alert_id)
        last = post.alert_id
    return again, in_flight
