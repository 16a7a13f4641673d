"""The detection's tables for people in a terminal (rich): findings, slowdowns, resource regressions."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jobs.detect.config import ContentionConfig
from jobs.detect.contention import one_row_per_slowdown
from jobs.detect.verdicts import DETECTED
from jobs.detect.work_config import WORK_METRIC_BY_NAME
from jobs.drift.finding_flags import DRIFT_FLAG_COLUMNS, drift_flags_text, with_drift_flags
from jobs.escaping import terminal_text
from jobs.pipeline.detection import DetectionOutcome
from jobs.query.series import SERIES_KEY
from jobs.readable import moment_text, p_value_text, ratio_text, slowdown_ratio

# ---------------------------------------------------------------------------------------------------------
# Rendering


def _plain(value: object) -> Text:
    """A cell from the fleet (query texts, identifiers, summaries naming them): shown as it is, never read
    as rich markup ("[link=…]" in a quoted identifier stays text), its control characters visible."""
    return terminal_text(value)


def _ratio(value: float | None) -> str:
    return ratio_text(value)


def _rate(value: float | None) -> str:
    """Calls per second; ``-`` when not measured (never a made-up 0.0)."""
    return "-" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms")


def resource_table(frame: pl.DataFrame, title: str = "Resource regressions") -> Table:
    """Detected resource regressions: e.g.: "temp blocks per call ×4.8 at deploy v42, latency +9%"."""
    table = Table(title=title, show_lines=True)
    for name in ("instance", "query", "regression", "began at", "p"):
        table.add_column(name, overflow="fold")
    for row in frame.to_dicts():
        began = row.get("detected_change_at")
        p_value = row.get("p_adjusted") if row.get("p_adjusted") is not None else row.get("p_value")
        table.add_row(
            _plain(row["instance"]),
            _plain(str(row.get("query") or row.get("queryid"))[:90]),
            _plain(row.get("summary") or row.get("metric")),
            moment_text(began),
            p_value_text(p_value),
        )
    return table


def _kind_text(row: dict) -> str:
    """plan_or_work, or both with how far the query's slowdown exceeds its instance's common one."""
    kind = row.get("kind") or "-"
    ratio, excess = row.get("instance_slowdown_ratio"), row.get("slowdown_excess")
    if kind == "both" and ratio is not None:
        excess_text = f", own {ratio_text(excess)} of it" if excess is not None else ""
        return f"both (instance {ratio_text(ratio)}{excess_text})"
    return str(kind)


def slowdowns_table(frame: pl.DataFrame) -> Table:
    table = Table(title="Instance slowdowns", show_lines=True)
    for name in ("instance", "began at", "deploy", "queries", "median → max ratio", "calls/s", "summary"):
        table.add_column(name, overflow="fold")
    for row in frame.to_dicts():
        began = row.get("began_at")
        table.add_row(
            _plain(row["instance"]),
            moment_text(began),
            _plain(row.get("deploy_version") or "unannounced"),
            f"{row['queries']} of {row['series_compared']}",
            f"{_ratio(row['median_ratio'])} → {_ratio(row['max_ratio'])}",
            f"{_rate(row['calls_per_s_before'])} → {_rate(row['calls_per_s_after'])}",
            _plain(row.get("summary") or ""),
        )
    return table


def _status_text(row: dict) -> str:
    status = str(row["status"])
    if status == "recovered" and row.get("recovered_at") is not None:
        return f"recovered at {moment_text(row['recovered_at'])} (now {_ms(row.get('latest_mean_ms'))})"
    if status == "superseded":
        return f"superseded by {row.get('superseded_by')}"
    return status


def _deploy_text(row: dict) -> str:
    if row.get("analysis") != "deploy":
        return "unannounced"
    others = f" (also near: {row['other_deploys']})" if row.get("other_deploys") else ""
    later = f" (deployed after: {row['deploys_after']})" if row.get("deploys_after") else ""
    return f"{row.get('deploy_version')}{others}{later}"


def _change_text(row: dict) -> str:
    """``0.037 ms → 27.4 ms (×749)``: the finding's levels and its one ratio (jobs.readable.slowdown_ratio,
    the same digits as its alert and its report line)."""
    before, after = row.get("before_mean_ms"), row.get("after_mean_ms")
    ratio = slowdown_ratio(before, after)
    return f"{_ms(before)} → {_ms(after)}" + (f" ({ratio_text(ratio)})" if ratio is not None else "")


def findings_table(frame: pl.DataFrame, title: str = "Findings") -> Table:
    """Each finding once (jobs.detect.findings): the deploy blamed or unannounced, with its status; a
    "drift" column with the latest per-execution drift flag per metric when ``frame`` has them
    (jobs.drift.finding_flags.with_drift_flags; "–" where the query was not scored)."""
    drifted = all(c in frame.columns for c in DRIFT_FLAG_COLUMNS)
    table = Table(title=title, show_lines=True)
    for name in (
        "instance",
        "query",
        "status",
        "before → after",
        "began at",
        "p",
        "deploy",
        "kind",
        "plan change",
        "work",
        *(["drift"] if drifted else []),
    ):
        table.add_column(name, overflow="fold")
    for row in frame.sort("onset", "finding_id").to_dicts():
        began = row.get("detected_change_at")
        table.add_row(
            _plain(row["instance"]),
            _plain(str(row.get("query") or row.get("queryid"))[:90]),
            _status_text(row),
            _change_text(row),
            moment_text(began),
            p_value_text(row.get("p_value")),
            _plain(_deploy_text(row)),  # versions come from other people's deploy files
            _kind_text(row),
            _plain(row.get("plan_diff_summary") or "no plans captured"),
            _plain(row.get("work_evidence") or row.get("work_summary") or "-"),
            *([drift_flags_text(row)] if drifted else []),
        )
    return table


ANALYSES = (
    ("at deploys", "regressions", "series"),
    ("unannounced", "unannounced", "series"),
    ("for work per call", "resource_regressions", "series × metric"),
)
"""(label, DetectionOutcome attribute, what one row is) of the analyses whose rows are not reported."""


def not_reported_lines(outcome: DetectionOutcome, show_all: bool = False) -> list[str]:
    """What was analysed and not reported: per analysis one line of counts per reason; with ``show_all``
    each row after it (a work row names its metric: "shared blocks per call")."""
    lines: list[str] = []
    for label, attribute, unit in ANALYSES:
        frame: pl.DataFrame = getattr(outcome, attribute)
        rejected = frame.filter(pl.col("status") != DETECTED) if frame.height else frame
        if not rejected.height:
            continue
        counts = rejected.group_by("reason").len().sort("len", "reason", descending=[True, False])
        reasons = ", ".join(f"{row['len']} {row['reason']}" for row in counts.iter_rows(named=True))
        lines.append(f"  {label}: {rejected.height} {unit} not reported: {reasons}")
        if show_all:
            for row in rejected.sort(*SERIES_KEY).iter_rows(named=True):
                lines.append(f"      {_series_line(row)} → {row['reason']}")
    return lines


def _series_line(row: dict) -> str:
    """``alpha: SELECT … [shared blocks per call, deploy v2.0]``: a rejected row's query and what of it."""
    query = " ".join(str(row.get("query") or row.get("queryid")).split())[:70]
    what = []
    if row.get("metric"):
        metric = WORK_METRIC_BY_NAME.get(str(row["metric"]))
        what.append(f"{metric.display} per call" if metric else str(row["metric"]))
        what.append(f"deploy {row['deploy_version']}" if row.get("deploy_version") else "unannounced")
    elif row.get("deploy_version"):
        what.append(f"deploy {row['deploy_version']}")
    return f"{row['instance']}: {query}" + (f" [{', '.join(what)}]" if what else "")


def print_detection(
    outcome: DetectionOutcome,
    console: Console,
    show_all: bool = False,
    drift: pl.DataFrame | None = None,
    same_moment_within: timedelta = ContentionConfig().same_moment_within,
) -> None:
    """The run for people, the findings first: the findings table, the resource regressions no finding
    shows already (every one with ``show_all``), the instance slowdowns, then what was analysed and not
    reported as counts per reason (each row with ``show_all``). ``drift`` (execution_drift rows): each
    finding's latest drift flags in a column (none on a lake without drift scores). A deploy's slowdown
    that the unannounced analysis found again within ``same_moment_within`` is one row (every row with
    ``show_all``)."""
    if outcome.settings_changed:
        console.print(
            "The analysis settings changed since the last run: every deploy and series re-examined."
        )
    shown = outcome.shown_findings
    if drift is not None and drift.height:
        shown = with_drift_flags(shown, drift)
    if shown.height:
        console.print(findings_table(shown, "Findings (open, or changed by this run)"))
    else:
        console.print("No open regression, and no finding changed.")
    resources = outcome.resource_detected
    if resources.height:
        # The unannounced analysis often finds a deploy's step again: show each (query, metric, time) once.
        resources = resources.sort(pl.col("analysis") != "deploy", maintain_order=True).unique(
            [*SERIES_KEY, "metric", "detected_change_at"], keep="first", maintain_order=True
        )
        if not show_all:  # a finding's own work step is its "work" cell already
            resources = resources.join(shown.select(*SERIES_KEY).unique(), on=list(SERIES_KEY), how="anti")
        if resources.height:
            console.print(resource_table(resources))
    else:
        console.print("No resource regression (work per call) found.")
    slowdowns = outcome.instance_slowdowns
    if not show_all:
        slowdowns = one_row_per_slowdown(slowdowns, same_moment_within)
    if slowdowns.height:
        console.print(slowdowns_table(slowdowns))
    lines = not_reported_lines(outcome, show_all)
    if lines:
        hint = "" if show_all else " (--all lists each)"
        console.print(f"Analysed and not reported{hint}:", markup=False, highlight=False)
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
