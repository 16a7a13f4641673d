"""The plan pins ledger (issue 30): proposals from the lake's findings and plan history, written to
``plan_pins``, and read back for ``radar pins``.

A run (``run_pin_proposals``) takes every open finding, its queryid's plan history and, per instance, a
listing of the relations and indexes the last good plans used (``sql/postgres/pins_catalogue.sql``: a read
of the catalogue, nothing else), and records one row per finding whose state changed since the last row
(a re-run writes nothing new). Proposing writes nothing to any server, whatever the mode; applying is
``jobs.plans.pin_apply`` (`radar pins apply`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from jobs.collect.fleet import FleetConfig
from jobs.detect.findings import latest_states
from jobs.lake.io import read_table, stem_for, write_table
from jobs.lake.storage import LakePath
from jobs.plans.config import PinningConfig, PlanDiffConfig
from jobs.plans.pins import (
    STATUS_IMPOSSIBLE,
    PinImpossible,
    PinProposal,
    PlanCatalogue,
    derive_hints,
    propose_pin,
)
from jobs.schemas.analysed import FINDING_STATES, PLAN_PINS
from jobs.schemas.collected import PLAN_SNAPSHOTS
from jobs.sqlfiles import load_sql

STATUS_SKIPPED = "skipped"
PAST_PROPOSAL = frozenset({"applied", "verified", "failed", "removed"})
"""A pin in one of these states is past its proposal: a proposal run never records it again (a person may
apply a removed pin again)."""
# What makes a ledger row news: a row equal to the pin's latest one in these is not written again.
STATE_COLUMNS = ("event", "reason", "hints", "mode", "good_shape_hash")


def pin_id(instance: str | None, finding_id: str | None) -> str:
    """One pin per finding: a stable hash of (instance, finding_id)."""
    return hashlib.sha256(f"{instance}|{finding_id}".encode()).hexdigest()[:16]


def ledger_frame(
    proposals: Iterable[PinProposal], recorded_at: datetime, decided_by: str, mode: str
) -> pl.DataFrame:
    """The proposals as plan_pins rows."""
    rows = []
    for p in proposals:
        row: dict[str, Any] = asdict(p)
        row["event"] = row.pop("status")
        row["relations"] = ", ".join(p.relations) or None
        row["indexes"] = ", ".join(p.indexes) or None
        rows.append(
            {
                **row,
                "pin_id": pin_id(p.instance, p.finding_id),
                "recorded_at": recorded_at,
                "decided_by": decided_by,
                "mode": mode,
                "sql_run": None,
            }
        )
    if not rows:
        return PLAN_PINS.empty()
    return PLAN_PINS.conform(pl.DataFrame(rows, infer_schema_length=None))


def latest_pins(rows: pl.DataFrame) -> pl.DataFrame:
    """The latest row per pin_id (the pin's state), newest first."""
    if rows.is_empty():
        return PLAN_PINS.empty()
    return (
        rows.sort("recorded_at")
        .unique("pin_id", keep="last", maintain_order=True)
        .sort("recorded_at", "pin_id", descending=[True, False])
    )


def news(rows: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    """The rows whose pin is new or whose state (STATE_COLUMNS) differs from the pin's latest stored row;
    a pin past its proposal (PAST_PROPOSAL) is left as it is."""
    if rows.is_empty() or stored.is_empty():
        return rows
    settled = latest_pins(stored).filter(pl.col("event").is_in(sorted(PAST_PROPOSAL))).select("pin_id")
    rows = rows.join(settled, on="pin_id", how="anti")
    latest = latest_pins(stored).select("pin_id", *[pl.col(c).alias(f"_old_{c}") for c in STATE_COLUMNS])
    joined = rows.join(latest, on="pin_id", how="left")
    same = pl.lit(True)
    for c in STATE_COLUMNS:
        same = same & pl.col(c).eq_missing(pl.col(f"_old_{c}"))
    known = pl.col("_old_event").is_not_null()
    return joined.filter(~(known & same)).select(PLAN_PINS.column_names)


def pin_words(row: Mapping[str, Any]) -> str:
    """One line for a finding's report: the pin's state, its hints or why there is none, and its id."""
    event, reason, hints = row.get("event"), row.get("reason") or "", row.get("hints")
    pin = f"(radar pins explain {row.get('pin_id')})"
    if event == "proposed":
        return f"proposed {hints} {pin}"
    if event in ("applied", "verified"):
        return f"{event}: {hints}; {reason} {pin}"
    return f"{event}: {reason} {pin}"


def with_pin_words(findings: pl.DataFrame, pins: pl.DataFrame | None) -> pl.DataFrame:
    """``findings`` (with finding_id) plus ``pin``: the words of each finding's latest pin (null: none)."""
    if pins is None or pins.is_empty() or findings.is_empty() or "finding_id" not in findings.columns:
        return findings.with_columns(pl.lit(None, pl.String).alias("pin"))
    latest = latest_pins(pins).unique("finding_id", keep="first", maintain_order=True)
    words = pl.DataFrame(
        {"finding_id": latest["finding_id"], "pin": [pin_words(r) for r in latest.to_dicts()]},
        schema={"finding_id": pl.String, "pin": pl.String},
    )
    return findings.drop("pin", strict=False).join(words, on="finding_id", how="left")


def read_pins(lake_root: LakePath) -> pl.DataFrame:
    """Every ledger row (plan_pins without its date partition column), oldest first."""
    rows = read_table(lake_root, PLAN_PINS)
    return rows.select(PLAN_PINS.column_names).sort("recorded_at", "pin_id")


def write_pins(lake_root: LakePath, rows: pl.DataFrame, recorded_at: datetime) -> None:
    """One file per write (a random suffix: two writes at one instant must not replace each other)."""
    if rows.is_empty():
        return
    stem = f"{stem_for(recorded_at)}-{uuid.uuid4().hex[:8]}"
    write_table(lake_root, PLAN_PINS, rows, {"date": recorded_at.strftime("%Y-%m-%d")}, stem)


def after_latest(latest: Mapping[str, Any], now: datetime) -> datetime:
    """``now``, or just after the pin's latest row when that is not earlier: a pin's rows never tie."""
    previous = latest.get("recorded_at")
    return now if previous is None or now > previous else previous + timedelta(microseconds=1)


# ---------------------------------------------------------------------------------------------------------
# Proposals from the lake


def good_plan_relations(snapshots: Sequence[Mapping[str, Any]]) -> set[str]:
    """Relation names of every plan in a query's history (what a catalogue listing must cover)."""
    names: set[str] = set()
    for snap in snapshots:
        try:
            names.update(s.relation for s in derive_hints(snap["plan_json"]).scans)
        except PinImpossible:
            for relation in snap.get("relations") or []:
                names.add(str(relation))
    return names


def propose_for_findings(
    findings: pl.DataFrame,
    snapshots: pl.DataFrame,
    catalogue_of: Callable[[Mapping[str, Any], set[str]], PlanCatalogue | None],
    config: PinningConfig,
    diff_config: PlanDiffConfig | None = None,
) -> list[PinProposal]:
    """One proposal per open finding (latest finding_states rows). ``catalogue_of(finding, relations)`` lists
    the finding's server's relations and indexes (None: could not be read); it is only called for findings
    whose pin is wanted ([pinning] allow/deny) and has a plan history, and may raise PinImpossible saying why
    the server could not be listed."""
    out: list[PinProposal] = []
    by_query: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for snap in snapshots.filter(pl.col("plan_json").is_not_null()).to_dicts():
        by_query.setdefault((snap["instance"], snap["queryid"]), []).append(snap)
    for finding in findings.filter(pl.col("status") == "open").to_dicts():
        instance, queryid = finding.get("instance"), finding.get("queryid")
        if instance is None or queryid is None:
            continue
        refused = config.query_allowed(instance, queryid)
        if refused is not None:
            out.append(
                PinProposal(
                    status=STATUS_SKIPPED,
                    reason=f"no pin: {refused}",
                    instance=instance,
                    queryid=queryid,
                    finding_id=finding.get("finding_id"),
                    database=finding.get("database"),
                    application_name=config.application_name,
                    p_value=finding.get("p_value"),
                    before_mean_ms=finding.get("before_mean_ms"),
                    after_mean_ms=finding.get("after_mean_ms"),
                    detected_change_at=finding.get("detected_change_at"),
                )
            )
            continue
        history = by_query.get((instance, queryid), [])
        unlisted: str | None = None
        try:
            catalogue = catalogue_of(finding, good_plan_relations(history)) if history else None
        except PinImpossible as exc:
            catalogue, unlisted = None, str(exc)
        proposal = propose_pin(
            finding, history, catalogue, application_name=config.application_name, diff_config=diff_config
        )
        if unlisted is not None and proposal.status == STATUS_IMPOSSIBLE and catalogue is None:
            proposal = replace(proposal, reason=unlisted)
        out.append(proposal)
    return out


@dataclass(frozen=True)
class PinRun:
    """What one proposal run did: the proposals made and the ledger rows written (new states only)."""

    proposals: list[PinProposal]
    written: pl.DataFrame


def run_pin_proposals(
    lake_root: LakePath,
    catalogue_of: Callable[[Mapping[str, Any], set[str]], PlanCatalogue | None],
    config: PinningConfig,
    now: datetime,
    *,
    decided_by: str,
    diff_config: PlanDiffConfig | None = None,
) -> PinRun:
    """Propose pins for the lake's open findings and record the changed states in plan_pins. Writes nothing
    to any server whatever the mode (applying is ``jobs.plans.pin_apply``)."""
    findings = latest_states(read_table(lake_root, FINDING_STATES))
    open_findings = findings.filter(pl.col("status") == "open")
    wanted = {(r["instance"], r["queryid"]) for r in open_findings.select("instance", "queryid").to_dicts()}
    instances = sorted({i for i, _ in wanted if i is not None})
    queryids = sorted({q for _, q in wanted if q is not None})
    snapshots = read_table(
        lake_root,
        PLAN_SNAPSHOTS,
        lambda s: s.filter(pl.col("instance").is_in(instances) & pl.col("queryid").is_in(queryids)),
    )
    proposals = propose_for_findings(open_findings, snapshots, catalogue_of, config, diff_config)
    rows = ledger_frame(proposals, now, decided_by, config.mode)
    fresh = news(rows, read_pins(lake_root)) if not rows.is_empty() else rows
    write_pins(lake_root, fresh, now)
    return PinRun(proposals, fresh)


# ---------------------------------------------------------------------------------------------------------
# The catalogue of a server (a read; never a write)


def read_catalogue(dsn: str, relations: set[str], *, database: str | None = None) -> PlanCatalogue:
    """The listed relations and their valid indexes on the server (``database`` when given), read with
    ``sql/postgres/pins_catalogue.sql`` in a read-only transaction."""
    import psycopg
    from psycopg.rows import dict_row

    kwargs: dict[str, Any] = {"connect_timeout": 10, "application_name": "pg-regression-radar pins"}
    if database:
        kwargs["dbname"] = database
    with psycopg.connect(dsn, **kwargs) as conn:
        conn.read_only = True
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(load_sql("pins_catalogue"), {"relations": sorted(relations)})
            return PlanCatalogue.from_rows(cur.fetchall())


def fleet_catalogues(fleet: FleetConfig) -> Callable[[Mapping[str, Any], set[str]], PlanCatalogue]:
    """``catalogue_of`` for ``run_pin_proposals``: the finding's instance of ``fleet`` read in the finding's
    database; PinImpossible (one line, no secret of the DSN) when the instance is unknown or unreadable."""
    import psycopg

    from jobs.redaction import scrub

    instances = {i.name: i for i in fleet.instances}

    def catalogue_of(finding: Mapping[str, Any], relations: set[str]) -> PlanCatalogue:
        instance = instances.get(finding["instance"])
        if instance is None:
            raise PinImpossible(f"pin impossible: instance {finding['instance']} is not in the fleet")
        dsn = instance.resolve_dsn()
        try:
            return read_catalogue(dsn, relations, database=finding.get("database"))
        except psycopg.Error as exc:
            first = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0], dsn)
            raise PinImpossible(
                f"pin impossible: the relations and indexes of {instance.name} could not be listed ({first})"
            ) from None

    return catalogue_of
