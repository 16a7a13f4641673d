"""Alert payloads of live pile-ups (``pileup_alert.schema.json``), and the lake reads they need.

Episodes come from ``jobs.detect.pileups`` over the snapshots of the last ``[pileups] lookback``: one
alert when an episode is seen (state ``open``) and one when the first snapshot without it arrives (state
``recovered``), each once per sink, through the same ``alerts_sent`` ledger as findings (``finding_id`` =
the episode id). A recovered episode names the regression finding of the same query that began at or
after its start, when detection has confirmed one by then (``related_finding_id``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl

from jobs.alerts.payloads import alert_id, alert_state
from jobs.detect.config import PileupConfig
from jobs.detect.findings import OPEN, RECOVERED
from jobs.detect.pileups import RESOLVED, live_pileups
from jobs.lake import io as lake
from jobs.query.texts import storable_query_text
from jobs.schemas.collected import ACTIVITY_QUERIES, ACTIVITY_SNAPSHOTS, QUERY_SAMPLES, QUERY_TEXTS

PILEUP_CONTRACT = Path(__file__).parent.parent / "contracts" / "pileup_alert.schema.json"
PILEUP_KIND = "pileup"


@cache
def pileup_alert_contract() -> dict[str, Any]:
    return json.loads(PILEUP_CONTRACT.read_text())


def read_live_pileups(lake_root: Path, now: datetime, config: PileupConfig) -> pl.DataFrame:
    """The pile-up episodes of the last ``config.lookback`` (jobs.detect.pileups.live_pileups), read from
    the lake: every snapshot's time, the running groups, and the samples of those query ids only."""
    since = now - config.lookback
    # the date partitions first: a lake keeps months of activity files, a run reads the last hours'
    recent = (pl.col("date") >= since.date().isoformat()) & (pl.col("captured_at") >= since)
    running = lake.read_table(lake_root, ACTIVITY_QUERIES, lambda f: f.filter(recent))
    if running.is_empty():
        return live_pileups(running, running, running, config)
    snapshots = lake.read_table(
        lake_root, ACTIVITY_SNAPSHOTS, lambda f: f.filter(recent).select("instance", "captured_at")
    )
    by_query = ["instance", "dbid", "userid", "queryid"]
    wanted = running.select(by_query).drop_nulls().unique()
    usual_since = since - timedelta(days=config.usual_days)
    samples = lake.read_table(
        lake_root,
        QUERY_SAMPLES,
        lambda f: (
            f.filter(pl.col("date") >= usual_since.date().isoformat())
            .filter(pl.col("queryid").is_in(wanted["queryid"].implode()))
            .filter(pl.col("interval_end") >= usual_since)
            .select(*by_query, "interval_end", "calls", "total_exec_time")
            .join(wanted.lazy(), on=by_query, how="semi")
        ),
    )
    return live_pileups(snapshots, running, samples, config)


def read_query_texts(lake_root: Path, pairs: pl.DataFrame) -> dict[tuple[str, int], str]:
    """(instance, queryid) -> the latest text in the lake, for the pairs named (drift alerts' queries, the
    pile-ups' blockers when the snapshot did not read their text): one narrow read."""
    if pairs.is_empty():
        return {}
    texts = lake.read_table(
        lake_root,
        QUERY_TEXTS,
        lambda f: f.join(pairs.lazy(), on=["instance", "queryid"], how="semi").select(
            "instance", "queryid", "query", "captured_at"
        ),
    )
    latest = texts.sort("captured_at").unique(["instance", "queryid"], keep="last")
    return {(i, q): t for i, q, t in latest.select("instance", "queryid", "query").iter_rows()}


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _related(findings: pl.DataFrame, episode: dict[str, Any]) -> str | None:
    """The regression finding of the same query that began at or after the episode's start, if any."""
    if findings.is_empty() or "queryid" not in findings.columns or episode["queryid"] is None:
        return None
    same = findings.filter(
        (pl.col("instance") == episode["instance"])
        & (pl.col("queryid") == episode["queryid"])
        & (pl.col("onset") >= episode["first_seen"])
    ).sort("onset")
    return same["finding_id"][0] if same.height else None


def pileup_alert_payloads(
    episodes: pl.DataFrame,
    sent: Mapping[str, set[str]],
    texts: Mapping[tuple[str, int], str],
    findings: pl.DataFrame,
    *,
    send_resolved: bool = True,
    severity: str = "critical",
) -> list[dict[str, Any]]:
    """Pure: one valid payload per episode with a state to alert (``sent``: per episode id, the states
    already alerted to the sink at hand); ``texts`` (instance, queryid) -> text; ``findings`` the latest
    state of every finding (to name a related one)."""
    out = []
    for episode in episodes.iter_rows(named=True):
        key = episode["pileup_id"]
        status = RECOVERED if episode["status"] == RESOLVED else OPEN
        state = alert_state(status, sent.get(key, set()), send_resolved=send_resolved)
        if state is None:
            continue
        instance, queryid, blocker = episode["instance"], episode["queryid"], episode["blocker_queryid"]
        blocker_text = episode["blocker_query"] or (
            texts.get((instance, blocker)) if blocker is not None else None
        )
        payload = {
            "alert_id": alert_id(key, state),
            "finding_id": key,
            "state": state,
            "kind": PILEUP_KIND,
            "severity": severity,
            "instance": instance,
            "queryid": None if queryid is None else str(queryid),
            "fingerprint": episode["fingerprint"],
            "query": storable_query_text(episode["query"]) or episode["fingerprint"],
            "cause": episode["cause"],
            "backends": int(episode["backends_now"]),
            "max_backends": int(episode["max_backends"]),
            "longest_s": float(episode["longest_s"]),
            "usual_ms": episode["usual_ms"],
            "wait_event": episode["wait_event"],
            "blocker_pid": episode["blocker_pid"],
            "blocker_state": episode["blocker_state"],
            "blocker_queryid": None if blocker is None else str(blocker),
            "blocker_query": storable_query_text(blocker_text) if blocker_text else None,
            "blocker_xact_s": episode["blocker_xact_s"],
            "first_seen": episode["first_seen"].isoformat(),
            "last_seen": episode["last_seen"].isoformat(),
            "resolved_at": _iso(episode["resolved_at"]),
            "related_finding_id": _related(findings, episode) if state != OPEN else None,
        }
        jsonschema.validate(payload, pileup_alert_contract())
        out.append(payload)
    return out
