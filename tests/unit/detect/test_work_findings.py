"""Work regressions are findings (jobs.detect.work_findings) on tiny inline rows: a work step alone opens
a finding of kind work; the same step as a latency finding is one finding naming both."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from jobs.detect.findings import OPEN, latest_states, update_findings
from jobs.detect.verdicts import DETECTED, NO_REGRESSION
from jobs.detect.work_findings import WORK, finding_rows_with_work
from jobs.schemas.analysed import RESOURCE_REGRESSIONS
from tests.unit.detect.test_findings import INTERVALS, MINUTE, QUERY, T, analysis_row, rows


def work_row(
    change=T,
    *,
    metric: str = "temp_blocks",
    ratio: float = float("inf"),
    status: str = DETECTED,
    **kw: object,
) -> dict:
    base = analysis_row(change, **kw)  # type: ignore[arg-type]
    return {
        **{k: base[k] for k in RESOURCE_REGRESSIONS.column_names if k in base},
        "series": base["series"],
        "status": status,
        "metric": metric,
        "unit": "blocks",
        "before_per_call": 0.0 if ratio == float("inf") else 10.0,
        "after_per_call": 116.0,
        "ratio": ratio,
        "latency_before_ms": 10.0,
        "latency_after_ms": 11.0,
        "latency_change": 0.1,
        "summary": f"{metric.replace('_', ' ')} per call 0 → 116 at deploy v-d2, latency +10%",
    }


def resources(*dicts: dict) -> pl.DataFrame:
    return RESOURCE_REGRESSIONS.conform(pl.DataFrame(list(dicts), infer_schema_length=None))


def findings_of(latency: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    steps = finding_rows_with_work(latency, work, INTERVALS)
    return update_findings(pl.DataFrame(), steps, computed_at=T + 10 * MINUTE, intervals=INTERVALS)


def test_a_work_step_alone_opens_a_finding_of_kind_work_with_its_deploy() -> None:
    latency = rows(
        analysis_row(T, status=NO_REGRESSION, reason="below_latency_threshold", before=10, after=11)
    )
    found = findings_of(latency, resources(work_row(T)))
    assert found.height == 1
    row = found.row(0, named=True)
    assert (row["status"], row["kind"], row["deploy_version"]) == (OPEN, WORK, "v-d2")
    assert row["work_metric"] == "temp_blocks" and row["work_ratio"] is None  # from 0: no finite ratio
    assert row["work_summary"].startswith("temp blocks per call 0 → 116")
    assert (row["before_mean_ms"], row["after_mean_ms"]) == (10.0, 11.0)  # latency, for the record
    assert row["query"] == QUERY


def test_the_same_step_in_latency_and_work_is_one_finding_naming_both() -> None:
    latency = rows(analysis_row(T))
    found = findings_of(
        latency, resources(work_row(T + MINUTE), work_row(T + MINUTE, metric="rows", ratio=3.0))
    )
    assert found.height == 1
    row = found.row(0, named=True)
    assert row["kind"] == "plan_or_work" and row["work_metric"] == "temp_blocks"
    assert "rows per call" in row["work_summary"] and "temp blocks per call" in row["work_summary"]


def test_an_unannounced_latency_step_that_is_a_deploys_work_step_is_that_deploys_finding() -> None:
    # CI: a work_mem cut at deploy v-d2, temp blocks 0 -> 116; the deploy's latency test let +26% pass
    # (below its threshold), the unannounced analysis saw it. One finding, at the deploy, naming the work.
    latency = rows(
        analysis_row(T, status=NO_REGRESSION, reason="below_latency_change_threshold"),
        analysis_row(T + MINUTE, analysis="unannounced", before=9.6, after=12.1),
    )
    work = resources(work_row(T))
    found = findings_of(latency, work)
    assert found.height == 1, found
    row = found.row(0, named=True)
    assert (row["analysis"], row["deploy_version"], row["kind"]) == ("deploy", "v-d2", "plan_or_work")
    assert row["deploy_id"] == "d2"  # the work step's deploy, not the latency row's null
    assert (row["before_mean_ms"], row["after_mean_ms"]) == (9.6, 12.1)
    assert row["work_summary"].startswith("temp blocks per call 0 → 116")
    # The next run sees the same: nothing changes.
    steps = finding_rows_with_work(latency, work, INTERVALS)
    again = update_findings(latency_states(found), steps, computed_at=T + 30 * MINUTE, intervals=INTERVALS)
    assert again.height == 0, again
    # Without the work step at the deploy it stays unannounced.
    alone = findings_of(latency, resources(work_row(T, analysis="unannounced")))
    assert alone.row(0, named=True)["deploy_version"] is None


def test_a_work_step_far_from_the_latency_step_is_its_own_finding_and_neither_supersedes_the_other() -> None:
    latency = rows(analysis_row(T))
    far = resources(work_row(T - 20 * MINUTE, ratio=4.0, analysis="unannounced"))  # no deploy in common
    apart = findings_of(latency, far)
    assert sorted(apart["kind"].to_list()) == sorted(["plan_or_work", WORK])
    # The next run sees both again: nothing changes (no superseding across kinds, no second finding).
    steps = finding_rows_with_work(latency, far, INTERVALS)
    again = update_findings(latency_states(apart), steps, computed_at=T + 30 * MINUTE, intervals=INTERVALS)
    assert again.height == 0, again
    first = findings_of(latency, resources(work_row(T + 20 * MINUTE, ratio=4.0)))  # merged: the same deploy
    # The deploy's window re-examined, its latency step no longer detected, the work step still there: the
    # latency finding is not "superseded" by the work step (a work step replaces no latency finding).
    quiet = rows(analysis_row(T, status=NO_REGRESSION, reason="welch_not_significant"))
    steps = finding_rows_with_work(quiet, resources(work_row(T + 20 * MINUTE, ratio=4.0)), INTERVALS)
    later = update_findings(latency_states(first), steps, computed_at=T + 40 * MINUTE, intervals=INTERVALS)
    assert "superseded" not in later["status"].to_list(), later.select("kind", "status", "superseded_by")


def test_undetected_work_rows_open_nothing() -> None:
    latency = rows(analysis_row(T, status=NO_REGRESSION, reason="below_latency_threshold"))
    assert findings_of(latency, resources(work_row(T, status=NO_REGRESSION))).height == 0
    assert findings_of(latency, RESOURCE_REGRESSIONS.empty()).height == 0


def latency_states(changes: pl.DataFrame) -> pl.DataFrame:
    return latest_states(changes)


def test_a_work_finding_is_not_recovered_by_the_latency_recheck() -> None:
    latency = rows(analysis_row(T, status=NO_REGRESSION, reason="below_latency_threshold"))
    first = findings_of(latency, resources(work_row(T)))
    points = pl.DataFrame(
        {
            "instance": "alpha",
            "series": "fp",
            "interval_start": [T + (i + 1) * MINUTE for i in range(12)],
            "interval_end": [T + (i + 2) * MINUTE for i in range(12)],
            "value": [11.0] * 3 + [10.0] * 9,  # latency back at its old level: says nothing of temp blocks
            "calls": [100] * 12,
            "interval_seconds": [60.0] * 12,
        }
    )
    again = update_findings(
        latency_states(first), latency, computed_at=T + 20 * MINUTE, intervals=INTERVALS, points=points
    )
    assert again.height == 0, again.select("status", "kind")
    assert timedelta(0) < MINUTE


def test_a_work_step_blamed_on_the_latency_steps_deploy_is_that_finding_even_beyond_the_tolerance() -> None:
    latency = rows(analysis_row(T))  # at deploy d2
    work = resources(work_row(T + 10 * MINUTE, ratio=4.0))  # the same deploy's window, 10 samples later
    found = findings_of(latency, work)
    assert found.height == 1 and found["kind"].to_list() == ["plan_or_work"]
    assert found["work_metric"].to_list() == ["temp_blocks"]
    unannounced = resources(work_row(T + 10 * MINUTE, ratio=4.0, analysis="unannounced"))
    assert findings_of(latency, unannounced).height == 2  # no deploy in common: two steps


def test_a_work_finding_recovers_when_its_metric_per_call_is_back() -> None:
    latency = rows(analysis_row(T, status=NO_REGRESSION, reason="below_latency_threshold"))
    first = findings_of(latency, resources(work_row(T, ratio=11.6)))  # 10 → 116 temp blocks per call
    assert first.row(0, named=True)["work_before_per_call"] == 10.0

    def points(temp: list[float]) -> pl.DataFrame:
        n = len(temp)
        return pl.DataFrame(
            {
                "instance": "alpha",
                "series": "fp",
                "interval_start": [T + (i + 1) * MINUTE for i in range(n)],
                "interval_end": [T + (i + 2) * MINUTE for i in range(n)],
                "value": [10.0] * n,
                "calls": [100] * n,
                "interval_seconds": [60.0] * n,
                "work:temp_blocks": temp,
            }
        )

    still = update_findings(
        latency_states(first),
        latency,
        computed_at=T + 20 * MINUTE,
        intervals=INTERVALS,
        points=points([116.0] * 12),
    )
    assert still.height == 0
    back = update_findings(
        latency_states(first),
        latency,
        computed_at=T + 20 * MINUTE,
        intervals=INTERVALS,
        points=points([116.0] * 3 + [11.0] * 9),
    )
    assert back["status"].to_list() == ["recovered"] and back["recovered_at"][0] == T + 4 * MINUTE


def test_a_later_work_step_of_an_open_finding_deepens_it_and_opens_nothing() -> None:
    """The soak's dropped primary key: the seq-scanned table bloats under updates, and its shared blocks per
    call step again ~100 s after the drop; the finding open since the drop is that episode."""
    latency = rows(analysis_row(T))
    for metric in ("temp_blocks", "shared_blocks"):  # the open finding names no work: any metric deepens it
        later = resources(work_row(T + 2 * MINUTE, metric=metric, ratio=2.7, analysis="unannounced"))
        found = findings_of(latency, later)
        assert found["kind"].to_list() == ["plan_or_work"], found.select("kind", "onset", "work_metric")
    # The open finding names shared blocks: a later step of shared blocks deepens it, of temp blocks is new.
    at_deploy = work_row(T + MINUTE, metric="shared_blocks", ratio=9.0)
    named = findings_of(latency, resources(at_deploy))
    assert named["work_metric"].to_list() == ["shared_blocks"]
    for metric, opened in (("shared_blocks", 0), ("temp_blocks", 1)):
        step = work_row(T + 20 * MINUTE, metric=metric, ratio=3.0, analysis="unannounced")
        later = resources(at_deploy, step)
        steps = finding_rows_with_work(latency, later, INTERVALS)
        again = update_findings(
            latency_states(named), steps, computed_at=T + 30 * MINUTE, intervals=INTERVALS
        )
        assert again.filter(pl.col("kind") == WORK).height == opened, again.select("kind", "work_metric")
    # A work step while no finding is open (before the latency step) is a finding of its own.
    earlier = findings_of(latency, resources(work_row(T - 20 * MINUTE, ratio=4.0, analysis="unannounced")))
    assert sorted(earlier["kind"].to_list()) == sorted(["plan_or_work", WORK])
