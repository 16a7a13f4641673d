"""The weekly regression report: what regressed, when, why, and how healthy the collection was.

``weekly_summary``, ``headline``, ``render_markdown`` and the words helpers are pure;
``write_weekly_report`` reads the lake, draws one plot per reported regression (jobs.report) and publishes
``<out>/<YYYY-Www>/`` atomically with ``report.html`` (one self-contained file: the plots inlined as data
URIs, no script, no CDN; jobs.publish.weekly_html) and ``report.md`` (for chat and wikis, with the PNGs
beside it): the folder is built under a temporary name and renamed into place, so readers never see half a
report.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs import lake
from jobs.detect.findings import OPEN, RECOVERED, SUPERSEDED, latest_states
from jobs.evidence import VERY_STRONG, WEAK, evidence_words
from jobs.plandiff import plan_diff_rows as plan_diff_rows  # the report's plan table (weekly_html)
from jobs.publish.drift import WeekDrift, drift_flags_text, week_drift, with_drift_flags
from jobs.report import LaterStep, later_steps, plot_regression, plt, regression_series
from jobs.schemas import (
    EXECUTION_DRIFT,
    FINDING_STATES,
    GATE_RESULTS,
    PLAN_DIFFS,
    QUERY_SAMPLES,
    QUERY_TEXTS,
    SNAPSHOT_RUNS,
)
from jobs.weekly_config import WeeklyReportConfig as WeeklyReportConfig

HEALTH_COUNTS: tuple[str, ...] = (
    "snapshots_missed",
    "restarts",
    "stats_resets",
    "evictions",
    "intervals_dropped",
    "intervals_sampled",
)
"""Per instance and week, summed from the DuckDB view collection_health_daily (the lake table
collection_health, which the samples job writes)."""


@dataclass(frozen=True)
class WeeklySummary:
    week: str
    start: datetime
    end: datetime
    regressions: pl.DataFrame
    """Findings that began in the week (latest state, not superseded), once each, largest added load
    first; with ``plan_diff`` (the structured JSON of plan_diffs) when one was computed."""
    fleet_health: pl.DataFrame
    """Per instance: snapshots ok / failed, last error, and HEALTH_COUNTS (0 when not recorded)."""
    deploys: pl.DataFrame
    drift: pl.DataFrame
    """Queries whose latency distribution drifted (status drift) in a run ending in the week, once each."""
    execution_drift: WeekDrift | None = None
    """Per-execution drift (execution_drift) scored in the week; None: the lake has no such row at all."""
    query_names: dict[tuple[str, int], str] = field(default_factory=dict)
    """(instance, queryid) -> query text, to name drifted queries (query_texts)."""
    gates: pl.DataFrame = field(default_factory=pl.DataFrame)
    """One row per gate run started in the week (gate_results): verdict, scenarios blocked / warned."""


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


def _fleet_health(runs: pl.DataFrame, health_days: pl.DataFrame | None) -> pl.DataFrame:
    """Per instance: the week's snapshot attempts (snapshot_runs) and its collection_health sums."""
    attempts = (
        runs.group_by("instance").agg(
            (pl.col("status") == "ok").sum().cast(pl.Int64).alias("snapshots_ok"),
            (pl.col("status") != "ok").sum().cast(pl.Int64).alias("snapshots_failed"),
            pl.col("error").filter(pl.col("status") != "ok").last().alias("last_error"),
            pl.col("insufficient_privilege_rows").max().alias("max_hidden_rows"),
        )
        if runs.height
        else pl.DataFrame(
            schema={
                "instance": pl.String,
                "snapshots_ok": pl.Int64,
                "snapshots_failed": pl.Int64,
                "last_error": pl.String,
                "max_hidden_rows": pl.Int64,
            }
        )
    )
    counts = pl.DataFrame(schema={"instance": pl.String, **dict.fromkeys(HEALTH_COUNTS, pl.Int64)})
    if health_days is not None and health_days.height:
        counts = health_days.group_by("instance").agg(pl.col(c).sum().cast(pl.Int64) for c in HEALTH_COUNTS)
    return (
        attempts.join(counts, on="instance", how="full", coalesce=True)
        .with_columns(pl.col("snapshots_ok", "snapshots_failed", *HEALTH_COUNTS).fill_null(0))
        .sort("instance")
    )


def _gate_runs(gates: pl.DataFrame | None, start: datetime, end: datetime) -> pl.DataFrame:
    """One row per gate run started in the week: its verdict and how many scenarios BLOCKed / WARNed."""
    if gates is None or gates.is_empty():
        return pl.DataFrame(
            schema={"run_started_at": pl.Datetime("us", "UTC"), "source": pl.String, "run_verdict": pl.String,
                    "scenarios": pl.UInt32, "blocked": pl.UInt32, "warned": pl.UInt32}
        )  # fmt: skip
    week = gates.filter(pl.col("run_started_at").is_between(start, end, closed="left"))
    scenario = pl.col("scenario")
    return (
        week.group_by("run_started_at", "source", "run_verdict")
        .agg(
            scenario.n_unique().alias("scenarios"),
            scenario.filter(pl.col("scenario_verdict") == "BLOCK").n_unique().alias("blocked"),
            scenario.filter(pl.col("scenario_verdict") == "WARN").n_unique().alias("warned"),
        )
        .sort("run_started_at", "source")
    )


def _with_plan_diffs(regressions: pl.DataFrame, plan_diffs: pl.DataFrame | None) -> pl.DataFrame:
    """The regressions with ``plan_diff`` (structured JSON) of their step: the latest plan_diffs row of the
    same (instance, series, change time); null when none was computed."""
    if plan_diffs is None or plan_diffs.is_empty() or regressions.is_empty():
        return regressions.with_columns(pl.lit(None, pl.String).alias("plan_diff"))
    keys = ["instance", "series", "detected_change_at"]
    latest = (
        plan_diffs.sort("computed_at", nulls_last=False)
        .unique(keys, keep="last", maintain_order=True)
        .select(*keys, "plan_diff")
    )
    return regressions.drop("plan_diff", strict=False).join(latest, on=keys, how="left", nulls_equal=True)


def weekly_summary(
    week: str,
    findings: pl.DataFrame,
    runs: pl.DataFrame,
    deploys: pl.DataFrame,
    drift: pl.DataFrame | None = None,
    execution_drift: pl.DataFrame | None = None,
    texts: pl.DataFrame | None = None,
    *,
    health_days: pl.DataFrame | None = None,
    gates: pl.DataFrame | None = None,
    plan_diffs: pl.DataFrame | None = None,
) -> WeeklySummary:
    """Pure: the week's findings (latest state of each, jobs.detect.findings: one per regression, however
    many analysis runs saw it) that began in the week and were not superseded; health; deploys.
    ``execution_drift``: the per-execution drift rows (jobs.publish.drift.week_drift); with any, each
    regression also carries its query's latest drift flags. ``texts`` (query_texts): names of drifted
    queries. ``health_days``: rows of the view collection_health_daily in the week; ``gates``: gate_results;
    ``plan_diffs``: the plan_diffs table."""
    start, end = week_bounds(week)
    detected = findings.filter(
        pl.col("onset").is_between(start, end, closed="left") & (pl.col("status") != SUPERSEDED)
    ).sort("added_load_ms_per_s", "onset", "finding_id", descending=[True, False, False], nulls_last=True)
    detected = _with_plan_diffs(detected, plan_diffs)
    week_runs = runs.filter(pl.col("captured_at").is_between(start, end, closed="left"))
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
        _fleet_health(week_runs, health_days),
        week_deploys,
        drifted,
        execution_drift=week_drift(execution_drift, start, end) if scored else None,
        query_names=names,
        gates=_gate_runs(gates, start, end),
    )


# ---------------------------------------------------------------------------------------------------------
# Words: what on-call reads in 30 seconds (pure)


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def slowdown_ratio(row: dict[str, Any]) -> float | None:
    before, after = row.get("before_mean_ms"), row.get("after_mean_ms")
    if before is None or after is None or before <= 0:
        return None
    return after / before


def slowdown_words(row: dict[str, Any]) -> str:
    """'82× slower', '2.4× slower', '45% slower' (after / before level); 'slower' without both levels."""
    ratio = slowdown_ratio(row)
    if ratio is None:
        return "slower"
    if ratio >= 10:
        return f"{ratio:,.0f}× slower"
    if ratio >= 2:
        return f"{ratio:.1f}× slower"
    if ratio > 1:
        return f"{(ratio - 1) * 100:.0f}% slower"
    return "no slower on average"


def moment_words(at: datetime) -> str:
    """'Tue 03 Nov 07:07 UTC'."""
    return f"{at.astimezone(UTC):%a %d %b %H:%M} UTC"


def cause_words(row: dict[str, Any]) -> str:
    if row.get("analysis") == "deploy" and row.get("deploy_version"):
        return f"at deploy {row['deploy_version']}"
    return "with no deploy near it (unannounced)"


def regression_words(row: dict[str, Any]) -> str:
    """'82× slower, since Tue 03 Nov 07:07 UTC, at deploy v4'."""
    change = row.get("detected_change_at")
    since = f", since {moment_words(change)}" if change is not None else ""
    return f"{slowdown_words(row)}{since}, {cause_words(row)}"


def severity(row: dict[str, Any], config: WeeklyReportConfig = WeeklyReportConfig()) -> str:
    """severe | major | minor, by how many times slower (WeeklyReportConfig.severe_ratio, major_ratio)."""
    ratio = slowdown_ratio(row) or 1.0
    return "severe" if ratio >= config.severe_ratio else "major" if ratio >= config.major_ratio else "minor"


def confidence_words(p: float | None, config: WeeklyReportConfig = WeeklyReportConfig()) -> str:
    """``jobs.evidence``'s words (the same as Slack's), with what a reader should do about them."""
    words = evidence_words(p, config.evidence_cutoffs())
    if words == VERY_STRONG:
        return f"{words} (this is not noise)"
    if words == WEAK:
        return f"{words}: check the plot before acting"
    return words


def status_words(row: dict[str, Any]) -> str:
    """'recovered Wed 04 Nov 09:00 UTC (back to 1.0 ms)' or 'open: still slow'."""
    if row.get("status") == RECOVERED:
        when = row.get("recovered_at")
        level = row.get("latest_mean_ms")
        back = f" (back to {_ms(level)})" if level is not None else ""
        return f"recovered {moment_words(when)}{back}" if when is not None else f"recovered{back}"
    if row.get("status") == OPEN:
        return "open: still slow"
    return str(row.get("status"))


def query_ids_words(row: dict[str, Any]) -> str:
    """'queryid 111', or 'queryid 111 (also 112, 113)': each id once."""
    main = row.get("queryid")
    others = [q for q in str(row.get("queryids") or "").split(",") if q and q != str(main)]
    return f"queryid {main}" + (f" (also {', '.join(others)})" if others else "")


@dataclass(frozen=True)
class Headline:
    """The report's top lines (``headline``): counts an on-call engineer reads first."""

    regressions: int
    open: int
    recovered: int
    by_instance: pl.DataFrame
    """instance, severe, major, minor, open, recovered: counts of the week's regressions."""
    latency_drifted: int
    execution_block: int
    execution_warn: int
    gate_runs: int
    gate_verdicts: dict[str, int]
    instances: int
    snapshots_ok: int
    snapshots_failed: int
    snapshots_missed: int
    restarts: int
    stats_resets: int
    evictions: int


SEVERITY_COUNTS: tuple[str, ...] = ("severe", "major", "minor", "open", "recovered")


def headline(summary: WeeklySummary, config: WeeklyReportConfig = WeeklyReportConfig()) -> Headline:
    """Pure: the summary at the top of the report."""
    rows = list(summary.regressions.iter_rows(named=True))
    per: dict[str, dict[str, int]] = {}
    for row in rows:
        counts = per.setdefault(row["instance"], dict.fromkeys(SEVERITY_COUNTS, 0))
        counts[severity(row, config)] += 1
        if row["status"] in (OPEN, RECOVERED):
            counts[row["status"]] += 1
    by_instance = pl.DataFrame(
        [{"instance": k, **v} for k, v in sorted(per.items())],
        schema={"instance": pl.String, **dict.fromkeys(SEVERITY_COUNTS, pl.Int64)},
    )
    health = summary.fleet_health
    columns = ("snapshots_ok", "snapshots_failed", *HEALTH_COUNTS)
    total = {c: int(health[c].sum()) if health.height else 0 for c in columns}
    week = summary.execution_drift
    verdicts = summary.gates["run_verdict"].value_counts(sort=True).rows() if summary.gates.height else []
    return Headline(
        regressions=len(rows),
        open=sum(r["status"] == OPEN for r in rows),
        recovered=sum(r["status"] == RECOVERED for r in rows),
        by_instance=by_instance,
        latency_drifted=summary.drift.height,
        execution_block=week.latest_counts["BLOCK"] if week else 0,
        execution_warn=week.latest_counts["WARN"] if week else 0,
        gate_runs=summary.gates.height,
        gate_verdicts={str(v): int(n) for v, n in verdicts},
        instances=health.height,
        snapshots_ok=total["snapshots_ok"],
        snapshots_failed=total["snapshots_failed"],
        snapshots_missed=total["snapshots_missed"],
        restarts=total["restarts"],
        stats_resets=total["stats_resets"],
        evictions=total["evictions"],
    )


def later_step_words(step: LaterStep) -> str:
    """'step up ×3.9 (no finding) at Mon 02 Nov 11:51 UTC'."""
    return f"{step.label} at {moment_words(step.at)}"


def render_markdown(
    summary: WeeklySummary,
    plots: dict[int, str],
    config: WeeklyReportConfig = WeeklyReportConfig(),
    later: dict[int, list[str]] | None = None,
) -> str:
    """Pure: the report text; ``plots`` maps a regression's row number to its image's relative path,
    ``later`` to the later steps of its series in words."""
    top = headline(summary, config)
    gates = ", ".join(f"{n} {v}" for v, n in top.gate_verdicts.items()) or "none"
    out = [
        f"# Query regressions, week {summary.week}",
        "",
        f"{summary.start:%Y-%m-%d} to {summary.end - timedelta(days=1):%Y-%m-%d} (UTC). "
        f"{summary.regressions.height} regression(s) began this week; "
        f"{summary.deploys.height} deploy(s) recorded.",
        "",
        "## Summary",
        "",
        f"- regressions: {top.regressions} ({top.open} open, {top.recovered} recovered)",
        *(
            f"  - {r['instance']}: {r['severe']} severe, {r['major']} major, {r['minor']} minor "
            f"({r['open']} open, {r['recovered']} recovered)"
            for r in top.by_instance.iter_rows(named=True)
        ),
        f"- drift: {top.latency_drifted} queries' latency drifted; per-execution "
        f"{top.execution_block} BLOCK, {top.execution_warn} WARN",
        f"- gate runs: {top.gate_runs} ({gates})",
        f"- collection: {top.instances} instance(s), {top.snapshots_failed} snapshot(s) failed, "
        f"{top.snapshots_missed} missed, {top.restarts} restart(s), {top.stats_resets} stats reset(s), "
        f"{top.evictions} eviction(s)",
        "",
        "## Regressions",
        "",
    ]
    if summary.regressions.is_empty():
        out += ["None detected.", ""]
    shown = summary.regressions.head(config.max_regressions)
    for number, row in enumerate(shown.iter_rows(named=True)):
        p = row["p_value"]
        others = f"; other deploys near: {row['other_deploys']}" if row.get("other_deploys") else ""
        evidence = f"p = {p:.2g}" if p is not None else "p not computed"
        out += [
            f"### {number + 1}. {row['instance']}: `{_cell(str(row['query'])[:160])}`",
            "",
            f"- **{regression_words(row)}**: {_ms(row['before_mean_ms'])} → {_ms(row['after_mean_ms'])} "
            f"per call{others}",
            f"- status: {status_words(row)} (finding {row['finding_id']})",
            f"- confidence: {confidence_words(p, config)} ({evidence})",
            f"- added load: {row['added_load_ms_per_s'] or 0:,.1f} ms of execution per second; "
            f"{query_ids_words(row)}",
            *([f"- work: {row['work_evidence']}"] if row.get("work_evidence") else []),
            *(f"- later in this series: {words}" for words in (later or {}).get(number, [])),
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
    out += ["## Gate runs", ""]
    if summary.gates.is_empty():
        out += ["No gate run recorded this week (gate_results)."]
    for row in summary.gates.iter_rows(named=True):
        out.append(
            f"- {row['run_started_at']:%Y-%m-%d %H:%M} UTC: **{row['run_verdict']}** "
            f"({_cell(row['source'])}; {row['scenarios']} scenario(s), {row['blocked']} BLOCK, "
            f"{row['warned']} WARN)"
        )
    out += ["", "## Deploys", ""]
    if summary.deploys.is_empty():
        out += ["None recorded."]
    for row in summary.deploys.iter_rows(named=True):
        target = row["instance"] or "whole fleet"
        out.append(f"- {row['deployed_at']:%Y-%m-%d %H:%M} UTC: {row['version']} to {target}")
    out += [
        "",
        "## Collection health",
        "",
        "| instance | snapshots ok | failed | missed | restarts | stats resets | evictions "
        "| intervals dropped | last error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary.fleet_health.iter_rows(named=True):
        out.append(
            f"| {row['instance']} | {row['snapshots_ok']} | {row['snapshots_failed']} | "
            f"{row['snapshots_missed']} | {row['restarts']} | {row['stats_resets']} | {row['evictions']} | "
            f"{row['intervals_dropped']} | {_cell(row['last_error'] or '')} |"
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


# ---------------------------------------------------------------------------------------------------------
# The writer: lake in, one folder per week out (I/O at the edge)


@dataclass(frozen=True)
class WeeklyReportFiles:
    """What ``write_weekly_report`` published."""

    week: str
    html: Path
    """report.html: self-contained (plots inlined), opens offline in any browser."""
    markdown: Path
    """report.md, with the plots as PNG files beside it."""


def week_health(lake_root: Path, start: datetime, end: datetime) -> pl.DataFrame:
    """The week's rows of the DuckDB view collection_health_daily (sql/duckdb/report_collection_health.sql):
    the report's health numbers are the ones `radar sql` gives (and a bad lake file is quarantined, as
    `radar sql` does)."""
    from jobs import duckdb_views
    from jobs.sqlfiles import load_sql

    sql = load_sql("report_collection_health", "duckdb")
    return duckdb_views.query(lake_root, sql.format(start=start.date(), end=end.date()))


def _steps_of(row: dict[str, Any], series: pl.DataFrame, findings: pl.DataFrame) -> list[LaterStep]:
    """Later changes of the plotted series: the onsets of later findings of the same series, and change
    points the report finds after the regression (jobs.report.later_steps) not next to one of those."""
    later = findings.filter(
        (pl.col("instance") == row["instance"])
        & (pl.col("series") == row["series"])
        & (pl.col("onset") > row["detected_change_at"])
        & (pl.col("status") != SUPERSEDED)
    ).sort("onset")
    steps = [
        LaterStep(f["onset"], f"finding ({f['status']}): {slowdown_words(f)}")
        for f in later.iter_rows(named=True)
    ]
    spacing = timedelta(seconds=float(series["interval_end"].diff().dt.total_seconds().median() or 60))
    for step in later_steps(series, row):
        if all(abs(step.at - known.at) > 3 * spacing for known in steps):
            steps.append(step)
    return sorted(steps, key=lambda s: s.at)


def _deploys_in_view(
    deploys: pl.DataFrame, instance: str, series: pl.DataFrame
) -> list[tuple[datetime, str]]:
    if deploys.is_empty() or series.is_empty():
        return []
    first, last = series["interval_start"].min(), series["interval_end"].max()
    shown = deploys.filter(
        (pl.col("instance").is_null() | (pl.col("instance") == instance))
        & pl.col("deployed_at").is_between(first, last)
    ).sort("deployed_at")
    return [(r["deployed_at"], str(r["version"])) for r in shown.iter_rows(named=True)]


def write_weekly_report(
    lake_root: Path, week: str, out_root: Path, config: WeeklyReportConfig = WeeklyReportConfig()
) -> WeeklyReportFiles:
    """Read the lake, draw the plots, publish ``<out_root>/<week>/report.html`` and ``report.md``."""
    import io

    from jobs.publish.weekly_html import png_data_uri, render_html

    findings = latest_states(lake.read_table(lake_root, FINDING_STATES))
    runs = lake.read_table(lake_root, SNAPSHOT_RUNS)
    deploys = lake.read_table(lake_root, "deploy_events")
    drift = lake.read_table(lake_root, "latency_drift")
    start, end = week_bounds(week)
    # up to the week's end only: a report of a past week reads neither later scorings nor their files' rows
    execution_drift = lake.read_table(
        lake_root, EXECUTION_DRIFT, lambda f: f.filter(pl.col("scored_at") < end)
    )
    texts = lake.read_table(lake_root, QUERY_TEXTS) if execution_drift.height else None
    summary = weekly_summary(
        week, findings, runs, deploys, drift, execution_drift, texts,
        health_days=week_health(lake_root, start, end),
        gates=lake.read_table(lake_root, GATE_RESULTS),
        plan_diffs=lake.read_table(lake_root, PLAN_DIFFS),
    )  # fmt: skip
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{week}-", dir=out_root))
    try:
        plots: dict[int, str] = {}
        images: dict[int, str] = {}
        later: dict[int, list[str]] = {}
        shown = summary.regressions.head(config.max_regressions)
        if shown.height:
            samples = lake.read_table(lake_root, QUERY_SAMPLES)
            all_texts = lake.read_table(lake_root, QUERY_TEXTS)
            for number, row in enumerate(shown.iter_rows(named=True)):
                series = regression_series(samples, all_texts, row["instance"], row["series"])
                if series.is_empty():
                    continue
                name = f"regression-{number + 1}.png"
                steps = _steps_of(row, series, findings)
                later[number] = [later_step_words(step) for step in steps]
                figure = plot_regression(
                    series, row, deploys=_deploys_in_view(deploys, row["instance"], series), steps=steps
                )
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
                plt.close(figure)
                (building / name).write_bytes(buffer.getvalue())
                plots[number] = name
                images[number] = png_data_uri(buffer.getvalue())
        (building / "report.md").write_text(render_markdown(summary, plots, config, later))
        (building / "report.html").write_text(render_html(summary, images, config, later))
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
    return WeeklyReportFiles(week, final / "report.html", final / "report.md")
