"""The weekly report as one HTML file: summary first, then each regression in words, plan diff and plot.

Why a static page with PNGs inlined as data URIs: it opens offline from a file, an e-mail attachment or a
wiki upload, with no script and no CDN (an interactive chart library needs JavaScript that mail clients and
many wikis strip). Rendered with jinja2, autoescaped: a query text is shown, never interpreted.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import jinja2

from jobs.drift.finding_flags import drift_flags_text
from jobs.plans.diff import plan_diff_rows
from jobs.publish.config import WeeklyReportConfig
from jobs.publish.weekly_summary import WeeklySummary
from jobs.publish.weekly_words import (
    confidence_words,
    headline,
    in_ms,
    moment_words,
    query_ids_words,
    regression_words,
    severity,
    status_words,
)
from jobs.readable import p_text

TEMPLATE = "weekly_report.html.j2"


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _finding(
    number: int, row: dict[str, Any], image: str | None, later: list[str], config: WeeklyReportConfig
) -> dict[str, Any]:
    p = row.get("p_value")
    return {
        "number": number + 1,
        "id": row["finding_id"],
        "instance": row["instance"],
        "database": row.get("database"),
        "query": " ".join(str(row.get("query") or "").split()),
        "words": regression_words(row),
        "levels": f"{in_ms(row.get('before_mean_ms'))} → {in_ms(row.get('after_mean_ms'))} per call",
        "severity": severity(row, config),
        "status": row["status"],
        "status_words": status_words(row),
        "confidence": confidence_words(p, config),
        "p": "not computed" if p is None else f"{p_text(p)} (Welch's t-test of the levels before and after)",
        "added_load": f"{row.get('added_load_ms_per_s') or 0:,.1f} ms of execution per second",
        "ids": query_ids_words(row),
        "other_deploys": row.get("other_deploys"),
        "work": row.get("work_evidence"),
        "plan_summary": row.get("plan_diff_summary") or "No plan captured for this query.",
        "plan_rows": plan_diff_rows(row.get("plan_diff")),
        "pin": row.get("pin"),
        "drift": drift_flags_text(row) if "drift_latency" in row else None,
        "image": image,
        "later": later,
    }


def render_html(
    summary: WeeklySummary,
    images: dict[int, str],
    config: WeeklyReportConfig | None = None,
    later: dict[int, list[str]] | None = None,
) -> str:
    """Pure: the page; ``images`` maps a regression's row number to its plot as a data URI, ``later`` to
    the later steps of its series in words (jobs.publish.weekly_words.later_step_words)."""
    config = config or WeeklyReportConfig()
    later = later or {}
    shown = summary.regressions.head(config.max_regressions)
    findings = [
        _finding(n, row, images.get(n), later.get(n, []), config)
        for n, row in enumerate(shown.iter_rows(named=True))
    ]
    week = summary.execution_drift
    flagged = []
    if week is not None:
        for row in week.flagged.iter_rows(named=True):
            name = summary.query_names.get((row["instance"], row["queryid"]))
            flagged.append({**row, "query": name or row["fingerprint"] or row["query_hash"][:16]})
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            summary=summary,
            top=headline(summary, config),
            findings=findings,
            more=summary.regressions.height - shown.height,
            drift=list(summary.drift.iter_rows(named=True)),
            execution=week,
            flagged=flagged,
            gates=list(summary.gates.iter_rows(named=True)),
            work=list(summary.work_regressions.iter_rows(named=True)),
            deploys=list(summary.deploys.iter_rows(named=True)),
            health=list(summary.fleet_health.iter_rows(named=True)),
            ms=in_ms,
            moment=moment_words,
            last_day=summary.end.date().fromordinal(summary.end.date().toordinal() - 1),
        )
    )
