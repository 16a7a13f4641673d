"""Plan pins (issue 30): the last good plan of a plan-change finding as pg_hint_plan hints, and the SQL that
would put them in ``hint_plan.hints`` for the query id and take them out again. Pure: no server, no lake.

``derive_hints`` reads an EXPLAIN JSON plan and writes one hint per thing the planner chose that a hint can
force: the scan method of each table (SeqScan, IndexScan / IndexOnlyScan / BitmapScan with the index names,
TidScan), the join method of each join (NestLoop, HashJoin, MergeJoin over the aliases beneath it) and,
where the plan has joins, ``Leading`` with the join tree (outer and inner of every join). Tables are named by
their alias, as pg_hint_plan matches them, and every name is double-quoted: a name from a monitored server is
hostile input, so one that a hint cannot carry (a control character, a comment delimiter, longer than
PostgreSQL keeps) makes the pin impossible instead of reaching the hint text.

``check_producible`` says whether the plan can still be produced: every relation and index it used must
still exist (a ``PlanCatalogue`` of the server); otherwise the pin is impossible, with the reason.

``propose_pin`` builds the proposal from a plan-change finding and its plan history: the plan in force before
the change (``jobs.plans.diff.plan_sides``, the rule the plan diff uses) is the last good plan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs.escaping import visible_controls
from jobs.plans.config import PlanDiffConfig
from jobs.plans.diff import plan_sides
from jobs.plans.shape import PlanFormatError, plan_root
from jobs.sqlfiles import load_sql

# Scan node types a hint can force, and the hint that forces each.
SCAN_HINTS: dict[str, str] = {
    "Seq Scan": "SeqScan",
    "Index Scan": "IndexScan",
    "Index Only Scan": "IndexOnlyScan",
    "Bitmap Heap Scan": "BitmapScan",
    "Tid Scan": "TidScan",
    "Tid Range Scan": "TidScan",
}
JOIN_HINTS: dict[str, str] = {"Nested Loop": "NestLoop", "Hash Join": "HashJoin", "Merge Join": "MergeJoin"}
# Nodes whose plan a hint set cannot reproduce faithfully yet: partitions and UNION (Append), subqueries
# and CTEs planned apart, foreign and custom scans, recursive queries. A plan holding one is not pinned.
UNSUPPORTED_NODES: frozenset[str] = frozenset(
    {
        "Append",
        "Merge Append",
        "Subquery Scan",
        "CTE Scan",
        "Foreign Scan",
        "Custom Scan",
        "Recursive Union",
        "WorkTable Scan",
        "Named Tuplestore Scan",
        "Table Function Scan",
    }
)
# Children planned as their own query (SubPlan, InitPlan): a hint set per query level is not derived yet.
SEPARATE_QUERY_LEVELS: frozenset[str] = frozenset({"SubPlan", "InitPlan"})
NAME_MAX_BYTES = 63
"""PostgreSQL keeps names of at most NAMEDATALEN - 1 bytes: a longer one did not come from a catalogue."""
_UNWRITABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

STATUS_PROPOSED = "proposed"
STATUS_IMPOSSIBLE = "impossible"
STATUS_NOT_A_PLAN_CHANGE = "not_a_plan_change"


class PinImpossible(ValueError):
    """The plan cannot be pinned; the message is the reason a reader sees ("pin impossible: ...")."""


# ---------------------------------------------------------------------------------------------------------
# Names and literals


def hint_name(name: object, what: str) -> str:
    """``name`` as a double-quoted pg_hint_plan object name (``"`` doubled), or PinImpossible when a hint
    cannot carry it: empty, not text, longer than PostgreSQL keeps, a control or bidi character, or a comment
    delimiter (pg_hint_plan refuses ``/*`` and ``*/`` inside names)."""
    if not isinstance(name, str) or not name:
        raise PinImpossible(f"pin impossible: the last good plan has a {what} without a name")
    shown = visible_controls(name, keep_lines=False)
    if len(name.encode()) > NAME_MAX_BYTES:
        raise PinImpossible(f"pin impossible: the {what} name {shown!r} is longer than PostgreSQL keeps")
    if _UNWRITABLE.search(name) or "/*" in name or "*/" in name:
        raise PinImpossible(f"pin impossible: the {what} name {shown!r} cannot be written in a hint")
    return '"' + name.replace('"', '""') + '"'


def sql_text_literal(text: str) -> str:
    """A SQL string literal read the same whatever ``standard_conforming_strings`` is: ``'`` doubled, and
    with a backslash the ``E''`` form with ``\\`` doubled. A NUL cannot be sent in text at all."""
    if "\x00" in text:
        raise PinImpossible("pin impossible: a NUL character cannot be stored in hint_plan.hints")
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def query_id_literal(query_id: object) -> str:
    """The query id as a bigint literal; anything but an int64 is refused."""
    if isinstance(query_id, bool) or not isinstance(query_id, int) or not INT64_MIN <= query_id <= INT64_MAX:
        raise PinImpossible(
            f"pin impossible: query id {visible_controls(query_id)!r} is not a 64-bit integer"
        )
    return str(query_id)


# ---------------------------------------------------------------------------------------------------------
# Hints from a plan


@dataclass(frozen=True)
class ScanChoice:
    """One table scan of the plan: alias, relation (schema when EXPLAIN VERBOSE named it), method, indexes."""

    alias: str
    relation: str
    schema: str | None
    node_type: str
    indexes: tuple[str, ...] = ()

    @property
    def hint(self) -> str:
        names = [hint_name(self.alias, "table alias"), *(hint_name(i, "index") for i in self.indexes)]
        return f"{SCAN_HINTS[self.node_type]}({' '.join(names)})"


@dataclass(frozen=True)
class JoinChoice:
    """One join of the plan: its method and the aliases of every table beneath it."""

    node_type: str
    aliases: tuple[str, ...]

    @property
    def hint(self) -> str:
        return f"{JOIN_HINTS[self.node_type]}({' '.join(hint_name(a, 'table alias') for a in self.aliases)})"


JoinTree = str | tuple["JoinTree", "JoinTree"]
"""An alias (a leaf) or (outer, inner) of a join."""


def leading_text(tree: JoinTree) -> str:
    """``Leading`` with the join pairs nested: ((a b) c) joins a (outer) to b, then that to c (inner)."""

    def pair(node: JoinTree) -> str:
        if isinstance(node, str):
            return hint_name(node, "table alias")
        return f"({pair(node[0])} {pair(node[1])})"

    return f"Leading({pair(tree)})"


@dataclass(frozen=True)
class PlanHints:
    """What the planner chose, as hints: scans, joins (innermost first) and the join tree."""

    scans: tuple[ScanChoice, ...]
    joins: tuple[JoinChoice, ...]
    join_tree: JoinTree | None

    @property
    def text(self) -> str:
        """The hint text for ``hint_plan.hints.hints``: scans, then joins, then Leading."""
        parts = [s.hint for s in self.scans] + [j.hint for j in self.joins]
        if self.joins and self.join_tree is not None:
            parts.append(leading_text(self.join_tree))
        return " ".join(parts)

    @property
    def relations(self) -> list[tuple[str | None, str]]:
        return sorted({(s.schema, s.relation) for s in self.scans}, key=lambda r: (r[0] or "", r[1]))


def _children(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in node.get("Plans") or [] if isinstance(c, dict)]


def _indexes_beneath(node: Mapping[str, Any]) -> tuple[str, ...]:
    """Index names of a bitmap heap scan's Bitmap Index Scans (through BitmapAnd / BitmapOr), plan order."""
    found: list[str] = []
    for child in _children(node):
        if "Index Name" in child:
            found.append(child["Index Name"])
        found.extend(_indexes_beneath(child))
    return tuple(dict.fromkeys(found))


def _refuse_unsupported(node: Mapping[str, Any]) -> None:
    node_type = str(node.get("Node Type"))
    if node_type in UNSUPPORTED_NODES:
        raise PinImpossible(
            f"pin impossible: the last good plan has a {visible_controls(node_type)} node, which pins do not "
            "reproduce yet"
        )
    if node.get("Parent Relationship") in SEPARATE_QUERY_LEVELS:
        raise PinImpossible(
            f"pin impossible: the last good plan has a {node['Parent Relationship']} (a query level planned "
            "apart), which pins do not reproduce yet"
        )


def _walk(
    node: Mapping[str, Any], scans: list[ScanChoice], joins: list[JoinChoice]
) -> tuple[JoinTree | None, list[str]]:
    """The join tree under ``node`` and its aliases; collects scans and joins (innermost joins first)."""
    _refuse_unsupported(node)
    node_type = str(node.get("Node Type"))
    children = _children(node)
    if node_type in SCAN_HINTS:
        for child in children:  # a subquery evaluated inside the scan (its filter's SubPlan) is refused too
            _refuse_unsupported(child)
        alias = node.get("Alias", node.get("Relation Name"))
        if "Relation Name" not in node:
            raise PinImpossible(
                f"pin impossible: the last good plan has a {node_type} without a relation name"
            )
        if node_type in ("Index Scan", "Index Only Scan"):
            indexes: tuple[str, ...] = (node["Index Name"],) if "Index Name" in node else ()
        elif node_type == "Bitmap Heap Scan":
            indexes = _indexes_beneath(node)
        else:
            indexes = ()
        scans.append(ScanChoice(alias, node["Relation Name"], node.get("Schema"), node_type, indexes))
        return alias, [alias]
    if "Alias" in node and not children:  # function, values scans: joinable by alias, no scan hint
        return node["Alias"], [node["Alias"]]
    subtrees = [_walk(child, scans, joins) for child in children]
    aliases = [a for _, mine in subtrees for a in mine]
    trees = [t for t, _ in subtrees if t is not None]
    if node_type in JOIN_HINTS:
        if len(trees) != 2:
            raise PinImpossible(
                f"pin impossible: a {node_type} of the last good plan does not join two inputs"
            )
        joins.append(JoinChoice(node_type, tuple(aliases)))
        return (trees[0], trees[1]), aliases
    if len(trees) > 1:
        raise PinImpossible(
            f"pin impossible: the last good plan has a {visible_controls(node_type)} node over several "
            "inputs, which pins do not reproduce yet"
        )
    return (trees[0] if trees else None), aliases


def derive_hints(plan: Any) -> PlanHints:
    """The hints that reproduce ``plan`` (EXPLAIN JSON in any wrapper); PinImpossible when they cannot."""
    try:
        root = plan_root(plan)
    except PlanFormatError as exc:
        raise PinImpossible(f"pin impossible: the last good plan is unreadable ({exc})") from None
    scans: list[ScanChoice] = []
    joins: list[JoinChoice] = []
    tree, aliases = _walk(root, scans, joins)
    repeated = sorted({a for a in aliases if aliases.count(a) > 1})
    if repeated:
        raise PinImpossible(
            f"pin impossible: the alias {visible_controls(repeated[0])!r} names two tables of the last good "
            "plan, so a hint cannot tell them apart"
        )
    if not scans:
        raise PinImpossible("pin impossible: the last good plan scans no table (nothing to pin)")
    hints = PlanHints(tuple(scans), tuple(joins), tree if joins else None)
    if not hints.text:  # writing the text checks every name: a hint that cannot be written never leaves
        raise PinImpossible("pin impossible: the last good plan gives no hint")
    return hints


# ---------------------------------------------------------------------------------------------------------
# Producibility


@dataclass(frozen=True)
class PlanCatalogue:
    """What exists on the server now: (schema, relation) pairs and valid (schema, relation, index) triples."""

    relations: frozenset[tuple[str, str]]
    indexes: frozenset[tuple[str, str, str]]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> PlanCatalogue:
        """From rows of ``sql/postgres/pins_catalogue.sql``: schemaname, relname, indexname (null: none)."""
        relations: set[tuple[str, str]] = set()
        indexes: set[tuple[str, str, str]] = set()
        for row in rows:
            relations.add((row["schemaname"], row["relname"]))
            if row.get("indexname") is not None:
                indexes.add((row["schemaname"], row["relname"], row["indexname"]))
        return cls(frozenset(relations), frozenset(indexes))


def _shown(schema: str | None, name: str) -> str:
    return visible_controls(f"{schema}.{name}" if schema else name, keep_lines=False)


def check_producible(hints: PlanHints, catalogue: PlanCatalogue) -> None:
    """PinImpossible naming the first relation or index of the plan that no longer exists (an index counts
    only on the relation it was used on)."""
    for scan in hints.scans:
        where = {
            (schema, rel)
            for schema, rel in catalogue.relations
            if rel == scan.relation and (scan.schema is None or schema == scan.schema)
        }
        if not where:
            raise PinImpossible(
                f"pin impossible: the last good plan used {_shown(scan.schema, scan.relation)}, which no "
                "longer exists"
            )
        for index in scan.indexes:
            if not any((schema, rel, index) in catalogue.indexes for schema, rel in where):
                raise PinImpossible(
                    f"pin impossible: the last good plan used {visible_controls(index, keep_lines=False)}, "
                    "which no longer exists"
                )


# ---------------------------------------------------------------------------------------------------------
# The SQL that applies and removes a pin


_PLACEHOLDER = re.compile(r"\{(query_id|application_name|hints)\}")


def _render(name: str, query_id: int, application_name: str, hints: str) -> str:
    values = {
        "query_id": query_id_literal(query_id),
        "application_name": sql_text_literal(application_name),
        "hints": sql_text_literal(hints),
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], load_sql(name)).strip()


def apply_sql(query_id: int, hints: str, application_name: str = "") -> str:
    """The INSERT that pins: it fails on an existing row for the query id, so a pin never overwrites a hint
    someone else wrote, and removing it restores the table exactly."""
    return _render("pins_apply", query_id, application_name, hints)


def remove_sql(query_id: int, hints: str, application_name: str = "") -> str:
    """The DELETE that takes the pin back: only the row it inserted, and only while it holds its hints."""
    return _render("pins_remove", query_id, application_name, hints)


# ---------------------------------------------------------------------------------------------------------
# A proposal from a finding


@dataclass(frozen=True)
class PinProposal:
    """One pin proposal (or why there is none) with its evidence, as the ledger records it."""

    status: str
    reason: str
    instance: str | None
    queryid: int | None
    finding_id: str | None
    database: str | None = None
    hints: str | None = None
    application_name: str = ""
    apply_sql: str | None = None
    remove_sql: str | None = None
    p_value: float | None = None
    before_mean_ms: float | None = None
    after_mean_ms: float | None = None
    detected_change_at: datetime | None = None
    good_captured_at: datetime | None = None
    good_source: str | None = None
    good_shape_hash: str | None = None
    bad_shape_hash: str | None = None
    good_plan_json: str | None = None
    bad_plan_json: str | None = None
    relations: list[str] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)


# Finding kinds whose step a plan can explain; contention alone is not a plan's doing.
PLAN_KINDS: frozenset[str | None] = frozenset({"plan_or_work", "both", None})


def _plan_text(snap: Mapping[str, Any] | None) -> str | None:
    if snap is None or snap.get("plan_json") is None:
        return None
    raw = snap["plan_json"]
    return raw if isinstance(raw, str) else json.dumps(raw)


def propose_pin(
    finding: Mapping[str, Any],
    snapshots: Sequence[Mapping[str, Any]],
    catalogue: PlanCatalogue | None,
    *,
    application_name: str = "",
    diff_config: PlanDiffConfig | None = None,
) -> PinProposal:
    """The pin for one finding (a finding_states row: finding_id, instance, queryid, detected_change_at,
    p_value, before/after_mean_ms, kind) from its plan history (plan_snapshots rows of its queryid: source,
    captured_at, shape_hash, plan_json). The last good plan is the one in force before the change; the pin is
    proposed only when the change was a plan-shape change and ``catalogue`` shows the plan still producible
    (no catalogue: impossible, since producibility was not checked)."""
    config = diff_config or PlanDiffConfig()
    base = {
        "instance": finding.get("instance"),
        "queryid": finding.get("queryid"),
        "finding_id": finding.get("finding_id"),
        "database": finding.get("database"),
        "application_name": application_name,
        "p_value": finding.get("p_value"),
        "before_mean_ms": finding.get("before_mean_ms"),
        "after_mean_ms": finding.get("after_mean_ms"),
        "detected_change_at": finding.get("detected_change_at"),
    }

    def not_plan(reason: str, **more: Any) -> PinProposal:
        return PinProposal(status=STATUS_NOT_A_PLAN_CHANGE, reason=reason, **base, **more)

    change_at = finding.get("detected_change_at")
    if finding.get("kind") not in PLAN_KINDS:
        return not_plan(f"no pin: the finding's kind is {finding.get('kind')}, not a plan change")
    if change_at is None:
        return not_plan("no pin: the finding has no change time")
    snaps = [dict(s) for s in snapshots if s.get("plan_json") is not None]
    sides = plan_sides(snaps, change_at, config.source_preference, config.change_tolerance)
    good, bad = sides.before, sides.after
    if good is None:
        return not_plan("no pin: no plan in the plan history before the change (no last good plan)")
    evidence = {
        "good_captured_at": good["captured_at"],
        "good_source": good.get("source"),
        "good_shape_hash": good.get("shape_hash"),
        "good_plan_json": _plan_text(good),
        "bad_shape_hash": None if bad is None else bad.get("shape_hash"),
        "bad_plan_json": _plan_text(bad),
    }
    if bad is None:
        return not_plan("no pin: no plan change recorded at the finding's step", **evidence)
    if bad.get("shape_hash") == good.get("shape_hash"):
        return not_plan("no pin: the plan's shape did not change at the finding's step", **evidence)
    facts: dict[str, Any] = {}
    try:
        query_id_literal(finding.get("queryid"))
        hints = derive_hints(good["plan_json"])
        facts = {
            "relations": [_shown(s, r) for s, r in hints.relations],
            "indexes": sorted({i for scan in hints.scans for i in scan.indexes}),
        }
        if catalogue is None:
            raise PinImpossible("pin impossible: the server's relations and indexes could not be listed")
        check_producible(hints, catalogue)
        text = hints.text
        queryid = int(finding["queryid"])
        sql = {
            "apply_sql": apply_sql(queryid, text, application_name),
            "remove_sql": remove_sql(queryid, text, application_name),
        }
    except PinImpossible as exc:
        return PinProposal(status=STATUS_IMPOSSIBLE, reason=str(exc), **base, **evidence, **facts)
    return PinProposal(
        status=STATUS_PROPOSED,
        reason=f"the plan before the change ({good.get('source')}, "
        f"{good['captured_at']:%Y-%m-%d %H:%M:%S}) is still producible: pin it",
        hints=text,
        **base,
        **evidence,
        **facts,
        **sql,
    )
