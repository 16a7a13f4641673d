"""The weekly report's content (pure): the week's findings, fleet health, gate runs and drift, as frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import polars as pl

from jobs.detect.findings import SUPERSEDED
from jobs.detect.work_findings import WORK
from jobs.drift.finding_flags import WeekDrift, week_drift, with_drift_flags
from jobs.plans.pin_ledger import with_pin_words

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
    work_regressions: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Findings of kind work that began in the week (work per call grew, latency did not regress), apart
    from ``regressions`` (latency)."""


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
    pins: pl.DataFrame | None = None,
) -> WeeklySummary:
    """Pure: the week's findings (latest state of each, jobs.detect.findings: one per regression, however
    many analysis runs saw it) that began in the week and were not superseded; health; deploys.
    ``execution_drift``: the per-execution drift rows (jobs.drift.finding_flags.week_drift); with any, each
    regression also carries its query's latest drift flags. ``texts`` (query_texts): names of drifted
    queries. ``health_days``: rows of the view collection_health_daily in the week; ``gates``: gate_results;
    ``plan_diffs``: the plan_diffs table; ``pins``: the plan_pins ledger (each regression gets ``pin``, the
    words of its finding's latest pin)."""
    start, end = week_bounds(week)
    detected = findings.filter(
        pl.col("onset").is_between(start, end, closed="left") & (pl.col("status") != SUPERSEDED)
    ).sort("added_load_ms_per_s", "onset", "finding_id", descending=[True, False, False], nulls_last=True)
    detected = with_pin_words(_with_plan_diffs(detected, plan_diffs), pins)
    is_work = pl.col("kind").fill_null("") == WORK if "kind" in detected.columns else pl.lit(False)
    work = detected.filter(is_work)
    detected = detected.filter(~is_work)
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
        work_regressions=work,
    )
