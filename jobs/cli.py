"""`radar`: the command line. Thin: each command parses, calls jobs/, and renders with rich."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from datetime import date
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobs.collect.deploys import DeployInboxConfig
from jobs.config import ConfigError, FleetConfig
from jobs.lake import LakeConfig, LakeLockError, incident_mark, incidents_since
from jobs.redaction import install_log_scrubber, registered_dsns, scrub

# Wide enough for the regression tables when output is not a terminal (make demo in CI, logs).
console = Console(width=None if sys.stdout.isatty() else 180)
DEFAULT_LAKE = Path("data/lake")
DEFAULT_FLEET_FILE = Path("data/fleet.toml")
DEFAULT_EMBEDDED_ROOT = Path(tempfile.gettempdir()) / "pg-regression-radar" / "fleet"
EXIT_LOCKED = 75  # EX_TEMPFAIL: another run holds a lake lock; try again later


def render(frame: pl.DataFrame, title: str | None = None, max_rows: int = 40) -> None:
    table = Table(title=title, show_lines=False)
    for name in frame.columns:
        table.add_column(name, overflow="fold")
    for row in frame.head(max_rows).iter_rows():
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)
    if frame.height > max_rows:
        console.print(f"[dim]… {frame.height - max_rows} more rows[/dim]")


def _scrubbing(fleet: FleetConfig) -> FleetConfig:
    """Register the fleet's DSNs with the log scrubber, so no log record shows a secret of theirs."""
    install_log_scrubber(*fleet.dsns())
    return fleet


def find_fleet(args: argparse.Namespace) -> FleetConfig | None:
    """An explicit --fleet-file (must exist), else data/fleet.toml if it exists, else the embedded fleet.

    Only the default path may fall back to the embedded fleet started by `radar fleet up`: a mistyped
    --fleet-file is an error, never a silent snapshot of some other fleet. None when there is no fleet.
    """
    from jobs.fleet import EmbeddedFleet

    if args.fleet_file is not None:
        if not Path(args.fleet_file).is_file():
            raise ConfigError(f"fleet file not found: {args.fleet_file} (given with --fleet-file)")
        return _scrubbing(FleetConfig.load(Path(args.fleet_file)))
    if DEFAULT_FLEET_FILE.exists():
        return _scrubbing(FleetConfig.load(DEFAULT_FLEET_FILE))
    embedded = EmbeddedFleet.load(Path(args.embedded_root))
    return None if embedded is None else _scrubbing(FleetConfig.from_embedded(embedded))


def load_fleet(args: argparse.Namespace) -> FleetConfig:
    """--fleet-file if it exists, else the embedded fleet started by `radar fleet up`."""
    fleet = find_fleet(args)
    if fleet is not None:
        return fleet
    raise ConfigError(
        f"no fleet: {DEFAULT_FLEET_FILE} does not exist and no embedded fleet runs at {args.embedded_root} "
        "(copy data/fleet.example.toml to data/fleet.toml, or run `radar fleet up`)"
    )


def lake_config(args: argparse.Namespace) -> LakeConfig:
    return LakeConfig(lock_wait_s=args.lock_wait_s)


def _iso_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def print_lake_incidents(mark: int) -> None:
    """One warning line per lake file this run quarantined or skipped (jobs.lake.LakeIncident)."""
    for incident in incidents_since(mark):
        console.print(f"warning: {incident.message()}", markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------------------------
# Commands


def cmd_fleet(args: argparse.Namespace) -> int:
    from jobs.fleet import EmbeddedFleet

    root = Path(args.embedded_root)
    if args.action == "up":
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        with console.status(f"starting {len(names)} PostgreSQL 18 servers under {root}"):
            fleet = EmbeddedFleet.create(root, names)
        (root / "fleet.toml").write_text(fleet.fleet_config_toml())
        render(pl.DataFrame(fleet.status()), "embedded fleet")
        console.print(f"fleet file: {root / 'fleet.toml'}  (radar snapshot picks the fleet up by itself)")
        return 0
    fleet = EmbeddedFleet.load(root)
    if fleet is None:
        console.print(f"no embedded fleet at {root}")
        return 0 if args.action != "status" else 1
    if args.action == "down":
        fleet.destroy() if args.destroy else fleet.stop()
        console.print("stopped" + (" and deleted" if args.destroy else ""))
        return 0
    render(pl.DataFrame(fleet.status()), "embedded fleet")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from jobs.collect.collector import snapshot_fleet

    fleet = load_fleet(args)
    with console.status(f"snapshotting {len(fleet.instances)} instances"):
        result = snapshot_fleet(fleet, Path(args.lake))
    render(pl.DataFrame(result.summary_rows()).drop("reason"), "snapshot")
    for label, rows in (("[red]failed[/red]", result.failed), ("[yellow]degraded[/yellow]", result.degraded)):
        for row in rows:
            console.print(f"{label} {row.instance}: {escape(row.reason)}", soft_wrap=True)
    return snapshot_exit_code(len(result.ok), len(result.failed))


SNAPSHOT_EXIT_CODES = """exit codes of `radar snapshot`:
  0  every instance was read (degraded ones included: they are listed)
  1  some instances failed (each is listed with its reason; the others are in the lake)
  2  usage or configuration error (bad fleet file, --fleet-file not found): nothing was read
  3  every instance failed"""


def snapshot_exit_code(ok: int, failed: int) -> int:
    if failed == 0:
        return 0
    return 3 if ok == 0 else 1


def cmd_deploy(args: argparse.Namespace) -> int:
    from jobs.collect.deploys import DeployInboxConfig, ingest_deploy_files, mark_deploy

    # Instance names are checked against the fleet when one is known (a fleet file or embedded fleet).
    fleet = find_fleet(args)
    known = None if fleet is None else fleet.instance_names
    if known is None and not args.fleet:
        console.print("[dim]no fleet file or embedded fleet: instance names are not checked[/dim]")
    config = DeployInboxConfig(
        allow_unknown_instance=args.allow_unknown_instance,
        max_file_bytes=args.max_file_bytes,
        max_events_per_file=args.max_events_per_file,
    )
    if args.action == "mark":
        events = mark_deploy(
            Path(args.lake),
            version=args.version,
            instances=args.instance or None,
            fleet=args.fleet,
            at=args.at,
            known_instances=known,
            config=config,
        )
        render(pl.DataFrame([e.as_row() for e in events]), "deploy recorded")
        return 0
    report = ingest_deploy_files(Path(args.inbox), Path(args.lake), config, known)
    console.print(f"{len(report.processed)} files processed, {len(report.events)} deploys recorded")
    for path, why in report.rejected.items():
        console.print(f"[red]rejected[/red] {path}: {why}")
    for path, why in report.failed.items():
        console.print(f"[red]not recorded[/red] {path}: {why}")
    return 1 if report.rejected or report.failed else 0


def cmd_samples(args: argparse.Namespace) -> int:
    from jobs.samples import SampleConfig, run_samples_job

    if (args.date_from or args.date_to) and not args.rebuild:
        raise ValueError("radar samples: --from/--to choose the days of a rebuild; add --rebuild")
    dates = None
    if args.date_from or args.date_to:
        dates = (args.date_from or args.date_to, args.date_to or args.date_from)
        if dates[0] > dates[1]:
            raise ValueError(f"radar samples: --from {dates[0]} is after --to {dates[1]}")
    report = run_samples_job(
        Path(args.lake),
        SampleConfig(min_executions=args.min_executions),
        lake_config=lake_config(args),
        dates=dates,
        mode="rebuild" if args.rebuild else "append",
    )
    console.print(
        f"{report.snapshot_rows} snapshot rows → {report.sample_rows} samples "
        f"({report.instances} instances, {report.seconds:.2f} s)"
    )
    if report.dropped_counts.height:
        render(report.dropped_counts, "dropped intervals")
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    from jobs.analysis import DetectionConfig, print_detection, run_detection

    config = DetectionConfig(lake=lake_config(args), incremental=not args.full)
    outcome = run_detection(Path(args.lake), config)
    print_detection(outcome, console, show_all=args.all)
    return 0


ALERTS_EXIT_CODES = """\
exit codes:
  0  every alert pending for a sink was delivered to it (or none was pending)
  1  some alert was dead-lettered (refused for good, or out of attempts) or deferred to the next run
     (a sink that looked down was stopped); the output names the sink and why
  2  configuration error (a webhook URL that is not http(s), a bad [alerts] key), or no sink at all
 75  another `radar alerts` run holds the alerts lock
"""


def cmd_alerts(args: argparse.Namespace) -> int:
    """Send each sink of [alerts] every finding alert it has not had; see ALERTS_EXIT_CODES."""
    import json

    from jobs.alerts import send_alerts
    from jobs.config import Override, load_settings

    overrides = [
        Override(key, value, flag)
        for key, value, flag in (
            ("alerts.file", args.file, "flag --file"),
            ("alerts.dead_letter_file", args.dead_letter_file, "flag --dead-letter-file"),
            ("alerts.webhook_url", args.webhook, "flag --webhook"),
            ("alerts.send_resolved", False if args.no_resolved else None, "flag --no-resolved"),
        )
        if value is not None
    ]
    alerts = load_settings(getattr(args, "config", None), overrides=overrides).settings.alerts
    report = send_alerts(
        Path(args.lake), alerts, retry_dead_letters=args.retry_dead_letters, lake_config=lake_config(args)
    )
    if not report.sinks:
        console.print(
            "[red]no alert sink[/red]: [alerts] file is empty and no webhook URL is set "
            f"(env {alerts.slack_webhook_env} / {alerts.webhook_env})"
        )
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(report.as_json(), indent=2, default=str) + "\n")
        return 0 if report.ok else 1
    for payload in report.sent:
        to = ", ".join(s.name for s in report.sinks if payload["alert_id"] in s.delivered)
        query = " ".join(payload["query"].split())[:80]
        console.print(f"alerted ({payload['state']}): {payload['instance']}: {query} → {to}", markup=False)
    for sink in report.sinks:
        for letter in sink.dead_lettered:
            console.print(
                f"[red]dead letter[/red] {escape(sink.name)}: alert {letter.alert_id} (finding "
                f"{letter.finding_id}, {letter.state}) after {letter.attempts} attempt(s): "
                f"{escape(letter.reason)}"
            )
        if sink.deferred:
            console.print(
                f"[yellow]{escape(sink.name)}[/yellow]: {sink.deferred} alert(s) deferred to the next run "
                f"({escape(sink.stopped)})"
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


def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0 PASS, 1 WARN (0 with --no-fail-on-warn), 2 BLOCK, 3 the gate could not run."""
    from jobs.gate import GateConfig, GateError, WorkloadError, render_gate_report, run_gate

    config = GateConfig(fail_on_warn=not args.no_fail_on_warn, max_seconds=args.max_seconds)
    try:
        with console.status("measuring baseline and candidate (interleaved rounds)"):
            report = run_gate(args.baseline, args.candidate, Path(args.workload), config)
    except (GateError, WorkloadError) as exc:
        console.print(f"[red]gate could not run:[/red] {exc}")
        return 3
    print(render_gate_report(report))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.partial")
        tmp.write_text(report.to_json())
        tmp.replace(out)
    return report.exit_code


def cmd_drift(args: argparse.Namespace) -> int:
    from jobs.collect.deploys import parse_timestamp
    from jobs.drift import DriftConfig, anchor_baseline, run_drift

    if args.action == "anchor":
        if not (args.start and args.end and args.label):
            console.print("[red]radar drift anchor needs --start, --end and --label[/red]")
            return 2
        row = anchor_baseline(
            Path(args.lake),
            start=parse_timestamp(args.start, "--start"),
            end=parse_timestamp(args.end, "--end"),
            instance=args.instance,
            fingerprint=args.fingerprint,
            label=args.label,
        )
        console.print(f"baseline anchored: {row}")
        return 0
    drift = run_drift(Path(args.lake), DriftConfig())
    shown = drift.filter(pl.col("status").is_in(["drift", "watch"])).select(
        "instance", "status", "reason", "query", "js", "psi"
    )
    if shown.height:
        render(shown, "latency drift")
    counts = drift.group_by("status").len().sort("status")
    console.print(
        "  ".join(f"{row['status']}: {row['len']}" for row in counts.iter_rows(named=True)) or "no series"
    )
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from jobs.compaction import ExpiredPartition, compact_lake

    expired: list[ExpiredPartition] = []
    config = replace(lake_config(args), analysis_retention_days=args.analysis_retention_days)
    done = compact_lake(Path(args.lake), min_age_days=args.min_age_days, config=config, expired=expired)
    for gone in expired:
        console.print(
            f"{gone.table}/{gone.partition}: expired ({gone.files} files past the analysis retention)"
        )
    for part in done:
        console.print(f"{part.table}/{part.partition}: {part.files_before} files → 1 ({part.rows} rows)")
    console.print(f"{len(done)} partitions compacted")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from jobs.weekly import iso_week, write_weekly_report

    week = args.week or iso_week(datetime.now(UTC) - timedelta(days=7))
    path = write_weekly_report(Path(args.lake), week, Path(args.out))
    console.print(f"weekly report: {path}")
    return 0


def cmd_views(args: argparse.Namespace) -> int:
    from jobs.duckdb_views import view_statements

    for statement in view_statements(Path(args.lake)):
        print(statement.rstrip(";") + ";\n")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from jobs.duckdb_views import query

    render(query(Path(args.lake), args.query), max_rows=args.max_rows)
    return 0


def cmd_setup_sql(args: argparse.Namespace) -> int:
    """Print the SQL that creates the monitoring and explain roles and the EXPLAIN helper (psql-ready)."""
    from jobs.plans.setup_sql import SetupRoles, setup_script, setup_steps

    roles = SetupRoles(monitor_role=args.monitor_role, explain_role=args.explain_role, helper=args.helper)
    steps = setup_steps(args.server_version_num, args.database or ["postgres"], roles)
    sys.stdout.write(setup_script(steps, args.server_version_num))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo import DemoConfig, run_demo

    config = DemoConfig(
        lake_root=Path(args.lake),
        fleet_root=Path(args.embedded_root).parent / "demo-fleet",
        seconds=args.seconds,
        keep_fleet=args.keep,
    )
    return run_demo(config, console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radar", description=__doc__)
    parser.add_argument("--lake", default=str(DEFAULT_LAKE), help="lake root (default: %(default)s)")
    parser.add_argument(
        "--fleet-file",
        default=None,
        help=f"fleet TOML; must exist when given (default: {DEFAULT_FLEET_FILE} if present, else the "
        "embedded fleet of `radar fleet up`)",
    )
    parser.add_argument(
        "--embedded-root",
        default=str(DEFAULT_EMBEDDED_ROOT),
        help="embedded fleet folder (default: %(default)s)",
    )
    parser.add_argument(
        "--lock-wait-s",
        type=float,
        default=LakeConfig.lock_wait_s,
        help="wait at most this long for a lake lock held by another run (default: %(default)s)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    fleet = sub.add_parser("fleet", help="start, stop or list a local embedded PostgreSQL 18 fleet")
    fleet.add_argument("action", choices=["up", "down", "status"])
    fleet.add_argument("--names", default="alpha,beta", help="comma-separated instance names (up)")
    fleet.add_argument("--destroy", action="store_true", help="delete the data folders too (down)")
    fleet.set_defaults(func=cmd_fleet)

    sub.add_parser(
        "snapshot",
        help="snapshot the whole fleet into the lake now",
        epilog=SNAPSHOT_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).set_defaults(func=cmd_snapshot)

    deploy = sub.add_parser("deploy", help="record deploys")
    deploy.add_argument("action", choices=["mark", "ingest"])
    target = deploy.add_mutually_exclusive_group()
    target.add_argument("--instance", action="append", help="instance deployed to (repeatable)")
    target.add_argument("--fleet", action="store_true", help="the deploy went to every instance")
    deploy.add_argument("--version", help="version deployed (mark)")
    deploy.add_argument("--at", help="ISO-8601 time of the deploy (default: now)")
    deploy.add_argument("--inbox", default="data/deploys", help="folder of deploy files (ingest)")
    deploy.add_argument(
        "--allow-unknown-instance",
        action="store_true",
        help="record instance names the fleet does not know (default: refuse them)",
    )
    deploy.add_argument(
        "--max-file-bytes",
        type=int,
        default=DeployInboxConfig.max_file_bytes,
        help="refuse an inbox file bigger than this, unread (default: %(default)s)",
    )
    deploy.add_argument(
        "--max-events-per-file",
        type=int,
        default=DeployInboxConfig.max_events_per_file,
        help="refuse an inbox file with more deploy events (default: %(default)s)",
    )
    deploy.set_defaults(func=cmd_deploy)

    samples = sub.add_parser("samples", help="append per-interval samples for new snapshots (or --rebuild)")
    samples.add_argument("--min-executions", type=int, default=1)
    samples.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild instead of appending the snapshots after the watermark (a repair; all days by default)",
    )
    samples.add_argument("--from", dest="date_from", type=_iso_date, help="first day of the rebuild (UTC)")
    samples.add_argument("--to", dest="date_to", type=_iso_date, help="last day of the rebuild (UTC)")
    samples.set_defaults(func=cmd_samples)

    detect = sub.add_parser("detect", help="find regressions around deploys and unannounced ones")
    detect.add_argument("--all", action="store_true", help="also list the series that were not reported")
    detect.add_argument(
        "--full",
        action="store_true",
        help="rebuild the samples and re-examine every deploy and series (default: only what is new)",
    )
    detect.set_defaults(func=cmd_detect)

    alerts = sub.add_parser(
        "alerts",
        help="send each finding to the alert sinks of [alerts] (JSONL file, Slack, webhook), once each",
        description="Sinks come from [alerts] in the config file: the JSONL file, Slack when its URL is\n"
        "set (env RADAR_SLACK_WEBHOOK or [alerts] slack_webhook_url), the generic JSON webhook likewise\n"
        "(env RADAR_ALERT_WEBHOOK or [alerts] webhook_url). Each sink gets each alert at most once;\n"
        "webhook URLs are never printed (only scheme://host).",
        epilog=ALERTS_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    alerts.add_argument("--file", default=None, help="JSONL file sink (default: [alerts] file)")
    alerts.add_argument(
        "--dead-letter-file", default=None, help="dead-letter JSONL file (default: [alerts] dead_letter_file)"
    )
    alerts.add_argument(
        "--webhook",
        default=None,
        metavar="URL",
        help="generic JSON webhook URL (prefer env RADAR_ALERT_WEBHOOK: a command line is visible to ps)",
    )
    alerts.add_argument("--no-resolved", action="store_true", help="send no recovered/superseded updates")
    alerts.add_argument(
        "--retry-dead-letters",
        action="store_true",
        help="send dead-lettered alerts again (each sink: those it refused or did not take)",
    )
    alerts.add_argument("--format", choices=["text", "json"], default="text", help="output (default: text)")
    alerts.set_defaults(func=cmd_alerts)

    gate = sub.add_parser(
        "gate", help="PASS / WARN / BLOCK: a workload on a baseline vs a candidate database"
    )
    gate.add_argument("--baseline", required=True, help="DSN of the database with the current schema")
    gate.add_argument("--candidate", required=True, help="DSN of the database with the change applied")
    gate.add_argument(
        "--workload", required=True, help="workload TOML (see tests/fixtures/gate_workload.toml)"
    )
    gate.add_argument("--json", help="also write the JSON report (gate_report.schema.json) here")
    gate.add_argument("--max-seconds", type=float, default=120.0, help="measurement budget (default 120)")
    gate.add_argument("--no-fail-on-warn", action="store_true", help="exit 0 on WARN")
    gate.set_defaults(func=cmd_gate)

    drift = sub.add_parser("drift", help="latency distribution drift against anchored baselines")
    drift.add_argument("action", nargs="?", choices=["run", "anchor"], default="run")
    drift.add_argument("--start", help="anchor: baseline window start (ISO-8601)")
    drift.add_argument("--end", help="anchor: baseline window end (ISO-8601)")
    drift.add_argument("--label", help="anchor: a name for the baseline, e.g. 'before v812'")
    drift.add_argument("--instance", help="anchor: one instance (default: the whole fleet)")
    drift.add_argument("--fingerprint", help="anchor: one query fingerprint (default: every query)")
    drift.set_defaults(func=cmd_drift)

    compact = sub.add_parser("compact", help="merge each closed day's snapshot files into one per instance")
    compact.add_argument(
        "--min-age-days", type=int, default=1, help="only days at least this old (default 1)"
    )
    compact.add_argument(
        "--analysis-retention-days",
        type=int,
        default=LakeConfig.analysis_retention_days,
        help="delete analysis rows of runs older than this many days (0 keeps them; default %(default)s)",
    )
    compact.set_defaults(func=cmd_compact)

    report = sub.add_parser("report", help="write the weekly regression report (markdown + plots)")
    report.add_argument("--week", help="ISO week YYYY-Www (default: last week)")
    report.add_argument("--out", default="data/reports", help="report folder (default: %(default)s)")
    report.set_defaults(func=cmd_report)

    views = sub.add_parser("views", help="print the DuckDB view definitions over the lake")
    views.set_defaults(func=cmd_views)
    sql = sub.add_parser("sql", help="run a DuckDB query over the lake views")
    sql.add_argument("query")
    sql.add_argument("--max-rows", type=int, default=40)
    sql.set_defaults(func=cmd_sql)

    setup = sub.add_parser(
        "setup-sql", help="print the SQL for the monitoring login, the explain role and the EXPLAIN helper"
    )
    setup.add_argument(
        "--server-version-num", type=int, default=180000, help="target server (default: %(default)s)"
    )
    setup.add_argument(
        "--database", action="append", help="database to install the helper in (repeatable; default postgres)"
    )
    setup.add_argument("--monitor-role", default="radar_monitor", help="login role (default: %(default)s)")
    setup.add_argument("--explain-role", default="radar_explain", help="NOLOGIN role EXPLAINs run as")
    setup.add_argument("--helper", default="radar.explain_generic", help="schema.function of the helper")
    setup.set_defaults(func=cmd_setup_sql)

    demo = sub.add_parser("demo", help="embedded fleet + workload + a real regression found and explained")
    demo.add_argument("--seconds", type=float, default=75.0, help="workload duration")
    demo.add_argument("--keep", action="store_true", help="leave the demo fleet running")
    demo.set_defaults(func=cmd_demo, lake="data/demo/lake")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    install_log_scrubber(getattr(args, "baseline", None), getattr(args, "candidate", None))
    if (
        args.command == "deploy"
        and args.action == "mark"
        and (not args.version or not (args.instance or args.fleet))
    ):
        console.print("[red]radar deploy mark needs --version and one of --instance NAME or --fleet[/red]")
        return 2
    mark = incident_mark()
    try:
        return int(args.func(args))
    except LakeLockError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return EXIT_LOCKED
    except (ConfigError, ValueError, RuntimeError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/red] {escape(scrub(str(exc), *registered_dsns()))}", soft_wrap=True)
        return 2
    finally:
        print_lake_incidents(mark)


if __name__ == "__main__":
    sys.exit(main())
