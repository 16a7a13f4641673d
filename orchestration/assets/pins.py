"""plan_pins: a pin proposal for each open finding caused by a plan change (issue 30), recorded in the lake's
plan_pins ledger. Reads each finding's server catalogue (relations and indexes); in [pinning] mode = apply it
applies each new proposal on the instances that opted in, as `radar pins propose` does. Not scheduled:
materialize it when wanted (or run `radar pins propose` from cron)."""

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from jobs.plans.pin_apply import PinRefused, apply_proposed
from jobs.plans.pin_ledger import fleet_catalogues, run_pin_proposals
from jobs.plans.pins import PlanCatalogue
from orchestration.resources import FleetResource, LakeResource
from orchestration.run_config import definitions_settings, section_config, section_from_config

PinningRunConfig = section_config("pinning")  # [pinning] of the config file


@dg.asset(
    deps=["findings", "plan_snapshots"],
    group_name="analyse",
    kinds={"postgres", "parquet"},
    description="A pg_hint_plan pin proposal (the last good plan's hints and the SQL that would apply and "
    "remove them) for each open finding caused by a plan change, or why none; rows in plan_pins. Reads "
    "each server's catalogue to check the plan can still be produced; writes to a server only in mode "
    "apply, on instances that opted in.",
)
def plan_pins(
    context: dg.AssetExecutionContext,
    config: PinningRunConfig,  # type: ignore[valid-type]
    fleet: FleetResource,
    lake: LakeResource,
) -> dg.MaterializeResult:
    pinning = section_from_config("pinning", config, "plan_pins")
    loaded: list[Callable[[Mapping[str, Any], set[str]], PlanCatalogue]] = []

    def catalogue_of(finding: Mapping[str, Any], relations: set[str]) -> PlanCatalogue:
        """The fleet is loaded when a finding needs its server's catalogue (no finding: no fleet needed)."""
        if not loaded:
            loaded.append(fleet_catalogues(fleet.load()))
        return loaded[0](finding, relations)

    now = datetime.now(UTC)
    run = run_pin_proposals(
        lake.path,
        catalogue_of,
        pinning,
        now,
        decided_by="the Dagster asset plan_pins",
        diff_config=definitions_settings().settings.plans.diff,
    )

    def dsn_of(instance: str) -> str:
        for item in fleet.load().instances:
            if item.name == instance:
                return item.resolve_dsn()
        raise PinRefused(f"instance {instance} is not in the fleet: nothing written")

    applied = apply_proposed(
        lake.path, run.written, dsn_of, pinning, now, decided_by="the Dagster asset plan_pins (mode apply)"
    )
    for refused in (a for a in applied if a.outcome != "applied"):
        context.log.warning(f"pin {refused.pin_id} on {refused.instance} not applied: {refused.reason}")
    events = run.written["event"].value_counts().sort("event").iter_rows() if run.written.height else []
    return dg.MaterializeResult(
        metadata={
            "findings_looked_at": len(run.proposals),
            "rows_written": run.written.height,
            "events": ", ".join(f"{event} {count}" for event, count in events) or "none",
            "mode": pinning.mode,
            "pins_applied": sum(a.outcome == "applied" for a in applied),
        }
    )
