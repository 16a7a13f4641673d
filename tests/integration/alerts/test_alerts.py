"""Alerts against a local HTTP server that behaves like a Slack incoming webhook (400 no_text without
`text`, 429 with Retry-After, 500, slow answers), real lakes: each sink gets each alert at most once, the
JSONL file one line per alert, retries follow the backoff and stop, the webhook URL appears nowhere."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl
import pytest

from jobs.alerts.delivery import (
    Answer,
    WebhookURLError,
    backoff_delay,
    deliver_with_retries,
    retry_after_seconds,
)
from jobs.alerts.payloads import alert_contract, alert_id, alert_payloads
from jobs.alerts.run import send_new_alerts
from jobs.alerts.sinks import JsonlFileSink, SlackSink, WebhookSink
from jobs.detect.findings import latest_states
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.compaction import compact_lake
from jobs.pipeline.detection import run_detection
from jobs.schemas.analysed import ALERT_DEAD_LETTERS, ALERTS_SENT, FINDING_STATES
from jobs.schemas.registry import TABLES
from tests.support.findings_lakes import AT, finding_row, write_findings
from tests.support.lakes import write_step_change_lake
from tests.support.slack_emulator import TOKEN, Emulator, serve_slack
from tests.support.slack_rules import slack_problems


@dataclass(frozen=True)
class Retry:
    """The retry fields of AlertsConfig (jobs.alerts.delivery.RetrySettings), fast for tests."""

    max_attempts: int = 4
    backoff_initial_s: float = 1.0
    backoff_multiplier: float = 2.0
    backoff_max_s: float = 30.0
    jitter: float = 0.5
    max_retry_after_s: float = 60.0
    timeout_s: float = 2.0


@pytest.fixture
def slack() -> Iterator[Emulator]:
    with serve_slack() as emulator:
        yield emulator


def alert_ids(n: int, state: str = "open") -> str:
    return alert_id(f"{n:016x}", state)


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def analysed_lake(lake_root: Path) -> Path:
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    return lake_root


def test_the_slack_payload_is_accepted_and_the_generic_one_is_dead_lettered_once(
    analysed_lake: Path, tmp_path: Path, slack: Emulator
) -> None:
    """The issue's bug: the generic JSON has no `text`, Slack answers 400 no_text. Now the Slack sink
    sends text + blocks (accepted), and a generic webhook pointed at Slack is dead-lettered at once and
    never retried; the JSONL file gets its line once whatever the webhooks do."""
    sleeps: list[float] = []
    file = tmp_path / "alerts.jsonl"
    dead_file = tmp_path / "dead.jsonl"

    def sinks() -> list[Any]:
        return [
            JsonlFileSink(file),
            SlackSink(slack.url, Retry(), sleep=sleeps.append),
            WebhookSink(slack.url, Retry(), sleep=sleeps.append),
        ]

    first = send_new_alerts(analysed_lake, sinks(), dead_letter_file=dead_file)
    assert len(first.sent) == 1 and first.pending == 1
    (accepted,) = slack.accepted
    assert accepted["text"].startswith("Query regression on db1: select * from orders where customer_id = $1")
    fields = dict(f["text"].split("\n", 1) for f in accepted["blocks"][2]["fields"])
    assert fields["*Instance*"] == "db1" and fields["*Deploy*"] == "v9"
    assert re.fullmatch(r"1\.\d+ ms → 9\.\d+ ms \(9\.\d× slower\)", fields["*Before → after*"]), fields
    assert fields["*Plan Diff*"] and fields["*Confidence*"].startswith("very strong evidence")
    generic = [r for r in slack.requests if "alert_id" in r]
    assert len(generic) == 1 and "text" not in generic[0]
    jsonschema.validate(generic[0], alert_contract())
    (letter,) = first.dead_lettered
    assert (letter.sink, letter.attempts, letter.last_status) == ("webhook", 1, 400)
    assert letter.reason == "permanent failure: HTTP 400 no_text" and sleeps == []
    assert jsonl(file) == [generic[0]]
    (dead_line,) = jsonl(dead_file)
    assert dead_line["reason"] == letter.reason and dead_line["alert_id"] == generic[0]["alert_id"]
    assert (
        dead_line["sink"] == "webhook" and dead_line["attempts"] == 1 and dead_line["payload"] == generic[0]
    )
    assert not first.ok and "1 dead-lettered" in first.failures["webhook http://127.0.0.1"]

    run_detection(analysed_lake)  # a later analysis finds the same regression again
    again = send_new_alerts(analysed_lake, sinks(), dead_letter_file=dead_file)
    assert again.sent == [] and again.pending == 0 and again.ok
    assert len(slack.requests) == 2, "nothing sent twice: not the accepted one, not the dead-lettered one"
    assert len(jsonl(file)) == 1 and len(jsonl(dead_file)) == 1
    rows = lake.read_table(analysed_lake, ALERTS_SENT).sort("sink")
    assert rows.select("sink", "attempts", "sinks").rows() == [
        ("file", 1, f"file {file}"),
        ("slack", 1, "slack http://127.0.0.1"),
    ]


def test_retries_follow_the_backoff_and_stop(lake_root: Path, tmp_path: Path, slack: Emulator) -> None:
    """500s: max_attempts attempts, waits 1, 2, 4 s (× 1 - jitter·u, u from the seeded generator), then a
    dead letter; the sink is stopped for the run (the next alert is deferred, not tried); a later run
    sends the deferred one and never the dead-lettered one again."""
    write_findings(lake_root, [finding_row(1), finding_row(2)])
    slack.script = [(500, {}, "internal_error")] * 4
    sleeps: list[float] = []
    settings = Retry(max_attempts=4, backoff_initial_s=1.0, backoff_multiplier=2.0, jitter=0.5)
    report = send_new_alerts(
        lake_root, [SlackSink(slack.url, settings, sleep=sleeps.append, rng=random.Random(7))]
    )
    draws = random.Random(7)
    assert sleeps == pytest.approx([base * (1 - 0.5 * draws.random()) for base in (1.0, 2.0, 4.0)])
    assert all(b / 2 <= s <= b for s, b in zip(sleeps, (1.0, 2.0, 4.0), strict=True))
    assert slack.keys() == Counter({alert_ids(1): 4}), "four attempts, then stopped; alert 2 not tried"
    (sink,) = report.sinks
    (letter,) = sink.dead_lettered
    assert letter.reason == "gave up after 4 attempts: last HTTP 500 internal_error"
    assert (letter.attempts, letter.last_status, sink.deferred) == (4, 500, 1)
    assert sink.stopped.startswith("stopped after: gave up after 4 attempts")

    later = send_new_alerts(lake_root, [SlackSink(slack.url, settings, sleep=sleeps.append)])
    assert [p["alert_id"] for p in later.sent] == [alert_ids(2)] and later.ok
    assert slack.keys() == Counter({alert_ids(1): 4, alert_ids(2): 1})
    dead = lake.read_table(lake_root, ALERT_DEAD_LETTERS)
    assert dead.select("alert_id", "sink", "attempts", "last_status").rows() == [
        (alert_ids(1), "slack", 4, 500)
    ]
    assert len(sleeps) == 3

    # Retrying dead letters (radar alerts --retry-dead-letters) sends it once more, once.
    retried = send_new_alerts(lake_root, [SlackSink(slack.url, settings)], retry_dead_letters=True)
    assert [p["alert_id"] for p in retried.sent] == [alert_ids(1)]
    assert send_new_alerts(lake_root, [SlackSink(slack.url, settings)], retry_dead_letters=True).pending == 0


def test_backoff_is_capped_and_jitter_stays_within_its_fraction() -> None:
    settings = Retry(backoff_initial_s=1.0, backoff_multiplier=3.0, backoff_max_s=10.0, jitter=0.25)
    rng = random.Random(1)
    delays = [backoff_delay(n, settings, rng) for n in range(1, 8)]
    bases = [1.0, 3.0, 9.0, 10.0, 10.0, 10.0, 10.0]
    assert all(0.75 * b <= d <= b for d, b in zip(delays, bases, strict=True)), delays
    assert backoff_delay(3, Retry(jitter=0.0), rng) == 4.0
    assert retry_after_seconds("7") == 7.0 and retry_after_seconds("soon") is None
    answers = iter([Answer(503, "busy", "3"), Answer(502, "", "99"), Answer(200, "ok")])
    sleeps: list[float] = []
    done = deliver_with_retries(lambda seconds: next(answers), Retry(jitter=0.0), sleep=sleeps.append)
    assert (done.status, done.attempts, sleeps) == ("delivered", 3, [3.0, 2.0]), "503 Retry-After, 502 not"
    http_date = "Sun, 29 Nov 2026 12:00:30 GMT"
    assert retry_after_seconds(http_date, now=datetime(2026, 11, 29, 12, 0, tzinfo=UTC)) == 30.0


def test_the_run_deadline_cuts_attempts_and_waits_and_defers_the_alert() -> None:
    """Issue 28: an attempt gets at most the run's time left; an attempt the deadline cut, or a wait that
    would end after it, defers the alert to the next run (retry_later), never dead-letters it."""
    now = [0.0]
    budgets: list[float] = []

    def post(answers: list[Answer], took: float) -> Any:
        def attempt(seconds: float) -> Answer:
            budgets.append(seconds)
            now[0] += took
            return answers.pop(0)

        return attempt

    def clock() -> float:
        return now[0]

    settings = Retry(max_attempts=4, timeout_s=2.0, backoff_initial_s=1.0, jitter=0.0)
    timeouts = [Answer(None, error="no complete answer within 2 s")] * 4
    cut = deliver_with_retries(
        post(timeouts, 2.0),
        settings,
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        deadline=4.5,
        clock=clock,
    )
    assert budgets == [2.0, 1.5] and (cut.status, cut.attempts, cut.delays_s) == ("retry_later", 2, (1.0,))
    assert cut.sink_down and cut.reason == "the run's deadline (run_deadline_s) passed"
    now[0], budgets[:] = 0.0, []
    waits = deliver_with_retries(
        post([Answer(500, "x")] * 4, 0.1), settings, sleep=lambda s: None, deadline=1.05, clock=clock
    )
    assert (waits.status, waits.attempts, waits.delays_s) == ("retry_later", 1, ()), "1 s wait > 0.95 s left"
    now[0] = 5.0
    late = deliver_with_retries(post([Answer(200, "ok")], 0.1), settings, deadline=5.0, clock=clock)
    assert (late.status, late.attempts) == ("retry_later", 0), "no attempt starts after the deadline"


def test_429_waits_for_retry_after_and_a_too_long_one_is_not_waited_for(
    lake_root: Path, slack: Emulator
) -> None:
    write_findings(lake_root, [finding_row(1), finding_row(2), finding_row(3)])
    slack.script = [(429, {"Retry-After": "7"}, "rate_limited"), (500, {}, "oops")]
    sleeps: list[float] = []
    settings = Retry(jitter=0.0, max_retry_after_s=60.0)
    first = send_new_alerts(lake_root, [SlackSink(slack.url, settings, sleep=sleeps.append)])
    assert sleeps == [7.0, 2.0], "Retry-After 7 s as told, then the backoff's second step (1 s × 2)"
    assert {p["alert_id"] for p in first.sent} == {alert_ids(1), alert_ids(2), alert_ids(3)} and first.ok
    assert first.sinks[0].attempts == 5 and slack.keys()[alert_ids(1)] == 3

    write_findings(lake_root, [finding_row(4), finding_row(5)], run="r2")
    slack.script = [(429, {"Retry-After": "3600"}, "rate_limited")]
    second = send_new_alerts(lake_root, [SlackSink(slack.url, settings, sleep=sleeps.append)])
    assert sleeps == [7.0, 2.0], "an hour is not waited for"
    (letter,) = second.dead_lettered
    assert letter.alert_id == alert_ids(4) and letter.attempts == 1 and letter.last_status == 429
    assert letter.reason.startswith("rate limited: Retry-After 3600 s is longer than max_retry_after_s 60 s")
    assert second.sinks[0].deferred == 1 and alert_ids(5) not in slack.keys(None)
    third = send_new_alerts(lake_root, [SlackSink(slack.url, settings, sleep=sleeps.append)])
    assert [p["alert_id"] for p in third.sent] == [alert_ids(5)]


def test_500_then_success_and_a_timeout_are_retried(lake_root: Path, tmp_path: Path, slack: Emulator) -> None:
    write_findings(lake_root, [finding_row(1)])
    slack.script = [(500, {}, "oops", 0.0), (200, {}, "ok", 1.0)]  # the second answer comes too late
    sleeps: list[float] = []
    file = tmp_path / "alerts.jsonl"
    settings = Retry(timeout_s=0.3, jitter=0.0)
    report = send_new_alerts(
        lake_root, [JsonlFileSink(file), SlackSink(slack.url, settings, sleep=sleeps.append)]
    )
    assert report.ok and [p["alert_id"] for p in report.sent] == [alert_ids(1)]
    assert sleeps == [1.0, 2.0] and slack.keys() == Counter({alert_ids(1): 3})
    assert report.sinks[1].attempts == 3 and len(jsonl(file)) == 1
    sent = lake.read_table(lake_root, ALERTS_SENT).sort("sink")
    assert sent.select("sink", "attempts").rows() == [("file", 1), ("slack", 3)]


def test_each_sink_gets_each_alert_at_most_once_whatever_the_others_do(
    lake_root: Path, tmp_path: Path, slack: Emulator
) -> None:
    """Finding 1 accepted, 2 refused (400 invalid_payload), 3 gets 500s until attempts run out (Slack
    stopped: 4 deferred), while the file takes all four once. The next runs send only 4, then the
    updates (1 recovered, 3 superseded), each once to each sink."""
    write_findings(lake_root, [finding_row(n) for n in (1, 2, 3, 4)])
    file = tmp_path / "alerts.jsonl"
    broken = {"on": True}

    def rule(body: dict[str, Any]) -> tuple[int, dict[str, str], str] | None:
        if "orders_2 " in body["text"]:
            return (400, {}, "invalid_payload")
        if "orders_3 " in body["text"] and broken["on"]:
            return (500, {}, "internal_error")
        return None

    slack.rule = rule

    def run() -> Any:
        return send_new_alerts(
            lake_root,
            [SlackSink(slack.url, Retry(max_attempts=3), sleep=lambda s: None), JsonlFileSink(file)],
            dead_letter_file=tmp_path / "dead.jsonl",
        )

    first = run()
    assert [p["alert_id"] for p in jsonl(file)] == [alert_ids(n) for n in (1, 2, 3, 4)]
    assert slack.keys() == Counter({alert_ids(1): 1, alert_ids(2): 1, alert_ids(3): 3})
    assert {d.alert_id: d.reason for d in first.dead_lettered} == {
        alert_ids(2): "permanent failure: HTTP 400 invalid_payload",
        alert_ids(3): "gave up after 3 attempts: last HTTP 500 internal_error",
    }
    assert first.sinks[0].deferred == 1 and first.pending == 4
    broken["on"] = False
    second = run()
    assert [p["alert_id"] for p in second.sent] == [alert_ids(4)] and second.ok
    assert run().pending == 0
    assert len(jsonl(file)) == 4 and slack.keys()[alert_ids(4)] == 1

    write_findings(
        lake_root,
        [
            finding_row(
                1, status="recovered", recovered_at=AT + timedelta(hours=2), computed_at=datetime.now(UTC)
            ),
            finding_row(3, status="superseded", superseded_by=f"{9:016x}", computed_at=datetime.now(UTC)),
        ],
        run="r2",
    )
    for _ in range(3):
        run()
    updates = [alert_ids(1, "recovered"), alert_ids(3, "superseded")]
    assert [p["alert_id"] for p in jsonl(file)][4:] == updates
    assert [slack.keys()[u] for u in updates] == [1, 1], "one update each, though 3 was dead-lettered"
    assert all(slack_problems(b) == [] for b in slack.accepted)
    sent = lake.read_table(lake_root, ALERTS_SENT)
    assert sent.group_by("alert_id", "sink").len()["len"].max() == 1, "one row per alert and sink"
    assert sent.height == 6 + 4 and len(jsonl(tmp_path / "dead.jsonl")) == 2


def test_the_jsonl_file_holds_each_alert_once_even_after_a_crash_before_bookkeeping(
    lake_root: Path, tmp_path: Path
) -> None:
    write_findings(lake_root, [finding_row(1), finding_row(2)])
    file = tmp_path / "alerts.jsonl"
    (first, _) = alert_payloads(latest_states(lake.read_table(lake_root, FINDING_STATES)), {})
    file.write_text(json.dumps(first) + "\n")  # written, then the run died before alerts_sent
    report = send_new_alerts(lake_root, [JsonlFileSink(file)])
    assert report.ok and len(report.sent) == 2
    assert [p["alert_id"] for p in jsonl(file)] == [alert_ids(1), alert_ids(2)]
    assert lake.read_table(lake_root, ALERTS_SENT).height == 2


def test_a_file_sink_that_cannot_write_loses_nothing(lake_root: Path, tmp_path: Path) -> None:
    write_findings(lake_root, [finding_row(1), finding_row(2)])
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the folder should be")
    report = send_new_alerts(lake_root, [JsonlFileSink(blocked / "alerts.jsonl")])
    assert not report.ok and report.dead_lettered == [] and report.sinks[0].deferred == 2
    assert "cannot write" in report.failures[f"file {blocked / 'alerts.jsonl'}"]
    assert lake.read_table(lake_root, ALERTS_SENT).height == 0
    fixed = send_new_alerts(lake_root, [JsonlFileSink(tmp_path / "alerts.jsonl")])
    assert len(fixed.sent) == 2 and len(jsonl(tmp_path / "alerts.jsonl")) == 2


def test_rows_from_before_per_sink_bookkeeping_count_for_every_sink(lake_root: Path, slack: Emulator) -> None:
    write_findings(lake_root, [finding_row(1), finding_row(2)])
    old = pl.DataFrame(  # the columns of alerts_sent before issue 10: no sink, no attempts
        {
            "alert_id": [alert_ids(1)],
            "sent_at": [AT],
            "instance": ["db1"],
            "queryid": [101],
            "sinks": ["file data/alerts.jsonl, webhook https://hooks.example"],
            "finding_id": [f"{1:016x}"],
            "state": ["open"],
        }
    )
    lake.write_table(lake_root, ALERTS_SENT, old, {"date": "2026-11-29"}, "old")
    report = send_new_alerts(lake_root, [SlackSink(slack.url, Retry())])
    assert [p["alert_id"] for p in report.sent] == [alert_ids(2)], "a sink added later gets no history"


def test_a_sink_added_later_gets_what_is_open_not_the_history(lake_root: Path, slack: Emulator) -> None:
    """The file has alerted findings 1 (open) and 2 (recovered) for days; Slack is added: it gets 1's
    alert, not 2's old recovery. Slack then goes down while finding 3 opens and recovers: once back, it
    gets 3's recovery (it was in use before)."""
    day = timedelta(days=1)
    write_findings(
        lake_root, [finding_row(1), finding_row(2, status="recovered", recovered_at=AT, computed_at=AT)]
    )
    file = JsonlFileSink(lake_root.parent / "alerts.jsonl")
    send_new_alerts(lake_root, [file], now=AT + day)
    added = send_new_alerts(lake_root, [file, SlackSink(slack.url, Retry())], now=AT + 2 * day)
    assert slack.keys() == Counter({alert_ids(1): 1})
    assert added.sinks[1].history_skipped == 1 and added.sinks[0].history_skipped == 0

    slack.rule = lambda body: (500, {}, "down")
    write_findings(lake_root, [finding_row(3, computed_at=AT + 3 * day)], run="r2")
    down = send_new_alerts(lake_root, [file, SlackSink(slack.url, Retry(max_attempts=1))], now=AT + 3 * day)
    assert [d.alert_id for d in down.dead_lettered] == [alert_ids(3)]
    slack.rule = lambda body: None
    write_findings(lake_root, [finding_row(3, status="recovered", computed_at=AT + 4 * day)], run="r3")
    back = send_new_alerts(lake_root, [file, SlackSink(slack.url, Retry())], now=AT + 4 * day)
    assert slack.keys()[alert_ids(3, "recovered")] == 1 and back.sinks[1].history_skipped == 1, "2 only"
    assert alert_ids(2, "recovered") not in slack.keys(None)


def test_resolved_updates_can_be_turned_off(lake_root: Path, tmp_path: Path) -> None:
    write_findings(lake_root, [finding_row(1), finding_row(2, status="recovered", recovered_at=AT)])
    file = tmp_path / "alerts.jsonl"
    send_new_alerts(lake_root, [JsonlFileSink(file)], send_resolved=False)
    write_findings(lake_root, [finding_row(1, status="recovered", recovered_at=AT)], run="r2")
    send_new_alerts(lake_root, [JsonlFileSink(file)], send_resolved=False)
    assert [(p["finding_id"], p["state"]) for p in jsonl(file)] == [(f"{1:016x}", "open")]


def test_two_runs_at_once_cannot_send_twice(lake_root: Path, tmp_path: Path) -> None:
    write_findings(lake_root, [finding_row(1)])
    with locks.exclusive_lock(lake_root, "alerts"), pytest.raises(locks.LakeLockError, match="alerts lock"):
        send_new_alerts(
            lake_root, [JsonlFileSink(tmp_path / "a.jsonl")], lake_config=locks.LakeConfig(lock_wait_s=0.1)
        )
    assert not (tmp_path / "a.jsonl").exists()


def test_the_url_appears_nowhere(lake_root: Path, tmp_path: Path, slack: Emulator, caplog: Any) -> None:
    """Every answer kind (accepted, 400, 404 on a wrong token, 500s, refused connection): the token is in
    no report, reason, lake row, dead letter, log record or repr."""
    write_findings(lake_root, [finding_row(n) for n in (1, 2, 3)])
    slack.script = [(200, {}, "ok"), (400, {}, f"no_text {slack.url}"), (500, {}, "x")]
    wrong = slack.url.replace("xoxTOKEN", "xoxWRONG")
    closed = f"http://127.0.0.1:1/services/{TOKEN}"
    dead_file = tmp_path / "dead.jsonl"
    sinks = [
        SlackSink(slack.url, Retry(max_attempts=2), sleep=lambda s: None),
        WebhookSink(wrong, Retry(), sleep=lambda s: None),
        SlackSink(closed, Retry(max_attempts=2), sleep=lambda s: None),
    ]
    sinks[2].key = "slack2"  # a second Slack sink, bookkept on its own
    with caplog.at_level("DEBUG"):
        report = send_new_alerts(lake_root, sinks, dead_letter_file=dead_file)
    reasons = {d.reason for d in report.dead_lettered}
    assert any("HTTP 404 no_service" in r for r in reasons) and any("network error" in r for r in reasons)
    assert any(r.startswith("permanent failure: HTTP 400 no_text http://127.0.0.1") for r in reasons), reasons
    outputs = [
        json.dumps(report.as_json()),
        repr(report),
        repr(sinks),
        str(report.failures),
        dead_file.read_text(),
        caplog.text,
        *(str(lake.read_table(lake_root, t).rows()) for t in TABLES),
    ]
    for secret in ("xoxTOKENs3cr3tV4lue", "xoxWRONG", "T0SECRET", "B0SECRET"):
        assert all(secret not in text for text in outputs), secret
    with pytest.raises(WebhookURLError) as bad:
        SlackSink(f"hooks.slack.com/services/{TOKEN}", Retry(), source="env RADAR_SLACK_WEBHOOK")
    assert "T0SECRET" not in str(bad.value) and "env RADAR_SLACK_WEBHOOK" in str(bad.value)
    with pytest.raises(WebhookURLError) as spaced:
        SlackSink(f"https://hooks.slack.com/services/{TOKEN} x", Retry())
    assert "T0SECRET" not in str(spaced.value)


def test_the_cli_and_the_asset_take_the_settings_and_the_url_appears_nowhere(
    lake_root: Path, tmp_path: Path, slack: Emulator, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The asset: [alerts] as run config, the files from AlertResource, the Slack URL from
    RADAR_SLACK_WEBHOOK at run time; it sends, then fails the run naming the dead letters. `radar alerts`
    ([alerts] from the config file): nothing left to send (exit 0), a later dead letter is exit 1, a bad
    URL exit 2. No output, event, run record or file holds the token."""
    import dagster as dg

    from jobs.cli.main import main
    from orchestration.assets.alerts import regression_alerts
    from orchestration.resources import AlertResource, LakeResource

    config = tmp_path / "radar.toml"
    config.write_text(
        f'[alerts]\nfile = "{tmp_path / "alerts.jsonl"}"\ndead_letter_file = "{tmp_path / "dead.jsonl"}"\n'
        "max_attempts = 2\nbackoff_initial_s = 0.01\njitter = 0.0\ntimeout_s = 2.0\n"
    )
    monkeypatch.setenv("RADAR_CONFIG", str(config))
    monkeypatch.setenv("RADAR_SLACK_WEBHOOK", slack.url)
    write_findings(lake_root, [finding_row(n) for n in (1, 2, 3)])
    slack.script = [(200, {}, "ok"), (400, {}, f"no_text {slack.url}"), (500, {}, "x"), (500, {}, "x")]
    resources = {
        "lake": LakeResource(root=str(lake_root)),
        "alerting": AlertResource(
            file=str(tmp_path / "alerts.jsonl"), dead_letter_file=str(tmp_path / "dead.jsonl")
        ),
    }
    run_config = {"ops": {"regression_alerts": {"config": {"max_attempts": 2, "backoff_initial_s": 0.01}}}}
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [regression_alerts],
            resources=resources,
            instance=instance,
            run_config=run_config,
            raise_on_error=False,
        )
        assert not result.success
        events = "\n".join(str(entry) for entry in instance.all_logs(result.run_id))
        run_record = str(instance.get_run_by_id(result.run_id))
    assert "not every alert was delivered: slack http://127.0.0.1: 2 dead-lettered" in events
    assert len(jsonl(tmp_path / "alerts.jsonl")) == 3 and len(jsonl(tmp_path / "dead.jsonl")) == 2
    assert slack.keys() == Counter({alert_ids(1): 1, alert_ids(2): 1, alert_ids(3): 2})

    assert main(["--lake", str(lake_root), "alerts", "--format", "json"]) == 0
    quiet = json.loads(capsys.readouterr().out)
    assert quiet["pending"] == 0 and quiet["ok"] and [s["sink"] for s in quiet["sinks"]] == ["file", "slack"]

    write_findings(lake_root, [finding_row(4)], run="r2")
    slack.rule = lambda body: (500, {}, f"down {slack.url}")
    assert main(["--lake", str(lake_root), "alerts"]) == 1
    shown = capsys.readouterr()
    assert "alerted (open): db1: select * from orders_4 where customer_id = $1 → file" in shown.out
    assert "dead letter slack http://127.0.0.1: alert" in shown.out and "gave up after 2 attempt" in shown.out
    assert slack.keys()[alert_ids(4)] == 2 and len(jsonl(tmp_path / "alerts.jsonl")) == 4
    slack.rule = lambda body: None
    assert main(["--lake", str(lake_root), "alerts", "--retry-dead-letters", "--format", "json"]) == 0
    retried = json.loads(capsys.readouterr().out)
    assert sorted(a["alert_id"] for a in retried["sent"]) == sorted(alert_ids(n) for n in (2, 3, 4))
    assert [slack.keys()[alert_ids(n)] for n in (1, 2, 3, 4)] == [1, 2, 3, 3]
    assert len(jsonl(tmp_path / "alerts.jsonl")) == 4, "the file had them all: nothing written again"

    monkeypatch.setenv("RADAR_SLACK_WEBHOOK", f"hooks.slack.com/services/{TOKEN}")
    assert main(["--lake", str(lake_root), "alerts"]) == 2
    bad = capsys.readouterr()
    assert "env RADAR_SLACK_WEBHOOK is not an http(s) URL" in bad.out

    files = "\n".join(p.read_text() for p in (tmp_path / "alerts.jsonl", tmp_path / "dead.jsonl"))
    tables = "\n".join(str(lake.read_table(lake_root, t).rows()) for t in TABLES)
    for text in (events, run_record, shown.out + shown.err, bad.out + bad.err, files, tables):
        assert "T0SECRET" not in text and "xoxTOKEN" not in text


def test_the_asset_says_when_no_slack_or_webhook_is_configured(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: Dagster's alerts went only to the JSONL file and never said Slack was not configured."""
    import dagster as dg

    from orchestration.assets.alerts import regression_alerts
    from orchestration.resources import AlertResource, LakeResource

    monkeypatch.delenv("RADAR_SLACK_WEBHOOK", raising=False)
    monkeypatch.delenv("RADAR_ALERT_WEBHOOK", raising=False)
    write_findings(lake_root, [finding_row(1)])
    file = tmp_path / "alerts.jsonl"
    resources = {"lake": LakeResource(root=str(lake_root)), "alerting": AlertResource(file=str(file))}
    with dg.instance_for_test() as instance:
        result = dg.materialize([regression_alerts], resources=resources, instance=instance)
        events = "\n".join(str(entry) for entry in instance.all_logs(result.run_id))
    assert result.success and len(jsonl(file)) == 1
    (materialization,) = result.asset_materializations_for_node("regression_alerts")
    note = materialization.metadata["note"].value
    assert "no Slack or webhook sink is configured" in note and str(file) in note
    assert "no Slack or webhook sink is configured" in events


def test_each_alert_is_recorded_on_its_own_and_compaction_merges_a_closed_day(
    lake_root: Path, tmp_path: Path, slack: Emulator
) -> None:
    """Issue 28: each accepted alert is its row's own file, written before the next alert is sent (a run
    killed mid-way keeps what it sent); compaction merges a closed day's files and nothing is sent again."""
    write_findings(lake_root, [finding_row(n) for n in (1, 2, 3)])
    slack.rule = lambda body: (400, {}, "invalid_payload") if "orders_3 " in body["text"] else None
    day = datetime(2026, 11, 29, 13, 0, tzinfo=UTC)

    def run() -> Any:
        sinks = [
            JsonlFileSink(tmp_path / "alerts.jsonl"),
            SlackSink(slack.url, Retry(), sleep=lambda s: None),
        ]
        return send_new_alerts(lake_root, sinks, now=day)

    first = run()
    assert len(first.sent) == 3 and len(first.dead_lettered) == 1
    assert len(lake.table_files(lake_root, ALERTS_SENT)) == 5, "3 to the file, 2 to Slack"
    assert len(lake.table_files(lake_root, ALERT_DEAD_LETTERS)) == 1
    before = lake.read_table(lake_root, ALERTS_SENT).sort("alert_id", "sink")
    done = compact_lake(
        lake_root, today=day.date() + timedelta(days=1), tables=(ALERTS_SENT, ALERT_DEAD_LETTERS)
    )
    assert [(d.table, d.files_before) for d in done] == [("alerts_sent", 5)]
    assert len(lake.table_files(lake_root, ALERTS_SENT)) == 1
    assert lake.read_table(lake_root, ALERTS_SENT).sort("alert_id", "sink").equals(before)
    assert run().pending == 0 and len(slack.requests) == 3


def test_an_object_store_lake_records_each_alert_on_its_own(
    s3_lake: Any, tmp_path: Path, slack: Emulator
) -> None:
    """The per-alert rows go through the lake's own write path: one PUT per alert on an object store (no
    local journal a run on another machine would not see); the lock is the lease object."""
    write_findings(s3_lake, [finding_row(n) for n in (1, 2)])
    first = send_new_alerts(s3_lake, [SlackSink(slack.url, Retry())], run_deadline_s=60.0)
    assert len(first.sent) == 2 and first.ok
    assert len(lake.table_files(s3_lake, ALERTS_SENT)) == 2
    again = send_new_alerts(s3_lake, [SlackSink(slack.url, Retry())], run_deadline_s=60.0)
    assert again.pending == 0 and len(slack.requests) == 2
