"""Alerts: each newly detected regression, once, to a JSONL file and/or a webhook.

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
from jobs.redaction import scrub
from jobs.regressions import DETECTED, one_row_per_finding
from jobs.schemas import ALERTS_SENT

CONTRACT = Path(__file__).parent / "contracts" / "regression_alert.schema.json"


@cache
def alert_contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text())


def alert_id(instance: str, fingerprint: str, detected_change_at: datetime) -> str:
    key = f"{instance}|{fingerprint}|{detected_change_at.isoformat()}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def alert_payloads(regressions: pl.DataFrame, already_sent: set[str]) -> list[dict[str, Any]]:
    """Pure: one valid payload per detected regression not alerted yet (deploy analysis preferred)."""
    detected = one_row_per_finding(
        regressions.filter(pl.col("status") == DETECTED).sort("detected_change_at")
    )
    out = []
    for row in detected.iter_rows(named=True):
        ident = alert_id(row["instance"], row["fingerprint"], row["detected_change_at"])
        if ident in already_sent:
            continue
        p_value = row["p_adjusted"] if row.get("p_adjusted") is not None else row["p_value"]
        payload = {
            "alert_id": ident,
            "kind": "performance_regression",
            "instance": row["instance"],
            "queryid": str(row["queryid"]),
            "fingerprint": row["fingerprint"],
            "query": storable_query_text(row["query"]) or "",  # a lake written before issue 7 may be raw
            "analysis": row["analysis"],
            "detected_change_at": row["detected_change_at"].isoformat(),
            "before_mean_ms": row["before_mean_ms"],
            "after_mean_ms": row["after_mean_ms"],
            "p_value": p_value,
            "added_load_ms_per_s": row.get("added_load_ms_per_s"),
            "deploy_version": row.get("deploy_version"),
            "plan_diff_summary": row.get("plan_diff_summary"),
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


def already_sent(lake_root: Path) -> set[str]:
    return set(
        lake.read_table(lake_root, ALERTS_SENT, lambda sent: sent.select("alert_id"))["alert_id"].to_list()
    )


def send_new_alerts(lake_root: Path, sinks: list[AlertSink], now: datetime | None = None) -> AlertReport:
    """Send every detected regression not alerted yet to every sink; record what all sinks accepted."""
    from jobs.analysis import read_regressions_with_plan_diffs

    payloads = alert_payloads(read_regressions_with_plan_diffs(lake_root), already_sent(lake_root))
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
        }
    )
    lake.write_table(
        lake_root, ALERTS_SENT, sent, {"date": moment.strftime("%Y-%m-%d")}, lake.stem_for(moment)
    )
    report.sent = payloads
    return report
