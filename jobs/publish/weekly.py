"""The weekly regression report: read the lake, draw the plots, publish HTML and Markdown side by side."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.detect.findings import SUPERSEDED, latest_states
from jobs.lake import io as lake
from jobs.plans.pin_ledger import read_pins
from jobs.publish.config import WeeklyReportConfig
from jobs.publish.plots import LaterStep, later_steps, plot_regression, plt, regression_series
from jobs.publish.weekly_markdown import render_markdown
from jobs.publish.weekly_summary import week_bounds, weekly_summary
from jobs.publish.weekly_words import later_step_words, slowdown_words
from jobs.schemas.analysed import EXECUTION_DRIFT, FINDING_STATES, GATE_RESULTS, PLAN_DIFFS
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS, SNAPSHOT_RUNS

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
    from jobs.lake import views as duckdb_views
    from jobs.sqlfiles import load_sql

    sql = load_sql("report_collection_health", "duckdb")
    return duckdb_views.query(lake_root, sql.format(start=start.date(), end=end.date()))


def _steps_of(row: dict[str, Any], series: pl.DataFrame, findings: pl.DataFrame) -> list[LaterStep]:
    """Later changes of the plotted series: the onsets of later findings of the same series, and change
    points the report finds after the regression (jobs.publish.plots.later_steps) not next to one of those."""
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
        pins=read_pins(lake_root),
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
