"""Findings: one regression, one finding, with a lifecycle (issue 9).

The detectors write analysis rows: one per analysed (deploy, series) and per unannounced series, every
run. A *finding* is the regression those rows describe: identified by (instance, series, onset), kept
across runs, and moved through its states:

  open        a step up was detected and the series has not come back;
  recovered   the series returned to its old level (``recovered_at``): from a later change point in the
              deploy window (``recovered_at`` of the analysis row), or from the re-check of an open
              finding against its series' latest samples (only open findings' series, only samples after
              the change), so a recovery after the analysis window is seen too;
  superseded  a run re-examined the analysis the finding came from (the same deploy's window of the same
              series; for an unannounced finding, the unannounced analysis of the series over a history
              holding the onset) and found there a step farther than the onset tolerance from it
              (``superseded_by`` names that step's finding): the change point moved, the new one replaces it.

Identity: a detected step matches an existing open or recovered finding of the same series when its
change time lies within ``onset_tolerance_samples`` samples of the finding's onset or of its latest change
time (counted on the instance's samples; median sample intervals where the run's samples do not reach
both); the finding keeps its id (a hash of instance, series and the onset of the first
detection). The deploy and unannounced analyses of one step are one step (the same series, change times
within the tolerance): attributed to the deploy when a deploy row has it, otherwise unannounced. A step
re-attributed (unannounced, then at a deploy; or to a later deploy) is the same finding, updated.

A finding no row of this run re-examined keeps its state: absence is never evidence (incremental runs skip
deploys whose windows got no new samples). ``update_findings`` returns only the findings whose state
changed; ``run_detection`` appends them to ``finding_states`` and the DuckDB view ``findings`` shows the
latest row per finding.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from jobs.detect.attribution import ATTRIBUTED_ELSEWHERE
from jobs.detect.config import FindingsConfig, RegressionConfig
from jobs.detect.segments import immaterial
from jobs.detect.verdicts import DETECTED
from jobs.detect.work_config import WORK_METRICS
from jobs.detect.work_findings import WORK, WORK_COLUMNS
from jobs.query.identity import series_owner
from jobs.query.series import SERIES_KEY, merge_intervals
from jobs.schemas.analysed import FINDING_STATES

OPEN = "open"
RECOVERED = "recovered"
SUPERSEDED = "superseded"
FINDING_STATUSES: tuple[str, ...] = (OPEN, RECOVERED, SUPERSEDED)
DEFAULT_REGRESSION = RegressionConfig()

# The query a finding names, from its latest analysis row.
QUERY_COLUMNS: tuple[str, ...] = ("queryid", "queryids", "query")
# The step's measurements and attribution: copied from each analysis row, and compared between runs.
STEP_COLUMNS: tuple[str, ...] = (
    "detected_change_at",
    "analysis",
    "deploy_id",
    "deploy_version",
    "deployed_at",
    "other_deploys",
    "deploys_after",
    "before_mean_ms",
    "after_mean_ms",
    "latest_mean_ms",
    "added_load_ms_per_s",
    "kind",
    "instance_slowdown_ratio",
    "slowdown_excess",
    "work_evidence",
    "plan_diff_summary",
    *WORK_COLUMNS,
)
# What a run's step may change in a finding; a finding whose values of these did not change gets no row.
# (p_value is the row's p_adjusted when it has one: set apart in _from_row.)
STATE_COLUMNS: tuple[str, ...] = (
    "status",
    *STEP_COLUMNS,
    "p_value",
    "recovered_at",
    "superseded_by",
    *QUERY_COLUMNS,
)
# Copied from the step's analysis row into the finding.
ROW_COLUMNS: tuple[str, ...] = ("database", "fingerprint", *QUERY_COLUMNS, *STEP_COLUMNS)


def run_id_for(computed_at: datetime) -> str:
    """The analysis run's id: its time, to the microsecond (deterministic from ``now``)."""
    return computed_at.strftime("%Y%m%dT%H%M%S%fZ")


def finding_id(instance: str, series: str, onset: datetime) -> str:
    key = f"{instance}|{series}|{onset.isoformat()}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def series_text() -> pl.Expr:
    """The series a row belongs to, as one string: SERIES_KEY after the instance, '|'-joined."""
    rest = [c for c in SERIES_KEY if c != "instance"]
    return pl.concat_str([pl.col(c).cast(pl.String) for c in rest], separator="|").alias("series")


def with_series(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the ``series`` string column (kept as is when SERIES_KEY already names it)."""
    if list(SERIES_KEY) == ["instance", "series"]:
        return frame
    return frame.with_columns(series_text())


def latest_states(states: pl.DataFrame) -> pl.DataFrame:
    """The latest row per finding_id of an append-only finding_states frame (what the view shows)."""
    if states.height == 0:
        return FINDING_STATES.empty()
    return (
        FINDING_STATES.conform(states.select(FINDING_STATES.columns_of(states)))
        .sort("computed_at", "run_id", "finding_id")
        .unique("finding_id", keep="last", maintain_order=True)
        .sort("instance", "series", "onset", "finding_id")
    )


def _tolerance(instance: str, intervals: dict[str, timedelta], config: FindingsConfig) -> timedelta:
    return intervals.get(instance, config.default_sample_interval) * config.onset_tolerance_samples


@dataclass(frozen=True)
class _Clock:
    """When two change times of one series are the same step: within ``onset_tolerance_samples`` samples
    of the instance (counted on its sample starts, when both lie among them), or within that many median
    intervals. Counting matters on a busy collector: one snapshot that took seconds (a DROP INDEX holding
    its lock) is one long sample, and two analyses may put the change at either end of it."""

    intervals: dict[str, timedelta]
    starts: Mapping[str, pl.Series]
    config: FindingsConfig

    def same_step(self, instance: str, a: datetime, b: datetime) -> bool:
        if abs(a - b) <= _tolerance(instance, self.intervals, self.config):
            return True
        starts = self.starts.get(instance)
        if starts is None or starts.len() == 0:
            return False
        early, late = min(a, b), max(a, b)
        if early < starts[0] or late > starts[-1]:
            return False
        between = int(starts.search_sorted(late, side="right")) - int(
            starts.search_sorted(early, side="right")
        )
        return between <= self.config.onset_tolerance_samples


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@dataclass
class _Step:
    """One detected step of one series in this run: the rows (both analyses) that found it."""

    instance: str
    series: str
    change: datetime
    row: dict
    """The representative row: a deploy row when one has the step."""
    finding: str | None = None


def _steps(detected: list[dict], clock: _Clock) -> list[_Step]:
    """Detected rows grouped into steps: per series, change times within the tolerance of a step's are the
    same step; deploy rows first (nearest their deploy), so a deploy row represents its step."""
    ordered = sorted(
        detected,
        key=lambda r: (
            r["instance"],
            r["series"],
            r["analysis"] != "deploy",
            abs(r["detected_change_at"] - r["deployed_at"]) if r.get("deployed_at") else timedelta(0),
            r["detected_change_at"],
            r.get("deploy_id") or "",
        ),
    )
    per_series: dict[tuple[str, str], list[_Step]] = {}
    for row in ordered:
        steps = per_series.setdefault((row["instance"], row["series"]), [])
        if not any(clock.same_step(row["instance"], s.change, row["detected_change_at"]) for s in steps):
            steps.append(_Step(row["instance"], row["series"], row["detected_change_at"], row))
    return sorted(
        (s for steps in per_series.values() for s in steps), key=lambda s: (s.instance, s.series, s.change)
    )


def _deepens_open_finding(step: _Step, findings: list[dict]) -> bool:
    """A work-only step on a series whose regression is already an open finding that began earlier, with
    the same work metric or none named, is that regression deepening, not a new one: a table that lost its
    index bloats under updates, and every scan reads more blocks a minute later. The step stays in
    resource_regressions; it opens no second finding (and no second alert) for the same query and episode.
    A step of another metric (temp blocks after a finding of shared blocks) is a cause of its own."""
    if step.row.get("kind") != WORK:
        return False
    return any(
        f["status"] == OPEN
        and f["onset"] < step.change
        and f.get("work_metric") in (None, step.row.get("work_metric"))
        for f in findings
    )


def _from_row(row: dict) -> dict:
    out = {c: row.get(c) for c in ROW_COLUMNS}
    out["p_value"] = row["p_adjusted"] if row.get("p_adjusted") is not None else row.get("p_value")
    return out


def update_findings(
    previous: pl.DataFrame,
    rows: pl.DataFrame,
    *,
    computed_at: datetime,
    intervals: dict[str, timedelta] | None = None,
    starts: Mapping[str, pl.Series] | None = None,
    points: pl.DataFrame | None = None,
    config: FindingsConfig = FindingsConfig(),
    regression: RegressionConfig = DEFAULT_REGRESSION,
) -> pl.DataFrame:
    """Pure: the finding_states rows of every finding this run opened or changed.

    ``previous``: the latest state per finding (``latest_states``); ``rows``: this run's latency analysis
    rows of both analyses (every status: an examined row that is not a detection tells what was
    re-examined); ``intervals``: sample interval per instance (``jobs.query.series.sample_intervals``);
    ``starts``: the sample starts of the instances with detections (``jobs.query.series.sample_starts``),
    to count the samples between two change times;
    ``points``: (instance, series, interval_start, value, calls, interval_seconds) of open findings'
    series after their change (``recovery_points``), for the recovery re-check; None skips it;
    ``regression``: the detector's thresholds (what remains of a recovered step is below them). Same
    inputs, same frame.
    """
    intervals = intervals or {}
    clock = _Clock(intervals, starts or {}, config)
    run_id = run_id_for(computed_at)
    prior = {r["finding_id"]: r for r in latest_states(previous).to_dicts()}
    state = {k: dict(v) for k, v in prior.items()}
    analysed = with_series(rows) if rows.height else rows
    detected = analysed.filter(pl.col("status") == DETECTED).to_dicts() if analysed.height else []
    steps = _steps(detected, clock)

    # Match each step to the nearest open or recovered finding of its series within the tolerance.
    of_series: dict[tuple[str, str], list[dict]] = {}
    for f in state.values():
        of_series.setdefault((f["instance"], f["series"]), []).append(f)
    taken: set[str] = set()
    for step in steps:
        near = []
        for f in of_series.get((step.instance, step.series), []):
            if f["finding_id"] in taken:
                continue
            distance = min(abs(step.change - f["onset"]), abs(step.change - f["detected_change_at"]))
            same = clock.same_step(step.instance, step.change, f["onset"]) or clock.same_step(
                step.instance, step.change, f["detected_change_at"]
            )
            if f["status"] != SUPERSEDED and same:
                near.append((distance, f["onset"], f["finding_id"]))
        if near:
            step.finding = min(near)[2]
        elif _deepens_open_finding(step, of_series.get((step.instance, step.series), [])):
            continue
        else:
            ident = finding_id(step.instance, step.series, step.change)
            step.finding = ident
            if ident not in state:  # a superseded finding at exactly this onset reopens under its id
                state[ident] = {
                    "finding_id": ident,
                    "instance": step.instance,
                    "series": step.series,
                    "onset": step.change,
                    "opened_at": computed_at,
                    "status": OPEN,
                    # how much evidence opened it (a large step: 2 to 15 new samples; issue 26)
                    "opened_on_samples": step.row.get("after_count"),
                    "opened_by": step.row.get("confirmed_by")
                    or (WORK if step.row.get("kind") == WORK else step.row.get("analysis")),
                }
        taken.add(step.finding)
        finding = state[step.finding]
        if finding.get("analysis") == "deploy" and step.row["analysis"] != "deploy":
            continue  # a deploy's step seen only by the unannounced analysis keeps its attribution
        kept = {c: finding.get(c) for c in ("latest_mean_ms",)} if finding["status"] == RECOVERED else {}
        finding.update(_from_row(step.row), **{c: v for c, v in kept.items() if v is not None})
        if finding["status"] == SUPERSEDED:
            finding.update(status=OPEN, superseded_by=None)
        if finding["status"] == OPEN and step.row.get("recovered_at") is not None:
            finding.update(status=RECOVERED, recovered_at=step.row["recovered_at"])

    # Superseded: the analysis an open finding came from was re-examined and put the step elsewhere.
    waiting = [
        f
        for f in state.values()
        if f["finding_id"] not in taken and f["status"] == OPEN and f["finding_id"] in prior
    ]
    examined = _rows_of_series(analysed, waiting)
    for finding in waiting:
        replacement = _replacement(
            finding, examined.get((finding["instance"], finding["series"]), []), steps, clock
        )
        if replacement is not None and replacement != finding["finding_id"]:
            finding.update(status=SUPERSEDED, superseded_by=replacement)

    if points is not None and points.height:
        _recheck_recovery(state, points, config, regression)

    changed = []
    for ident, finding in state.items():
        before = prior.get(ident)
        if before is None and _transient(finding, regression):
            continue
        if before is not None and all(_same(before.get(c), finding.get(c)) for c in STATE_COLUMNS):
            continue
        if before is None:
            change = "opened"
        elif finding["status"] != before["status"]:
            change = finding["status"]
        else:
            change = "updated"
        changed.append({**finding, "run_id": run_id, "computed_at": computed_at, "change": change})
    if not changed:
        return FINDING_STATES.empty()
    frame = pl.DataFrame(
        [{c: r.get(c) for c in FINDING_STATES.column_names} for r in changed],
        schema=FINDING_STATES.polars_schema,
    )
    return frame.sort("instance", "series", "onset", "finding_id")


def _transient(finding: dict, regression: RegressionConfig) -> bool:
    """A new unannounced finding already back at its old level: a transient episode (lock contention, a
    backup), which the unannounced analysis does not report (RegressionConfig.require_ongoing); its own
    ongoing test compares segment means, which one elevated segment after the episode can defeat."""
    return (
        regression.require_ongoing
        and finding.get("analysis") == "unannounced"
        and finding["status"] == RECOVERED
    )


def _rows_of_series(analysed: pl.DataFrame, findings: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """This run's analysis rows of the findings' series, per (instance, series): one semi-join, not one
    scan of the run's rows per finding."""
    if analysed.height == 0 or not findings:
        return {}
    wanted = pl.DataFrame(
        {"instance": [f["instance"] for f in findings], "series": [f["series"] for f in findings]},
        schema={"instance": pl.String, "series": pl.String},
    ).unique()
    out: dict[tuple[str, str], list[dict]] = {}
    for row in analysed.join(wanted, on=["instance", "series"], how="semi").iter_rows(named=True):
        out.setdefault((row["instance"], row["series"]), []).append(row)
    return out


def _replacement(
    finding: dict,
    examined: list[dict],
    steps: list[_Step],
    clock: _Clock,
) -> str | None:
    """The finding of the step the run found in place of ``finding``, if the run re-examined it: the same
    deploy's window of the series (a deploy finding), or the unannounced analysis of the series over a
    history holding the onset (an unannounced finding)."""
    # A work step never replaces a latency finding, nor the reverse: they are different analyses.
    examined = [r for r in examined if (r.get("kind") == WORK) == (finding.get("kind") == WORK)]
    if finding.get("analysis") == "deploy":
        rows = [
            r for r in examined if r["analysis"] == "deploy" and r.get("deploy_id") == finding["deploy_id"]
        ]
    else:
        rows = [
            r
            for r in examined
            if r["analysis"] == "unannounced"
            and r.get("window_start") is not None
            and r["window_start"] < finding["onset"] <= r["window_end"]
        ]
    for row in rows:
        if row["status"] != DETECTED and row.get("reason") != ATTRIBUTED_ELSEWHERE:
            continue
        if row.get("detected_change_at") is None:
            continue
        for step in steps:
            if (
                (step.instance, step.series) == (finding["instance"], finding["series"])
                and clock.same_step(step.instance, step.change, row["detected_change_at"])
                and step.finding is not None
            ):
                return step.finding
    return None


def recovery_points(samples: pl.DataFrame, open_findings: pl.DataFrame) -> pl.DataFrame:
    """(instance, series, interval_start, interval_end, value, calls, interval_seconds) of the series of
    ``open_findings`` ((instance, series, detected_change_at, queryids): ``recheck_targets``), from each
    finding's change on: bounded by what is open, not by the history.

    A sample belongs to a finding's series by membership (its instance, its database and user as the
    series name says, one of its ``queryids``), not by identifying the samples again: identity over a
    partial history (only the samples since the change) could name a side-by-side chain differently."""
    columns = {
        "instance": pl.String,
        "series": pl.String,
        "interval_start": pl.Datetime("us", "UTC"),
        "interval_end": pl.Datetime("us", "UTC"),
        "value": pl.Float64,
        "calls": pl.Int64,
        "interval_seconds": pl.Float64,
    }
    if open_findings.height == 0 or samples.height == 0:
        return pl.DataFrame(schema=columns)
    for column in ("dbid", "userid"):
        if column not in samples.columns:
            samples = samples.with_columns(pl.lit(None, dtype=pl.Int64).alias(column))
    dbid, userid = series_owner(pl.col("series"))
    members = (
        open_findings.filter(pl.col("queryids").is_not_null())
        .group_by("instance", "series")
        .agg(pl.col("detected_change_at").min().alias("_since"), pl.col("queryids").first())
        .with_columns(
            pl.col("queryids").str.split(",").cast(pl.List(pl.Int64)).alias("queryid"), dbid, userid
        )
        .explode("queryid")
        .rename({"userid": "_userid"})
        .drop("queryids")
    )
    points = samples.join(members, on=["instance", "dbid", "queryid"], how="inner", nulls_equal=True).filter(
        (pl.col("interval_start") >= pl.col("_since"))
        & (pl.col("_userid").is_null() | (pl.col("userid") == pl.col("_userid")))
    )
    if points.height == 0:
        return pl.DataFrame(schema=columns)
    # Work per call of every metric too, for work findings (columns the samples lack count as untracked).
    sums = tuple(dict.fromkeys(c for m in WORK_METRICS for c in m.columns if c in points.columns))
    merged = merge_intervals(points, ["instance", "series"], sums).with_columns(
        (
            (pl.sum_horizontal(pl.col(c).cast(pl.Float64) for c in m.columns) / pl.col("calls"))
            if all(c in points.columns for c in m.columns)
            else pl.lit(None, dtype=pl.Float64)
        ).alias(f"work:{m.name}")
        for m in WORK_METRICS
    )
    work = {f"work:{m.name}": pl.Float64 for m in WORK_METRICS}
    return merged.select(*columns, *work).cast(columns | work).sort("instance", "series", "interval_end")


def recovery_samples_wanted(open_findings: pl.DataFrame) -> pl.DataFrame:
    """(instance, queryid, since) the recovery re-check needs from the lake: the queryids of every open
    finding from its change on (what ``recovery_points`` reads)."""
    return (
        open_findings.filter(pl.col("queryids").is_not_null())
        .with_columns(pl.col("queryids").str.split(",").cast(pl.List(pl.Int64)).alias("queryid"))
        .explode("queryid")
        .group_by("instance", "queryid")
        .agg(pl.col("detected_change_at").min().alias("since"))
        .sort("instance", "queryid")
    )


def recheck_targets(open_findings: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """(instance, series, detected_change_at, queryids) of every open finding and detected row of this run:
    the series the recovery re-check reads (bounded by what is open or new, not by the history)."""
    columns = ["instance", "series", "detected_change_at", "queryids"]
    detected = rows.filter(pl.col("status") == DETECTED) if rows.height else rows
    parts = [open_findings.select(columns)]
    if detected.height:
        parts.append(with_series(detected).select(columns))
    return pl.concat(parts, how="vertical_relaxed")


def _recheck_recovery(
    state: dict[str, dict], points: pl.DataFrame, config: FindingsConfig, regression: RegressionConfig
) -> None:
    """Open findings whose series came back: after the last sample at or above the midpoint of the before
    and after levels, at least ``recovery_samples`` samples whose median is back at the old level (what
    remains of the step is below the detector's latency change threshold, or immaterial)."""
    by_series = points.partition_by(["instance", "series"], as_dict=True, maintain_order=True)
    for finding in state.values():
        if finding["status"] != OPEN:
            continue
        series = by_series.get((finding["instance"], finding["series"]))
        if series is None:
            continue
        series = series.filter(pl.col("interval_start") >= finding["detected_change_at"])
        if finding.get("kind") == WORK:  # its latency may never have moved: its metric per call decides
            _recheck_work(finding, series, config)
            continue
        before, after = finding.get("before_mean_ms"), finding.get("after_mean_ms")
        if before is None or after is None or after <= before:
            continue
        since = _after_last_high(series["value"].to_list(), before, after)
        if since is None:
            continue
        back = series.slice(since)
        if back.height < config.recovery_samples:
            continue
        level = statistics.median(back["value"].to_list())  # one slow interval is not the level
        seconds = float(back["interval_seconds"].sum())
        rate = float(back["calls"].sum()) / seconds if seconds > 0 else math.inf
        small = immaterial(np.array([before]), np.array([level]), np.array([rate]), regression)[0]
        if level < before * (1 + regression.latency_change_threshold) or small:
            finding.update(status=RECOVERED, recovered_at=back["interval_start"][0], latest_mean_ms=level)


def _recheck_work(finding: dict, series: pl.DataFrame, config: FindingsConfig) -> None:
    """A work finding recovers as a latency one does, on its metric per call: after the last sample at
    or above the midpoint of the before and after levels, at least ``recovery_samples`` samples whose
    median keeps at most a quarter of the step."""
    before, after = finding.get("work_before_per_call"), finding.get("work_after_per_call")
    column = f"work:{finding.get('work_metric')}"
    if before is None or after is None or after <= before or column not in series.columns:
        return
    values = series[column].to_list()
    since = _after_last_high(values, before, after)
    if since is None:
        return
    back = [v for v in values[since:] if v is not None]
    if len(back) < config.recovery_samples:
        return
    if statistics.median(back) <= before + (after - before) / 4:
        finding.update(status=RECOVERED, recovered_at=series["interval_start"][since])


def _after_last_high(values: list[float | None], before: float, after: float) -> int | None:
    """Index just after the last value at or above the midpoint of the step (None: no such value; a
    null value, an untracked interval, is never high). The recovery re-checks read from there."""
    middle = (before + after) / 2
    high = [i for i, v in enumerate(values) if v is not None and v >= middle]
    return high[-1] + 1 if high else None
