"""`radar plans`: one query's plan history."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, lake_root, say, settings_of, show_rows

PLANS_TABLE_COLUMNS = [
    "instance",
    "queryid",
    "source",
    "captured_at",
    "root_node",
    "total_cost",
    "plan_rows",
    "shape_hash",
    "change_summary",
]


def cmd_plans(args: argparse.Namespace) -> int:
    from jobs.plans.query_plans import last_change, read_query_plans
    from jobs.readable import moment_text

    settings = settings_of(args)
    found = read_query_plans(
        lake_root(args), args.query, instance=args.instance, source=args.source, config=settings.plans.diff
    )
    if found.matched.is_empty():
        say(
            args,
            f"no query matches {args.query!r} (a queryid, or a fragment of the query text)",
            markup=False,
        )
        if args.format != "table":
            show_rows(args, found.history)
        return 1
    if found.history.is_empty():
        say(
            args,
            f"{found.matched.height} queries match {args.query!r} but none has a plan snapshot "
            "(capture plans with `radar snapshot --capture-plans`, or read auto_explain logs with "
            "--auto-explain)",
            markup=False,
        )
        if args.format != "table":
            show_rows(args, found.history)
        return 1
    show_rows(args, found.history, f"plan history of {args.query}", columns=PLANS_TABLE_COLUMNS)
    if args.format == "table":
        change = last_change(found.history, settings.plans.diff)
        console.print(
            "last change: " + (change.summary if change else "none (one shape per source so far)"),
            markup=False,
            soft_wrap=True,
        )
        if found.regression_diffs.height:
            latest = found.regression_diffs.row(0, named=True)
            console.print(
                f"plan diff of the latest regression ({latest['instance']}, change at "
                f"{moment_text(latest['detected_change_at'])}): {latest['plan_diff_summary']}",
                markup=False,
                soft_wrap=True,
            )
    return 0
