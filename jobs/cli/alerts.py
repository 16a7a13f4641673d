"""`radar alerts`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, escaped, lake_config, lake_root, say, settings_of
from jobs.escaping import visible_controls


def cmd_alerts(args: argparse.Namespace) -> int:
    """Send each sink of [alerts] every finding alert it has not had; exit codes: EXIT_CODES["alerts"]."""
    import json

    from jobs.alerts.run import send_alerts

    settings = settings_of(args)
    alerts = settings.alerts
    report = send_alerts(
        lake_root(args),
        alerts,
        retry_dead_letters=args.retry_dead_letters,
        lake_config=lake_config(args),
        cutoffs=settings.report.evidence_cutoffs(),
        pileups=settings.pileups,
    )
    if not report.sinks:
        say(
            args,
            "[red]no alert sink[/red]: [alerts] file is empty and no webhook URL is set "
            f"(env {alerts.slack_webhook_env} / {alerts.webhook_env})",
        )
        return 2
    if args.format in ("json", "jsonl"):
        indent = 2 if args.format == "json" else None
        sys.stdout.write(json.dumps(report.as_json(), indent=indent, default=str) + "\n")
        return 0 if report.ok else 1
    for payload in report.sent:
        to = ", ".join(s.name for s in report.sinks if payload["alert_id"] in s.delivered)
        query = " ".join(payload["query"].split())[:80]
        kind = payload.get("kind")
        what = (
            f"drift {payload['metric']} "
            if kind == "execution_drift"
            else "pile-up "
            if kind == "pileup"
            else ""
        )
        line = f"alerted {what}({payload['state']}): {payload['instance']}: {query} → {to}"
        console.print(visible_controls(line), markup=False)
    for sink in report.sinks:
        for letter in sink.dead_lettered:
            console.print(
                f"[red]dead letter[/red] {escaped(sink.name)}: alert {letter.alert_id} (finding "
                f"{letter.finding_id}, {letter.state}) after {letter.attempts} attempt(s): "
                f"{escaped(letter.reason)}"
            )
        if sink.deferred:
            console.print(
                f"[yellow]{escaped(sink.name)}[/yellow]: {sink.deferred} alert(s) deferred to the next run "
                f"({escaped(sink.stopped)})"
            )
    for note in report.notes:
        console.print(f"warning: {note}", markup=False)
    if report.dead_lettered and alerts.dead_letter_file:
        console.print(
            f"dead letters: {alerts.dead_letter_file} and the lake table alert_dead_letters", markup=False
        )
    if not report.pending:
        console.print("no new regression to alert")
    return 0 if report.ok else 1
