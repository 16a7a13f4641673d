"""The weekly report as Markdown."""

from __future__ import annotations

from datetime import timedelta

from jobs.drift.finding_flags import drift_flags_text
from jobs.escaping import markdown_code as code
from jobs.escaping import markdown_text as md
from jobs.publish.config import WeeklyReportConfig
from jobs.publish.weekly_summary import WeeklySummary
from jobs.publish.weekly_words import (
    confidence_words,
    headline,
    in_ms,
    query_ids_words,
    regression_words,
    status_words,
)
from jobs.readable import p_text


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
            f"  - {md(r['instance'])}: {r['severe']} severe, {r['major']} major, {r['minor']} minor "
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
        evidence = p_text(p)
        out += [
            f"### {number + 1}. {md(row['instance'])}: {code(row['query'], max_width=160)}",
            "",
            f"- **{md(regression_words(row))}**: "
            f"{in_ms(row['before_mean_ms'])} → {in_ms(row['after_mean_ms'])} per call{md(others)}",
            f"- status: {md(status_words(row))} (finding {md(row['finding_id'])})",
            f"- confidence: {confidence_words(p, config)} ({evidence})",
            f"- added load: {row['added_load_ms_per_s'] or 0:,.1f} ms of execution per second; "
            f"{md(query_ids_words(row))}",
            *([f"- work: {md(row['work_evidence'])}"] if row.get("work_evidence") else []),
            *(f"- later in this series: {md(words)}" for words in (later or {}).get(number, [])),
            f"- plan: {md(row.get('plan_diff_summary') or 'no plan captured')}",
            *([f"- pin: {md(row['pin'])}"] if row.get("pin") else []),
            *([f"- per-execution drift: {md(drift_flags_text(row))}"] if "drift_latency" in row else []),
            "",
        ]
        if number in plots:
            out += [f"![latency of regression {number + 1}]({plots[number]})", ""]
    if summary.regressions.height > shown.height:
        out += [
            f"… and {summary.regressions.height - shown.height} more (see the `findings` view).",
            "",
        ]
    out += render_work_regressions(summary)
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
                f"| {md(row['instance'])} | {code(row['query'], max_width=100, in_table=True)} | "
                f"{in_ms(row['baseline_p95_ms'])} → {in_ms(row['current_p95_ms'])} | {row['js']:.2f} | "
                f"{row['psi']:.2f} | {md(baseline)} |"
            )
        out.append("")
    out += render_execution_drift(summary)
    out += ["## Gate runs", ""]
    if summary.gates.is_empty():
        out += ["No gate run recorded this week (gate_results)."]
    for row in summary.gates.iter_rows(named=True):
        out.append(
            f"- {row['run_started_at']:%Y-%m-%d %H:%M} UTC: **{row['run_verdict']}** "
            f"({md(row['source'])}; {row['scenarios']} scenario(s), {row['blocked']} BLOCK, "
            f"{row['warned']} WARN)"
        )
    out += ["", "## Deploys", ""]
    if summary.deploys.is_empty():
        out += ["None recorded."]
    for row in summary.deploys.iter_rows(named=True):
        target = row["instance"] or "whole fleet"
        out.append(f"- {row['deployed_at']:%Y-%m-%d %H:%M} UTC: {md(row['version'])} to {md(target)}")
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
            f"| {md(row['instance'])} | {row['snapshots_ok']} | {row['snapshots_failed']} | "
            f"{row['snapshots_missed']} | {row['restarts']} | {row['stats_resets']} | {row['evictions']} | "
            f"{row['intervals_dropped']} | {md(row['last_error'] or '')} |"
        )
    return "\n".join(out) + "\n"


def _plan_words(changed: bool | None) -> str:
    """The design's stronger signal: the flagged scorings ran a plan shape the baseline never did."""
    return "**changed**" if changed is True else "same" if changed is False else "–"


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
            "| flag | instance | query | metric | JS | PSI | plan shape | baseline | scorings flagged "
            "| first flagged | latest |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in week.flagged.iter_rows(named=True):
            name = summary.query_names.get((row["instance"], row["queryid"]))
            query = name or row["fingerprint"] or row["query_hash"][:16]
            out.append(
                f"| {row['flag']} | {md(row['instance'])} | "
                f"{code(query, max_width=100, in_table=True)} | "
                f"{md(row['metric'])} | {_flag_number(row['js'])} | {_flag_number(row['psi'])} | "
                f"{_plan_words(row.get('plan_changed'))} | "
                f"{md(row['baseline_version'])} | "
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


def render_work_regressions(summary: WeeklySummary) -> list[str]:
    """Findings of kind work: the query's work per call grew (a sort spilling, a plan reading more) while
    its latency did not regress; they cost the server all the same."""
    out = ["## Work regressions", ""]
    if summary.work_regressions.is_empty():
        return [*out, "None detected.", ""]
    out += ["| instance | query | work per call | deploy | status |", "|---|---|---|---|---|"]
    for row in summary.work_regressions.iter_rows(named=True):
        out.append(
            f"| {md(row['instance'])} | {code(row['query'], max_width=120, in_table=True)} | "
            f"{md(row.get('work_summary') or row.get('work_metric') or '')} | "
            f"{md(row.get('deploy_version') or 'unannounced')} | {md(status_words(row))} |"
        )
    return [*out, ""]
