"""Regressions of work on tiny inline series: each gate of the resource detector and the work evidence."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from jobs.collect.deploys import DeployEvent, events_frame
from jobs.detect.config import RegressionConfig
from jobs.detect.deploy_analysis import detect_regressions
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.detect.work import (
    NO_STEP_ABOVE_GATES,
    attach_work_evidence,
    detect_resource_regressions,
    steps_possible,
    work_per_call,
)
from jobs.detect.work_config import WORK_METRICS, ResourceConfig
from jobs.lake import views as duckdb_views
from jobs.lake.io import write_table
from jobs.pipeline.detection import run_detection
from jobs.publish.console import print_detection
from jobs.query.series import RegressionInputError, fingerprinted_samples, run_lengths
from jobs.schemas.analysed import RESOURCE_REGRESSIONS
from tests.support.lakes import SERIES_DEPLOY_AT, series_samples, series_texts, write_step_change_lake

CONFIG = RegressionConfig(window_before=timedelta(minutes=5), window_after=timedelta(minutes=10))
QUERY = "select * from orders order by amount"
TEXTS = series_texts([("alpha", 11, QUERY), ("alpha", 12, QUERY)])
# Work of a read-only query that neither spills nor plans (track_planning off): every column present.
QUIET = {
    "shared_blks_hit": 40.0,
    "shared_blks_read": 0.0,
    "temp_blks_written": 0.0,
    "rows": 20.0,
    "wal_bytes": 0.0,
    "total_plan_time": 0.0,
    "plans": 0.0,
}


def wobble(n: int, level: float, spread: float = 0.02) -> np.ndarray:
    """level × (1 ± spread), alternating: a known mean, some variance, no randomness."""
    return level * (1.0 + spread * np.where(np.arange(n) % 2 == 0, 1.0, -1.0))


def step(
    before: float, after: float, n_before: int = 30, n_after: int = 60, spread: float = 0.02
) -> np.ndarray:
    return np.concatenate([wobble(n_before, before, spread), wobble(n_after, after, spread)])


def deploys() -> pl.DataFrame:
    return events_frame([DeployEvent(version="v42", deployed_at=SERIES_DEPLOY_AT, instance="alpha")]).drop(
        "date"
    )


def samples(latency: np.ndarray, **work: np.ndarray | float) -> pl.DataFrame:
    return series_samples(latency, queryid=11, work={**QUIET, **work})


def resource_rows(frame: pl.DataFrame, config: RegressionConfig = CONFIG, **kwargs: object) -> pl.DataFrame:
    return detect_resource_regressions(frame, TEXTS, deploys(), config, **kwargs)  # type: ignore[arg-type]


def deploy_row(frame: pl.DataFrame, metric: str, config: RegressionConfig = CONFIG) -> dict:
    rows = resource_rows(frame, config, unannounced=False).filter(pl.col("metric") == metric)
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def evidence(frame: pl.DataFrame, config: RegressionConfig = CONFIG) -> dict:
    found = detect_regressions(frame, TEXTS, deploys(), config)
    assert found["status"].to_list() == ["detected"], found.select("reason")
    return attach_work_evidence(found, frame, TEXTS, config).row(0, named=True)


def test_work_mem_cut_spills_more_and_is_a_resource_regression_the_latency_detector_misses() -> None:
    """The issue's server: temp blocks per call ×4.8 at a deploy, latency only +9%."""
    frame = samples(step(1.0, 1.09), temp_blks_written=step(120.0, 576.0))
    latency = detect_regressions(frame, TEXTS, deploys(), CONFIG).row(0, named=True)
    assert latency["reason"] == "below_latency_change_threshold"  # stopped at stage 0, never reported
    row = deploy_row(frame, "temp_blocks")
    assert (row["status"], row["reason"]) == ("detected", "detected")
    assert row["before_per_call"] == pytest.approx(120.0) and row["after_per_call"] == pytest.approx(576.0)
    assert row["ratio"] == pytest.approx(4.8)
    assert row["detected_change_at"] == SERIES_DEPLOY_AT and row["changepoint_index"] == 30
    assert row["p_value"] < CONFIG.p_value_threshold
    assert row["latency_change"] == pytest.approx(0.09)
    assert row["summary"] == "temp blocks per call ×4.8 (120 → 576) at deploy v42, latency +9%"
    assert (row["unit"], row["deploy_version"], row["query"]) == ("blocks", "v42", QUERY)
    others = resource_rows(frame, unannounced=False).filter(pl.col("metric") != "temp_blocks")
    assert set(others["status"]) == {"no_regression"}
    assert set(others["metric"]) == {"shared_blocks", "rows", "wal_bytes"}  # planning untracked: no row


def test_summary_says_a_large_latency_change_as_a_factor() -> None:
    frame = samples(step(1.0, 12.0), shared_blks_hit=step(100.0, 3000.0))
    row = deploy_row(frame, "shared_blocks")
    assert row["summary"] == "shared blocks per call ×30 (100 → 3,000) at deploy v42, latency ×12"


def test_ratio_below_the_threshold_is_rejected_even_with_a_large_absolute_increase() -> None:
    frame = samples(step(1.0, 1.0), temp_blks_written=step(1000.0, 1800.0))
    row = deploy_row(frame, "temp_blocks")
    assert (row["status"], row["reason"]) == ("no_regression", "below_ratio_threshold")
    assert row["naive_ratio"] == pytest.approx(1.8)
    assert row["changepoint_index"] is None  # stage 0: no further work
    looser = RegressionConfig(
        window_before=CONFIG.window_before,
        window_after=CONFIG.window_after,
        resource=ResourceConfig(ratio_threshold=1.5),
    )
    assert deploy_row(frame, "temp_blocks", looser)["status"] == "detected"


def test_increase_below_the_absolute_floor_is_rejected_even_at_a_large_ratio() -> None:
    frame = samples(step(1.0, 1.0), temp_blks_written=step(0.5, 4.0))  # ×8, but 3.5 blocks per call
    row = deploy_row(frame, "temp_blocks")
    assert (row["status"], row["reason"]) == ("no_regression", "below_absolute_floor")
    assert row["naive_ratio"] == pytest.approx(8.0)
    lower = RegressionConfig(
        window_before=CONFIG.window_before,
        window_after=CONFIG.window_after,
        resource=ResourceConfig(temp_blocks_floor=2.0),
    )
    assert deploy_row(frame, "temp_blocks", lower)["status"] == "detected"


def test_a_step_long_after_the_deploy_is_outside_the_tolerance() -> None:
    temp = np.concatenate([wobble(60, 100.0), wobble(30, 600.0)])  # 5 min after the deploy; tolerance 3 min
    row = deploy_row(samples(step(1.0, 1.0), temp_blks_written=temp), "temp_blocks")
    assert (row["status"], row["reason"]) == ("no_regression", "change_point_outside_tolerance")
    assert row["detected_change_at"] == SERIES_DEPLOY_AT + timedelta(minutes=5)


def test_a_single_spike_passes_stage_zero_but_has_no_change_point() -> None:
    temp = wobble(90, 100.0)
    temp[50] = 50_000.0
    row = deploy_row(samples(step(1.0, 1.0), temp_blks_written=temp), "temp_blocks")
    assert row["naive_ratio"] > 2
    assert (row["status"], row["reason"]) == ("no_regression", "no_significant_change_point")


def test_welch_p_above_the_threshold_is_not_a_regression() -> None:
    rng = np.random.default_rng(5)
    temp = np.concatenate([100 * rng.lognormal(0, 0.3, 30), 400 * rng.lognormal(0, 0.3, 60)])
    frame = samples(step(1.0, 1.0), temp_blks_written=temp)
    row = deploy_row(frame, "temp_blocks")
    assert row["status"] == "detected"
    strict = RegressionConfig(
        window_before=CONFIG.window_before, window_after=CONFIG.window_after, p_value_threshold=row["p_value"]
    )
    stricter = deploy_row(frame, "temp_blocks", strict)
    assert (stricter["status"], stricter["reason"]) == ("no_regression", "welch_not_significant")


def test_less_work_is_never_a_resource_regression() -> None:
    frame = samples(step(1.0, 1.0), temp_blks_written=step(600.0, 100.0), shared_blks_hit=step(5000.0, 50.0))
    rows = resource_rows(frame)
    assert rows.filter(pl.col("status") == "detected").height == 0
    assert deploy_row(frame, "temp_blocks")["reason"] == "below_ratio_threshold"


def test_too_few_samples_before_the_deploy_is_insufficient_data() -> None:
    frame = series_samples(
        step(1.0, 1.0, n_before=3),
        queryid=11,
        first=-3,
        work={**QUIET, "temp_blks_written": step(10, 900, 3)},
    )
    row = deploy_row(frame, "temp_blocks")
    assert (row["status"], row["reason"]) == ("insufficient_data", "too_few_samples")


def test_planning_time_is_analysed_only_where_it_is_tracked() -> None:
    plan = step(0.1, 5.0)
    tracked = samples(step(1.0, 1.2), total_plan_time=plan, plans=1.0)
    row = deploy_row(tracked, "plan_ms")
    assert row["status"] == "detected" and row["unit"] == "ms"
    assert row["summary"].startswith("planning time per call ×50 (0.1 → 5)")
    untracked = samples(step(1.0, 1.2), total_plan_time=0.0, plans=0.0)
    assert "plan_ms" not in resource_rows(untracked)["metric"].to_list()


def test_columns_a_server_lacks_are_not_analysed_and_not_an_error() -> None:
    frame = series_samples(step(1.0, 1.0), queryid=11)  # no work columns at all
    assert resource_rows(frame).height == 0
    found = detect_regressions(series_samples(step(1.0, 5.0), queryid=11), TEXTS, deploys(), CONFIG)
    row = attach_work_evidence(found, series_samples(step(1.0, 5.0), queryid=11), TEXTS, CONFIG).row(
        0, named=True
    )
    assert row["status"] == "detected"
    assert (row["work_changed"], row["work_evidence"]) == (None, None)


def test_index_drop_evidence_names_shared_blocks_and_says_rows_unchanged() -> None:
    frame = samples(step(1.0, 5.0), shared_blks_hit=step(100.0, 7400.0))
    row = evidence(frame)
    assert row["work_changed"] is True
    assert row["work_evidence"] == "shared blocks per call ×74, rows unchanged"


def test_latency_finding_with_unchanged_work_says_so() -> None:
    row = evidence(samples(step(1.0, 5.0)))
    assert row["work_changed"] is False
    assert row["work_evidence"] == "work per call unchanged (largest: shared blocks ×1.00)"


def test_latency_finding_whose_work_fell_says_so_and_is_still_a_work_change() -> None:
    row = evidence(samples(step(1.0, 5.0), shared_blks_hit=step(4000.0, 400.0), rows=step(20.0, 200.0)))
    assert row["work_changed"] is True
    assert row["work_evidence"] == "rows per call ×10, shared blocks per call fell ×0.1"


def test_evidence_is_only_on_detected_findings() -> None:
    frame = samples(step(1.0, 1.05), shared_blks_hit=step(100.0, 7400.0))
    found = detect_regressions(frame, TEXTS, deploys(), CONFIG)
    out = attach_work_evidence(found, frame, TEXTS, CONFIG)
    assert out["status"].to_list() == ["no_regression"]
    assert out.select("work_changed", "work_evidence").rows() == [(None, None)]
    assert out.columns == found.columns and out.drop("work_changed", "work_evidence").equals(
        found.drop("work_changed", "work_evidence")
    )


def test_evidence_uses_the_segments_of_the_latency_welch_test() -> None:
    """A deploy inside an interval: that mixed sample is in neither the latency means nor the work's."""
    latency = step(1.0, 5.0)
    blocks = step(100.0, 7400.0)
    blocks[29] = latency[29] = 1e6  # the straddling interval, nonsense on purpose
    frame = samples(latency, shared_blks_hit=blocks)
    moved = deploys().with_columns(pl.col("deployed_at") - timedelta(seconds=5))
    found = detect_regressions(frame, TEXTS, moved, CONFIG)
    assert found["status"].to_list() == ["detected"] and found["before_count"][0] == 29
    row = attach_work_evidence(found, frame, TEXTS, CONFIG).row(0, named=True)
    assert row["work_evidence"] == "shared blocks per call ×74, rows unchanged"


def test_a_step_no_deploy_explains_is_found_by_the_unannounced_analysis() -> None:
    frame = series_samples(
        step(1.0, 1.0, 60, 60),
        queryid=11,
        first=-200,
        work={**QUIET, "temp_blks_written": step(50, 400, 60, 60)},
    )
    rows = resource_rows(frame)
    assert rows.filter(pl.col("analysis") == "deploy").height == 0  # no sample in the deploy's window
    row = rows.filter((pl.col("analysis") == "unannounced") & (pl.col("metric") == "temp_blocks")).row(
        0, named=True
    )
    assert (row["status"], row["reason"]) == ("detected", "detected")
    assert row["ratio"] == pytest.approx(8.0) and row["p_adjusted"] < CONFIG.fdr_q
    assert row["fdr_method"].startswith("benjamini-hochberg")
    assert row["summary"].startswith("temp blocks per call ×8.0 (50 → 400) since ")
    assert row["summary"].endswith("(unannounced), latency +0%")


def test_a_step_that_came_back_down_is_recovered_not_a_regression() -> None:
    temp = np.concatenate([wobble(40, 50.0), wobble(40, 400.0), wobble(40, 50.0)])
    frame = series_samples(
        wobble(120, 1.0), queryid=11, first=-200, work={**QUIET, "temp_blks_written": temp}
    )
    row = resource_rows(frame).filter(pl.col("metric") == "temp_blocks").row(0, named=True)
    assert (row["status"], row["reason"]) == ("no_regression", "recovered")


def test_queryids_of_one_fingerprint_merge_into_one_work_series() -> None:
    """Two queryids of one query, half the calls each: per call is Σ work / Σ calls of the interval."""
    a = series_samples(step(1.0, 1.0), queryid=11, calls=100, work={**QUIET, "temp_blks_written": 10.0})
    b = series_samples(step(1.0, 1.0), queryid=12, calls=300, work={**QUIET, "temp_blks_written": 50.0})
    points = fingerprinted_samples(pl.concat([a, b]), TEXTS)
    series = work_per_call(points, ["instance", "fingerprint"])
    temp = series.filter(pl.col("metric") == "temp_blocks")
    assert temp.height == 90 and temp["calls"].unique().to_list() == [400]
    assert temp["value"].unique().to_list() == [pytest.approx((10 * 100 + 50 * 300) / 400)]
    assert set(series["metric"]) == {m.name for m in WORK_METRICS}


def test_resource_thresholds_are_validated() -> None:
    with pytest.raises(ValueError, match="ratio_threshold"):
        ResourceConfig(ratio_threshold=1.0)
    with pytest.raises(ValueError, match="rows_floor"):
        ResourceConfig(rows_floor=-1.0)
    assert RegressionConfig().resource == ResourceConfig()


def test_resource_regressions_have_a_duckdb_view(tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    assert (
        duckdb_views.query(lake_root, "select count(*) as n from resource_regressions_detected")["n"][0] == 0
    )
    found = resource_rows(samples(step(1.0, 1.09), temp_blks_written=step(120.0, 576.0)))
    write_table(lake_root, RESOURCE_REGRESSIONS, found, {"date": "2026-11-29"}, "r1")
    shown = duckdb_views.query(lake_root, "select metric, summary from resource_regressions_detected")
    assert shown["metric"].to_list() == ["temp_blocks", "temp_blocks"]  # deploy and unannounced


def test_an_unannounced_step_below_the_ratio_or_the_floor_is_not_reported() -> None:
    def unannounced(temp: np.ndarray, config: RegressionConfig = CONFIG) -> dict:
        frame = series_samples(
            wobble(120, 1.0), queryid=11, first=-200, work={**QUIET, "temp_blks_written": temp}
        )
        rows = resource_rows(frame, config)
        return rows.filter((pl.col("metric") == "temp_blocks") & (pl.col("analysis") == "unannounced")).row(
            0, named=True
        )

    # By default a series whose range cannot hold a step past the gates is not searched, and says so.
    for temp in (step(1000.0, 1500.0, 60, 60), step(0.5, 5.0, 60, 60)):
        row = unannounced(temp)
        assert (row["status"], row["reason"], row["changepoint_index"]) == (
            "no_regression",
            NO_STEP_ABOVE_GATES,
            None,
        )
    # Searched anyway: the step is found, and its row says which gate it fell short of.
    every = replace(CONFIG, search_every_series=True)
    small_ratio = unannounced(step(1000.0, 1500.0, 60, 60), every)
    assert (small_ratio["status"], small_ratio["reason"]) == ("no_regression", "below_ratio_threshold")
    assert small_ratio["changepoint_index"] == 60  # a clear step, but only ×1.5
    small_step = unannounced(step(0.5, 5.0, 60, 60), every)
    assert (small_step["status"], small_step["reason"]) == ("no_regression", "below_absolute_floor")
    # A step past both gates is still searched and found.
    assert unannounced(step(100.0, 400.0, 60, 60))["status"] == "detected"


def test_steps_possible_is_exact_at_the_gates() -> None:
    values = np.array([10.0, 20.0, 0.0, 0.0, 0.0, 16.0, 50.0, 99.0, 5.0, 5.0])
    sizes = np.array([2, 2, 2, 2, 2])
    floors = np.array([10.0, 10.0, 16.0, 50.0, 1.0])
    # [10, 20]: x2, +10 -> both gates met exactly; [0, 0]: nothing; [0, 16]: from 0, +16 = floor;
    # [50, 99]: x1.98 < 2; [5, 5]: constant.
    assert steps_possible(values, sizes, floors, 2.0).tolist() == [True, False, True, False, False]
    assert steps_possible(values[:0], sizes[:0], floors[:0], 2.0).tolist() == []


def test_a_negative_or_nan_work_delta_is_a_clear_error_naming_the_sample() -> None:
    bad = step(120.0, 576.0)
    bad[40] = -3.0
    with pytest.raises(RegressionInputError, match=r"instance alpha queryid 11 at .*temp_blks_written"):
        resource_rows(samples(step(1.0, 1.0), temp_blks_written=bad))
    bad[40] = np.nan
    with pytest.raises(RegressionInputError, match="must be finite"):
        resource_rows(samples(step(1.0, 1.0), temp_blks_written=bad))


def test_unannounced_latency_findings_carry_work_evidence_too() -> None:
    frame = series_samples(
        step(1.0, 5.0, 60, 60),
        queryid=11,
        first=-200,
        work={**QUIET, "shared_blks_read": step(10, 900, 60, 60)},
    )
    found = detect_regressions(frame, TEXTS, deploys(), CONFIG)
    assert found.height == 0  # nothing in the deploy's window
    unannounced = detect_unannounced_regressions(frame, TEXTS, CONFIG)
    row = attach_work_evidence(unannounced, frame, TEXTS, CONFIG).row(0, named=True)
    assert row["status"] == "detected"
    assert row["work_evidence"] == "shared blocks per call ×19, rows unchanged"  # (40 + 10) → (40 + 900)


def test_radar_detect_prints_resource_regressions_and_writes_them(tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    write_step_change_lake(lake_root)
    outcome = run_detection(lake_root)
    console = Console(record=True, width=220)
    print_detection(outcome, console)
    text = console.export_text()
    # The finding's own work step is its "work" cell: no second table (nor a second latency ratio) for it.
    assert "shared blocks per call ×10, rows" in text  # the latency finding's work column
    assert "(×9.9)" in text  # its one ratio, after / before of its levels
    assert "Resource regressions" not in text
    assert "for work per call:" in text and "series × metric not reported" in text
    console = Console(record=True, width=220)
    print_detection(outcome, console, show_all=True)
    text = console.export_text()
    assert "Resource regressions" in text
    assert "shared blocks per call ×10 (75 → 750) at deploy v9, latency ×" in text
    assert "[shared blocks per call, deploy v9] → " in text or "[rows per call, deploy v9] → " in text
    assert any(p.parts[-3] == "resource_regressions" for p in outcome.files)


def test_run_lengths_are_the_contiguous_groups_in_row_order() -> None:
    """Runs of equal keys (nulls equal to nulls), as an order-keeping group_by gives them for contiguous
    groups; a key that returns later is a new run."""
    frame = pl.DataFrame(
        {"a": [None, None, "x", "x", "y", "y", "y", None, "x"], "b": [None, None, 1, 1, 1, 2, 2, None, 1]}
    )
    runs = run_lengths(frame, ["a", "b"])
    assert runs.rows() == [
        (None, None, 2),
        ("x", 1, 2),
        ("y", 1, 1),
        ("y", 2, 2),
        (None, None, 1),
        ("x", 1, 1),
    ]
    assert runs["size"].sum() == frame.height
    assert run_lengths(frame.head(0), ["a", "b"]).height == 0


def test_the_shared_deploy_series_are_what_each_deploy_analysis_builds_alone() -> None:
    """detect_from_frames builds the deploy windows' identity and merged intervals once (``deploy_series``)
    for both deploy analyses: with two queryids of one series (merged into one point per interval) and two
    deploys, the latency columns are ``merge_intervals``' own and both analyses give the same rows."""
    from jobs.detect.deploy_analysis import DEPLOY_SERIES_KEY, MERGED_COLUMNS, scoped_deploy_windows
    from jobs.detect.work import deploy_resource_regressions, deploy_series
    from jobs.detect.work_config import WORK_COLUMNS
    from jobs.query.series import merge_intervals

    rng = np.random.default_rng(5)
    frame = pl.concat(
        [
            series_samples(step(10.0, 25.0) * rng.uniform(0.9, 1.1, 90), queryid=11, work=QUIET),
            series_samples(step(12.0, 12.5) * rng.uniform(0.9, 1.1, 90), queryid=12, work=QUIET, calls=7),
        ],
        how="diagonal_relaxed",
    )
    events = events_frame(
        [
            DeployEvent(version="v42", deployed_at=SERIES_DEPLOY_AT, instance="alpha"),
            DeployEvent(version="v43", deployed_at=SERIES_DEPLOY_AT + timedelta(minutes=3), instance="alpha"),
        ]
    ).drop("date")
    points = fingerprinted_samples(frame, TEXTS, CONFIG.identity)
    windows = scoped_deploy_windows(points, TEXTS, events, CONFIG, None, WORK_COLUMNS)
    shared = deploy_series(windows[0])
    assert shared.merged.select(MERGED_COLUMNS).equals(merge_intervals(windows[0], list(DEPLOY_SERIES_KEY)))
    assert detect_regressions(points, TEXTS, events, CONFIG, None, windows, shared).equals(
        detect_regressions(points, TEXTS, events, CONFIG, None, windows)
    )
    assert deploy_resource_regressions(points, TEXTS, events, CONFIG, None, windows, shared).equals(
        deploy_resource_regressions(points, TEXTS, events, CONFIG, None, windows)
    )


@pytest.mark.parametrize("shuffled", [False, True])
def test_tracked_only_keeps_the_series_with_a_tracked_interval_whatever_their_order(shuffled: bool) -> None:
    """stacked_metrics(tracked_only=True) drops a (series, metric) whose tracking sums to 0: by run-length
    groups when each series is one run of rows (merge_intervals' order), else by the window it replaced."""
    from jobs.detect.work import stacked_metrics

    rng = np.random.default_rng(2)
    n = 40
    merged = pl.DataFrame(
        {
            "instance": ["a"] * n + ["b"] * n,
            "series": ["s1"] * (n // 2) + ["s2"] * (n // 2) + ["s1"] * n,
            "interval_start": pl.datetime_range(
                SERIES_DEPLOY_AT, SERIES_DEPLOY_AT + timedelta(minutes=2 * n - 1), "1m", eager=True
            ),
            "calls": rng.integers(1, 9, 2 * n).astype(np.float64),
        }
    ).with_columns(
        pl.col("interval_start").alias("interval_end"),
        pl.lit(60.0).alias("interval_seconds"),
        pl.lit(1.0).alias("latency_ms"),
        pl.int_range(pl.len()).alias("position"),
        *(pl.lit(1.0).alias(f"work:{m.name}") for m in WORK_METRICS),
        *(
            pl.Series(
                f"tracking:{m.name}", np.where(np.arange(2 * n) < n // 2 + i, 0.0, rng.uniform(0, 2, 2 * n))
            )
            for i, m in enumerate(WORK_METRICS)
        ),
    )
    if shuffled:
        merged = merged.sample(fraction=1.0, shuffle=True, seed=3)
    keys = ["instance", "series"]
    got = stacked_metrics(merged, keys, tracked_only=True)
    everything = stacked_metrics(merged, keys)
    expected = everything.filter(pl.col("tracking").sum().over([*keys, "metric"]) > 0)
    assert got.equals(expected)
    assert got.height < everything.height  # a series with no tracked interval went


@pytest.mark.parametrize(
    ("column", "value", "dtype"),
    [
        ("temp_blks_written", -3, pl.Int64),
        ("wal_bytes", -1, pl.Int64),
        ("total_plan_time", float("nan"), pl.Float64),
        ("total_plan_time", float("inf"), pl.Float64),
        ("total_plan_time", -0.5, pl.Float64),
    ],
)
def test_a_work_delta_that_is_negative_or_not_finite_is_named(
    column: str, value: float, dtype: pl.DataType
) -> None:
    """A counter that went backwards or is not a number is refused naming the column, whatever its type
    (integers are checked by sign, floats for finiteness too)."""
    frame = samples(wobble(120, 1.0)).with_columns(pl.col(column).cast(dtype))
    frame = frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 7)
        .then(pl.lit(value, dtype=dtype))
        .otherwise(pl.col(column))
        .alias(column)
    )
    with pytest.raises(RegressionInputError, match=rf"{column} = .*must be finite and >= 0"):
        work_per_call(fingerprinted_samples(frame, TEXTS), ["instance", "series"])
    clean = samples(wobble(120, 1.0)).with_columns(pl.col(column).cast(dtype))
    assert work_per_call(fingerprinted_samples(clean, TEXTS), ["instance", "series"]).height


def test_tracked_work_is_the_stacked_rows_without_stacking_them() -> None:
    """``TrackedWork`` names the groups and values ``stacked_metrics(tracked_only=True)`` has and stacks
    only the searched groups' rows; both must be exactly the stacked frame's (``only_searched``)."""
    from jobs.detect.segments import group_extremes, only_searched
    from jobs.detect.work import TrackedWork, merged_work, possible_steps, stacked_metrics

    rng = np.random.default_rng(3)
    parts, texts = [], []
    for number, queryid in enumerate((21, 22, 23, 24)):
        work = {**QUIET, "rows": rng.random(40) * 9, "wal_bytes": rng.random(40) * (number % 2)}
        if number == 2:
            work["total_plan_time"], work["plans"] = rng.random(40), 1.0  # planning tracked here only
        parts.append(series_samples(1 + rng.random(40), queryid=queryid, work=work))
        texts.append(("alpha", queryid, f"SELECT c{number} FROM t WHERE id = $1"))
    samples_ = pl.concat(parts, how="diagonal_relaxed")
    keys = ["instance", "series"]
    merged = merged_work(fingerprinted_samples(samples_, series_texts(texts)), keys)
    stacked = stacked_metrics(merged, keys, tracked_only=True)
    groups = run_lengths(stacked, [*keys, "metric"])
    tracked = TrackedWork.of(merged, keys)
    assert tracked is not None
    assert tracked.groups.equals(groups)
    sizes = groups["size"].to_numpy().astype(np.int64)
    values = stacked["value"].to_numpy().astype(np.float64)
    low, high = group_extremes(values, sizes)
    assert np.array_equal(tracked.low, low) and np.array_equal(tracked.high, high)
    floors = np.full(sizes.shape[0], 0.5)
    assert np.array_equal(
        possible_steps(tracked.low, tracked.high, sizes, floors, 1.5),
        steps_possible(values, sizes, floors, 1.5),
    )
    for searched in (np.arange(sizes.shape[0]), np.array([0, 3, 7]), np.array([], dtype=np.int64)):
        want = only_searched(stacked, values, sizes, searched)
        got = tracked.searched(sizes, searched)
        assert got[0].equals(want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
        assert got[3].equals(want[3])
