"""Alerts: payload contract, sent once, nothing lost when a sink is down (real HTTP on loopback)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import dagster as dg
import jsonschema
import pytest

from jobs.alerts import JsonlFileSink, WebhookSink, alert_contract, send_new_alerts
from jobs.analysis import run_detection
from jobs.cli import main
from orchestration.assets.alerts import regression_alerts
from orchestration.resources import AlertResource, LakeResource
from tests.lakes import write_step_change_lake


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []
    status = 204

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"received": [], "status": 204})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/secret-token-123", handler
    finally:
        server.shutdown()


@pytest.fixture
def analysed_lake(lake_root: Path) -> Path:
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    return lake_root


def test_each_regression_is_alerted_once_with_a_valid_payload(
    analysed_lake: Path, tmp_path: Path, webhook: tuple[str, type[_Receiver]]
) -> None:
    url, receiver = webhook
    sinks = [JsonlFileSink(tmp_path / "alerts.jsonl"), WebhookSink(url)]
    first = send_new_alerts(analysed_lake, sinks)
    assert len(first.sent) == 1 and not first.failures
    payload = receiver.received[0]
    jsonschema.validate(payload, alert_contract())
    assert payload["query"] == "select * from orders where customer_id = $1"
    assert payload["queryid"] == "111" and payload["analysis"] == "deploy"
    assert [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()] == [payload]
    run_detection(analysed_lake)  # a later analysis finds the same regression again
    second = send_new_alerts(analysed_lake, sinks)
    assert second.sent == [] and len(receiver.received) == 1


def test_a_failing_sink_loses_nothing_and_never_leaks_the_url(
    analysed_lake: Path, tmp_path: Path, webhook: tuple[str, type[_Receiver]]
) -> None:
    url, receiver = webhook
    receiver.status = 500
    failed = send_new_alerts(analysed_lake, [WebhookSink(url)])
    assert failed.pending == 1 and failed.sent == []
    assert "secret-token-123" not in json.dumps(failed.failures)
    receiver.status = 200
    retried = send_new_alerts(analysed_lake, [WebhookSink(url)])
    assert len(retried.sent) == 1
    down = send_new_alerts(analysed_lake, [WebhookSink("http://127.0.0.1:1/x")])
    assert down.pending == 0, "already delivered"


def test_alerts_asset_and_cli(analysed_lake: Path, tmp_path: Path) -> None:
    resources = {
        "lake": LakeResource(root=str(analysed_lake)),
        "alerting": AlertResource(file=str(tmp_path / "a.jsonl"), webhook_url=""),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize([regression_alerts], resources=resources, instance=instance)
    assert result.success
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 1
    assert main(["--lake", str(analysed_lake), "alerts", "--file", str(tmp_path / "b.jsonl")]) == 0
    assert not (tmp_path / "b.jsonl").exists(), "already alerted by the asset"
    code = main(["--lake", str(tmp_path / "other"), "alerts", "--webhook", "http://127.0.0.1:1/x"])
    assert code == 0  # nothing pending: no sink is called


def test_an_alert_is_keyed_on_the_finding_and_a_later_state_sends_one_update_once() -> None:
    from datetime import UTC, datetime

    import polars as pl

    from jobs.alerts import alert_payloads
    from jobs.detect.findings import latest_states
    from jobs.schemas import FINDING_STATES

    at = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    base = {
        "finding_id": "0123456789abcdef",
        "run_id": "r1",
        "computed_at": at,
        "instance": "alpha",
        "series": "fp",
        "fingerprint": "fp",
        "queryid": 7,
        "query": "select 1",
        "onset": at,
        "detected_change_at": at,
        "analysis": "deploy",
        "deploy_version": "v2",
        "other_deploys": "v1 at 2026-11-29T11:55:00Z",
        "before_mean_ms": 1.0,
        "after_mean_ms": 10.0,
        "p_value": 0.001,
    }

    def state(**change: object) -> pl.DataFrame:
        return latest_states(FINDING_STATES.conform(pl.DataFrame([{**base, **change}])))

    (first,) = alert_payloads(state(status="open"), {})
    assert first["state"] == "open" and first["finding_id"] == base["finding_id"]
    assert first["other_deploys"] == "v1 at 2026-11-29T11:55:00Z"
    moved = state(status="open", detected_change_at=datetime(2026, 11, 29, 12, 1, tzinfo=UTC))
    assert alert_payloads(moved, {base["finding_id"]: {"open"}}) == [], "a moved change point: no new alert"
    recovered = state(status="recovered", recovered_at=datetime(2026, 11, 29, 13, 0, tzinfo=UTC))
    (update,) = alert_payloads(recovered, {base["finding_id"]: {"open"}})
    assert update["state"] == "recovered" and update["alert_id"] != first["alert_id"]
    assert update["recovered_at"] == "2026-11-29T13:00:00+00:00"
    assert alert_payloads(recovered, {base["finding_id"]: {"open", "recovered"}}) == []
    superseded = state(status="superseded", superseded_by="fedcba9876543210")
    assert alert_payloads(superseded, {base["finding_id"]: {"open", "recovered"}}) == [], "one update only"
    (late,) = alert_payloads(recovered, {})  # over before any alert went out: one alert, in that state
    assert late["state"] == "recovered"


def test_later_analysis_runs_of_the_same_regression_send_nothing_more(
    lake_root: Path, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    write_step_change_lake(lake_root)
    sink = JsonlFileSink(tmp_path / "alerts.jsonl")
    first = datetime(2026, 11, 3, tzinfo=UTC)
    sent = []
    for i in range(3):
        run_detection(lake_root, now=first + timedelta(minutes=15 * i))
        sent += send_new_alerts(lake_root, [sink]).sent
    assert [p["state"] for p in sent] == ["open"] and sent[0]["analysis"] == "deploy"
    assert len((tmp_path / "alerts.jsonl").read_text().splitlines()) == 1
