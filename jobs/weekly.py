"""The weekly regression report: what regressed, when, why, and how healthy the collection was.

``weekly_summary`` and ``render_markdown`` are pure; ``write_weekly_report`` reads the lake, draws one
plot per reported regression (jobs.report) and publishes ``<out>/<YYYY-Www>/report.md`` atomically: the
report folder is built under a temporary name and renamed into place, so readers never see half a report.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

from jobs import lake
from jobs.detect.findings import RECOVERED, SUPERSEDED, latest_states
from jobs.publish.drift import WeekDrift, drift_flags_text, week_drift, with_drift_flags
from jobs.report import plot_regression, plt, regression_series
from jobs.schemas import EXECUTION_DRIFT, FINDING_STATES, QUERY_SAMPLES, QUERY_TEXTS, SNAPSHOT_RUNS
from jobs.weekly_config import WeeklyReportConfig as WeeklyReportConfig


@dataclass(frozen=True)
class WeeklySummary:
    week: str
    start: datetime
    end: datetime
    regressions: pl.DataFrame
    """Findings that began in the week (latest state, not superseded), once each, largest added load
    first."""
    fleet_health: pl.DataFrame
    deploys: pl.DataFrame
    drift: pl.DataFrame
    """Queries whose latency distribution drifted (status drift) in a run ending in the week, once each."""
    execution_drift: WeekDrift | None = None
    """Per-execution drift (execution_drift) scored in the week; None: the lake has no such row at all."""
    query_names: dict[tuple[str, int], str] = field(default_factory=dict)
    """(instance, queryid) -> query text, to name drifted queries (query_texts)."""


def week_bounds(week: str) -> tuple[datetime, datetime]:
    """[Monday 00:00 UTC, next Monday) of an ISO week written ``YYYY-Www``."""
    try:
        year, number = week.split("-W")
        monday = date.fromisocalendar(int(year), int(number), 1)
    except ValueError:
        raise ValueError(f"week {week!r}: expected ISO form YYYY-Www, e.g. 2026-W48") from None
    start = datetime(monday.year, monday.month, monday.day, tzinfo=UTC)
    return start, start + timedelta(days=7)


def iso_week(moment: datetime) -> str:
    year, number, _ = moment.isocalendar()
    return f"{year}-W{number:02d}"


def weekly_summary(
    week: str,
    findings: pl.DataFrame,
    runs: pl.DataFrame,
    deploys: pl.DataFrame,
    drift: pl.DataFrame | None = None,
    execution_drift: pl.DataFrame | None = None,
    texts: pl.DataFrame | None = None,
) -> WeeklySummary:
    """Pure: the week's findings (latest state of each, jobs.detect.findings: one per regression, however
    many analysis runs saw it) that began in the week and were not superseded; health; deploys.
    ``execution_drift``: the per-execution drift rows (jobs.publish.drift.week_drift); with any, each
    regression also carries its query's latest drift flags. ``texts`` (query_texts): names of drifted
    queries."""
    start, end = week_bounds(week)
    detected = findings.filter(
        pl.col("onset").is_between(start, end, closed="left") & (pl.col("status") != SUPERSEDED)
    ).sort("added_load_ms_per_s", "onset", "finding_id", descending=[True, False, False], nulls_last=True)
    week_runs = runs.filter(pl.col("captured_at").is_between(start, end, closed="left"))
    health = (
        week_runs.group_by("instance")
        .agg(
            (pl.col("status") == "ok").sum().alias("snapshots_ok"),
            (pl.col("status") != "ok").sum().alias("snapshots_failed"),
            pl.col("error").filter(pl.col("status") != "ok").last().alias("last_error"),
            pl.col("insufficient_privilege_rows").max().alias("max_hidden_rows"),
        )
        .sort("instance")
    )
    week_deploys = deploys.filter(pl.col("deployed_at").is_between(start, end, closed="left")).sort(
        "deployed_at"
    )
    drifted = pl.DataFrame()
    if drift is not None and drift.height:
        drifted = (
            drift.filter(
                (pl.col("status") == "drift") & pl.col("current_end").is_between(start, end, closed="left")
            )
            .sort("current_end")
            .unique(["instance", "series"], keep="last", maintain_order=True)
            .sort("added_load_ms_per_s", descending=True, nulls_last=True)
        )
    scored = execution_drift is not None and execution_drift.height > 0
    if scored:  # the flags as they stood at the week's end, not as they are today
        detected = with_drift_flags(detected, execution_drift.filter(pl.col("scored_at") < end))
    names: dict[tuple[str, int], str] = {}
    if scored and texts is not None and texts.height:
        latest_texts = texts.sort("captured_at").unique(["instance", "queryid"], keep="last")
        names = {(i, q): t for i, q, t in latest_texts.select("instance", "queryid", "query").iter_rows()}
    return WeeklySummary(
        week,
        start,
        end,
        detected,
        health,
        week_deploys,
        drifted,
        execution_drift=week_drift(execution_drift, start, end) if scored else None,
        query_names=names,
    )


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(
    summary: WeeklySummary, plots: dict[int, str], config: WeeklyReportConfig = WeeklyReportConfig()
) -> str:
    """Pure: the report text; ``plots`` maps a regression's row number to its image's relative path."""
    out = [
        f"# Query regressions, week {summary.week}",
        "",
        f"{summary.start:%Y-%m-%d} to {summary.end - timedelta(days=1):%Y-%m-%d} (UTC). "
        f"{summary.regressions.height} regression(s) began this week; "
        f"{summary.deploys.height} deploy(s) recorded.",
        "",
        "## Regressions",
        "",
    ]
    if summary.regressions.is_empty():
        out += ["None detected.", ""]
    shown = summary.regressions.head(config.max_regressions)
    for number, row in enumerate(shown.iter_rows(named=True)):
        cause = (
            f"deploy {row['deploy_version']}" if row["analysis"] == "deploy" else "no deploy (unannounced)"
        )
        p = row["p_value"]
        others = f"; other deploys near: {row['other_deploys']}" if row.get("other_deploys") else ""
        state = (
            f"recovered at {row['recovered_at']:%Y-%m-%d %H:%M:%S} UTC"
            if row["status"] == RECOVERED and row.get("recovered_at") is not None
            else row["status"]
        )
        out += [
            f"### {number + 1}. {row['instance']}: `{_cell(str(row['query'])[:160])}`",
            "",
            f"- **{_ms(row['before_mean_ms'])} → {_ms(row['after_mean_ms'])}** per call, "
            f"began {row['detected_change_at']:%Y-%m-%d %H:%M:%S} UTC ({cause}{others}); p = {p:.2g}",
            f"- status: {state} (finding {row['finding_id']})",
            f"- added load: {row['added_load_ms_per_s'] or 0:,.1f} ms of execution per second; "
            f"queryid {row['queryid']} (all: {row['queryids']})",
            f"- plan: {row.get('plan_diff_summary') or 'no plan captured'}",
            *([f"- per-execution drift: {drift_flags_text(row)}"] if "drift_latency" in row else []),
            "",
        ]
        if number in plots:
            out += [f"![latency of regression {number + 1}]({plots[number]})", ""]
    if summary.regressions.height > shown.height:
        out += [
            f"… and {summary.regressions.height - shown.height} more (see the `findings` view).",
            "",
        ]
    out += ["## Latency drift", ""]
    if summary.drift.is_empty():
        out += ["No query's latency distribution drifted from its baseline.", ""]
    else:
        out += [
            "| instance | query | p95 baseline → current | JS | PSI | baseline |",
            "|---|---|---|---|---|---|",
        ]
        for row in summary.drift.iter_rows(named=True):
            baseline = row["baseline_label"] or row["baseline_source"]
            out.append(
                f"| {row['instance']} | `{_cell(str(row['query'])[:100])}` | {_ms(row['baseline_p95_ms'])} → "
                f"{_ms(row['current_p95_ms'])} | {row['js']:.2f} | {row['psi']:.2f} | {_cell(baseline)} |"
            )
        out.append("")
    out += render_execution_drift(summary)
    out += ["## Deploys", ""]
    if summary.deploys.is_empty():
        out += ["None recorded.", ""]
    for row in summary.deploys.iter_rows(named=True):
        target = row["instance"] or "whole fleet"
        out.append(f"- {row['deployed_at']:%Y-%m-%d %H:%M} UTC: {row['version']} to {target}")
    out += [
        "",
        "## Collection health",
        "",
        "| instance | snapshots ok | failed | last error |",
        "|---|---|---|---|",
    ]
    for row in summary.fleet_health.iter_rows(named=True):
        out.append(
            f"| {row['instance']} | {row['snapshots_ok']} | {row['snapshots_failed']} | "
            f"{_cell(row['last_error'] or '')} |"
        )
    return "\n".join(out) + "\n"


def _flag_number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render_execution_drift(summary: WeeklySummary) -> list[str]:
    """Pure: the report's per-execution drift section: every pair WARN or BLOCK in the week, and how many
    pairs had too few samples to be judged (said, never folded into PASS)."""
    out = ["## Per-execution drift (cost, latency, cardinality)", ""]
    week = summary.execution_drift
    if week is None or week.scored_pairs == 0:
        return [*out, "No per-execution drift scored this week (no execution_drift rows).", ""]
    counts = week.latest_counts
    out += [
        f"{week.scored_pairs} (instance, query, metric) pair(s) scored; at their latest scoring of the week "
        f"{counts['BLOCK']} BLOCK, {counts['WARN']} WARN, {counts['PASS']} PASS.",
        "",
    ]
    if week.flagged.is_empty():
        out += ["No pair's distribution drifted to WARN or BLOCK this week.", ""]
    else:
        out += [
            "| flag | instance | query | metric | JS | PSI | baseline | scorings flagged | first flagged "
            "| latest |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in week.flagged.iter_rows(named=True):
            name = summary.query_names.get((row["instance"], row["queryid"]))
            query = name or row["fingerprint"] or row["query_hash"][:16]
            out.append(
                f"| {row['flag']} | {_cell(row['instance'])} | `{_cell(str(query)[:100])}` | "
                f"{row['metric']} | {_flag_number(row['js'])} | {_flag_number(row['psi'])} | "
                f"{_cell(row['baseline_version'])} | "
                f"{row['scorings_flagged']} | {row['first_flagged_at']:%Y-%m-%d %H:%M} UTC | "
                f"{row['latest_flag'] or '–'} |"
            )
        out.append("")
    out += [
        f"{week.insufficient_pairs} pair(s) had too few samples to be judged at their latest scoring "
        "(WARN insufficient_samples: not a PASS; widen the capture window or the sample rate).",
        "",
    ]
    return out


def write_weekly_report(
    lake_root: Path, week: str, out_root: Path, config: WeeklyReportConfig = WeeklyReportConfig()
) -> Path:
    """Read the lake, draw the plots, publish ``<out_root>/<week>/report.md``; returns its path."""
    regressions = latest_states(lake.read_table(lake_root, FINDING_STATES))
    runs = lake.read_table(lake_root, SNAPSHOT_RUNS)
    deploys = lake.read_table(lake_root, "deploy_events")
    drift = lake.read_table(lake_root, "latency_drift")
    _, end = week_bounds(week)
    # up to the week's end only: a report of a past week reads neither later scorings nor their files' rows
    execution_drift = lake.read_table(
        lake_root, EXECUTION_DRIFT, lambda f: f.filter(pl.col("scored_at") < end)
    )
    texts = lake.read_table(lake_root, QUERY_TEXTS) if execution_drift.height else None
    summary = weekly_summary(week, regressions, runs, deploys, drift, execution_drift, texts)
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{week}-", dir=out_root))
    try:
        plots: dict[int, str] = {}
        shown = summary.regressions.head(config.max_regressions)
        if shown.height:
            samples = lake.read_table(lake_root, QUERY_SAMPLES)
            texts = lake.read_table(lake_root, QUERY_TEXTS)
            for number, row in enumerate(shown.iter_rows(named=True)):
                series = regression_series(samples, texts, row["instance"], row["series"])
                if series.is_empty():
                    continue
                name = f"regression-{number + 1}.png"
                figure = plot_regression(series, row)
                figure.savefig(building / name, dpi=100)
                plt.close(figure)
                plots[number] = name
        (building / "report.md").write_text(render_markdown(summary, plots, config))
        building.chmod(0o755)
        final = out_root / week
        if final.exists():
            retired = out_root / f".{week}-old-{datetime.now(UTC):%H%M%S%f}"
            final.rename(retired)
            building.rename(final)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            building.rename(final)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return final / "report.md"
