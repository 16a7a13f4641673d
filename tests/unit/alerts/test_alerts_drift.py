"""BLOCK per-execution drift alerted like a regression finding: once per BLOCK episode of (instance,
query_hash, metric, baseline_version) until it clears, one update when it does, through the same sinks."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from jobs.alerts.drift_payloads import drift_alert_contract, drift_alert_payloads, drift_episodes
from jobs.alerts.run import send_new_alerts
from jobs.alerts.sinks import JsonlFileSink
from jobs.alerts.slack import slack_message
from jobs.lake import io as lake
from jobs.schemas.analysed import ALERTS_SENT
from tests.support.drift_frames import SCORED, drift_frame, drift_row, write_drift
from tests.support.slack_rules import slack_problems

STEP = timedelta(minutes=10)


def _scorings(flags: list[str], **kw: object) -> list[dict]:
    out = []
    for i, flag in enumerate(flags):
        reason = "insufficient_samples" if flag == "few" else None
        out.append(
            drift_row(
                "fp-a",
                "latency",
                "WARN" if flag == "few" else flag,
                scored_at=SCORED + i * STEP,
                reason=reason,
                js=0.4 if flag == "BLOCK" else 0.02,
                psi=1.5 if flag == "BLOCK" else 0.01,
                **kw,  # type: ignore[arg-type]
            )
        )
    return out


def _episode(flags: list[str]) -> tuple[str, object, object] | None:
    found = drift_episodes(drift_frame(_scorings(flags)))
    return None if not found else (found[0]["status"], found[0]["blocked_since"], found[0]["cleared_at"])


def test_episodes_open_clear_and_start_again() -> None:
    assert _episode(["PASS", "WARN"]) is None, "never BLOCK: nothing to alert"
    assert _episode(["PASS", "BLOCK", "BLOCK"]) == ("open", SCORED + STEP, None)
    assert _episode(["BLOCK", "few", "BLOCK"]) == ("open", SCORED, None), "too few samples: no evidence"
    assert _episode(["BLOCK", "few"]) == ("open", SCORED, None)
    assert _episode(["BLOCK", "BLOCK", "PASS"]) == ("recovered", SCORED, SCORED + 2 * STEP)
    assert _episode(["BLOCK", "WARN"]) == ("recovered", SCORED, SCORED + STEP), "WARN is no longer BLOCK"
    assert _episode(["BLOCK", "PASS", "BLOCK"]) == ("open", SCORED + 2 * STEP, None), "a new episode"
    one = drift_episodes(drift_frame(_scorings(["BLOCK"])))[0]["episode_id"]
    again = drift_episodes(drift_frame(_scorings(["BLOCK", "PASS", "BLOCK"])))[0]["episode_id"]
    assert one != again
    two_baselines = _scorings(["BLOCK"]) + _scorings(["BLOCK"], baseline_version="v2")
    assert len(drift_episodes(drift_frame(two_baselines))) == 2, "one episode per baseline_version"


def test_payload_is_sent_once_until_it_clears_then_one_update() -> None:
    blocked = drift_frame(_scorings(["PASS", "BLOCK", "BLOCK"]))
    (first,) = drift_alert_payloads(blocked, {}, {("db1", 111): "select * from orders where id = $1"})
    jsonschema.validate(first, drift_alert_contract())
    assert first["state"] == "open" and first["kind"] == "execution_drift"
    assert (first["metric"], first["baseline_version"], first["js"], first["psi"]) == (
        "latency",
        "v1",
        0.4,
        1.5,
    )
    assert first["query"] == "select * from orders where id = $1" and first["queryid"] == "111"
    assert first["blocked_since"] == (SCORED + STEP).isoformat()
    episode = first["finding_id"]
    assert drift_alert_payloads(blocked, {episode: {"open"}}) == [], "still BLOCK: not again"
    cleared = drift_frame(_scorings(["PASS", "BLOCK", "BLOCK", "PASS"]))
    (update,) = drift_alert_payloads(cleared, {episode: {"open"}})
    assert update["state"] == "recovered" and update["finding_id"] == episode and update["flag"] == "PASS"
    assert update["cleared_at"] == (SCORED + 3 * STEP).isoformat()
    assert drift_alert_payloads(cleared, {episode: {"open", "recovered"}}) == []
    assert drift_alert_payloads(cleared, {episode: {"open"}}, send_resolved=False) == []
    unnamed = drift_alert_payloads(drift_frame(_scorings(["BLOCK"], queryid=None)), {})[0]
    assert unnamed["queryid"] is None and unnamed["query"] == "fp-a", "no text: the fingerprint"
    bad = {**first, "kind": "performance_regression"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, drift_alert_contract())


def test_slack_text_names_query_metric_scores_and_baseline() -> None:
    rows = _scorings(["BLOCK"], baseline_version="v812")
    (payload,) = drift_alert_payloads(drift_frame(rows), {}, {("db1", 111): 'select "<!channel>" from t'})
    message = slack_message(payload)
    assert slack_problems(message) == []
    text = message["text"]
    query = 'select "&lt;!channel&gt;" from t'
    for needle in ("BLOCK drift on db1", "latency", query, "JS 0.400", "PSI 1.500", "baseline v812"):
        assert needle in text, (needle, text)
    assert "<!channel>" not in json.dumps(message)
    fields = " ".join(f["text"] for f in message["blocks"][2]["fields"])
    assert "*Baseline version*\nv812" in fields and "*JS / PSI*\nJS 0.400 · PSI 1.500" in fields
    (update,) = drift_alert_payloads(
        drift_frame(_scorings(["BLOCK", "PASS"], baseline_version="v812")), {payload["finding_id"]: {"open"}}
    )
    cleared = slack_message(update)
    assert slack_problems(cleared) == [] and cleared["text"].startswith("Drift cleared on db1: latency of")


def test_alert_run_sends_drift_once_through_the_sinks_and_the_update_once(
    lake_root: Path, tmp_path: Path
) -> None:
    file = tmp_path / "alerts.jsonl"
    write_drift(lake_root, _scorings(["PASS", "BLOCK"]) + _scorings(["BLOCK"], queryid=None, instance="db2"))
    report = send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED + timedelta(hours=1))
    assert report.ok and [(p["instance"], p["state"]) for p in report.sent] == [
        ("db2", "open"),  # BLOCK since the first scoring
        ("db1", "open"),  # BLOCK since the second
    ]
    sent = lake.read_table(lake_root, ALERTS_SENT).sort("instance")
    assert sent.select("instance", "queryid", "state").rows() == [("db1", 111, "open"), ("db2", None, "open")]
    again = send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED + timedelta(hours=2))
    assert again.sent == [] and again.pending == 0, "one BLOCK episode, one alert"
    write_drift(lake_root, [drift_row("fp-a", "latency", "PASS", scored_at=SCORED + 5 * STEP)])
    cleared = send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED + timedelta(hours=3))
    assert [(p["instance"], p["state"]) for p in cleared.sent] == [("db1", "recovered")]
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert [(p["instance"], p["state"]) for p in lines] == [
        ("db2", "open"),
        ("db1", "open"),
        ("db1", "recovered"),
    ]
    assert send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED + timedelta(hours=4)).sent == []
    # A new BLOCK of the same pair after it cleared is a new episode: alerted again.
    write_drift(lake_root, [drift_row("fp-a", "latency", "BLOCK", scored_at=SCORED + 6 * STEP)])
    fresh = send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED + timedelta(hours=5))
    assert [(p["instance"], p["state"]) for p in fresh.sent] == [("db1", "open")]
    assert fresh.sent[0]["finding_id"] not in {p["finding_id"] for p in lines}
    assert pl.Series([p["alert_id"] for p in lines]).n_unique() == 3


def test_a_regression_alert_carries_its_querys_drift_flags(lake_root: Path, tmp_path: Path) -> None:
    from tests.support.findings_lakes import finding_row, write_findings

    write_findings(lake_root, [finding_row(1), finding_row(2)])
    write_drift(lake_root, [drift_row("fp1", "latency", "WARN"), drift_row("fp1", "cost", "PASS")])
    file = tmp_path / "alerts.jsonl"
    report = send_new_alerts(lake_root, [JsonlFileSink(file)], SCORED)
    flags = {p["fingerprint"]: p["drift_flags"] for p in report.sent if p["kind"] == "performance_regression"}
    assert flags == {
        "fp1": {"cost": "PASS", "latency": "WARN", "cardinality": None},
        "fp2": {"cost": None, "latency": None, "cardinality": None},
    }
    assert all(p["kind"] == "performance_regression" for p in report.sent), "no BLOCK: no drift alert"
    opened = slack_message(next(p for p in report.sent if p["fingerprint"] == "fp1"))
    assert slack_problems(opened) == []
    assert "*Drift*\ncost PASS · latency WARN · cardinality –" in json.dumps(
        opened, ensure_ascii=False
    ).replace("\\n", "\n")
    plain = slack_message(next(p for p in report.sent if p["fingerprint"] == "fp2"))
    assert "*Drift*" not in json.dumps(plain), "never scored: no drift field"


def test_a_sink_added_later_is_not_sent_old_drift_clearings(lake_root: Path, tmp_path: Path) -> None:
    first, later = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    write_drift(lake_root, _scorings(["BLOCK"]))
    send_new_alerts(lake_root, [JsonlFileSink(first)], SCORED + timedelta(hours=1))
    write_drift(lake_root, [drift_row("fp-a", "latency", "PASS", scored_at=SCORED + STEP)])
    send_new_alerts(lake_root, [JsonlFileSink(first)], SCORED + timedelta(hours=2))
    assert [p["state"] for p in map(json.loads, first.read_text().splitlines())] == ["open", "recovered"]
    # A second sink first used after the episode cleared: the clearing is history, not news.
    report = send_new_alerts(
        lake_root, [JsonlFileSink(first), JsonlFileSink(later, key="file2")], SCORED + timedelta(hours=3)
    )
    assert report.sent == [] and report.sinks[1].history_skipped == 1
    assert not later.exists() or later.read_text() == ""
