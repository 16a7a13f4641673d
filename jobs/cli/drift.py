"""`radar drift`: interval drift, anchored per-execution baselines, scoring, payloads and checks."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from jobs.cli.common import EXIT_USAGE, escaped, lake_root, say, settings_of, show_rows

DRIFT_TABLE_COLUMNS = ["instance", "status", "reason", "query", "js", "psi"]


EXECUTION_DRIFT_TABLE_COLUMNS = [
    "instance",
    "query_hash",
    "metric",
    "flag",
    "reason",
    "n_baseline",
    "n_candidate",
    "js",
    "psi",
    "baseline_version",
]
EXIT_PAYLOAD_INVALID = 3
EXIT_NO_BASELINE = 4
DRIFT_FLAG_EXIT = {"PASS": 0, "WARN": 1, "BLOCK": 2}


def _drift_now(args: argparse.Namespace) -> Any:
    from jobs.collect.deploys import parse_timestamp

    return parse_timestamp(args.now, "--now") if args.now else None


def drift_anchor_samples(args: argparse.Namespace) -> int:
    """`radar drift anchor-samples`: anchor execution-sample baselines of a window under a new version."""
    import polars as pl

    from jobs.collect.deploys import parse_timestamp
    from jobs.drift.baselines import anchor_sample_baselines

    if not (args.version and args.start and args.end):
        say(args, "[red]radar drift anchor-samples needs --version, --start and --end[/red]")
        return EXIT_USAGE
    rows = anchor_sample_baselines(
        lake_root(args),
        version=args.version,
        start=parse_timestamp(args.start, "--start"),
        end=parse_timestamp(args.end, "--end"),
        instance=args.instance,
        config=settings_of(args).drift.samples,
        now=_drift_now(args),
    )
    shown = rows.select(
        "baseline_version",
        "instance",
        "query_hash",
        "metric",
        "n_window",
        pl.col("samples").list.len().cast(pl.Int64).alias("n_kept"),
        "window_start",
        "window_end",
        "created_at",
    )
    show_rows(args, shown, f"baselines anchored as {args.version}")
    say(
        args,
        f"baseline version {escaped(args.version)}: {rows.height} (instance, query, metric) pairs anchored",
    )
    return 0


def _say_checks(args: argparse.Namespace, checks: list[Any]) -> bool:
    """One line per check; True when every check passed."""
    for check in checks:
        style = "green" if check.passed else "yellow"
        verdict = "ok" if check.passed else "FAILED"
        say(args, f"[{style}]check {check.name} {verdict}:[/{style}] {escaped(check.description)}")
    return all(check.passed for check in checks)


def drift_score(args: argparse.Namespace) -> int:
    """`radar drift score`: the lake's current window against the anchored baselines (execution_drift)."""
    import polars as pl

    from jobs.drift.checks import UNSCORED_REASONS
    from jobs.drift.execution import check_lake, flag_counts, run_execution_drift, worst_flag

    config = settings_of(args).drift
    drift = run_execution_drift(lake_root(args), config, _drift_now(args), args.version)
    shown = drift if args.all else drift.filter(pl.col("flag") != "PASS")
    if shown.height or args.format != "table":
        show_rows(args, shown, "execution drift", columns=EXECUTION_DRIFT_TABLE_COLUMNS)
    counts = "  ".join(f"{flag}: {n}" for flag, n in flag_counts(drift).items())
    unscored = ", ".join(f"{r}: {drift.filter(pl.col('reason') == r).height}" for r in UNSCORED_REASONS)
    say(args, f"{counts}  ({unscored})" if drift.height else "no pair: no execution sample and no baseline")
    if drift.height:
        _say_checks(args, check_lake(lake_root(args), config, drift["scored_at"][0]))
    worst = worst_flag(drift)
    return DRIFT_FLAG_EXIT[worst] if worst else 0


def drift_score_payload(args: argparse.Namespace) -> int:
    """`radar drift score --payload FILE`: one CI candidate against its anchored baseline; exit by flag."""
    import json

    import polars as pl

    from jobs.drift.baselines import load_sample_baselines
    from jobs.drift.contract import PayloadError, parse_payload, score_payload
    from jobs.publish.output import plain_rows

    source = "stdin" if args.payload == "-" else args.payload
    limit = settings_of(args).drift.max_payload_bytes
    try:
        # Read at most one byte past the limit: a 50 MB payload must not be read whole to be refused.
        if args.payload == "-":
            text = sys.stdin.buffer.read(limit + 1)
        else:
            with open(args.payload, "rb") as handle:
                text = handle.read(limit + 1)
        payload = parse_payload(text, limit)
    except (OSError, UnicodeDecodeError) as exc:
        say(args, f"[red]payload {escaped(source)} unreadable:[/red] {escaped(str(exc))}")
        return EXIT_PAYLOAD_INVALID
    except PayloadError as exc:
        say(args, f"[red]payload {escaped(source)} rejected:[/red] {escaped(str(exc))}")
        return EXIT_PAYLOAD_INVALID
    version, qh, metric = payload["baseline_version"], payload["query_hash"], payload["metric"]
    baselines = load_sample_baselines(lake_root(args)).filter(
        (pl.col("query_hash") == qh) & (pl.col("metric") == metric)
    )
    if args.instance:
        baselines = baselines.filter(pl.col("instance") == args.instance)
    chosen = baselines.filter(pl.col("baseline_version") == version)
    scope = f" on instance {args.instance}" if args.instance else ""
    if chosen.height == 0:
        known = sorted(set(baselines["baseline_version"].to_list()))
        say(
            args,
            f"[red]no anchored baseline[/red] of version {escaped(version)!r} for query_hash {qh}, metric "
            f"{metric}{scope} (versions anchored for it: {escaped(', '.join(known)) or 'none'}; anchor one "
            "with `radar drift anchor-samples`)",
        )
        return EXIT_NO_BASELINE
    if chosen.height > 1:
        instances = ", ".join(sorted(chosen["instance"].to_list()))
        say(
            args,
            f"[red]baseline {escaped(version)!r} of query_hash {qh}, {metric} is anchored on several "
            f"instances[/red] ({escaped(instances)}): give --instance",
        )
        return EXIT_NO_BASELINE
    baseline = chosen.row(0, named=True)
    score = score_payload(payload, baseline["samples"], settings_of(args).drift.score, validated=True)
    result = {"instance": baseline["instance"], "baseline_version": version, **score}
    if args.format in ("json", "jsonl"):
        (row,) = plain_rows([result], list(result))
        sys.stdout.write(json.dumps(row) + "\n")  # one DriftScore object
    else:
        show_rows(args, pl.DataFrame([result]), "drift score")
    return DRIFT_FLAG_EXIT[score["flag"]]


def drift_checks_cmd(args: argparse.Namespace) -> int:
    """`radar drift checks`: the stale-baseline and degenerate-samples checks over the lake."""
    import polars as pl

    from jobs.drift.execution import check_lake

    checks = check_lake(lake_root(args), settings_of(args).drift, _drift_now(args))
    rows = pl.DataFrame(
        {
            "check": [c.name for c in checks],
            "passed": [c.passed for c in checks],
            "description": [c.description for c in checks],
        }
    )
    if args.format != "table":
        show_rows(args, rows)
        return 0 if all(c.passed for c in checks) else 1
    return 0 if _say_checks(args, checks) else 1


def cmd_drift(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.collect.deploys import parse_timestamp
    from jobs.drift.interval import anchor_baseline, run_drift

    if args.action == "anchor-samples":
        return drift_anchor_samples(args)
    if args.action == "score":
        return drift_score_payload(args) if args.payload else drift_score(args)
    if args.action == "checks":
        return drift_checks_cmd(args)
    if args.action == "anchor":
        if not (args.start and args.end and args.label):
            say(args, "[red]radar drift anchor needs --start, --end and --label[/red]")
            return 2
        row = anchor_baseline(
            lake_root(args),
            start=parse_timestamp(args.start, "--start"),
            end=parse_timestamp(args.end, "--end"),
            instance=args.instance,
            fingerprint=args.fingerprint,
            label=args.label,
        )
        say(args, f"baseline anchored: {escaped(str(row))}")
        return 0
    drift = run_drift(lake_root(args), settings_of(args).drift)
    shown = drift if args.all else drift.filter(pl.col("status").is_in(["drift", "watch"]))
    if shown.height or args.format != "table":
        show_rows(args, shown, "latency drift", columns=DRIFT_TABLE_COLUMNS)
    counts = drift.group_by("status").len().sort("status")
    say(
        args,
        "  ".join(f"{row['status']}: {row['len']}" for row in counts.iter_rows(named=True)) or "no series",
    )
    if args.fail_on_drift and drift.filter(pl.col("status") == "drift").height:
        return 1
    return 0
