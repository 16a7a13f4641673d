"""The weekly report's words: severity, evidence, moments, causes and the headline, shared by Markdown
and HTML."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from jobs.detect.evidence import VERY_STRONG, WEAK, evidence_words
from jobs.detect.findings import OPEN, RECOVERED
from jobs.publish.config import WeeklyReportConfig
from jobs.publish.plots import LaterStep
from jobs.publish.weekly_summary import HEALTH_COUNTS, WeeklySummary
from jobs.readable import ratio_number
from jobs.readable import slowdown_ratio as levels_ratio

# ---------------------------------------------------------------------------------------------------------
# Words: what on-call reads in 30 seconds (pure)


def in_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.3f} ms" if value < 10 else f"{value:,.1f} ms"


def slowdown_ratio(row: dict[str, Any]) -> float | None:
    """The finding's one ratio (jobs.readable.slowdown_ratio: after / before level, as every surface)."""
    return levels_ratio(row.get("before_mean_ms"), row.get("after_mean_ms"))


def slowdown_words(row: dict[str, Any]) -> str:
    """'82× slower', '2.4× slower', '1.4× slower' (the digits of the console and the alerts); 'slower'
    without both levels."""
    ratio = slowdown_ratio(row)
    if ratio is None:
        return "slower"
    if ratio > 1:
        return f"{ratio_number(ratio)}× slower"
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
    """``jobs.detect.evidence``'s words (the same as Slack's), with what a reader should do about them."""
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
        back = f" (back to {in_ms(level)})" if level is not None else ""
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
