"""Plan JSON → a stable shape hash and a few summary facts.

Every plan source (EXPLAIN, auto_explain, pg_store_plans) hands us the same EXPLAIN JSON node tree, wrapped
differently. ``plan_root`` unwraps it; ``plan_shape_hash`` hashes only what makes two plans *the same
plan* (node types, relations, indexes, join types and order), never costs, row counts or constants, so a
plan that merely got a new estimate keeps its hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Keys that define the shape of one node; everything else (costs, rows, widths, filters, conditions,
# output lists, buffers, timings) is left out on purpose.
SHAPE_KEYS: tuple[str, ...] = (
    "Node Type",
    "Operation",
    "Strategy",
    "Partial Mode",
    "Parent Relationship",
    "Join Type",
    "Relation Name",
    "Index Name",
    "CTE Name",
    "Subplan Name",
    "Parallel Aware",
)


class PlanFormatError(ValueError):
    """The text is not an EXPLAIN JSON plan."""


def plan_root(plan: Any) -> dict[str, Any]:
    """The root plan node from any of the wrappers: ``[{"Plan": …}]``, ``{"Plan": …}`` or a node itself."""
    if isinstance(plan, str | bytes):
        try:
            plan = json.loads(plan)
        except json.JSONDecodeError as exc:
            raise PlanFormatError(f"plan is not JSON: {exc}") from None
    if isinstance(plan, list):
        if len(plan) != 1:
            raise PlanFormatError(f"expected one plan in the EXPLAIN list, found {len(plan)}")
        plan = plan[0]
    if isinstance(plan, dict) and isinstance(plan.get("Plan"), dict):
        plan = plan["Plan"]
    if not isinstance(plan, dict) or "Node Type" not in plan:
        raise PlanFormatError("no 'Node Type' at the plan root (not an EXPLAIN JSON plan)")
    return plan


def walk_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of the tree, parents before children, children in plan order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = current.get("Plans") or []
        stack.extend(reversed([c for c in children if isinstance(c, dict)]))


def _shape(node: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[Any]:
    own = [[key, node[key]] for key in SHAPE_KEYS if key in node and key not in ignore]
    children = [_shape(c, ignore) for c in node.get("Plans") or [] if isinstance(c, dict)]
    return [own, children]


def plan_shape_hash(root: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    """A stable 16-hex-digit hash of the plan's shape (sha256 of a canonical JSON of the shape keys);
    ``ignore`` leaves shape keys out (``("Index Name",)``: is the only change an index rename?)."""
    canonical = json.dumps(_shape(root, ignore), separators=(",", ":"), sort_keys=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PlanFacts:
    """What the lake keeps next to the plan JSON, so views and diffs need not re-parse it."""

    shape_hash: str
    root_node: str
    total_cost: float | None
    plan_rows: float | None
    actual_rows: float | None
    actual_total_time_ms: float | None
    node_types: list[str]
    relations: list[str]
    indexes: list[str]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def plan_facts(root: dict[str, Any]) -> PlanFacts:
    """Shape hash, root node, root cost/rows and the sets of node types, relations and indexes."""
    node_types: set[str] = set()
    relations: set[str] = set()
    indexes: set[str] = set()
    for node in walk_nodes(root):
        node_types.add(str(node.get("Node Type")))
        if "Relation Name" in node:
            relations.add(str(node["Relation Name"]))
        if "Index Name" in node:
            indexes.add(str(node["Index Name"]))
    return PlanFacts(
        shape_hash=plan_shape_hash(root),
        root_node=str(root.get("Node Type")),
        total_cost=_num(root.get("Total Cost")),
        plan_rows=_num(root.get("Plan Rows")),
        actual_rows=_num(root.get("Actual Rows")),
        actual_total_time_ms=_num(root.get("Actual Total Time")),
        node_types=sorted(node_types),
        relations=sorted(relations),
        indexes=sorted(indexes),
    )


def node_label(node: dict[str, Any]) -> str:
    """'Index Scan using orders_customer_idx on orders' style label for summaries."""
    label = str(node.get("Node Type"))
    if "Index Name" in node:
        label += f" using {node['Index Name']}"
    if "Relation Name" in node:
        label += f" on {node['Relation Name']}"
    return label
