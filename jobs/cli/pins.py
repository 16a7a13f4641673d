"""`radar pins`: the plan pins ledger (issue 30): list, explain one, or propose from the open findings."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jobs.cli.common import console, lake_root, load_fleet, say, settings_of, show_rows

EXIT_NO_SUCH_PIN = 1
EXIT_PIN_REFUSED = 3
PINS_TABLE_COLUMNS = ["pin_id", "event", "instance", "queryid", "hints", "reason", "recorded_at"]


def cmd_pins(args: argparse.Namespace) -> int:
    if args.action == "propose":
        return _propose(args)
    if args.action in ("apply", "remove"):
        return _write(args)
    if args.action == "check":
        return _check(args)
    from jobs.plans.pin_ledger import latest_pins, read_pins

    rows = read_pins(lake_root(args))
    if args.instance:
        rows = rows.filter(rows["instance"] == args.instance)
    if args.action == "list":
        latest = latest_pins(rows)
        if latest.is_empty() and args.format == "table":
            say(args, "no pins recorded (radar pins propose records them for open plan-change findings)")
            return 0
        show_rows(args, latest, "plan pins (latest state of each)", columns=PINS_TABLE_COLUMNS)
        return 0
    if not args.pin_id:
        say(args, f"[red]error:[/red] radar pins {args.action} needs a PIN_ID (radar pins list shows them)")
        return 2
    mine = rows.filter(rows["pin_id"] == args.pin_id)
    if mine.is_empty():
        say(args, f"no pin {args.pin_id!r} in the ledger (radar pins list shows them)", markup=False)
        return EXIT_NO_SUCH_PIN
    if args.format != "table":
        show_rows(args, mine)
        return 0
    _explain(mine.to_dicts())
    return 0


def _plan_lines(plan_json: str | None) -> str:
    if not plan_json:
        return "–"
    from jobs.plans.shape import PlanFormatError, node_label, plan_root, walk_nodes

    try:
        root = plan_root(plan_json)
    except PlanFormatError:
        return "(unreadable plan)"
    return "; ".join(node_label(n) for n in walk_nodes(root) if "Relation Name" in n) or node_label(root)


def _explain(history: list[dict[str, Any]]) -> None:
    """The pin's latest state with its evidence and SQL, then every earlier row of its history."""
    from jobs.escaping import visible_controls
    from jobs.readable import moment_text

    latest = history[-1]

    def line(label: str, value: object) -> None:
        """One line of fleet text (relation names, SQL): control characters shown as escapes."""
        text = visible_controls(f"{label}: {'–' if value is None else value}")
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    line("pin", latest["pin_id"])
    line("state", f"{latest['event']} ({latest['mode']} mode, by {latest['decided_by']})")
    line("why", latest["reason"])
    line("instance / query id", f"{latest['instance']} / {latest['queryid']}")
    line("finding", latest["finding_id"])
    p = latest.get("p_value")
    line(
        "evidence",
        f"latency {latest.get('before_mean_ms')} ms → {latest.get('after_mean_ms')} ms at "
        f"{moment_text(latest['detected_change_at']) if latest.get('detected_change_at') else '?'}"
        + (f", p = {p:.3g}" if p is not None else ""),
    )
    line("last good plan", f"{_plan_lines(latest.get('good_plan_json'))} ({latest.get('good_source')})")
    line("plan the change brought", _plan_lines(latest.get("bad_plan_json")))
    line("hints", latest.get("hints"))
    line("apply with", latest.get("apply_sql"))
    line("remove with", latest.get("remove_sql"))
    line("SQL run on the server", latest.get("sql_run") or "none (nothing written)")
    for row in history[:-1]:
        line(f"earlier, {moment_text(row['recorded_at'])}", f"{row['event']}: {row['reason']}")


def _propose(args: argparse.Namespace) -> int:
    """Proposals for the lake's open findings (each server's catalogue is read); in mode apply, each new
    proposal on an instance that opted in is applied as the pin role."""
    from datetime import UTC, datetime

    from jobs.plans.pin_apply import apply_proposed
    from jobs.plans.pin_ledger import fleet_catalogues, run_pin_proposals

    settings = settings_of(args)
    fleet = load_fleet(args)
    pinning = settings.pinning
    now = datetime.now(UTC)
    run = run_pin_proposals(
        lake_root(args),
        fleet_catalogues(fleet),
        pinning,
        now,
        decided_by="radar pins propose",
        diff_config=settings.plans.diff,
    )
    applied = apply_proposed(
        lake_root(args),
        run.written,
        _dsn_of(fleet),
        pinning,
        now,
        decided_by="radar pins propose (mode apply)",
    )
    say(
        args,
        f"{len(run.proposals)} open findings looked at; {run.written.height} ledger rows written "
        f"(new or changed pins); {sum(a.outcome == 'applied' for a in applied)} pins applied",
    )
    for refused in (a for a in applied if a.outcome != "applied"):
        say(args, f"pin {refused.pin_id} on {refused.instance} not applied: {refused.reason}", markup=False)
    show_rows(args, run.written, "plan pins recorded now", columns=PINS_TABLE_COLUMNS)
    return EXIT_PIN_REFUSED if any(a.outcome != "applied" for a in applied) else 0


def _dsn_of(fleet: Any) -> Any:
    """instance name → its DSN, for the writes (PinRefused for an instance not in the fleet)."""
    from jobs.plans.pin_apply import PinRefused

    instances = {i.name: i for i in fleet.instances}

    def dsn_of(instance: str) -> str:
        if instance not in instances:
            raise PinRefused(f"instance {instance} is not in the fleet: nothing written")
        return instances[instance].resolve_dsn()

    return dsn_of


def _write(args: argparse.Namespace) -> int:
    """radar pins apply|remove PIN_ID [--dry-run]: the recorded SQL, run as the pin role where opted in."""
    from datetime import UTC, datetime

    from jobs.plans.pin_apply import PinRefused, write_pin

    if not args.pin_id:
        say(args, f"[red]error:[/red] radar pins {args.action} needs a PIN_ID (radar pins list shows them)")
        return 2
    settings = settings_of(args)

    def dsn_of(instance: str) -> str:
        return _dsn_of(load_fleet(args))(instance)  # the fleet is needed only when the SQL really runs

    try:
        done = write_pin(
            lake_root(args),
            args.pin_id,
            action=args.action,
            dsn_of=dsn_of,
            config=settings.pinning,
            now=datetime.now(UTC),
            dry_run=args.dry_run,
        )
    except KeyError:
        say(args, f"no pin {args.pin_id!r} in the ledger (radar pins list shows them)", markup=False)
        return EXIT_NO_SUCH_PIN
    except PinRefused as exc:
        say(args, f"not {args.action.removesuffix('e')}ed: {exc}", markup=False)
        return EXIT_PIN_REFUSED
    if not done.ran:
        sys.stdout.write(done.sql.rstrip() + "\n")
        return 0
    say(
        args,
        f"{args.action.removesuffix('e')}ed pin {args.pin_id}; ran: {done.sql.splitlines()[-1]}",
        markup=False,
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    """radar pins check: judge each applied pin (verified, failed: removed, pending) and remove the pins whose
    plan can no longer be produced, whose TTL passed or (verified) whose query id is gone (opted-in
    instances)."""
    from datetime import UTC, datetime

    import polars as pl

    from jobs.plans.pin_apply import check_applied_pins, lake_last_seen, lake_latencies
    from jobs.plans.pin_ledger import fleet_catalogues

    settings = settings_of(args)
    fleet = load_fleet(args)
    dsn_of = _dsn_of(fleet)

    detector = settings.detector.regression_config()
    checks = check_applied_pins(
        lake_root(args),
        fleet_catalogues(fleet),
        dsn_of,
        settings.pinning,
        datetime.now(UTC),
        latencies_of=lake_latencies(lake_root(args), detector),
        detector=detector,
        last_seen_of=lake_last_seen(lake_root(args)),
    )
    frame = pl.DataFrame(
        [vars(c) for c in checks],
        schema={"pin_id": pl.String, "instance": pl.String, "outcome": pl.String, "reason": pl.String},
    )
    show_rows(args, frame, "applied pins checked")
    return EXIT_PIN_REFUSED if any(c.outcome == "not_removed" for c in checks) else 0
