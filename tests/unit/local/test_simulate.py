"""The fleet simulator: deterministic, collector-shaped, every event seen by the real samples job as the
ground truth says, and the real detection pipeline finds the injected regression at its deploy and nothing
else."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from jobs.detect.config import SampleConfig
from jobs.detect.samples_job import run_samples_job
from jobs.lake import io as lake
from jobs.local.simulate.__main__ import main as simulate_main
from jobs.local.simulate.simulated_fleet import FleetShape, lifetime_cumsum, simulate_fleet, simulate_instance
from jobs.local.simulate.writer import WriteReport, load_ground_truth, write_fleet
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.schemas.collected import SAMPLE_DELTAS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

# Every kind of event at least once with this seed (checked below), on a shape small enough for a few files.
EVENTFUL = FleetShape(
    instances=2,
    statements=12,
    minutes=120,
    seed=1,
    regressions=0,
    deploys_per_hour=0,
    restarts_per_hour=0.6,
    resets_per_hour=0.6,
    evictions_per_hour=1.5,
    clock_steps_per_hour=0.6,
    failed_snapshots_per_hour=0.6,
)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _instance_frames(shape: FleetShape) -> tuple[pl.DataFrame, pl.DataFrame]:
    """All statement rows and run rows of the fleet, with ``instance``, straight from the generator."""
    rows, runs = [], []
    for sim in simulate_fleet(shape):
        rows.append(sim.rows.with_columns(pl.lit(sim.name).alias("instance")))
        runs.append(pl.DataFrame([{**r, "instance": sim.name} for r in sim.runs], infer_schema_length=None))
    return pl.concat(rows), pl.concat(runs, how="diagonal_relaxed")


def test_same_shape_gives_identical_files_and_the_fast_writer_the_collectors_bytes(tmp_path: Path) -> None:
    small = replace(  # one instance with every kind of event, a failed snapshot among them
        EVENTFUL,
        instances=1,
        minutes=40,
        seed=6,
        failed_snapshots_per_hour=3,
        restarts_per_hour=1.5,
        resets_per_hour=1.5,
        clock_steps_per_hour=1.5,
        evictions_per_hour=3,
    )
    write_fleet(tmp_path / "a", small, fast=True)
    write_fleet(tmp_path / "b", small, fast=True)
    write_fleet(tmp_path / "collector", small)  # through the collector's own writers (fsync each file)
    first = _files(tmp_path / "a")
    assert first == _files(tmp_path / "b")
    assert first == _files(tmp_path / "collector")
    statement_files = [f for f in first if f.startswith("statement_snapshots/")]
    run_files = [f for f in first if f.startswith("snapshot_runs/")]
    events = load_ground_truth(tmp_path / "a/_simulation/ground_truth.json")["events"]
    failed = sum(e["kind"] == "failed_snapshot" for e in events)
    assert {e["kind"] for e in events} == {
        "restart",
        "stats_reset",
        "eviction",
        "clock_step",
        "failed_snapshot",
    }
    assert len(run_files) == small.snapshots  # one run row file per snapshot, failed ones included
    assert len(statement_files) == small.snapshots - failed
    write_fleet(tmp_path / "other", replace(small, seed=2), fast=True)
    assert _files(tmp_path / "other") != first


def test_counters_are_cumulative_within_an_entry_life() -> None:
    steps = np.array([[1, 2], [3, 4], [5, 6], [7, 8]])
    starts = np.array([[True, True], [False, False], [False, True], [False, False]])
    out = lifetime_cumsum(steps, starts, np.array([100, 0]))
    assert out.tolist() == [[101, 2], [104, 6], [109, 6], [116, 14]]

    rows, _ = _instance_frames(EVENTFUL)
    life = ["instance", "queryid", "postmaster_start", "stats_reset", "stats_since"]
    steps_seen = (
        rows.sort("instance", "queryid", "collector_clock")
        .group_by(life, maintain_order=True)
        .agg(pl.col(c).diff().min().alias(c) for c in SAMPLE_DELTAS)
    )
    worst = steps_seen.select(pl.min_horizontal(pl.col(c).fill_null(0).min() for c in SAMPLE_DELTAS)).item()
    assert worst >= 0
    assert steps_seen.select(pl.col("calls").min()).item() >= 1  # every statement runs every interval


def test_events_shape_the_rows_as_the_server_would() -> None:
    sims = list(simulate_fleet(EVENTFUL))
    kinds = Counter(e.kind for s in sims for e in s.truth.events)
    assert set(kinds) == {"restart", "stats_reset", "eviction", "clock_step", "failed_snapshot"}
    for sim in sims:
        runs = pl.DataFrame(sim.runs, infer_schema_length=None)
        ok = runs.filter(pl.col("status") == "ok")
        by_time = {r["captured_at"]: r for r in ok.iter_rows(named=True)}
        times = ok["captured_at"].to_list()
        for event in sim.truth.events:
            after = event.snapshot_at
            if event.kind == "failed_snapshot":
                assert runs.filter(pl.col("captured_at") == after)["status"].to_list() == ["failed"]
                continue
            before = times[times.index(after) - 1]
            now_rows = sim.rows.filter(pl.col("captured_at") == after)
            old_rows = sim.rows.filter(pl.col("captured_at") == before)
            if event.kind in ("restart", "stats_reset"):
                # every entry starts again: fewer calls than before, created after the event, dealloc 0
                joined = now_rows.join(old_rows, on="queryid", suffix="_old")
                assert joined.height == EVENTFUL.statements
                assert (joined["calls"] < joined["calls_old"]).all()
                assert (joined["stats_since"] > joined["stats_since_old"]).all()
                assert by_time[after]["dealloc"] == 0
                assert by_time[after]["stats_reset"] == event.at
                changed = by_time[after]["postmaster_start"] != by_time[before]["postmaster_start"]
                assert changed == (event.kind == "restart")
            elif event.kind == "eviction":
                # dealloc rises by one; the evicted entries leave and come back with new counters
                assert by_time[after]["dealloc"] == by_time[before]["dealloc"] + 1
                assert not set(event.queryids) & set(now_rows["queryid"].to_list())
                back = sim.rows.filter(
                    pl.col("queryid").is_in(list(event.queryids)) & (pl.col("captured_at") > after)
                )
                first_back = back.sort("captured_at").group_by("queryid").first()
                old = old_rows.filter(pl.col("queryid").is_in(list(event.queryids)))
                joined = first_back.join(old, on="queryid", suffix="_old")
                assert joined.height == len(event.queryids)
                assert (joined["stats_since"] > joined["stats_since_old"]).all()
                assert (joined["calls"] < joined["calls_old"]).all()
            elif event.kind == "clock_step":
                offset = (pl.col("captured_at") - pl.col("collector_clock")).dt.total_seconds(fractional=True)
                moved = now_rows.select(offset.first()).item() - old_rows.select(offset.first()).item()
                assert abs(abs(moved) - EVENTFUL.clock_step_seconds) < 1.0


@pytest.fixture(scope="module")
def eventful_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WriteReport]:
    root = tmp_path_factory.mktemp("eventful") / "lake"
    return root, write_fleet(root, EVENTFUL, fast=True)


@pytest.mark.parametrize("grew", [False, True])
def test_samples_job_drops_exactly_what_the_ground_truth_says(
    tmp_path: Path, eventful_lake: tuple[Path, WriteReport], grew: bool
) -> None:
    root, report = eventful_lake
    truth = load_ground_truth(report.truth_path)
    config = SampleConfig(drop_when_dealloc_grew=grew)
    job = run_samples_job(root, config, out_root=tmp_path / "samples", mode="rebuild")
    expected = truth["expected_drops"]["drop_when_dealloc_grew" if grew else "default"]
    seen = job.dropped_counts.to_dicts()
    assert seen == expected
    reasons = {d["reason"] for d in seen}
    assert {"server_restarted", "stats_reset", "entry_recreated", "clock_skew"} <= reasons
    assert ("evicted_in_interval" in reasons) == grew
    # every row but each entry's first has a predecessor: it is a sample or a counted drop
    first_rows = EVENTFUL.instances * EVENTFUL.statements
    assert job.snapshot_rows == truth["snapshot_rows"] == report.snapshot_rows
    assert job.sample_rows == job.snapshot_rows - first_rows - sum(d["count"] for d in expected)
    snapshots = lake.read_table(root, STATEMENT_SNAPSHOTS)
    runs = lake.read_table(root, SNAPSHOT_RUNS)
    assert snapshots.height == report.snapshot_rows
    assert runs.filter(pl.col("status") == "failed").height == sum(
        e["kind"] == "failed_snapshot" for e in truth["events"]
    )


DETECTABLE = FleetShape(
    instances=1,
    statements=8,
    minutes=120,
    seed=5,
    regressions=1,
    deploys_per_hour=1.0,
    restarts_per_hour=0,
    resets_per_hour=0,
    evictions_per_hour=0,
    clock_steps_per_hour=0,
    failed_snapshots_per_hour=0,
)


def test_detection_finds_the_injected_regression_at_its_deploy_and_nothing_else(tmp_path: Path) -> None:
    report = write_fleet(tmp_path, DETECTABLE, fast=True)
    truth = load_ground_truth(report.truth_path)
    assert len(truth["regressions"]) == 1 and len(truth["deploys"]) >= 2  # a clean deploy too
    outcome = run_detection(tmp_path, DetectionConfig(), now=DETECTABLE.end)
    found = {
        (r["instance"], r["queryid"], r["deployed_at"].isoformat())
        for r in outcome.detected.iter_rows(named=True)
    }
    injected = {(r["instance"], r["queryid"], r["onset"]) for r in truth["regressions"]}
    assert found == injected
    assert outcome.regressions.height == len(truth["deploys"]) * DETECTABLE.statements
    unannounced = (
        outcome.unannounced.filter(pl.col("status") == "detected")
        if outcome.unannounced.height
        else outcome.unannounced
    )
    assert set(unannounced["queryid"].to_list()) <= {r["queryid"] for r in truth["regressions"]}


def test_regressions_that_do_not_fit_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="instance sim-0000: 1 deploys"):
        simulate_instance(replace(DETECTABLE, minutes=60), 0, 1)


def test_entry_point_prints_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = simulate_main(
        [
            "--instances",
            "1",
            "--statements",
            "5",
            "--minutes",
            "5",
            "--regressions",
            "0",
            "--lake",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "25 snapshot rows" in out and "rows/s" in out and "MB" in out
