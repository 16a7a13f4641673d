"""Alert payloads (pure): one per (finding, state), in the contract ``regression_alert.schema.json``.

Alerts are keyed on the finding (jobs.detect.findings), not on an analysis row: a change point that moves
by a sample between runs is the same finding and sends nothing new. A finding's first alert is sent in
state ``open`` (or in the state it already had when first seen), and a later change of state
(``recovered`` or ``superseded``) sends one update, once. The payload is the contract's JSON object
(checked with jsonschema); a sink renders it (Slack Block Kit, the generic webhook and the JSONL file
send it as it is).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl

from jobs.detect.findings import OPEN
from jobs.detect.work_findings import WORK
from jobs.drift.scorer import METRICS
from jobs.query.texts import storable_query_text

CONTRACT = Path(__file__).parent.parent / "contracts" / "regression_alert.schema.json"
WORK_REGRESSION = "work_regression"
"""The payload ``kind`` of a finding of kind work (work per call grew; latency did not regress)."""


@cache
def alert_contract() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text())


def alert_id(finding: str, state: str) -> str:
    """One alert per (finding, state): the first alert (state open, or the finding's state when it was
    already over before any alert went out) and at most one update (recovered or superseded)."""
    return hashlib.sha256(f"{finding}|{state}".encode()).hexdigest()[:16]


def alert_state(status: str, sent_states: set[str], *, send_resolved: bool = True) -> str | None:
    """The state to alert for a finding now in ``status`` that was alerted in ``sent_states``, or None.

    Open and never alerted: the alert. Recovered or superseded: one update, once, whatever came before
    (a finding already over when first seen gets its one alert in that state); never a second update.
    ``send_resolved`` False: only the open alert is ever sent (a finding over before it was alerted sends
    nothing)."""
    if status == OPEN:
        return None if sent_states else OPEN
    if not send_resolved or sent_states - {OPEN}:
        return None
    return status


def alert_payloads(
    findings: pl.DataFrame,
    sent: Mapping[str, set[str]],
    *,
    send_resolved: bool = True,
    severity: str = "critical",
    work_severity: str = "warning",
) -> list[dict[str, Any]]:
    """Pure: one valid payload per finding (latest state, the `findings` view) with a state to alert;
    ``drift_flags`` the query's latest per-execution drift flag per metric when ``findings`` carries them
    (jobs.drift.finding_flags.with_drift_flags), else null; ``pin`` the words of the finding's latest plan pin
    when ``findings`` carries them (jobs.plans.pin_ledger.with_pin_words), else null.

    ``sent``: per finding_id, the states already alerted (to the sink at hand), in onset order.
    ``severity`` / ``work_severity``: of a latency finding's alert, and of a work finding's (kind work)."""
    out = []
    for row in findings.sort("onset", "finding_id").iter_rows(named=True):
        state = alert_state(row["status"], sent.get(row["finding_id"], set()), send_resolved=send_resolved)
        if state is None:
            continue
        payload = {
            "alert_id": alert_id(row["finding_id"], state),
            "finding_id": row["finding_id"],
            "state": state,
            "kind": WORK_REGRESSION if row.get("kind") == WORK else "performance_regression",
            "severity": work_severity if row.get("kind") == WORK else severity,
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
            "deploys_after": row.get("deploys_after"),
            "plan_diff_summary": row.get("plan_diff_summary"),
            "pin": row.get("pin"),
            "recovered_at": row["recovered_at"].isoformat() if row.get("recovered_at") else None,
            "superseded_by": row.get("superseded_by"),
            "work": (
                {
                    "metric": row["work_metric"],
                    "ratio": row.get("work_ratio"),
                    "summary": row.get("work_summary") or "",
                }
                if row.get("work_metric")
                else None
            ),
            "drift_flags": (
                {metric: row.get(f"drift_{metric}") for metric in METRICS}
                if f"drift_{METRICS[0]}" in row
                else None
            ),
        }
        jsonschema.validate(payload, alert_contract())
        out.append(payload)
    return out
