"""Alert payloads of BLOCK per-execution drift (pure), in the contract ``drift_alert.schema.json``.

A pair is (instance, query_hash, metric); its scorings against one ``baseline_version`` form episodes: a
run of consecutive BLOCK scorings is one episode, alerted once (state ``open``) until it clears, i.e. the
pair scores PASS or WARN with enough samples; then one update (state ``recovered``), once, like a regression
finding (jobs.alerts.payloads.alert_state, the same ``alerts_sent`` ledger keyed by ``finding_id`` = the
episode id). A scoring with too few samples (insufficient_samples) is no evidence either way: it neither
clears an episode nor extends one. A pair that BLOCKs again after clearing is a new episode, a new alert.
Only the latest episode of a pair is considered (older ones were alerted, or are history).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl

from jobs.alerts.payloads import alert_id, alert_state
from jobs.detect.findings import OPEN, RECOVERED
from jobs.drift.scorer import BLOCK, INSUFFICIENT_SAMPLES
from jobs.query.texts import storable_query_text

DRIFT_CONTRACT = Path(__file__).parent.parent / "contracts" / "drift_alert.schema.json"
DRIFT_KIND = "execution_drift"
EPISODE_KEY = ("instance", "query_hash", "metric", "baseline_version")


@cache
def drift_alert_contract() -> dict[str, Any]:
    return json.loads(DRIFT_CONTRACT.read_text())


def episode_id(instance: str, query_hash: str, metric: str, baseline_version: str, since: datetime) -> str:
    """The id of one BLOCK episode (used as the alert ledger's ``finding_id``)."""
    text = f"drift|{instance}|{query_hash}|{metric}|{baseline_version}|{since.isoformat()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def drift_episodes(drift: pl.DataFrame | None) -> list[dict[str, Any]]:
    """The latest BLOCK episode of every (instance, query_hash, metric, baseline_version) that has one:
    ``status`` open (its latest informative scoring is BLOCK) or recovered (a later one is not),
    ``blocked_since`` (the episode's first BLOCK), ``row`` (the scoring the alert describes: the latest
    BLOCK when open, the first clearing scoring when recovered) and ``cleared_at``."""
    if drift is None or drift.is_empty():
        return []
    informative = drift.filter(pl.col("reason").fill_null("") != INSUFFICIENT_SAMPLES)
    blocked_keys = informative.filter(pl.col("flag") == BLOCK).select(EPISODE_KEY).unique()
    mine = informative.join(blocked_keys, on=list(EPISODE_KEY), how="semi", nulls_equal=True)
    out = []
    for part in mine.sort(*EPISODE_KEY, "scored_at").partition_by(list(EPISODE_KEY), maintain_order=True):
        rows = part.to_dicts()
        last_block = max(i for i, r in enumerate(rows) if r["flag"] == BLOCK)
        first = last_block
        while first > 0 and rows[first - 1]["flag"] == BLOCK:
            first -= 1
        cleared = rows[last_block + 1] if last_block + 1 < len(rows) else None
        since = rows[first]["scored_at"]
        key = {k: rows[0][k] for k in EPISODE_KEY}
        out.append(
            {
                **key,
                "episode_id": episode_id(*(str(key[k]) for k in EPISODE_KEY), since),
                "status": OPEN if cleared is None else RECOVERED,
                "blocked_since": since,
                "row": rows[last_block] if cleared is None else cleared,
                "cleared_at": None if cleared is None else cleared["scored_at"],
            }
        )
    return sorted(out, key=lambda e: (e["blocked_since"], e["episode_id"]))


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _number(value: float | None) -> float | None:
    return None if value is None or value != value else float(value)


def drift_alert_payloads(
    drift: pl.DataFrame | None,
    sent: Mapping[str, set[str]],
    query_texts: Mapping[tuple[str, int], str] | None = None,
    *,
    send_resolved: bool = True,
) -> list[dict[str, Any]]:
    """Pure: one valid payload per BLOCK episode with a state to alert (``sent``: per episode id, the
    states already alerted to the sink at hand). ``query_texts``: (instance, queryid) -> text."""
    out = []
    for episode in drift_episodes(drift):
        episode_key = episode["episode_id"]
        state = alert_state(episode["status"], sent.get(episode_key, set()), send_resolved=send_resolved)
        if state is None:
            continue
        row = episode["row"]
        queryid = row.get("queryid")
        text = (query_texts or {}).get((row["instance"], queryid)) if queryid is not None else None
        payload = {
            "alert_id": alert_id(episode_key, state),
            "finding_id": episode_key,
            "state": state,
            "kind": DRIFT_KIND,
            "instance": row["instance"],
            "queryid": None if queryid is None else str(queryid),
            "fingerprint": row.get("fingerprint") or "",
            "query_hash": row["query_hash"],
            "query": storable_query_text(text) or row.get("fingerprint") or row["query_hash"],
            "metric": row["metric"],
            "baseline_version": row["baseline_version"],
            "flag": row["flag"],
            "reason": row.get("reason") or "",
            "js": _number(row.get("js")),
            "psi": _number(row.get("psi")),
            "wasserstein": _number(row.get("wasserstein")),
            "n_baseline": int(row.get("n_baseline") or 0),
            "n_candidate": int(row.get("n_candidate") or 0),
            "profile": row.get("profile"),
            "blocked_since": episode["blocked_since"].isoformat(),
            "scored_at": row["scored_at"].isoformat(),
            "window_start": _iso(row.get("window_start")),
            "window_end": _iso(row.get("window_end")),
            "cleared_at": _iso(episode["cleared_at"]),
        }
        jsonschema.validate(payload, drift_alert_contract())
        out.append(payload)
    return out


def cleared_since(drift: pl.DataFrame | None) -> dict[str, datetime]:
    """Per episode that has cleared: when (so a sink added later is not sent old clearings it never had
    the open alert of: jobs.alerts.run.history_for)."""
    return {e["episode_id"]: e["cleared_at"] for e in drift_episodes(drift) if e["cleared_at"] is not None}
