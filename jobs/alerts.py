"""Alerts: each finding once, to a JSONL file and/or a webhook; a later change of its state (recovered,
superseded) sends one update, once.

Alerts are keyed on the finding (jobs.detect.findings), not on an analysis row: a change point that moves
by a sample between runs is the same finding and sends nothing new. ``alerts_sent`` records (finding_id,
state) for every alert sent.

Payloads follow ``jobs/contracts/regression_alert.schema.json`` (checked with jsonschema before sending).
An alert is recorded in the lake table ``alerts_sent`` only after every sink accepted it, so a sink that
is down loses nothing: the next run sends it again. Webhook URLs often carry tokens; only their scheme and
host ever reach logs.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import jsonschema
import polars as pl

from jobs import lake
from jobs.collect.texts import storable_query_text
from jobs.detect.findings import OPEN, latest_states
from jobs.redaction import scrub
from jobs.schemas import ALERTS_SENT, FINDING_STATES

CONTRACT = Path(__file__).parent / "contracts" / "regression_alert.schema.json"


@cache
def alert_contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text())


def alert_id(finding: str, state: str) -> str:
    """One alert per (finding, state): the first alert (state open, or the finding's state when it was
    already over before any alert went out) and at most one update (recovered or superseded)."""
    return hashlib.sha256(f"{finding}|{state}".encode()).hexdigest()[:16]


def alert_state(status: str, sent_states: set[str]) -> str | None:
    """The state to alert for a finding now in ``status`` that was alerted in ``sent_states``, or None.

    Open and never alerted: the alert. Recovered or superseded: one update, once, whatever came before
    (a finding already over when first seen gets its one alert in that state); never a second update."""
    if status == OPEN:
        return None if sent_states else OPEN
    if sent_states - {OPEN}:
        return None
    return status


def alert_payloads(findings: pl.DataFrame, sent: dict[str, set[str]]) -> list[dict[str, Any]]:
    """Pure: one valid payload per finding (latest state, the `findings` view) with a state to alert.

    ``sent``: per finding_id, the states already alerted (alerts_sent)."""
    out = []
    for row in findings.sort("onset", "finding_id").iter_rows(named=True):
        state = alert_state(row["status"], sent.get(row["finding_id"], set()))
        if state is None:
            continue
        payload = {
            "alert_id": alert_id(row["finding_id"], state),
            "finding_id": row["finding_id"],
            "state": state,
            "kind": "performance_regression",
            "instance": row["instance"],
            "queryid": str(row["queryid"]),
            "fingerprint": row["fingerprint"] or "",
            "series": row["series"],
            "query": storable_query_text(row["query"]) or "",  # a lake written before issue 7 may be raw
            "analysis": row["analysis"],
            "detected_change_at": row["detected_change_at"].isoformat(),
            "onset": row["onset"].isoformat(),
            "before_mean_ms": row["before_mean_ms"],
            "after_mean_ms": row["after_mean_ms"],
            "p_value": row["p_value"],
            "added_load_ms_per_s": row.get("added_load_ms_per_s"),
            "deploy_version": row.get("deploy_version"),
            "other_deploys": row.get("other_deploys"),
            "plan_diff_summary": row.get("plan_diff_summary"),
            "recovered_at": row["recovered_at"].isoformat() if row.get("recovered_at") else None,
            "superseded_by": row.get("superseded_by"),
        }
        jsonschema.validate(payload, alert_contract())
        out.append(payload)
    return out


class AlertSink(Protocol):
    name: str

    def send(self, payloads: list[dict[str, Any]]) -> None: ...


@dataclass(frozen=True)
class JsonlFileSink:
    """Appends one JSON line per alert (what a log shipper or a chat bot can tail)."""

    path: Path

    @property
    def name(self) -> str:
        return f"file {self.path}"

    def send(self, payloads: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(p, sort_keys=True) + "\n" for p in payloads))


@dataclass(frozen=True)
class WebhookSink:
    """POSTs each alert as JSON; any non-2xx answer or network error is a failure."""

    url: str
    timeout_s: float = 10.0

    @property
    def name(self) -> str:
        parts = urlsplit(self.url)
        return f"webhook {parts.scheme}://{parts.hostname}"

    def send(self, payloads: list[dict[str, Any]]) -> None:
        for payload in payloads:
            request = urllib.request.Request(
                self.url,
                data=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                    if not 200 <= answer.status < 300:
                        raise OSError(f"{self.name} answered {answer.status}")
            except urllib.error.URLError as exc:
                raise OSError(f"{self.name}: {exc.reason}") from None


@dataclass
class AlertReport:
    sent: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    pending: int = 0


def already_sent(lake_root: Path) -> dict[str, set[str]]:
    """Per finding_id: the states alerted (rows of alerts_sent written before findings have none)."""
    sent = lake.read_table(lake_root, ALERTS_SENT, lambda frame: frame.select("finding_id", "state"))
    out: dict[str, set[str]] = {}
    for finding, state in sent.drop_nulls("finding_id").iter_rows():
        out.setdefault(finding, set()).add(state)
    return out


def read_findings(lake_root: Path) -> pl.DataFrame:
    """The latest state of every finding (what the `findings` view shows)."""
    return latest_states(lake.read_table(lake_root, FINDING_STATES))


def send_new_alerts(lake_root: Path, sinks: list[AlertSink], now: datetime | None = None) -> AlertReport:
    """Send every finding's alert or update not sent yet to every sink; record what all sinks accepted."""
    payloads = alert_payloads(read_findings(lake_root), already_sent(lake_root))
    report = AlertReport(pending=len(payloads))
    if not payloads or not sinks:
        return report
    for sink in sinks:
        try:
            sink.send(payloads)
        except OSError as exc:
            report.failures[sink.name] = scrub(str(exc))
    if report.failures:
        return report  # nothing recorded: every alert is sent again next time
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    sent = pl.DataFrame(
        {
            "alert_id": [p["alert_id"] for p in payloads],
            "sent_at": [moment] * len(payloads),
            "instance": [p["instance"] for p in payloads],
            "queryid": [int(p["queryid"]) for p in payloads],
            "sinks": [", ".join(s.name for s in sinks)] * len(payloads),
            "finding_id": [p["finding_id"] for p in payloads],
            "state": [p["state"] for p in payloads],
        }
    )
    lake.write_table(
        lake_root, ALERTS_SENT, sent, {"date": moment.strftime("%Y-%m-%d")}, lake.stem_for(moment)
    )
    report.sent = payloads
    return report
