"""The argument parser: every command, its flags and exit codes (help stays fast: no heavy imports)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    pass
from jobs.cli.alerts import cmd_alerts
from jobs.cli.common import (
    DEFAULT_EMBEDDED_ROOT,
    DEFAULT_FLEET_FILE,
    DEFAULT_LAKE,
    EXIT_GATE_USAGE,
    EXIT_SERVER_UNREADABLE,
    SQL_CELL_WIDTH,
    TABLE_MAX_ROWS,
    iso_date,
    positive_rows,
)
from jobs.cli.compact import cmd_compact
from jobs.cli.config import cmd_config
from jobs.cli.demo import cmd_demo
from jobs.cli.deploy import cmd_deploy
from jobs.cli.detect import cmd_detect, shard_flag
from jobs.cli.drift import EXIT_NO_BASELINE, EXIT_PAYLOAD_INVALID, cmd_drift
from jobs.cli.fleet import cmd_fleet
from jobs.cli.gate import cmd_gate
from jobs.cli.metrics import cmd_metrics, cmd_serve_metrics
from jobs.cli.pins import EXIT_NO_SUCH_PIN, EXIT_PIN_REFUSED, cmd_pins
from jobs.cli.plans import cmd_plans
from jobs.cli.report import cmd_report
from jobs.cli.samples import cmd_samples
from jobs.cli.setup_sql import cmd_setup_sql
from jobs.cli.snapshot import cmd_snapshot
from jobs.cli.sql import cmd_sql, cmd_views

# ---------------------------------------------------------------------------------------------------------
# Parser

COMMON_EXIT_CODES = (
    "  2  usage or configuration error (bad flag, bad --config or fleet file, no fleet): nothing done\n"
    "  70 internal error (EX_SOFTWARE): a bug in radar, one line on stderr; RADAR_DEBUG=1 shows the\n"
    "     traceback. What earlier runs wrote to the lake is kept\n"
    "  74 the OS refused a write (EX_IOERR): disk full, over quota, read-only, no permission, I/O error;\n"
    "     one line names the path and what was kept (every file already in the lake)\n"
    "  75 another run holds a lake lock (EX_TEMPFAIL): try again later"
)


def _exit_codes(command: str, *lines: str) -> str:
    return (
        f"exit codes of `radar {command}`:\n"
        + "\n".join(f"  {line}" for line in lines)
        + "\n"
        + COMMON_EXIT_CODES
    )


SNAPSHOT_EXIT_CODES = _exit_codes(
    "snapshot",
    "0  every instance was read (degraded ones included: they are listed)",
    "1  some instances failed (each is listed with its reason; the others are in the lake)",
    "3  every instance failed",
    "   plan capture and auto_explain problems are listed as warnings and never change the code",
)
EXIT_CODES = {
    "fleet": _exit_codes("fleet", "0  done", "1  status: no embedded fleet runs at --embedded-root"),
    "snapshot": SNAPSHOT_EXIT_CODES,
    "deploy": _exit_codes(
        "deploy",
        "0  recorded (ingest: every file processed)",
        "1  ingest: some files were rejected or not recorded (each is listed)",
        "   mark: an instance the fleet does not know, or no fleet to check names against, exits 2",
    ),
    "samples": _exit_codes("samples", "0  samples appended (or rebuilt)"),
    "detect": _exit_codes(
        "detect",
        "0  detection ran (findings or not)",
        "1  --fail-on-detect and at least one finding is open after the run",
    ),
    "gate": _exit_codes(
        "gate",
        "0   PASS (or WARN with --no-fail-on-warn): the run rules the regression out",
        "1   WARN",
        "2   BLOCK",
        "3   the gate could not run: an unreachable database, a scenario that fails on the baseline or",
        "    crashes (a Python scenario that raises or never calls mark), a file that does not load, a",
        "    stored run that cannot be replayed; it prints no verdict",
        "4   INCONCLUSIVE: a measurement still undecided when the cycles or the budget ran out (the report",
        "    says which regression it could not rule out)",
        "64  a bad flag, flag value or config file (EX_USAGE); it prints no verdict",
        "70  a bug in radar (EX_SOFTWARE)",
    ),
    "drift": _exit_codes(
        "drift",
        "0  run: drift computed; anchor, anchor-samples: baseline anchored; score: the worst flag is PASS",
        "   (or there is no pair); score --payload: PASS; checks: every check passed",
        "1  run: --fail-on-drift and a series has status drift; score (--payload): the worst flag is WARN",
        "   (insufficient_samples and no_baseline rows are WARN); checks: a check failed",
        "2  score (--payload): BLOCK (a bad flag or config, an empty version or an empty window also",
        "   exit 2: they print no rows)",
        f"{EXIT_PAYLOAD_INVALID}  score --payload: the file is unreadable, not JSON, or breaks",
        "   drift_payload.schema.json (the message names the field)",
        f"{EXIT_NO_BASELINE}  score --payload: no anchored baseline of the payload's baseline_version for",
        "   its query_hash and metric (or one on several instances and no --instance)",
    ),
    "compact": _exit_codes("compact", "0  done"),
    "report": _exit_codes("report", "0  report written"),
    "metrics": _exit_codes(
        "metrics",
        "0  printed (or --textfile written whole: a temp file renamed over it)",
        "   a folder that does not exist, or no path, exits 2",
    ),
    "serve-metrics": _exit_codes(
        "serve-metrics",
        "0  stopped by Ctrl-C or SIGTERM",
        "   a port in use or not permitted exits 2 (one line naming host and port)",
    ),
    "views": _exit_codes("views", "0  done"),
    "sql": _exit_codes("sql", "0  rows printed (a failing query exits 2 with DuckDB's message)"),
    "plans": _exit_codes(
        "plans",
        "0  plan history printed",
        "1  no query matches, or the matched queries have no plan snapshot",
    ),
    "pins": _exit_codes(
        "pins",
        "0  list: printed; explain: the pin explained; propose: open findings looked at (rows or none);",
        "   apply, remove: written and recorded (--dry-run: the SQL printed, nothing connected to);",
        "   check: every applied pin kept or removed",
        f"{EXIT_NO_SUCH_PIN}  explain, apply, remove: no pin of that id in the ledger",
        f"{EXIT_PIN_REFUSED}  apply, remove: refused, nothing written; one line says why: the instance",
        "   has not opted in, pg_hint_plan not loaded or its hint table off, a hint there, its state;",
        "   check: a pin that should go could not be removed (its row says why)",
        "   propose, apply, remove and check without a fleet exit 2",
    ),
    "config": _exit_codes("config", "0  show: printed; check: the configuration (and fleet file) is valid"),
    "setup-sql": _exit_codes(
        "setup-sql",
        "0  printed",
        f"{EXIT_SERVER_UNREADABLE}  --dsn: the server cannot be reached or read (one line, no password)",
    ),
    "demo": _exit_codes("demo", "0  the demo found and explained its regression", "1  it did not"),
    "alerts": _exit_codes(
        "alerts",
        "0  every alert pending for a sink was delivered to it (or none was pending)",
        "1  some alert was dead-lettered (refused for good, or out of attempts) or deferred to the next",
        "   run (a sink that looked down was stopped); the output names the sink and why",
        "2  also: a webhook URL that is not http(s), or no sink at all",
        "75 another `radar alerts` run holds the alerts lock",
    ),
}
FORMAT_HELP = (
    "table (default), json (an array of objects, one per row; ISO-8601 UTC times), jsonl (the same objects, "
    "one per line and nothing else: for a file cron appends to) or csv; see jobs/publish/output.py and "
    "docs/scripting.md"
)
ROW_FORMATS = ["table", "json", "jsonl", "csv"]


def _global_options(parser: argparse.ArgumentParser, *, in_subcommand: bool) -> None:
    """The options every command takes, before or after the command name.

    On a subcommand they default to SUPPRESS, so one given before the command is not reset by the
    subcommand's defaults."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if in_subcommand else value

    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--config",
        default=default(None),
        metavar="PATH",
        help="settings TOML; must exist when given (default: env RADAR_CONFIG, else data/radar.toml if "
        "present, else the built-in defaults; see `radar config show`)",
    )
    group.add_argument(
        "--lake", default=default(None), help=f"lake root (default: [lake] root, {DEFAULT_LAKE})"
    )
    group.add_argument(
        "--fleet-file",
        default=default(None),
        metavar="PATH",
        help=f"fleet TOML; must exist when given (default: {DEFAULT_FLEET_FILE}; missing is an error "
        "unless --embedded)",
    )
    group.add_argument(
        "--embedded",
        action="store_true",
        default=default(False),
        help="use the embedded fleet of `radar fleet up` (at --embedded-root) as the fleet",
    )
    group.add_argument(
        "--embedded-root",
        default=default(str(DEFAULT_EMBEDDED_ROOT)),
        help=f"embedded fleet folder (default: {DEFAULT_EMBEDDED_ROOT})",
    )
    group.add_argument(
        "--set",
        dest="set_after" if in_subcommand else "set_before",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="any setting of the config file, e.g. --set drift.samples.stale_block_share=0.1 (repeatable; "
        "the value read as in a RADAR_ variable; beats the file, the environment and the other flags)",
    )
    group.add_argument(
        "--lock-wait-s",
        type=float,
        default=default(None),
        help="wait at most this long for a lake lock held by another run (default: [lake] lock_wait_s, 10)",
    )


def _command(
    sub: Any, name: str, help_text: str, *, formats: bool = False, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand with the global options, its exit codes epilog and (``formats``) --format."""
    parser = sub.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description or help_text, 100),
        epilog=EXIT_CODES[name],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if name == "gate":
        parser.usage_exit = EXIT_GATE_USAGE  # type: ignore[attr-defined]
    _global_options(parser, in_subcommand=True)
    chosen = getattr(sub, "_radar_command", ALL_COMMANDS)
    parser._radar_full = chosen in (ALL_COMMANDS, name)  # type: ignore[attr-defined]
    if formats:
        # The gate's json is one report object (its contract), not rows: no JSON Lines of it.
        choices = ["table", "json", "csv"] if name == "gate" else ROW_FORMATS
        parser.add_argument("--format", choices=choices, default="table", help=FORMAT_HELP)
    return parser


ALL_COMMANDS = "*"


def _design_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """The design flags (jobs.config.flags) on the command being run only: importing jobs.config costs
    more than the whole of `radar --help` may (it loads the lake's and the fleet file's modules)."""
    if getattr(parser, "_radar_full", False):
        from jobs.config.flags import add_design_flags

        add_design_flags(parser, *names)


GLOBAL_OPTIONS_WITH_VALUE = frozenset(
    {"--config", "--lake", "--fleet-file", "--embedded-root", "--lock-wait-s"}
)


def command_in(argv: list[str]) -> str | None:
    """The command an argument list runs: its first word that is not a global option or its value."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


DETECTOR_FLAGS = ("window_minutes", "min_executions", "latency_threshold", "changepoint_tolerance")
ALL_DESIGN_FLAGS = (*DETECTOR_FLAGS, "capture_plans", "auto_explain")


class RadarParser(argparse.ArgumentParser):
    """argparse with the usage error's exit code set per command: 2 as argparse has it, except for commands
    whose 2 is a verdict (the gate's BLOCK), which use EX_USAGE (64)."""

    usage_exit = 2

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = ALL_COMMANDS) -> argparse.ArgumentParser:
    """The parser; ``command``: the one whose design flags to add (ALL_COMMANDS: every command's, None:
    none, for the top-level help)."""
    parser = RadarParser(
        prog="radar",
        description=__doc__.splitlines()[0],
        epilog="Every command documents its exit codes in `radar COMMAND --help`.",
    )
    if command == "gate":
        parser.usage_exit = EXIT_GATE_USAGE  # an unknown flag of `radar gate` is reported by this parser
    _global_options(parser, in_subcommand=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sub._radar_command = command  # type: ignore[attr-defined]

    fleet = _command(sub, "fleet", "start, stop or list a local embedded PostgreSQL 18 fleet", formats=True)
    fleet.add_argument("action", choices=["up", "down", "status"])
    fleet.add_argument("--names", default="alpha,beta", help="comma-separated instance names (up)")
    fleet.add_argument("--destroy", action="store_true", help="delete the data folders too (down)")
    fleet.add_argument(
        "--sampler",
        action="store_true",
        help="up: run auto_explain as a sampler of executions ([plans.auto_explain.sampler]: per-execution "
        "drift) instead of logging plans slower than 200 ms",
    )
    fleet.set_defaults(func=cmd_fleet)

    snapshot = _command(
        sub,
        "snapshot",
        "one collection cycle: snapshot the fleet, then (when asked) capture plans and read auto_explain",
        formats=True,
        description="One collection cycle, what the Dagster job does: snapshot pg_stat_statements of every "
        "instance, then with --capture-plans the plans of that snapshot's top queries (pg_store_plans when "
        "trusted, else EXPLAIN GENERIC_PLAN), and with --auto-explain the new auto_explain records of each "
        "instance's log_dir. Both default to the [plans] settings.",
    )
    _design_flags(snapshot, "capture_plans", "auto_explain")
    snapshot.set_defaults(func=cmd_snapshot)

    deploy = _command(
        sub,
        "deploy",
        "record deploys",
        formats=True,
        description="Record deploys. JSON/CSV rows: mark, the deploy events recorded; ingest, one row per "
        "inbox file (file, outcome processed | rejected | not_recorded, reason).",
    )
    deploy.add_argument("action", choices=["mark", "ingest"])
    target = deploy.add_mutually_exclusive_group()
    target.add_argument("--instance", action="append", help="instance deployed to (repeatable)")
    target.add_argument("--fleet", action="store_true", help="the deploy went to every instance")
    deploy.add_argument("--version", help="version deployed (mark)")
    deploy.add_argument("--at", help="ISO-8601 time of the deploy (default: now)")
    deploy.add_argument(
        "--inbox", default=None, help="folder of deploy files (ingest; default: [deploys] inbox)"
    )
    deploy.add_argument(
        "--allow-unknown-instance",
        action="store_true",
        help="record instance names the fleet does not know, or unchecked when there is no fleet "
        "(default: refuse them)",
    )
    deploy.add_argument(
        "--max-file-bytes",
        type=int,
        default=None,
        help="refuse an inbox file bigger than this, unread (default: [deploys] max_file_bytes)",
    )
    deploy.add_argument(
        "--max-events-per-file",
        type=int,
        default=None,
        help="refuse an inbox file with more deploy events (default: [deploys] max_events_per_file)",
    )
    deploy.set_defaults(func=cmd_deploy)

    samples = _command(
        sub, "samples", "append per-interval samples for new snapshots (or --rebuild)", formats=True
    )
    _design_flags(samples, "min_executions")
    samples.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild instead of appending the snapshots after the watermark (a repair; all days by default)",
    )
    samples.add_argument("--from", dest="date_from", type=iso_date, help="first day of the rebuild (UTC)")
    samples.add_argument("--to", dest="date_to", type=iso_date, help="last day of the rebuild (UTC)")
    samples.set_defaults(func=cmd_samples)

    detect = _command(
        sub,
        "detect",
        "find regressions around deploys and unannounced ones",
        formats=True,
        description="Find regressions around deploys and unannounced ones. JSON/CSV rows: the findings "
        "that are open or that this run changed (the finding_states columns, then drift_cost, drift_latency, "
        "drift_cardinality: the latest per-execution drift flag of the query, null when never scored).",
    )
    _design_flags(detect, *DETECTOR_FLAGS)
    detect.add_argument("--all", action="store_true", help="also list the series that were not reported")
    detect.add_argument(
        "--full",
        action="store_true",
        help="rebuild the samples and re-examine every deploy and series (default: only what is new)",
    )
    detect.add_argument(
        "--fail-on-detect", action="store_true", help="exit 1 when a finding is open after the run"
    )
    detect.add_argument(
        "--memory-budget-mib",
        type=int,
        default=None,
        metavar="MIB",
        help="a run that reads every sample (--full, the first, a settings change) and would need more "
        "memory analyses its instances in chunks that fit, with the same findings (default: "
        "[detector.memory] budget_mib; 0 = one pass)",
    )
    detect.add_argument(
        "--shard",
        type=shard_flag,
        default=None,
        metavar="K/N",
        help="only shard K of N (instances by the hash of their name): one shard's pass of a sharded "
        "detection, after every shard's --phase candidates",
    )
    detect.add_argument(
        "--phase",
        choices=("candidates", "detect"),
        default="detect",
        help="with --shard: 'candidates' records the shard's unannounced candidates (phase 1); 'detect' "
        "(default) runs its detection, the false discovery rate over every shard's candidates (phase 2)",
    )
    detect.set_defaults(func=cmd_detect)

    alerts = _command(
        sub,
        "alerts",
        "send each finding to the alert sinks of [alerts] (JSONL file, Slack, webhook), once each",
        description="Sinks come from [alerts] in the config file: the JSONL file, Slack when its URL is "
        "set (env RADAR_SLACK_WEBHOOK or [alerts] slack_webhook_url), the generic JSON webhook likewise "
        "(env RADAR_ALERT_WEBHOOK or [alerts] webhook_url). Each sink gets each alert at most once; "
        "webhook URLs are never printed (only scheme://host).",
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
    alerts.add_argument(
        "--format",
        choices=["text", "json", "jsonl"],
        default="text",
        help="output (default: text); json: the run's report object; jsonl: that object on one line",
    )
    alerts.set_defaults(func=cmd_alerts)

    gate = _command(
        sub,
        "gate",
        "PASS / WARN / BLOCK / INCONCLUSIVE: a scenario suite on a baseline vs a candidate database",
        formats=True,
        description="PASS / WARN / BLOCK / INCONCLUSIVE: a scenario suite (a scenario file, a workload file "
        "or the built-in suite) measured in cycles on a baseline and a candidate database, every verdict "
        "bounded by its confidence; or a stored run judged again (--replay). --format json prints the "
        "object of jobs/contracts/gate_suite_report.schema.json; csv one row per scenario and measurement.",
    )
    gate.add_argument("--baseline", help="DSN of the database with the current schema")
    gate.add_argument("--candidate", help="DSN of the database with the change applied")
    source = gate.add_mutually_exclusive_group()
    source.add_argument(
        "--workload", help="workload TOML (see tests/fixtures/gate_workload.toml): one scenario per query"
    )
    source.add_argument(
        "--scenarios",
        help="scenario file (.sql, .toml workload, .py) or builtin[:name,...]: memory, temp/shared blocks, "
        "WAL and planning measured beside wallclock",
    )
    source.add_argument(
        "--replay",
        metavar="RUN",
        help="judge a stored run again without a server: a report file (--json) or a run_id of the lake's "
        "gate_runs; the flags and --set given change its stored configuration",
    )
    gate.add_argument(
        "--calibration-dsn", help="calibration aa: a copy of the baseline database on the candidate's server"
    )
    gate.add_argument("--calibration", choices=["off", "auto", "aa", "probe"], help="[gate] calibration")
    gate.add_argument(
        "--aa-timing",
        choices=["interleaved", "before"],
        help="[gate] aa_timing: the copy measured inside every cycle (default) or A/A cycles before them",
    )
    gate.add_argument("--cycles", type=int, help="[gate] cycles (default 3)")
    gate.add_argument(
        "--max-cycles", type=int, help="[gate] max_cycles: cycles an undecided scenario may run (default 7)"
    )
    gate.add_argument(
        "--verdict-rule",
        choices=["bounded", "design"],
        help="[gate] verdict_rule: bounded by the CI (default) or the design's rule",
    )
    gate.add_argument("--selection", choices=["median", "best"], help="[gate] selection")
    gate.add_argument("--seed", type=int, help="[gate] seed")
    gate.add_argument(
        "--filter",
        dest="sample_filter",
        choices=["none", "drop_first", "running_mean_sigma", "fences"],
        help="[gate] sample_filter",
    )
    gate.add_argument(
        "--aggregation",
        choices=["minimum", "mean", "mean_minus_std", "normal_fit", "p50", "p95"],
        help="[gate] aggregation (wallclock)",
    )
    gate.add_argument(
        "--threshold",
        action="append",
        metavar="NAME=RATIO",
        help="a measurement's relative threshold, repeatable: wallclock, memory, worker_memory, temp_blocks, "
        "shared_blocks, wal_bytes, planning (e.g. --threshold memory=0.3)",
    )
    gate.add_argument(
        "--lake-write",
        action="store_true",
        help="append the run's rows to the lake's gate_results and the whole report (raw measurements "
        "included) to gate_runs ([lake] root or --lake)",
    )
    gate.add_argument(
        "--max-seconds",
        "--suite-max-seconds",
        dest="suite_max_seconds",
        type=float,
        default=None,
        help="the whole run's budget, from its start ([gate] suite_max_seconds, 600); what is undecided "
        "when it is spent is INCONCLUSIVE",
    )
    gate.add_argument("--json", help="also write the JSON report (gate_suite_report.schema.json) here")
    gate.add_argument("--no-fail-on-warn", action="store_true", help="exit 0 on WARN")
    gate.set_defaults(func=cmd_gate)

    drift = _command(
        sub,
        "drift",
        "distribution drift against anchored baselines ([drift] settings)",
        formats=True,
        description="run / anchor: the per-interval latency drift of pg_stat_statements means (the cheaper "
        "proxy). anchor-samples / score / checks: per-execution drift of the auto_explain samples "
        "(latency, cost, cardinality) against anchored baselines ([drift.samples], [drift.score]): "
        "anchor-samples anchors a window under a new --version; score scores the current window, writes "
        "execution_drift and runs the checks; score --payload FILE scores one CI candidate "
        "(drift_payload.schema.json; '-' reads stdin) against its baseline_version; checks runs the "
        "stale-baseline and degenerate-samples checks.",
    )
    drift.add_argument(
        "action", nargs="?", choices=["run", "anchor", "anchor-samples", "score", "checks"], default="run"
    )
    drift.add_argument("--start", help="anchor, anchor-samples: baseline window start (ISO-8601)")
    drift.add_argument("--end", help="anchor, anchor-samples: baseline window end (ISO-8601)")
    drift.add_argument("--label", help="anchor: a name for the baseline, e.g. 'before v812'")
    drift.add_argument(
        "--version",
        help="anchor-samples: the new baseline version (never reused); score: score against this version "
        "(default: each pair's newest)",
    )
    drift.add_argument(
        "--payload", metavar="FILE", help="score: one CI candidate payload (JSON; - for stdin)"
    )
    drift.add_argument("--now", help="score, checks, anchor-samples: the as-of time (ISO-8601; default now)")
    drift.add_argument(
        "--current-window",
        default=None,
        help="score: candidate window ending at --now, e.g. 10m ([drift.samples] current_window)",
    )
    drift.add_argument(
        "--profile",
        choices=["calibrated", "calibrated_linear", "design"],
        default=None,
        help="score: the scorer's profile ([drift.score] profile, calibrated)",
    )
    drift.add_argument(
        "--instance", help="anchor, anchor-samples, score --payload: one instance (default: the whole fleet)"
    )
    drift.add_argument("--fingerprint", help="anchor: one query fingerprint (default: every query)")
    drift.add_argument(
        "--all",
        action="store_true",
        help="rows of every series (default: status drift or watch; score: flag WARN or BLOCK)",
    )
    drift.add_argument("--fail-on-drift", action="store_true", help="exit 1 when a series has status drift")
    drift.set_defaults(func=cmd_drift)

    compact = _command(
        sub,
        "compact",
        "merge each closed day's snapshot files into one per instance",
        formats=True,
        description="Merge each closed day's snapshot files into one per instance, and expire analysis "
        "rows past [lake] analysis_retention_days. JSON/CSV rows: one per partition (action compacted or "
        "expired).",
    )
    compact.add_argument(
        "--min-age-days", type=int, default=1, help="only days at least this old (default 1)"
    )
    compact.add_argument(
        "--analysis-retention-days",
        type=int,
        default=None,
        help="delete analysis rows of runs older than this many days (0 keeps them; default: [lake] "
        "analysis_retention_days, 30)",
    )
    compact.set_defaults(func=cmd_compact)

    report = _command(
        sub,
        "report",
        "write the weekly regression report (HTML + markdown + plots)",
        formats=True,
        description="Write the weekly regression report (report.html, self-contained with its plots, and "
        "report.md with PNGs) and print its regressions (the findings that began in the week, the "
        "finding_states columns).",
    )
    report.add_argument("--week", help="ISO week YYYY-Www (default: the current week, so far)")
    report.add_argument("--out", default=None, help="report folder (default: [report] out, data/reports)")
    report.set_defaults(func=cmd_report)

    metrics = _command(
        sub,
        "metrics",
        "the lake's Prometheus exposition, to stdout or a node_exporter textfile",
        description="The lake's metrics in the Prometheus text format (docs/metrics.md): collection "
        "health per instance, the collector's skipped EXPLAINs, drift scores, verdicts and degenerate pairs, "
        "open findings by kind, alerts sent and dead-lettered. --textfile writes them atomically for "
        "node_exporter's textfile collector (run it from cron); --rules prints the drift alert rules of "
        "the effective settings instead (data/prometheus/radar.rules.yml is the default's).",
    )
    metrics.add_argument(
        "--format",
        choices=["prom", "json", "jsonl"],
        default="prom",
        help="prom: the Prometheus text format (default); json / jsonl: one object per sample (family, type, "
        "name, labels, value); --textfile always writes prom",
    )
    metrics.add_argument(
        "--textfile",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="write to PATH (a .prom file in node_exporter's textfile folder) instead of stdout; without "
        "PATH: [metrics] textfile",
    )
    metrics.add_argument(
        "--rules", action="store_true", help="print the Prometheus alert rules ([drift.samples] thresholds)"
    )
    metrics.set_defaults(func=cmd_metrics)

    serve = _command(
        sub,
        "serve-metrics",
        "serve the lake's Prometheus exposition over HTTP until stopped",
        description="A long-running HTTP endpoint (any path, e.g. /metrics) with the exposition of `radar "
        "metrics`, the lake read again at most once per [metrics] cache_s.",
    )
    serve.add_argument(
        "--port", type=int, default=None, help="port ([metrics] port, 9188; 0: any free one, printed)"
    )
    serve.add_argument("--host", default=None, help="address to listen on ([metrics] host, 127.0.0.1)")
    serve.set_defaults(func=cmd_serve_metrics)

    views = _command(sub, "views", "print the DuckDB view definitions over the lake")
    views.set_defaults(func=cmd_views)
    sql = _command(sub, "sql", "run a DuckDB query over the lake views", formats=True)
    sql.add_argument("query")
    sql.add_argument(
        "--max-rows",
        type=positive_rows,
        default=None,
        help=f"print at most this many rows, 0 for all (default: {TABLE_MAX_ROWS} in a table, all in JSON "
        "and CSV); a line (stderr for JSON/CSV) says when rows were left out",
    )
    sql.add_argument(
        "--max-width",
        type=positive_rows,
        default=SQL_CELL_WIDTH,
        metavar="CHARS",
        help=f"table format: cut each cell at this many characters with an ellipsis, 0 for never (default: "
        f"{SQL_CELL_WIDTH}); a table still wider than the terminal prints one vertical record per row",
    )
    sql.set_defaults(func=cmd_sql)

    plans = _command(
        sub,
        "plans",
        "a query's plan history and its last plan change",
        formats=True,
        description="A query's plan history: every stored plan shape per source, oldest first, each with "
        "what changed since the one before it, then the last change and the plan diff of its latest "
        "regression. QUERY is a queryid (negative ones too) or a fragment of the normalized text.",
    )
    plans.add_argument("query", metavar="QUERYID|TEXT")
    plans.add_argument("--instance", help="only this instance")
    plans.add_argument(
        "--source",
        choices=["pg_store_plans", "generic_explain", "auto_explain"],
        help="only this plan source",
    )
    plans.add_argument(
        "--max-rows", type=positive_rows, default=None, help="print at most this many rows, 0 for all"
    )
    plans.set_defaults(func=cmd_plans)

    pins = _command(
        sub,
        "pins",
        "plan pins: a plan-change finding's last good plan as a pg_hint_plan hint (list, explain, propose, "
        "apply, remove)",
        formats=True,
        description="The plan pins ledger (lake table plan_pins). list: each pin's latest state; explain "
        "PIN_ID: its evidence (finding, p-value, latency before and after, the two plans), hints and the "
        "exact SQL that would apply and remove it, then its history; propose: a pin for every open finding "
        "caused by a plan change whose last good plan can still be produced (each server's catalogue is "
        "read to check; nothing is written to any server), recorded in the ledger; apply / remove PIN_ID: "
        "run its SQL as the pin role (radar setup-sql --pins) on an instance that opted in ([pinning] mode = "
        "apply, apply_instances), after checking pg_hint_plan is loaded and its hint table on; check: "
        "judge each applied pin (verified, or failed and removed) and remove each pin in place whose plan "
        "can no longer be produced (a relation or index gone), whose [pinning] ttl passed or, once verified, "
        "whose query id is gone (no samples for [pinning] gone_after), recorded.",
    )
    pins.add_argument(
        "action",
        nargs="?",
        choices=["list", "explain", "propose", "apply", "remove", "check"],
        default="list",
    )
    pins.add_argument(
        "pin_id", nargs="?", metavar="PIN_ID", help="explain, apply, remove: the pin (from radar pins list)"
    )
    pins.add_argument(
        "--dry-run",
        action="store_true",
        help="apply, remove: print the SQL that would run, connect to nothing, record nothing",
    )
    pins.add_argument("--instance", help="list, explain: only this instance's pins")
    pins.add_argument(
        "--max-rows", type=positive_rows, default=None, help="print at most this many rows, 0 for all"
    )
    pins.set_defaults(func=cmd_pins)

    config = _command(
        sub,
        "config",
        "show the effective settings and where each came from, or check them without running",
        formats=True,
        description="show: every setting's effective value and its source (default, file, env, flag); "
        "check: validate the settings (and the fleet file) without running anything. The design flags "
        "given here are applied as they would be on the command that takes them.",
    )
    config.add_argument("action", choices=["show", "check"])
    _design_flags(config, *ALL_DESIGN_FLAGS)
    config.set_defaults(func=cmd_config)

    setup = _command(
        sub, "setup-sql", "print the SQL for the monitoring login, the explain role and the EXPLAIN helper"
    )
    target = setup.add_mutually_exclusive_group()
    target.add_argument(
        "--server-version-num", type=int, default=None, help="target server's version (default: 180000)"
    )
    target.add_argument(
        "--dsn",
        help="read the version and pg_stat_statements from this server instead (its password is never "
        "printed); --database then defaults to the DSN's database",
    )
    setup.add_argument(
        "--database", action="append", help="database to install the helper in (repeatable; default postgres)"
    )
    setup.add_argument("--monitor-role", default="radar_monitor", help="login role (default: %(default)s)")
    setup.add_argument("--explain-role", default="radar_explain", help="NOLOGIN role EXPLAINs run as")
    setup.add_argument("--helper", default="radar.explain_generic", help="schema.function of the helper")
    setup.add_argument(
        "--pins",
        action="store_true",
        help="also the plan pins' role (PostgreSQL 16+: NOLOGIN, writes hint_plan.hints only; the monitor "
        "role may SET ROLE to it) and its grants in each database holding pg_hint_plan (docs/pins.md)",
    )
    setup.add_argument("--pin-role", default="radar_pinner", help="the pins' role (default: %(default)s)")
    setup.set_defaults(func=cmd_setup_sql)

    demo = _command(sub, "demo", "embedded fleet + workload + a real regression found and explained")
    demo.add_argument("--seconds", type=float, default=75.0, help="workload duration")
    demo.add_argument("--keep", action="store_true", help="leave the demo fleet running")
    demo.add_argument(
        "--all", action="store_true", help="also list every series analysed and not reported (each line)"
    )
    demo.set_defaults(func=cmd_demo, lake="data/demo/lake")
    return parser
