"""One alerts run: every sink gets each (finding, state) alert it has not had, at most once.

Bookkeeping is per sink, in the lake: ``alerts_sent`` holds one row per alert a sink accepted and
``alert_dead_letters`` one per alert a sink refused for good or that ran out of attempts (also appended,
with the payload, to the dead-letter JSONL file). A sink is never sent an alert it accepted, whatever
the other sinks did, nor one dead-lettered for it (unless ``retry_dead_letters``). Each alert's row is its
own lake file, written (fsynced, renamed into place; one PUT on an object store) as soon as the sink
answered and before the next alert is sent: a run killed at any moment (kill -9 skips every ``finally``)
can send again only the one alert in flight, to the one sink that had it, with the same alert_id as its
idempotency key. A run holds the lake lock ``alerts``: two runs at once cannot send an alert twice.

A run has a deadline (``run_deadline_s`` from taking the lock): no attempt or retry wait goes past it, and
the alerts not sent by then are deferred to the next run, so the lock is held at most that long plus the
writing of the last alert's row.

A sink that looks down (attempts exhausted, a long Retry-After, a revoked URL, a file that cannot be
written) is stopped for the rest of the run: its other alerts are deferred, sent by the next run.

A sink added to a lake that already has alert history is not sent that history: findings that were over
(recovered or superseded) before the sink's first use and were alerted to another sink are skipped for it
(``history_for``); the findings open now still get their alert.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from jobs.alerts.delivery import DEAD, DELIVERED, Outcome
from jobs.alerts.drift_payloads import cleared_since, drift_alert_payloads
from jobs.alerts.payloads import alert_payloads
from jobs.alerts.pileup_payloads import pileup_alert_payloads, read_live_pileups, read_query_texts
from jobs.alerts.sinks import AlertSink, sinks_from_settings
from jobs.detect.config import PileupConfig
from jobs.detect.evidence import EvidenceCutoffs
from jobs.detect.findings import OPEN, latest_states
from jobs.drift.finding_flags import latest_execution_drift, with_drift_flags
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.plans.pin_ledger import read_pins, with_pin_words
from jobs.redaction import scrub
from jobs.schemas.analysed import ALERT_DEAD_LETTERS, ALERTS_SENT, EXECUTION_DRIFT, FINDING_STATES

if TYPE_CHECKING:
    from jobs.alerts.config import AlertsConfig

ALERTS_LOCK = "alerts"
ALL_SINKS = ""  # the ledger key of rows written before per-sink bookkeeping: every sink had them


@dataclass(frozen=True)
class DeadLetter:
    sink: str
    sink_name: str
    alert_id: str
    finding_id: str
    state: str
    instance: str
    queryid: str | None  # null for a drift alert whose samples had no queryid
    attempts: int
    last_status: int | None
    reason: str
    dead_lettered_at: datetime
    payload: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # the file keeps it

    def as_row(self) -> dict[str, Any]:
        """The alert_dead_letters row (no payload: the lake has the finding)."""
        row = {k: v for k, v in self.__dict__.items() if k != "payload"}
        return {**row, "queryid": None if self.queryid is None else int(self.queryid)}

    def as_json(self) -> dict[str, Any]:
        """The dead-letter file's line: the row plus the payload, to resend by hand."""
        return {**self.__dict__, "dead_lettered_at": self.dead_lettered_at.isoformat()}


@dataclass
class SinkReport:
    """One sink's part of a run."""

    key: str
    name: str
    pending: int = 0
    delivered: list[str] = field(default_factory=list)  # alert_ids
    dead_lettered: list[DeadLetter] = field(default_factory=list)
    deferred: int = 0  # not attempted this run (the sink was stopped) or to write again (retry_later)
    stopped: str = ""  # why the sink was stopped for the rest of the run
    attempts: int = 0
    delays_s: list[float] = field(default_factory=list)  # every wait between attempts, in order
    history_skipped: int = 0  # updates of findings over before this sink was first used (history_for)

    @property
    def ok(self) -> bool:
        return not self.dead_lettered and not self.deferred

    def as_json(self) -> dict[str, Any]:
        return {
            "sink": self.key,
            "name": self.name,
            "pending": self.pending,
            "delivered": len(self.delivered),
            "dead_lettered": [
                {k: v for k, v in d.as_json().items() if k not in ("sink", "sink_name", "payload")}
                for d in self.dead_lettered
            ],
            "deferred": self.deferred,
            "stopped": self.stopped or None,
            "attempts": self.attempts,
            "history_skipped": self.history_skipped,
        }


@dataclass
class AlertReport:
    """What a run sent: ``sent`` the payloads some sink accepted this run (each once), per sink the rest."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    sinks: list[SinkReport] = field(default_factory=list)
    pending: int = 0  # distinct alerts some sink had not had when the run began
    notes: list[str] = field(default_factory=list)  # e.g. the dead-letter file could not be written

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sinks)

    @property
    def dead_lettered(self) -> list[DeadLetter]:
        return [d for s in self.sinks for d in s.dead_lettered]

    @property
    def failures(self) -> dict[str, str]:
        """Per sink name that did not take everything: why, in a line (never a URL)."""
        out = {}
        for s in self.sinks:
            if s.ok:
                continue
            parts = []
            if s.dead_lettered:
                parts.append(f"{len(s.dead_lettered)} dead-lettered ({s.dead_lettered[-1].reason})")
            if s.deferred:
                parts.append(f"{s.deferred} deferred to the next run ({s.stopped})")
            out[s.name] = "; ".join(parts)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "pending": self.pending,
            "sent": [
                {k: p[k] for k in ("alert_id", "finding_id", "state", "instance", "queryid")}
                for p in self.sent
            ],
            "sinks": [s.as_json() for s in self.sinks],
            "notes": self.notes,
        }


def _states_by_sink(frame: pl.DataFrame) -> dict[str, dict[str, set[str]]]:
    out: dict[str, dict[str, set[str]]] = {}
    for finding, state, sink in frame.drop_nulls("finding_id").iter_rows():
        out.setdefault(sink or ALL_SINKS, {}).setdefault(finding, set()).add(state)
    return out


def delivered_states(lake_root: Path) -> dict[str, dict[str, set[str]]]:
    """Per sink key (``ALL_SINKS`` for rows before per-sink bookkeeping), per finding: states accepted."""
    return _states_by_sink(
        lake.read_table(lake_root, ALERTS_SENT, lambda f: f.select("finding_id", "state", "sink"))
    )


def dead_lettered_states(lake_root: Path) -> dict[str, dict[str, set[str]]]:
    """Per sink key, per finding: the states dead-lettered for that sink."""
    return _states_by_sink(
        lake.read_table(lake_root, ALERT_DEAD_LETTERS, lambda f: f.select("finding_id", "state", "sink"))
    )


def already_sent(lake_root: Path) -> dict[str, set[str]]:
    """Per finding_id: the states some sink accepted."""
    out: dict[str, set[str]] = {}
    for by_finding in delivered_states(lake_root).values():
        for finding, states in by_finding.items():
            out.setdefault(finding, set()).update(states)
    return out


def first_use(lake_root: Path) -> dict[str, datetime]:
    """Per sink key: when it first accepted or dead-lettered an alert (rows before per-sink bookkeeping,
    without a sink, are not counted)."""
    out: dict[str, datetime] = {}
    for table, column in ((ALERTS_SENT, "sent_at"), (ALERT_DEAD_LETTERS, "dead_lettered_at")):
        frame = lake.read_table(
            lake_root,
            table,
            lambda f, c=column: f.filter(pl.col("sink").is_not_null()).group_by("sink").agg(pl.col(c).min()),
        )
        for sink, moment in frame.iter_rows():
            if moment is not None and (sink not in out or moment < out[sink]):
                out[sink] = moment
    return out


def over_since(lake_root: Path, findings: pl.DataFrame) -> dict[str, datetime]:
    """Per finding not open: when the radar first recorded its current state (recovered or superseded)."""
    over = findings.filter(pl.col("status") != OPEN).select("finding_id", "status")
    if over.is_empty():
        return {}
    states = lake.read_table(
        lake_root, FINDING_STATES, lambda f: f.select("finding_id", "status", "computed_at")
    )
    first = (
        over.join(states, on=["finding_id", "status"]).group_by("finding_id").agg(pl.col("computed_at").min())
    )
    return dict(first.iter_rows())


def history_for(
    sink_key: str,
    delivered: Mapping[str, Mapping[str, set[str]]],
    over: Mapping[str, datetime],
    since: datetime,
) -> set[str]:
    """The findings a sink is not told about: over before ``since`` (the sink's first use, or now for a
    sink never used), and already alerted to another sink. A sink added to a lake with a history gets
    the regressions open now and what happens from then on, not every old recovery; a sink that was
    down gets what it missed (its first use is before the outage)."""
    elsewhere = {f for key, ledger in delivered.items() if key != sink_key for f in ledger}
    return {f for f, moment in over.items() if moment < since and f in elsewhere}


def read_findings(lake_root: Path) -> pl.DataFrame:
    """The latest state of every finding (what the `findings` view shows), with the words of its latest
    plan pin (``pin``; null: none): an alert built after the pin carries its line."""
    return with_pin_words(latest_states(lake.read_table(lake_root, FINDING_STATES)), read_pins(lake_root))


def read_execution_drift(lake_root: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict[tuple[str, int], str]]:
    """The latest execution_drift row of every pair (the flags shown with regression alerts), every row of
    the pairs that were ever BLOCK (what drift alerts look at), and the texts of those queries by
    (instance, queryid)."""
    keys = ["instance", "query_hash", "metric", "baseline_version"]
    pair = ["instance", "query_hash", "metric"]
    # Two narrow scans, not the whole history: the latest flag of each pair (five columns), and every
    # column only of the pairs that were ever BLOCK.
    latest = latest_execution_drift(
        lake.read_table(
            lake_root,
            EXECUTION_DRIFT,
            lambda f: (
                f.select(*pair, "scored_at", "flag")
                .sort("scored_at")
                .group_by(pair)
                .agg(pl.col("scored_at", "flag").last())
            ),
        )
    )
    drift = lake.read_table(
        lake_root,
        EXECUTION_DRIFT,
        lambda f: f.join(f.filter(pl.col("flag") == "BLOCK").select(keys).unique(), on=keys, how="semi"),
    )
    if drift.is_empty():
        return latest, drift, {}
    named = drift.select("instance", "queryid").drop_nulls().unique()
    return latest, drift, read_query_texts(lake_root, named)


def _pileup_texts(lake_root: Path, episodes: pl.DataFrame) -> dict[tuple[str, int], str]:
    """The lake's texts of the blockers whose statement the snapshot did not read (a pile-up's own text
    comes with its snapshot rows): one narrow read, none when every text is at hand."""
    if episodes.is_empty():
        return {}
    pairs = (
        episodes.filter(pl.col("blocker_query").is_null())
        .select("instance", pl.col("blocker_queryid").alias("queryid"))
        .drop_nulls()
        .unique()
    )
    return read_query_texts(lake_root, pairs) if pairs.height else {}


def _merged(*ledgers: Mapping[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for ledger in ledgers:
        for finding, states in ledger.items():
            out.setdefault(finding, set()).update(states)
    return out


def _record(
    lake_root: Path,
    sink: AlertSink,
    delivered: list[tuple[dict[str, Any], Outcome]],
    dead: list[DeadLetter],
    moment: datetime,
    dead_letter_file: Path | None,
    report: AlertReport,
) -> None:
    stem = f"{lake.stem_for(moment)}-{sink.key}-{uuid.uuid4().hex[:8]}"
    partition = {"date": moment.strftime("%Y-%m-%d")}
    if delivered:
        rows = pl.DataFrame(
            [
                {
                    "alert_id": p["alert_id"],
                    "sent_at": moment,
                    "instance": p["instance"],
                    "queryid": None if p["queryid"] is None else int(p["queryid"]),
                    "sinks": sink.name,
                    "finding_id": p["finding_id"],
                    "state": p["state"],
                    "sink": sink.key,
                    "attempts": outcome.attempts,
                }
                for p, outcome in delivered
            ],
            schema_overrides={"sent_at": ALERTS_SENT.polars_schema["sent_at"], "queryid": pl.Int64()},
        )
        lake.write_table(lake_root, ALERTS_SENT, rows, partition, stem)
    if dead:
        frame = pl.DataFrame(
            [d.as_row() for d in dead],
            schema_overrides={
                "dead_lettered_at": ALERT_DEAD_LETTERS.polars_schema["dead_lettered_at"],
                "last_status": pl.Int64(),
                "queryid": pl.Int64(),
            },
        )
        lake.write_table(lake_root, ALERT_DEAD_LETTERS, frame, partition, stem)
        if dead_letter_file is not None:
            _append_dead_letters(dead_letter_file, dead, report)


def _append_dead_letters(path: Path, dead: Iterable[DeadLetter], report: AlertReport) -> None:
    """The dead letters as JSON lines (each with its payload, to resend by hand); the lake holds them too,
    so a file that cannot be written is a note, not a lost record."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(d.as_json(), sort_keys=True) + "\n" for d in dead))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        report.notes.append(
            f"cannot append to the dead-letter file {path}: {exc.strerror or exc} (the lake table "
            f"{ALERT_DEAD_LETTERS.name} holds them)"
        )


def _dead_letter(sink: AlertSink, payload: dict[str, Any], outcome: Outcome, moment: datetime) -> DeadLetter:
    return DeadLetter(
        sink=sink.key,
        sink_name=sink.name,
        alert_id=payload["alert_id"],
        finding_id=payload["finding_id"],
        state=payload["state"],
        instance=payload["instance"],
        queryid=payload["queryid"],
        attempts=outcome.attempts,
        last_status=outcome.last_status,
        reason=scrub(outcome.reason),
        dead_lettered_at=moment,
        payload=payload,
    )


@dataclass(frozen=True)
class RunDeadline:
    """When a run stops sending: a ``time.monotonic()`` time (None: never), what the sinks' retry loops
    are given too."""

    at: float | None
    seconds: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> RunDeadline:
        return cls(None if seconds is None else time.monotonic() + seconds, seconds)

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    @property
    def reason(self) -> str:
        return f"the run's deadline (run_deadline_s = {self.seconds:g} s) passed"


def _send_to(
    lake_root: Path,
    sink: AlertSink,
    payloads: list[dict[str, Any]],
    report: AlertReport,
    sent: dict[str, dict[str, Any]],
    now: datetime | None,
    dead_letter_file: Path | None,
    deadline: RunDeadline,
) -> SinkReport:
    """Each alert to ``sink``, its row written before the next is sent (what makes a kill cost at most the
    alert in flight); stops at the run's deadline or when the sink looks down."""
    result = SinkReport(sink.key, sink.name, pending=len(payloads))
    for index, payload in enumerate(payloads):
        if deadline.passed():
            result.deferred += len(payloads) - index
            result.stopped = f"stopped: {deadline.reason}"
            break
        outcome = sink.deliver(payload, deadline.at)
        result.attempts += outcome.attempts
        result.delays_s.extend(outcome.delays_s)
        moment = (now or datetime.now(UTC)).astimezone(UTC)
        if outcome.status == DELIVERED:
            _record(lake_root, sink, [(payload, outcome)], [], moment, dead_letter_file, report)
            result.delivered.append(payload["alert_id"])
            sent.setdefault(payload["alert_id"], payload)
        elif outcome.status == DEAD:
            letter = _dead_letter(sink, payload, outcome, moment)
            _record(lake_root, sink, [], [letter], moment, dead_letter_file, report)
            result.dead_lettered.append(letter)
        else:
            result.deferred += 1
        if outcome.sink_down:
            result.deferred += len(payloads) - index - 1
            reason = deadline.reason if deadline.passed() else scrub(outcome.reason)
            result.stopped = f"stopped after: {reason}"
            break
    return result


def send_new_alerts(
    lake_root: Path,
    sinks: list[AlertSink],
    now: datetime | None = None,
    *,
    send_resolved: bool = True,
    retry_dead_letters: bool = False,
    dead_letter_file: Path | None = None,
    lake_config: locks.LakeConfig | None = None,
    severity: str = "critical",
    work_severity: str = "warning",
    pileups: PileupConfig | None = None,
    run_deadline_s: float | None = None,
) -> AlertReport:
    """Send each sink every alert (finding, state) it has not accepted, nor dead-lettered (unless
    ``retry_dead_letters``); record per sink and alert what it accepted and what it refused for good.
    ``pileups``: also the live pile-ups of the lake's latest snapshots (None or disabled: not looked at).
    Sending stops ``run_deadline_s`` after the lock is taken (None: no deadline); the rest is deferred."""
    report = AlertReport()
    if not sinks:
        return report
    with locks.exclusive_lock(lake_root, ALERTS_LOCK, lake_config):
        deadline = RunDeadline.after(run_deadline_s)
        findings = read_findings(lake_root)
        latest_drift, drift, drift_texts = read_execution_drift(lake_root)
        if latest_drift.height:
            findings = with_drift_flags(findings, latest_drift)
        start = (now or datetime.now(UTC)).astimezone(UTC)
        episodes = (
            read_live_pileups(lake_root, start, pileups)
            if pileups is not None and pileups.enabled
            else pl.DataFrame()
        )
        if findings.is_empty() and drift.is_empty() and episodes.is_empty():
            report.sinks = [SinkReport(s.key, s.name) for s in sinks]
            return report
        delivered = delivered_states(lake_root)
        dead = {} if retry_dead_letters else dead_lettered_states(lake_root)
        over = {**over_since(lake_root, findings), **cleared_since(drift)}
        used = first_use(lake_root)
        texts = _pileup_texts(lake_root, episodes)
        plans = []
        skipped: dict[str, int] = {}
        for sink in sinks:
            handled = _merged(
                delivered.get(ALL_SINKS, {}), delivered.get(sink.key, {}), dead.get(sink.key, {})
            )
            history = history_for(sink.key, delivered, over, used.get(sink.key, start))
            payloads = alert_payloads(
                findings, handled, send_resolved=send_resolved, severity=severity, work_severity=work_severity
            ) + drift_alert_payloads(drift, handled, drift_texts, send_resolved=send_resolved)
            if episodes.height:
                payloads += pileup_alert_payloads(
                    episodes, handled, texts, findings, send_resolved=send_resolved, severity=severity
                )
            skipped[sink.key] = sum(p["finding_id"] in history for p in payloads)
            plans.append((sink, [p for p in payloads if p["finding_id"] not in history]))
        report.pending = len({p["alert_id"] for _, payloads in plans for p in payloads})
        sent: dict[str, dict[str, Any]] = {}
        try:
            for sink, payloads in plans:
                result = _send_to(lake_root, sink, payloads, report, sent, now, dead_letter_file, deadline)
                result.history_skipped = skipped[sink.key]
                report.sinks.append(result)
        finally:
            report.sent = list(sent.values())
    return report


def send_alerts(
    lake_root: Path,
    alerts: AlertsConfig,
    env: Mapping[str, str] | None = None,
    *,
    retry_dead_letters: bool = False,
    now: datetime | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    lake_config: locks.LakeConfig | None = None,
    cutoffs: EvidenceCutoffs = EvidenceCutoffs(),
    pileups: PileupConfig | None = None,
) -> AlertReport:
    """``send_new_alerts`` to the sinks [alerts] names (webhook URLs read from ``env`` now); ``cutoffs``:
    the evidence words' ([report], so Slack and the weekly report say the same); ``pileups``: [pileups]."""
    return send_new_alerts(
        lake_root,
        sinks_from_settings(alerts, env, sleep=sleep, rng=rng, cutoffs=cutoffs),
        now,
        send_resolved=alerts.send_resolved,
        severity=alerts.severity,
        work_severity=alerts.work_severity,
        retry_dead_letters=retry_dead_letters,
        dead_letter_file=Path(alerts.dead_letter_file) if alerts.dead_letter_file else None,
        lake_config=lake_config,
        pileups=pileups,
        run_deadline_s=alerts.run_deadline_s,
    )
