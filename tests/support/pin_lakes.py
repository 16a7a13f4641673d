"""A lake with one open plan-change finding and its plan history, for the plan pins tests (issue 30)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.lake import io as lake
from jobs.plans.config import PinningConfig
from jobs.plans.pin_ledger import run_pin_proposals
from jobs.plans.pins import PlanCatalogue
from jobs.plans.shape import plan_facts
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.findings_lakes import AT, finding_row, write_findings

QUERYID = 101  # finding_row(1)
CHANGE = AT + timedelta(minutes=1)
GOOD = {
    "Node Type": "Aggregate",
    "Plans": [
        {
            "Node Type": "Index Scan",
            "Parent Relationship": "Outer",
            "Relation Name": "orders",
            "Alias": "o",
            "Index Name": "orders_customer_id_idx",
        }
    ],
}
BAD = {
    "Node Type": "Aggregate",
    "Plans": [
        {"Node Type": "Seq Scan", "Parent Relationship": "Outer", "Relation Name": "orders", "Alias": "o"}
    ],
}
WITH_INDEX = PlanCatalogue.from_rows(
    [{"schemaname": "public", "relname": "orders", "indexname": "orders_customer_id_idx"}]
)
WITHOUT_INDEX = PlanCatalogue.from_rows([{"schemaname": "public", "relname": "orders", "indexname": None}])


def snapshot(plan: dict[str, Any], at: Any, queryid: int = QUERYID, **more: Any) -> dict[str, Any]:
    """A plan_snapshots row of ``plan`` (a generic EXPLAIN) captured at ``at``; ``more``: other columns."""
    facts = plan_facts(plan)
    return {
        **more,
        "captured_at": at,
        "queryid": queryid,
        "source": "generic_explain",
        "is_generic": True,
        "shape_hash": facts.shape_hash,
        "root_node": facts.root_node,
        "relations": facts.relations,
        "indexes": facts.indexes,
        "plan_json": json.dumps(plan),
    }


def write_pin_lake(lake_root: Path) -> Path:
    """One open finding on db1 (queryid 101) whose plan went from an index scan to a seq scan at its step."""
    write_findings(lake_root, [finding_row(1)])
    rows = PLAN_SNAPSHOTS.conform(
        pl.DataFrame([snapshot(GOOD, CHANGE - timedelta(minutes=30)), snapshot(BAD, CHANGE)])
    )
    lake.write_table(lake_root, PLAN_SNAPSHOTS, rows, {"instance": "db1", "date": "2026-11-29"}, "plans")
    return lake_root


def listing(catalogue: PlanCatalogue) -> Any:
    seen: list[tuple[str, set[str]]] = []

    def catalogue_of(finding: dict[str, Any], relations: set[str]) -> PlanCatalogue:
        seen.append((finding["instance"], relations))
        return catalogue

    catalogue_of.seen = seen  # type: ignore[attr-defined]
    return catalogue_of


def proposed(pin_lake: Path) -> str:
    run = run_pin_proposals(
        pin_lake, listing(WITH_INDEX), PinningConfig(), AT + timedelta(hours=2), decided_by="t"
    )
    return str(run.written["pin_id"][0])


def never_connect(instance: str) -> str:
    raise AssertionError(f"connected to {instance}")
