"""Plan diffs: what changed in a query's plan around a detected regression, for humans and for machines.

``diff_plans`` compares two plan JSON trees: root node, node types / relations / indexes added or removed,
estimated cost moved beyond a ratio, row-estimate errors where actual rows exist (auto_explain), and a
caution whenever a side is a generic plan (an estimate, not what ran). ``plan_diffs_for_regressions``
picks, for each detected regression, the plan in force before ``detected_change_at`` and the first plan
after it (the plan the change brought; see ``_sides`` for the tolerance around a change point either way),
and says separately, in full, what changed later (``later_change``: a restore, a re-drop), never in place
of the change's own diff.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.lake.io import stem_for, write_table
from jobs.plans.analyses import DEFAULT_WINDOW, analyses_before, analyze_note
from jobs.plans.config import PlanDiffConfig
from jobs.plans.shape import node_label, plan_facts, plan_root, walk_nodes
from jobs.query.series import SERIES_KEY
from jobs.schemas.analysed import PLAN_DIFFS

GENERIC_CAUTION = "Caution: {side} (EXPLAIN GENERIC_PLAN): an estimate, not what ran."


@dataclass(frozen=True)
class PlanDiff:
    """Structured diff of two plans plus its one-paragraph human summary."""

    shape_changed: bool
    before_shape_hash: str
    after_shape_hash: str
    root_before: str
    root_after: str
    root_changed: bool
    node_types_added: list[str]
    node_types_removed: list[str]
    relations_added: list[str]
    relations_removed: list[str]
    indexes_added: list[str]
    indexes_removed: list[str]
    cost_before: float | None
    cost_after: float | None
    cost_ratio: float | None
    cost_moved: bool
    row_estimate_errors: list[dict[str, Any]] = field(default_factory=list)
    cautions: list[str] = field(default_factory=list)
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def _scan_labels(root: dict[str, Any]) -> list[str]:
    """Labels of the nodes that touch a relation (the part of a plan a reader recognises)."""
    labels = [node_label(n) for n in walk_nodes(root) if "Relation Name" in n]
    return labels or [node_label(root)]


def row_estimate_errors(root: dict[str, Any], side: str, factor: float) -> list[dict[str, Any]]:
    """Nodes whose actual rows differ from the estimate by at least ``factor`` (both per loop)."""
    found = []
    for node in walk_nodes(root):
        estimated, actual = node.get("Plan Rows"), node.get("Actual Rows")
        if not isinstance(estimated, int | float) or not isinstance(actual, int | float):
            continue
        ratio = max(estimated, actual, 1.0) / max(min(estimated, actual), 1.0)
        if ratio >= factor:
            found.append(
                {
                    "side": side,
                    "node": node_label(node),
                    "estimated_rows": float(estimated),
                    "actual_rows": float(actual),
                    "factor": round(ratio, 1),
                }
            )
    return found


def _fmt_cost(value: float | None) -> str:
    return "?" if value is None else f"{value:,.1f}"


def diff_plans(
    before_json: Any,
    after_json: Any,
    *,
    before_generic: bool = False,
    after_generic: bool = False,
    config: PlanDiffConfig | None = None,
) -> PlanDiff:
    """Compare two plans (JSON text or parsed EXPLAIN JSON in any wrapper)."""
    config = config or PlanDiffConfig()
    before, after = plan_root(before_json), plan_root(after_json)
    fb, fa = plan_facts(before), plan_facts(after)
    ratio = None
    if fb.total_cost is not None and fa.total_cost is not None and fb.total_cost > 0:
        ratio = fa.total_cost / fb.total_cost
    moved = ratio is not None and (
        ratio >= config.cost_change_ratio or ratio <= 1.0 / config.cost_change_ratio
    )
    errors = row_estimate_errors(before, "before", config.row_error_factor) + row_estimate_errors(
        after, "after", config.row_error_factor
    )
    errors = sorted(errors, key=lambda e: -e["factor"])[: config.max_row_errors]
    cautions = []
    if before_generic and after_generic:
        cautions.append(GENERIC_CAUTION.format(side="both plans are generic plans"))
    elif before_generic:
        cautions.append(GENERIC_CAUTION.format(side="the before plan is a generic plan"))
    elif after_generic:
        cautions.append(GENERIC_CAUTION.format(side="the after plan is a generic plan"))

    def added(a: list[str], b: list[str]) -> list[str]:
        return sorted(set(b) - set(a))

    diff = PlanDiff(
        shape_changed=fb.shape_hash != fa.shape_hash,
        before_shape_hash=fb.shape_hash,
        after_shape_hash=fa.shape_hash,
        root_before=fb.root_node,
        root_after=fa.root_node,
        root_changed=fb.root_node != fa.root_node,
        node_types_added=added(fb.node_types, fa.node_types),
        node_types_removed=added(fa.node_types, fb.node_types),
        relations_added=added(fb.relations, fa.relations),
        relations_removed=added(fa.relations, fb.relations),
        indexes_added=added(fb.indexes, fa.indexes),
        indexes_removed=added(fa.indexes, fb.indexes),
        cost_before=fb.total_cost,
        cost_after=fa.total_cost,
        cost_ratio=None if ratio is None else round(ratio, 3),
        cost_moved=moved,
        row_estimate_errors=errors,
        cautions=cautions,
    )
    return _with_summary(diff, before, after)


def _with_summary(diff: PlanDiff, before: dict[str, Any], after: dict[str, Any]) -> PlanDiff:
    parts: list[str] = []
    if diff.shape_changed:
        parts.append(f"Plan changed: {'; '.join(_scan_labels(before))} → {'; '.join(_scan_labels(after))}.")
    else:
        parts.append(f"Plan shape unchanged ({'; '.join(_scan_labels(after))}).")
    if diff.root_changed:
        parts.append(f"Root node {diff.root_before} → {diff.root_after}.")
    changes = []
    for label, plus, minus in (
        ("node types", diff.node_types_added, diff.node_types_removed),
        ("indexes", diff.indexes_added, diff.indexes_removed),
        ("relations", diff.relations_added, diff.relations_removed),
    ):
        items = [f"+{x}" for x in plus] + [f"-{x}" for x in minus]
        if items:
            changes.append(f"{label} {', '.join(items)}")
    if changes:
        joined = "; ".join(changes)
        parts.append(joined[0].upper() + joined[1:] + ".")
    if diff.cost_moved:
        parts.append(
            f"Estimated cost {_fmt_cost(diff.cost_before)} → {_fmt_cost(diff.cost_after)} "
            f"(×{diff.cost_ratio:.3g})."
        )
    for error in diff.row_estimate_errors[:2]:
        parts.append(
            f"Row estimate off ×{error['factor']:g} ({error['side']}: {error['node']}, "
            f"estimated {error['estimated_rows']:g}, actual {error['actual_rows']:g})."
        )
    parts.extend(diff.cautions)
    return PlanDiff(**{**asdict(diff), "summary": " ".join(parts)})


def _queryid_set(row: dict[str, Any]) -> set[int]:
    ids: set[int] = set()
    if row.get("queryid") is not None:
        ids.add(int(row["queryid"]))
    extra = row.get("queryids")
    if isinstance(extra, str):
        ids.update(int(x) for x in extra.replace(" ", "").split(",") if x)
    elif isinstance(extra, list | tuple | pl.Series):
        ids.update(int(x) for x in extra if x is not None)
    return ids


def _series_columns(reg: dict[str, Any]) -> dict[str, Any]:
    return {c: reg.get(c) for c in ("fingerprint", "series", "dbid", "database")}


def _same_database(reg: dict[str, Any], snap: dict[str, Any]) -> bool:
    """A plan belongs to the finding's database unless it names another one: by dbid (pg_store_plans,
    generic EXPLAIN), else by name (auto_explain logs carry the database name, not its oid)."""
    if reg.get("dbid") is not None and snap.get("dbid") is not None:
        return int(reg["dbid"]) == int(snap["dbid"])
    if reg.get("database") is not None and snap.get("dbname") is not None:
        return reg["database"] == snap["dbname"]
    return True


def _pick(snaps: list[dict[str, Any]], preference: tuple[str, ...]) -> dict[str, Any] | None:
    """The latest snapshot; on equal times the preferred source."""
    if not snaps:
        return None
    rank = {s: i for i, s in enumerate(preference)}
    return max(snaps, key=lambda s: (s["captured_at"], -rank.get(s["source"], len(rank))))


def _pick_first(snaps: list[dict[str, Any]], preference: tuple[str, ...]) -> dict[str, Any] | None:
    """The earliest snapshot; on equal times the preferred source."""
    if not snaps:
        return None
    rank = {s: i for i, s in enumerate(preference)}
    return min(snaps, key=lambda s: (s["captured_at"], rank.get(s["source"], len(rank))))


@dataclass(frozen=True)
class PlanSides:
    """The plans around one change: in effect before it, the first after it, and the latest of all."""

    before: dict[str, Any] | None
    after: dict[str, Any] | None
    latest: dict[str, Any] | None = None
    """The latest snapshot captured after ``after`` (None when ``after`` is the latest)."""


def _sides(
    snaps: list[dict[str, Any]], change_at: datetime, tolerance: timedelta, preference: tuple[str, ...]
) -> PlanSides:
    def first_of_its_source(snap: dict[str, Any]) -> bool:
        return not any(
            o["source"] == snap["source"] and o["captured_at"] < snap["captured_at"] for o in snaps
        )

    # The change point is located to within ``tolerance`` either way, and it is the start of the first
    # new-regime interval, so the plan the change brought is, in this order:
    # 1. the shape change (a row with an earlier row of its source, not the query's first capture) nearest
    #    to change_at within the tolerance either way (ties: the earlier; then the preferred source). Plans
    #    are captured just after their snapshot, so the capture of the change point's own cycle, stamped at
    #    change_at, often shows the new plan (make demo; issue 21's dropped primary key); a change point
    #    located a little late or early has its change a little before or after it. A restore inside the
    #    tolerance is farther away than the drop (the soak test: a key restored 112 s after its drop, with
    #    the 2-minute tolerance, once became the drop's "after");
    # 2. the first row in (change_at, change_at + tolerance]: the capture at the end of that interval;
    # 3. the first row after that. A row beyond the tolerance never wins over 1-2: it is a later change
    #    (issue 21: the restore of a dropped index once became the "after" of the drop's finding).
    rank = {source: i for i, source in enumerate(preference)}
    near = [s for s in snaps if abs(s["captured_at"] - change_at) <= tolerance and not first_of_its_source(s)]
    after = (
        min(
            near,
            key=lambda s: (
                abs(s["captured_at"] - change_at),
                s["captured_at"],
                rank.get(s["source"], len(rank)),
            ),
        )
        if near
        else None
    )
    after = (
        after
        or _pick_first(
            [s for s in snaps if change_at < s["captured_at"] <= change_at + tolerance], preference
        )
        or _pick_first([s for s in snaps if s["captured_at"] > change_at + tolerance], preference)
    )
    if after is None:
        return PlanSides(_pick([s for s in snaps if s["captured_at"] <= change_at], preference), None)
    earlier = [s for s in snaps if s["captured_at"] < after["captured_at"] and s["captured_at"] <= change_at]
    latest = _pick([s for s in snaps if s["captured_at"] > after["captured_at"]], preference)
    return PlanSides(_pick(earlier, preference), after, latest)


def plan_sides(
    snaps: list[dict[str, Any]],
    change_at: datetime,
    preference: tuple[str, ...],
    tolerance: timedelta = timedelta(0),
) -> PlanSides:
    """The plans around a change; one source holding both sides is preferred (in preference order).

    after is the plan the change brought (``_sides``: a shape change within ``tolerance`` of ``change_at``
    either way, else the first row after it; never a later change such as a restore); before is the
    latest snapshot captured before it and not after ``change_at``; latest is the latest snapshot after
    ``after``, for telling the reader when the plan has moved on since.
    """
    for source in preference:
        sides = _sides([s for s in snaps if s["source"] == source], change_at, tolerance, preference)
        if sides.before is not None and sides.after is not None:
            return sides
    return _sides(snaps, change_at, tolerance, preference)


def choose_before_after(
    snaps: list[dict[str, Any]],
    change_at: datetime,
    preference: tuple[str, ...],
    tolerance: timedelta = timedelta(0),
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(before, after) of ``plan_sides``."""
    sides = plan_sides(snaps, change_at, preference, tolerance)
    return sides.before, sides.after


def _real_plan_after(
    snaps: list[dict[str, Any]], change_at: datetime, tolerance: timedelta
) -> dict[str, Any] | None:
    """The earliest auto_explain plan (what really ran) logged after the change, if any."""
    real = [s for s in snaps if s["source"] == "auto_explain" and s["captured_at"] >= change_at - tolerance]
    return min(real, key=lambda s: s["captured_at"]) if real else None


def later_change(
    before: dict[str, Any], after: dict[str, Any], latest: dict[str, Any], config: PlanDiffConfig
) -> tuple[str, dict[str, Any]]:
    """What changed after the change's own plan (a restore, a re-drop), said in full beside the diff: it
    is not the cause of the finding, yet a reader must see that the current plan differs, including a
    root-node change or an index that came back. Returns (the sentence, its structured form)."""
    later = diff_plans(after["plan_json"], latest["plan_json"], config=config)
    back = latest["shape_hash"] == before["shape_hash"]
    details = []
    if later.root_changed:
        details.append(f"root node {later.root_before} → {later.root_after}")
    indexes = [f"+{x}" for x in later.indexes_added] + [f"-{x}" for x in later.indexes_removed]
    if indexes:
        details.append(f"indexes {', '.join(indexes)}")
    labels = "; ".join(_scan_labels(plan_root(latest["plan_json"])))
    note = (
        f"Later, at {latest['captured_at']:%Y-%m-%d %H:%M:%S} ({latest['source']}), "
        f"the plan changed again to {labels}"
        + (f" ({'; '.join(details)})" if details else "")
        + "; "
        + ("the current plan is the one before the change again." if back else "that is the current plan.")
    )
    return note, {
        "captured_at": latest["captured_at"].isoformat(),
        "source": latest["source"],
        "shape_hash": latest["shape_hash"],
        "same_shape_as_before": back,
        "root_before": later.root_before,
        "root_after": later.root_after,
        "root_changed": later.root_changed,
        "indexes_added": later.indexes_added,
        "indexes_removed": later.indexes_removed,
        "summary": later.summary,
    }


def _diff_row(reg: dict[str, Any], snaps: list[dict[str, Any]], config: PlanDiffConfig) -> dict[str, Any]:
    change_at = reg.get("detected_change_at")
    row: dict[str, Any] = {
        "instance": reg.get("instance"),
        "queryid": reg.get("queryid"),
        **_series_columns(reg),
        "detected_change_at": change_at,
    }
    if change_at is None:
        return {**row, "diff_status": "no_change_time", "plan_diff_summary": "No change time: no plan diff."}
    if not snaps:
        return {**row, "diff_status": "no_plans", "plan_diff_summary": NO_PLAN_NEVER_TRIED}
    sides = plan_sides(snaps, change_at, config.source_preference, config.change_tolerance)
    before, after = sides.before, sides.after
    for side, snap in (("before", before), ("after", after)):
        if snap is not None:
            row[f"{side}_captured_at"] = snap["captured_at"]
            row[f"{side}_source"] = snap["source"]
            row[f"{side}_shape_hash"] = snap["shape_hash"]
    if before is None:
        assert after is not None
        label = "; ".join(_scan_labels(plan_root(after["plan_json"])))
        summary = f"No plan captured before the change; after it: {label} ({after['source']})."
        return {**row, "diff_status": "no_before", "plan_diff_summary": summary}
    if after is None:
        label = "; ".join(_scan_labels(plan_root(before["plan_json"])))
        summary = (
            f"No plan change recorded after the change point; plan in effect: {label} "
            f"({before['source']}, since {before['captured_at']:%Y-%m-%d %H:%M:%S})."
        )
        return {**row, "diff_status": "no_new_shape", "plan_diff_summary": summary}
    diff = diff_plans(
        before["plan_json"],
        after["plan_json"],
        before_generic=bool(before.get("is_generic")),
        after_generic=bool(after.get("is_generic")),
        config=config,
    )
    summary = diff.summary
    structured = diff.to_dict()
    if before["source"] != after["source"]:
        note = (
            f"Caution: before ({before['source']}) and after ({after['source']}) come from different "
            "sources; "
            "shapes can differ for that reason alone."
        )
        summary += " " + note
        structured["cautions"] = [*structured["cautions"], note]
    real = _real_plan_after(snaps, change_at, config.change_tolerance) if after.get("is_generic") else None
    if real is not None:
        same = real["shape_hash"] == after["shape_hash"]
        labels = "; ".join(_scan_labels(plan_root(real["plan_json"])))
        when = f"{real['captured_at']:%H:%M:%S}"
        duration = f", {real['duration_ms']:.1f} ms" if real.get("duration_ms") is not None else ""
        note = (
            f"Confirmed by a real plan logged by auto_explain at {when} (same shape{duration})."
            if same
            else f"A real plan logged by auto_explain at {when} differs from the generic estimate: "
            f"{labels}{duration}."
        )
        summary += " " + note
        structured["real_plan_after"] = {
            "captured_at": real["captured_at"].isoformat(),
            "same_shape_as_after": same,
            "duration_ms": real.get("duration_ms"),
        }
    latest = sides.latest
    if latest is not None and latest["shape_hash"] != after["shape_hash"]:
        note, structured["latest_plan"] = later_change(before, after, latest, config)
        summary += " " + note
    structured.update(
        before_source=before["source"],
        after_source=after["source"],
        before_captured_at=before["captured_at"].isoformat(),
        after_captured_at=after["captured_at"].isoformat(),
    )
    return {
        **row,
        "diff_status": "changed"
        if diff.shape_changed
        else "cost_changed"
        if diff.cost_moved
        else "unchanged",
        "plan_diff_summary": summary,
        "plan_diff": json.dumps(structured, sort_keys=True),
    }


def with_analyze_note(
    row: dict[str, Any],
    snaps: list[dict[str, Any]],
    analyses: pl.DataFrame | None,
    window: timedelta = DEFAULT_WINDOW,
) -> dict[str, Any]:
    """``row`` (a plan_diffs row) with the ANALYZEs that can explain its change named in the summary
    ("ANALYZE of <table> at <time>, <N> min before the plan change") and listed in the structured diff
    (``analyze_before_change``): an ANALYZE of a relation of the two diffed plans, at most ``window``
    before the change and after the before plan was captured (that plan was still chosen with the
    statistics of any earlier ANALYZE, so an earlier one explains nothing; issue 21)."""
    change_at = row.get("detected_change_at")
    since = row.get("before_captured_at")
    if analyses is None or analyses.is_empty() or change_at is None or since is None or not snaps:
        return row
    diffed = [
        s
        for s in snaps
        if (s["captured_at"], s["source"]) in {
            (row.get("before_captured_at"), row.get("before_source")),
            (row.get("after_captured_at"), row.get("after_source")),
        }
    ]  # fmt: skip
    relations = {r for s in diffed for r in (s.get("relations") or [])}
    dbnames = {s.get("dbname") for s in diffed} - {None}
    found = [
        f
        for f in analyses_before(
            analyses,
            row["instance"],
            relations,
            change_at,
            window,
            next(iter(dbnames)) if len(dbnames) == 1 else None,
        )
        if f["analysed_at"] > since
    ]
    if not found:
        return row
    note = analyze_note(found, change_at, plan_changed=row.get("diff_status") == "changed")
    out = {**row, "plan_diff_summary": f"{row.get('plan_diff_summary') or ''} {note}".strip()}
    if out.get("plan_diff"):
        structured = json.loads(out["plan_diff"])
        structured["analyze_before_change"] = [
            {
                "table": f"{f['schemaname']}.{f['relname']}" if f.get("schemaname") else f["relname"],
                "kind": f["kind"],
                "analysed_at": f["analysed_at"].isoformat(),
                "minutes_before": round((change_at - f["analysed_at"]).total_seconds() / 60, 1),
            }
            for f in found
        ]
        out["plan_diff"] = json.dumps(structured, sort_keys=True)
    return out


NO_PLAN_NEVER_TRIED = "No plan captured: none tried."
"""Plans are captured (`radar snapshot --capture-plans`) for each instance's top statements; UPDATE/DELETE
plans come only from auto_explain logs (--auto-explain). Short: it stands in a table column."""


def latest_capture_attempts(
    capture_log: pl.LazyFrame | pl.DataFrame | None, wanted: set[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]] | str:
    """The latest plan_capture_log attempt of each wanted (instance, queryid), read in one pass over the log
    (only the queries without plans are wanted); a one-line reason when the log cannot be read (the reason
    is a courtesy: never the diffs' end)."""
    if capture_log is None or not wanted:
        return {}
    instances = sorted({i for i, _ in wanted})
    queryids = sorted({q for _, q in wanted})
    try:
        latest = (
            capture_log.lazy()
            .filter(pl.col("instance").is_in(instances) & pl.col("queryid").is_in(queryids))
            .sort("captured_at", descending=True, nulls_last=True)
            .unique(["instance", "queryid"], keep="first", maintain_order=True)
            .collect()
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"plan_capture_log could not be read: {first}"
    return {(r["instance"], r["queryid"]): r for r in latest.iter_rows(named=True)}


def why_no_plan(
    attempts: dict[tuple[str, int], dict[str, Any]] | str, instance: str | None, queryids: set[int]
) -> str:
    """ "No plan captured" with its reason: the latest attempt (``latest_capture_attempts``) for the query
    (any of its queryids) on that instance, e.g. "UPDATE needs write privilege to be EXPLAINed
    (generic_explain refused, last tried ...)"; when there is none, that no capture was tried (issue 21:
    the reason was only in plan_capture_log)."""
    if isinstance(attempts, str):
        return f"No plan captured ({attempts})."
    mine = [attempts[(instance, q)] for q in queryids if (instance, q) in attempts]
    if not mine:
        return NO_PLAN_NEVER_TRIED
    attempt = max(mine, key=lambda r: (r["captured_at"] is not None, r["captured_at"] or 0))
    reason = " ".join(str(attempt.get("reason") or "no reason recorded").split())
    when = attempt["captured_at"]
    stamp = f"{when:%Y-%m-%d %H:%M:%S} UTC" if when is not None else "an unknown time"
    return (
        f"No plan captured: {reason} ({attempt.get('source')} {attempt.get('status')}, last tried {stamp})."
    )


def plan_diffs_for_regressions(
    regressions: pl.DataFrame,
    plan_snapshots: pl.DataFrame,
    config: PlanDiffConfig | None = None,
    analyses: pl.DataFrame | None = None,
    analyze_window: timedelta = DEFAULT_WINDOW,
    capture_log: pl.LazyFrame | pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One plan_diffs row per detected regression, matching plans by instance + any of its queryids, of its
    own database (``_same_database``: on PG18 one query has one queryid in every database). ``analyses``
    (jobs.plans.analyses.table_analyses): an ANALYZE of a table of the query at most ``analyze_window``
    before the change is named in the summary. ``capture_log`` (plan_capture_log rows with ``instance``,
    lazy is best: only the queries without plans are looked up): why a query has no plan."""
    config = config or PlanDiffConfig()
    detected = regressions
    if "status" in detected.columns:
        detected = detected.filter(pl.col("status") == "detected")
    snaps = (
        plan_snapshots.filter(pl.col("plan_json").is_not_null()) if plan_snapshots.height else plan_snapshots
    )
    by_key: dict[tuple[str, int], list[dict[str, Any]]] = {}
    if not snaps.is_empty():
        cols = [
            "instance",
            "queryid",
            "captured_at",
            "source",
            "shape_hash",
            "is_generic",
            "plan_json",
            "duration_ms",
            "dbid",
            "dbname",
            "relations",
        ]
        for snap in snaps.select([c for c in cols if c in snaps.columns]).to_dicts():
            by_key.setdefault((snap["instance"], snap["queryid"]), []).append(snap)
    out = []
    records = detected.to_dicts()
    for reg in records:
        mine = [
            s
            for qid in _queryid_set(reg)
            for s in by_key.get((reg.get("instance"), qid), [])
            if _same_database(reg, s)
        ]
        try:
            out.append(with_analyze_note(_diff_row(reg, mine, config), mine, analyses, analyze_window))
        except Exception as exc:  # one bad plan must not lose the other regressions' diffs
            out.append(
                {
                    "instance": reg.get("instance"),
                    "queryid": reg.get("queryid"),
                    **_series_columns(reg),
                    "detected_change_at": reg.get("detected_change_at"),
                    "diff_status": "error",
                    "plan_diff_summary": f"Plan diff failed for queryid {reg.get('queryid')}: {exc}",
                }
            )
    # Why a query has no plan: its latest capture attempts, read once for every such finding.
    unplanned = [(i, reg) for i, reg in enumerate(records) if out[i]["diff_status"] == "no_plans"]
    wanted = {(reg["instance"], q) for _, reg in unplanned for q in _queryid_set(reg) if reg.get("instance")}
    attempts = latest_capture_attempts(capture_log, wanted) if unplanned else {}
    for i, reg in unplanned:
        out[i]["plan_diff_summary"] = why_no_plan(attempts, reg.get("instance"), _queryid_set(reg))
    return pl.DataFrame(out, schema=PLAN_DIFFS.polars_schema)


def attach_plan_diffs(regressions: pl.DataFrame, diffs: pl.DataFrame) -> pl.DataFrame:
    """The regressions frame with ``plan_diff_summary`` and ``plan_diff`` (null for non-detected rows)."""
    keys = [*SERIES_KEY, "detected_change_at"]
    right = diffs.select([*keys, "plan_diff_summary", "plan_diff"]).unique(keys, keep="last")
    return regressions.join(right, on=keys, how="left", nulls_equal=True)


def write_plan_diffs(lake_root: Path, diffs: pl.DataFrame, computed_at: datetime) -> Path | None:
    """One plan_diffs file per computation, partitioned by the computation's date."""
    if diffs.is_empty():
        return None
    return write_table(
        lake_root, PLAN_DIFFS, diffs, {"date": computed_at.strftime("%Y-%m-%d")}, stem_for(computed_at)
    )


def plan_diff_rows(plan_diff: str | None) -> list[tuple[str, str, str]]:
    """The changed parts of a plan as (what, before, after) rows from plan_diffs.plan_diff (JSON of
    jobs.plans.diff.PlanDiff): root node, node types / indexes / relations only on one side, estimated
    cost, where each plan came from, and the later plan when it changed again. Empty when no structured diff
    was computed."""
    if not plan_diff:
        return []
    diff = json.loads(plan_diff)

    def listed(items: list[str] | None) -> str:
        return ", ".join(items or []) or "–"

    rows = [("root node", str(diff.get("root_before") or "–"), str(diff.get("root_after") or "–"))]
    for label, key in (("node types", "node_types"), ("indexes", "indexes"), ("relations", "relations")):
        removed, added = diff.get(f"{key}_removed") or [], diff.get(f"{key}_added") or []
        if removed or added:
            rows.append((f"{label} only on one side", listed(removed), listed(added)))
    if diff.get("cost_before") is not None or diff.get("cost_after") is not None:
        ratio = f" (×{diff['cost_ratio']:.3g})" if diff.get("cost_ratio") else ""
        before, after = diff.get("cost_before") or 0, diff.get("cost_after") or 0
        rows.append(("estimated cost", f"{before:,.0f}", f"{after:,.0f}{ratio}"))
    if diff.get("before_source") or diff.get("after_source"):
        rows.append(
            ("captured by", f"{diff.get('before_source')} {str(diff.get('before_captured_at') or '')[:16]}",
             f"{diff.get('after_source')} {str(diff.get('after_captured_at') or '')[:16]}")
        )  # fmt: skip
    later = diff.get("latest_plan")
    if later:  # a later change (a restore) is shown beside the diff, never instead of it
        back = " (the plan before the change again)" if later.get("same_shape_as_before") else ""
        rows.append(
            ("later plan", f"{later.get('root_before') or '–'}",
             f"{later.get('root_after') or '–'} {str(later.get('captured_at') or '')[:16]}{back}")
        )  # fmt: skip
    return rows
