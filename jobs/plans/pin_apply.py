"""Applying and removing a recorded pin (issue 30): the ledger row's own SQL, run as the pin role only.

A pin is written to a server only where ``[pinning]`` opted in (mode apply and the instance in
apply_instances), only as the NOLOGIN pin role (``radar setup-sql --pins``: writes hint_plan.hints, nothing
else; the monitoring login SETs ROLE to it), and only after checking, in the same transaction, that
pg_hint_plan is loaded, its hint table enabled and writable. A dry run returns the SQL and connects nowhere.
Every write becomes a ledger row (``applied`` / ``removed``) with the SQL run.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from jobs.detect.config import RegressionConfig
from jobs.lake.storage import LakePath
from jobs.plans.config import PinningConfig
from jobs.plans.pin_ledger import after_latest, latest_pins, read_pins, write_pins
from jobs.plans.pin_verify import FAILED, PENDING, VERIFIED, interval_latencies, verify_pin
from jobs.plans.pins import PinImpossible, PlanCatalogue, check_producible, derive_hints
from jobs.schemas.analysed import PLAN_PINS
from jobs.sqlfiles import load_sql

_ROLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
EVENT_APPLIED = "applied"
EVENT_VERIFIED = "verified"
EVENT_REMOVED = "removed"
EVENT_FAILED = "failed"
APPLIABLE = frozenset({"proposed", EVENT_REMOVED})
"""A pin may be applied from these states (a removed pin may be applied again; a failed one by hand only
after a new proposal)."""
IN_PLACE = frozenset({EVENT_APPLIED, EVENT_VERIFIED})
"""States in which the pin's row is in the hint table."""


class PinRefused(RuntimeError):
    """The pin was not written: why, in one line (not opted in, pg_hint_plan not ready, a hint there)."""


@dataclass(frozen=True)
class PinWrite:
    """What an apply or remove did: the SQL, whether it ran, and the ledger row recorded."""

    sql: str
    ran: bool
    row: dict[str, Any] | None = None


def ready_problem(facts: Mapping[str, Any], instance: str) -> str | None:
    """Why this session may not write a pin (from ``sql/postgres/pins_ready.sql``), or None."""
    if facts.get("hint_table_vartype") != "bool":
        return (
            f"pg_hint_plan is not loaded on {instance} (add it to shared_preload_libraries or "
            "session_preload_libraries): a pin would do nothing"
        )
    if facts.get("enable_hint_table") != "on":
        return f"pg_hint_plan.enable_hint_table is off on {instance}: the hint table is not read"
    if not facts.get("hint_table_exists"):
        return f"hint_plan.hints does not exist on {instance} (CREATE EXTENSION pg_hint_plan in its database)"
    if not facts.get("may_write"):
        return (
            f"role {facts.get('role_name')} may not write hint_plan.hints on {instance} "
            "(radar setup-sql --pins grants it)"
        )
    return None


def _latest(lake_root: LakePath, pin: str) -> dict[str, Any]:
    rows = read_pins(lake_root).filter(pl.col("pin_id") == pin)
    if rows.is_empty():
        raise KeyError(pin)
    return latest_pins(rows).row(0, named=True)


def _run(dsn: str, sql: str, role: str, instance: str, database: str | None, *, removing: bool) -> None:
    """SET ROLE to the pin role, check readiness, run ``sql`` and commit, in one transaction."""
    import psycopg
    from psycopg.rows import dict_row

    from jobs.redaction import scrub

    if not _ROLE.match(role):
        raise PinRefused(f"[pinning] pin_role {role!r} must be a plain SQL name")
    kwargs: dict[str, Any] = {
        "connect_timeout": 10,
        "application_name": "pg-regression-radar pins",
        # never hang on the hint table: a lock held elsewhere makes the write fail fast, not queue
        "options": "-c statement_timeout=5000 -c lock_timeout=1000",
    }
    if database:
        kwargs["dbname"] = database
    try:
        with psycopg.connect(dsn, **kwargs) as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(load_sql("pins_set_role").replace("{pin_role}", '"' + role + '"'))
            cur.execute(load_sql("pins_ready"))
            problem = ready_problem(cur.fetchone() or {}, instance)
            if problem is not None:
                raise PinRefused(problem)
            cur.execute(sql)
            if removing and cur.rowcount != 1:
                raise PinRefused(
                    f"the pin's row is not in hint_plan.hints on {instance} as the pin wrote it (removed or "
                    "changed by someone else): nothing removed"
                )
            conn.commit()
    except psycopg.errors.UniqueViolation:
        raise PinRefused(
            f"hint_plan.hints on {instance} already has a hint for this query id and application_name: "
            "a pin never overwrites one (nothing written)"
        ) from None
    except psycopg.Error as exc:
        first = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0], dsn)
        raise PinRefused(f"the pin could not be written on {instance}: {first}") from None


def write_pin(
    lake_root: LakePath,
    pin: str,
    *,
    action: str,
    dsn_of: Any,
    config: PinningConfig,
    now: datetime,
    dry_run: bool = False,
    decided_by: str | None = None,
    reason: str | None = None,
    event: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> PinWrite:
    """Apply (``action`` "apply") or remove ("remove") the recorded pin ``pin`` and record it; ``dsn_of``
    (instance name → DSN) is only called when the SQL is really run. KeyError: no such pin; PinRefused: why
    nothing was written."""
    latest = _latest(lake_root, pin)
    instance = str(latest["instance"])
    if action == "apply":
        sql, event = latest.get("apply_sql"), EVENT_APPLIED
        if latest["event"] not in APPLIABLE or not sql:
            raise PinRefused(
                f"pin {pin} is {latest['event']}: only a proposed (or removed) pin can be applied"
            )
    else:
        sql, event = latest.get("remove_sql"), EVENT_REMOVED
        if latest["event"] not in IN_PLACE or not sql:
            raise PinRefused(
                f"pin {pin} is {latest['event']}: only an applied (or verified) pin can be removed"
            )
    if dry_run:
        return PinWrite(sql, ran=False)
    if not config.applies_on(instance):
        raise PinRefused(
            f'{instance} has not opted in to applied pins ([pinning] mode = "apply" and {instance} in '
            "apply_instances): nothing written; --dry-run prints the SQL"
        )
    database = latest.get("database")
    _run(dsn_of(instance), sql, config.pin_role, instance, database, removing=action == "remove")
    now = after_latest(latest, now)
    who = decided_by or f"radar pins {action} by {getpass.getuser()}"
    row = {
        **latest,
        "event": event,
        "recorded_at": now,
        "decided_by": who,
        "mode": config.mode,
        "sql_run": sql,
    }
    row["reason"] = reason or (
        f"applied: the last good plan's hints are in hint_plan.hints for query id {latest['queryid']}"
        if event == EVENT_APPLIED
        else "removed: the pin's row is gone from hint_plan.hints (the table is as before the pin)"
    )
    frame = PLAN_PINS.conform(pl.DataFrame([row], infer_schema_length=None))
    write_pins(lake_root, frame, now)
    return replace(PinWrite(sql, ran=True), row=row)


@dataclass(frozen=True)
class PinCheck:
    """One applied pin looked at by ``check_applied_pins``."""

    pin_id: str
    instance: str
    outcome: str
    """kept | verified | pending | failed (removed) | removed (plan no longer producible) | expired (removed:
    TTL) | gone (removed: the query id stopped running) | not_removed;
    applied | not_applied (``apply_proposed``)"""
    reason: str


def check_applied_pins(
    lake_root: LakePath,
    catalogue_of: Callable[[Mapping[str, Any], set[str]], PlanCatalogue],
    dsn_of: Callable[[str], str],
    config: PinningConfig,
    now: datetime,
    *,
    latencies_of: Callable[[Mapping[str, Any]], pl.DataFrame] | None = None,
    detector: RegressionConfig | None = None,
    last_seen_of: Callable[[Mapping[str, Any]], LastSeen] | None = None,
) -> list[PinCheck]:
    """Every pin in place: one whose last good plan can no longer be produced (a relation or index gone), or
    whose [pinning] ttl passed, or (with ``last_seen_of``) a verified one whose query id is gone
    (``query_gone``), is removed with its recorded SQL, as the pin role, and recorded with the
    reason; then, with
    ``latencies_of`` (the pin's query's ``interval_latencies``), an applied pin is judged
    (``jobs.plans.pin_verify``): verified is recorded, failed is removed and recorded as failed, pending
    waits. A pin that should go but cannot be removed (the instance no longer opted in, its row changed) is
    reported, not recorded."""
    detector = detector or RegressionConfig()
    rows = read_pins(lake_root)
    latest = latest_pins(rows).filter(pl.col("event").is_in(sorted(IN_PLACE)))
    applied_at = {
        r["pin_id"]: r["recorded_at"]
        for r in latest_pins(rows.filter(pl.col("event") == EVENT_APPLIED)).to_dicts()
    }
    out: list[PinCheck] = []

    def take_back(pin: dict[str, Any], outcome: str, why: str, **more: Any) -> None:
        try:
            write_pin(
                lake_root,
                pin["pin_id"],
                action="remove",
                dsn_of=dsn_of,
                config=config,
                now=now,
                decided_by="radar pins check",
                **more,
            )
        except PinRefused as exc:
            out.append(
                PinCheck(pin["pin_id"], str(pin["instance"]), "not_removed", f"{why}; not removed: {exc}")
            )
            return
        out.append(PinCheck(pin["pin_id"], str(pin["instance"]), outcome, why))

    for pin in latest.to_dicts():
        instance = str(pin["instance"])
        try:
            hints = derive_hints(pin["good_plan_json"])
            check_producible(hints, catalogue_of(pin, {s.relation for s in hints.scans}))
        except PinImpossible as exc:
            why = str(exc)
            take_back(pin, "removed", why, reason=f"removed: {why.removeprefix('pin impossible: ')}")
            continue
        since = applied_at.get(pin["pin_id"], pin["recorded_at"])
        if now - since >= config.ttl:
            why = f"the pin's TTL ({config.ttl}) passed: applied at {since:%Y-%m-%d %H:%M:%S} UTC"
            take_back(pin, "expired", why, reason=f"removed: {why}")
            continue
        if last_seen_of is not None and pin["event"] == EVENT_VERIFIED:
            why = query_gone(pin, last_seen_of(pin), config.gone_after)
            if why is not None:
                take_back(pin, "gone", why, reason=f"removed: {why}")
                continue
        if latencies_of is None or pin["event"] != EVENT_APPLIED or pin.get("detected_change_at") is None:
            out.append(PinCheck(pin["pin_id"], instance, "kept", "the last good plan is still producible"))
            continue
        verdict = verify_pin(
            latencies_of(pin),
            change_at=pin["detected_change_at"],
            applied_at=since,
            now=now,
            detector=detector,
            verify_within=config.verify_within,
            min_samples=config.verify_min_samples,
            residual_share=config.verify_residual_share,
        )
        figures = {"pinned_mean_ms": verdict.pinned_mean_ms, "verify_p_value": verdict.p_vs_regressed}
        if verdict.outcome == VERIFIED:
            at = after_latest(pin, now)
            row = {**pin, **figures, "event": EVENT_VERIFIED, "recorded_at": at, "reason": verdict.reason}
            row.update(decided_by="radar pins check", mode=config.mode, sql_run=None)
            write_pins(lake_root, PLAN_PINS.conform(pl.DataFrame([row], infer_schema_length=None)), at)
            out.append(PinCheck(pin["pin_id"], instance, VERIFIED, verdict.reason))
        elif verdict.outcome == FAILED:
            take_back(pin, FAILED, verdict.reason, reason=verdict.reason, event=EVENT_FAILED, extra=figures)
        else:
            out.append(PinCheck(pin["pin_id"], instance, PENDING, verdict.reason))
    return out


@dataclass(frozen=True)
class LastSeen:
    """When a pin's query last ran and when its instance was last sampled (ends of intervals in
    query_samples; None: no such sample since the finding's change)."""

    query_last: datetime | None
    instance_last: datetime | None


def query_gone(pin: Mapping[str, Any], seen: LastSeen, gone_after: timedelta) -> str | None:
    """Why the pin's query id is gone, or None: its instance's samples went on for ``gone_after`` past the
    query's last one (or past the pin's verification when the query has none). A collector that stopped
    leaves the instance unsampled too, so it never makes a query look gone."""
    last = seen.query_last or pin["recorded_at"]
    if seen.instance_last is None or seen.instance_last - last < gone_after:
        return None
    return (
        f"query id {pin['queryid']} is gone: no samples for {gone_after} (its last interval ended "
        f"{last:%Y-%m-%d %H:%M:%S} UTC; the instance was sampled until "
        f"{seen.instance_last:%Y-%m-%d %H:%M:%S} UTC)"
    )


def lake_last_seen(lake_root: LakePath) -> Callable[[Mapping[str, Any]], LastSeen]:
    """``last_seen_of`` for ``check_applied_pins``: from query_samples since the finding's change, the end
    of the query's last interval with calls and of the instance's last interval (any query)."""
    from jobs.lake.io import read_table
    from jobs.schemas.collected import QUERY_SAMPLES

    def last_seen_of(pin: Mapping[str, Any]) -> LastSeen:
        since = pin.get("detected_change_at") or pin["recorded_at"]
        mine = (pl.col("queryid") == pin["queryid"]) & (pl.col("calls") > 0)
        frame = read_table(
            lake_root,
            QUERY_SAMPLES,
            lambda s: s.filter(
                (pl.col("instance") == pin["instance"]) & (pl.col("interval_end") >= since)
            ).select(
                pl.col("interval_end").filter(mine).max().alias("query_last"),
                pl.col("interval_end").max().alias("instance_last"),
            ),
        )
        if frame.is_empty():
            return LastSeen(None, None)
        row = frame.row(0, named=True)
        return LastSeen(row["query_last"], row["instance_last"])

    return last_seen_of


def lake_latencies(
    lake_root: LakePath, detector: RegressionConfig
) -> Callable[[Mapping[str, Any]], pl.DataFrame]:
    """``latencies_of`` for ``check_applied_pins``: the pin's query's interval latencies from query_samples,
    from the detector's window before the finding's change on."""
    from jobs.lake.io import read_table
    from jobs.schemas.collected import QUERY_SAMPLES

    def latencies_of(pin: Mapping[str, Any]) -> pl.DataFrame:
        since = pin["detected_change_at"] - detector.window_before
        samples = read_table(
            lake_root,
            QUERY_SAMPLES,
            lambda s: s.filter(
                (pl.col("instance") == pin["instance"])
                & (pl.col("queryid") == pin["queryid"])
                & (pl.col("interval_end") >= since)
            ),
        )
        return interval_latencies(samples)

    return latencies_of


def apply_proposed(
    lake_root: LakePath,
    written: pl.DataFrame,
    dsn_of: Callable[[str], str],
    config: PinningConfig,
    now: datetime,
    *,
    decided_by: str,
) -> list[PinCheck]:
    """[pinning] mode = apply: each pin a proposal run just recorded as proposed, on an instance that opted
    in, is applied (``write_pin``); a refusal is reported, not recorded. Nothing is done in mode propose."""
    out: list[PinCheck] = []
    if config.mode != "apply":
        return out
    for row in written.filter(pl.col("event") == "proposed").to_dicts():
        instance = str(row["instance"])
        if not config.applies_on(instance):
            continue
        try:
            write_pin(
                lake_root,
                row["pin_id"],
                action="apply",
                dsn_of=dsn_of,
                config=config,
                now=now,
                decided_by=decided_by,
            )
        except PinRefused as exc:
            out.append(PinCheck(row["pin_id"], instance, "not_applied", str(exc)))
            continue
        out.append(PinCheck(row["pin_id"], instance, EVENT_APPLIED, f"applied ({decided_by})"))
    return out
