"""The detection split per shard (issue 14): each shard's pass over its own instances, with the
Benjamini-Hochberg step of the unannounced analyses taken over every shard's candidates in between
(jobs.pipeline.sharded, jobs.detect.fleet_fdr). On a simulated fleet, 4 shards' passes give the verdicts,
p-values, findings and run state a whole-fleet run gives."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from jobs.cli.main import main
from jobs.collect.shards import shard_of
from jobs.detect import findings
from jobs.detect.changepoint_memo import ChangePointMemo, memo_key
from jobs.detect.config import RegressionConfig
from jobs.detect.findings import latest_states
from jobs.detect.fleet_fdr import LATENCY, RESOURCE, CandidateRecorder, FleetFdr, bh_adjusted
from jobs.detect.samples_job import lake_instances, run_samples_job
from jobs.detect.segments import consecutive_segment_tests
from jobs.lake import io as lake
from jobs.local.simulate.simulated_fleet import FleetShape
from jobs.local.simulate.writer import write_fleet
from jobs.pipeline import detection as analysis
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.pipeline.sharded import (
    analysis_round,
    latest_candidate_runs,
    other_shards_candidates,
    record_shard_candidates,
    run_shard_detection,
    shard_instances,
)
from jobs.schemas.analysed import (
    ANALYSED_DEPLOYS,
    ANALYSIS_RUNS,
    FDR_CANDIDATES,
    FINDING_STATES,
    PERFORMANCE_REGRESSIONS,
    RESOURCE_REGRESSIONS,
)
from jobs.schemas.collected import QUERY_SAMPLES

SHARDS = 4
SHAPE = FleetShape(instances=8, statements=30, minutes=180, seed=7, regressions=3)
FULL = DetectionConfig(rebuild_samples=False, incremental=False)
# The unannounced history window ends at the latest sample of the call: per shard, not per fleet.
BATCH_COLUMNS = ["run_id", "computed_at", "fdr_method", "window_start", "window_end", "date"]


# ---------------------------------------------------------------------------------------------------------
# Pure: the adjustment


def test_adjusting_among_other_shards_equals_one_call_over_the_union() -> None:
    rng = np.random.default_rng(3)
    fleet = rng.uniform(0, 0.2, 40) ** 2
    whole = stats.false_discovery_control(fleet, method="bh")
    pieces = np.split(np.arange(40), [7, 19, 30])
    for piece in pieces:
        others = np.delete(fleet, piece)
        assert np.array_equal(bh_adjusted(fleet[piece], others), whole[piece])  # float for float
    assert np.array_equal(bh_adjusted(fleet), whole)
    # more tests, larger adjusted p: a shard alone would have reported smaller ones
    assert (bh_adjusted(fleet[pieces[0]]) <= whole[pieces[0]]).all()
    assert (bh_adjusted(fleet[pieces[0]]) < whole[pieces[0]]).any()


def test_the_recorder_keeps_each_family_and_adjusts_within_the_call() -> None:
    recorder = CandidateRecorder()
    p = np.array([0.01, 0.04, 0.002])
    assert np.array_equal(recorder.adjust(LATENCY)(p), stats.false_discovery_control(p, method="bh"))
    recorder.adjust(RESOURCE)(np.array([0.5]))
    assert np.array_equal(recorder.p_values(LATENCY), p)
    assert recorder.p_values(RESOURCE).tolist() == [0.5]
    fleet = FleetFdr({LATENCY: np.array([0.3, 0.03])})
    assert fleet.tests(LATENCY) == 2 and fleet.tests(RESOURCE) == 0
    assert np.array_equal(fleet.adjust(RESOURCE)(p), bh_adjusted(p))


# ---------------------------------------------------------------------------------------------------------
# On a simulated fleet


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sharded") / "lake"
    write_fleet(root, SHAPE)
    run_samples_job(root)
    return root


def _copy(simulated: Path, to: Path) -> Path:
    shutil.copytree(simulated, to)
    return to


def _table(root: Path, table: str) -> pl.DataFrame:
    frame = lake.read_table(root, table).drop(BATCH_COLUMNS, strict=False)
    return frame.sort(frame.columns, nulls_last=True)


def _sharded_pass(root: Path, config: DetectionConfig, at: object, shards: range = range(SHARDS)) -> list:
    for shard in shards:
        record_shard_candidates(root, config, shard, SHARDS, now=at)  # type: ignore[arg-type]
    return [
        run_shard_detection(root, config, s, SHARDS, now=at + timedelta(seconds=1 + s))  # type: ignore[operator]
        for s in shards
    ]


def test_a_lake_without_samples_yet_is_sharded_by_its_snapshots(simulated: Path, tmp_path: Path) -> None:
    """Before any run built samples (a new lake, a new instance), every instance with snapshots is in its
    shard, so the shard's pass builds its samples instead of finding nothing to analyse."""
    fresh = _copy(simulated, tmp_path / "fresh")
    shutil.rmtree(fresh / QUERY_SAMPLES.name)
    listed = sorted(i for shard in range(SHARDS) for i in shard_instances(fresh, shard, SHARDS))
    assert listed == lake_instances(fresh) and listed


def test_four_shards_give_the_whole_fleet_runs_verdicts(simulated: Path, tmp_path: Path) -> None:
    whole, sharded = _copy(simulated, tmp_path / "whole"), _copy(simulated, tmp_path / "sharded")
    outcome = run_detection(whole, FULL, now=SHAPE.end)
    assert outcome.detected.height > 0, "the simulated regressions must be found"
    passes = _sharded_pass(sharded, FULL, SHAPE.end)
    assert sorted(i for p in passes for i in p.outcome.regressions["instance"].unique()) == sorted(
        outcome.regressions["instance"].unique()
    )
    for shard, result in enumerate(passes):  # each pass analysed its own instances only
        assert set(result.outcome.regressions["instance"]) <= set(shard_instances(sharded, shard, SHARDS))
        assert {shard_of(i, SHARDS) for i in result.outcome.unannounced["instance"]} <= {shard}
        assert result.candidates.missing == []
    for table in (PERFORMANCE_REGRESSIONS, RESOURCE_REGRESSIONS):
        left, right = _table(whole, table.name), _table(sharded, table.name)
        assert left.height > 0
        assert left.equals(right), table.name  # statuses, p-values, BH-adjusted p-values
    findings = [latest_states(lake.read_table(r, FINDING_STATES)) for r in (whole, sharded)]
    keys = ["finding_id", "status", "instance", "series", "p_value"]
    assert findings[0].height > 0
    assert findings[0].select(keys).sort("finding_id").equals(findings[1].select(keys).sort("finding_id"))
    # the fleet's candidate count is what every shard's rows say they were adjusted among
    fleet_tests = {r["fdr_method"] for r in outcome.unannounced.iter_rows(named=True)}
    shard_tests = {m for p in passes for m in p.outcome.unannounced["fdr_method"].to_list()}
    assert fleet_tests == shard_tests
    # every instance's watermark recorded once, by its own shard's pass
    runs = lake.read_table(sharded, ANALYSIS_RUNS)
    assert runs["instance"].is_unique().all()
    assert sorted(runs["instance"]) == sorted(lake.read_table(whole, ANALYSIS_RUNS)["instance"])


@pytest.mark.slow  # a whole-fleet run and four shard passes on the simulated fleet
def test_a_shard_that_ignored_the_others_candidates_would_report_smaller_adjusted_p(
    simulated: Path, tmp_path: Path
) -> None:
    """What the fleet-wide step changes: a shard's pass alone (its BH over its own candidates) differs
    from the fleet's; this is the difference the two phases remove."""
    root = _copy(simulated, tmp_path / "alone")
    alone = [run_shard_detection(root, FULL, s, SHARDS, now=SHAPE.end) for s in range(SHARDS)]
    assert all(
        sorted(r.candidates.missing) == sorted(set(_keys()) - {f"shard-{i}"}) for i, r in enumerate(alone)
    )
    whole = run_detection(_copy(simulated, tmp_path / "whole"), FULL, now=SHAPE.end)
    p_alone = pl.concat([r.outcome.unannounced for r in alone]).filter(pl.col("p_adjusted").is_not_null())
    p_whole = whole.unannounced.filter(pl.col("p_adjusted").is_not_null())
    joined = p_whole.join(p_alone, on=["instance", "series"], suffix="_alone")
    assert joined.height == p_whole.height > 1
    assert (joined["p_adjusted_alone"] <= joined["p_adjusted"]).all()
    assert (joined["p_adjusted_alone"] < joined["p_adjusted"]).any()


def _keys() -> list[str]:
    return [f"shard-{s}" for s in range(SHARDS)]


def test_only_each_shards_latest_candidates_count(simulated: Path, tmp_path: Path) -> None:
    root = _copy(simulated, tmp_path / "lake")
    first = record_shard_candidates(root, FULL, 1, SHARDS, now=SHAPE.end)
    second = record_shard_candidates(root, FULL, 1, SHARDS, now=SHAPE.end + timedelta(minutes=1))
    folder = root / FDR_CANDIDATES.name / "shard=shard-1"
    assert [p.name for p in folder.glob("*.parquet")] == [second.path.name] != [first.path.name]
    record_shard_candidates(root, FULL, 2, 3, now=SHAPE.end)  # another shard count: not counted
    seen = other_shards_candidates(root, 0, SHARDS)
    assert seen.used["shard"].to_list() == ["shard-1"]
    assert seen.missing == ["shard-2", "shard-3"]
    assert seen.fleet.tests(LATENCY) == second.candidates[LATENCY]


def test_incremental_sharded_passes_follow_full_ones_and_a_whole_fleet_run(
    simulated: Path, tmp_path: Path
) -> None:
    """Nothing new after a full sharded pass: the incremental passes re-examine nothing, each instance's
    watermark is its own shard's, and a whole-fleet run after them is incremental too."""
    root = _copy(simulated, tmp_path / "lake")
    _sharded_pass(root, FULL, SHAPE.end)
    detected = _table(root, PERFORMANCE_REGRESSIONS.name).filter(pl.col("status") == "detected")
    incremental = DetectionConfig(rebuild_samples=False, incremental=True)
    again = _sharded_pass(root, incremental, SHAPE.end + timedelta(minutes=5))
    assert all(p.outcome.regressions.height == 0 and p.outcome.unannounced.height == 0 for p in again)
    assert all(not p.outcome.settings_changed for p in again)
    assert all(p.outcome.finding_changes.height == 0 for p in again)
    whole = run_detection(root, incremental, now=SHAPE.end + timedelta(minutes=10))
    assert whole.regressions.height == whole.unannounced.height == 0
    assert _table(root, PERFORMANCE_REGRESSIONS.name).filter(pl.col("status") == "detected").equals(detected)
    # a changed threshold makes every shard's next pass a full one (each shard judges by its instances)
    stricter = DetectionConfig(rebuild_samples=False, incremental=True, unannounced=False)
    changed = _sharded_pass(root, stricter, SHAPE.end + timedelta(minutes=15))
    assert all(p.outcome.settings_changed for p in changed if p.instances)
    seen = lake.read_table(root, ANALYSED_DEPLOYS)
    assert set(seen["shard"].drop_nulls()) <= {f"{k} of {SHARDS}" for k in _keys()}


def test_phase_two_starts_when_every_shard_recorded_or_after_the_wait() -> None:
    def at(minute: int) -> str:
        return f"20261201T10{minute:02d}00000000Z"

    now = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
    both = {"shard-0": at(1), "shard-1": at(3)}
    assert analysis_round({}, {}, 2, now, 600) is None
    assert analysis_round({"shard-0": at(1)}, {}, 2, now, 600) is None  # waiting for shard-1
    assert analysis_round(both, {}, 2, now, 600) == at(3)
    assert analysis_round(both, both, 2, now, 600) is None  # consumed by the last round
    assert analysis_round(both, {"shard-0": at(1)}, 2, now, 600) is None  # shard-0 has nothing new
    assert analysis_round({"shard-0": at(1)}, {}, 2, now, 240) == at(1)  # waited 4 minutes: go without it


def test_latest_candidate_runs_are_read_from_the_file_names(simulated: Path, tmp_path: Path) -> None:
    root = _copy(simulated, tmp_path / "lake")
    assert latest_candidate_runs(root, SHARDS) == {}
    recorded = record_shard_candidates(root, FULL, 2, SHARDS, now=SHAPE.end)
    record_shard_candidates(root, FULL, 0, 3, now=SHAPE.end)  # another shard count
    assert latest_candidate_runs(root, SHARDS) == {"shard-2": recorded.path.name.split("-of")[0]}


@pytest.mark.slow  # a whole-fleet run and four shard passes on the simulated fleet
def test_a_shards_pass_judges_only_its_own_instances_findings(
    simulated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another shard's open findings are that shard's to re-check (two passes writing states of one
    finding at once would race): a pass hands the findings update only its own instances' findings."""
    root = _copy(simulated, tmp_path / "lake")
    run_detection(root, FULL, now=SHAPE.end)  # a whole-fleet run opened findings on several shards
    opened = latest_states(lake.read_table(root, FINDING_STATES))
    assert (
        opened["instance"].map_elements(lambda i: shard_of(i, SHARDS), return_dtype=pl.Int64).n_unique() > 1
    )
    handed: list[set[str]] = []
    real = findings.update_findings

    def spy(previous: pl.DataFrame, rows: pl.DataFrame, **kwargs: object) -> pl.DataFrame:
        handed.append(set(previous["instance"].to_list()))
        return real(previous, rows, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(analysis, "update_findings", spy)
    for shard in range(SHARDS):
        handed.clear()
        run_shard_detection(root, FULL, shard, SHARDS, now=SHAPE.end + timedelta(minutes=1 + shard))
        assert handed and handed[0] <= set(shard_instances(root, shard, SHARDS))


@pytest.mark.slow  # a whole-fleet run and four shard passes on the simulated fleet
def test_radar_detect_runs_one_shards_phases(
    simulated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`radar detect --shard K/N --phase candidates`, then `radar detect --shard K/N`: scriptable (JSON,
    exit codes), the same verdicts as the library's passes; a bad --shard exits 2 naming the flag."""
    root = _copy(simulated, tmp_path / "lake")
    common = ["--lake", str(root), "detect", "--full", "--format", "json"]
    for shard in range(SHARDS):
        assert main([*common, "--shard", f"{shard}/{SHARDS}", "--phase", "candidates"]) == 0
        row = json.loads(capsys.readouterr().out)
        assert row[0]["shard"] == f"shard-{shard}" and row[0]["instances"] == len(
            shard_instances(root, shard, SHARDS)
        )
    codes = [main([*common, "--shard", f"{s}/{SHARDS}", "--fail-on-detect"]) for s in range(SHARDS)]
    shown = capsys.readouterr()
    assert "no recorded candidates" not in shown.err + shown.out
    opened = latest_states(lake.read_table(root, FINDING_STATES)).filter(pl.col("status") == "open")
    assert opened.height > 0
    assert codes == [1 if shard_of_any(opened, s) else 0 for s in range(SHARDS)]
    with pytest.raises(SystemExit) as bad:
        main([*common, "--shard", "4/4"])
    assert bad.value.code == 2 and "--shard takes K/N" in capsys.readouterr().err


def shard_of_any(findings: pl.DataFrame, shard: int) -> bool:
    return any(shard_of(i, SHARDS) == shard for i in findings["instance"].to_list())


# ---------------------------------------------------------------------------------------------------------
# Phase 2 reuses phase 1's change points


def test_the_memo_returns_what_the_search_found_and_only_for_the_same_inputs() -> None:
    rng = np.random.default_rng(11)
    sizes = np.array([60, 45, 80], dtype=np.int64)
    values = np.concatenate(
        [
            rng.normal(1.0, 0.05, 60),
            rng.normal(2.0, 0.1, 45),
            np.r_[rng.normal(1, 0.05, 40), rng.normal(3, 0.1, 40)],
        ]
    )
    config = RegressionConfig()
    args = {"max_change_points": config.max_change_points, "fdr_q": config.fdr_q}
    plain = consecutive_segment_tests(values, sizes, config.unannounced_changepoint, **args)
    memo = ChangePointMemo()
    first = consecutive_segment_tests(values, sizes, config.unannounced_changepoint, memo=memo, **args)
    again = consecutive_segment_tests(values, sizes, config.unannounced_changepoint, memo=memo, **args)
    assert (memo.hits, memo.misses) == (1, 1)
    for steps in (first, again):
        assert np.array_equal(steps.cut, plain.cut) and np.array_equal(steps.welch.p, plain.welch.p)
    assert plain.cut.size > 0
    # through the lake's rows and back, and a changed value or setting is another key (searched afresh)
    restored = ChangePointMemo.from_frame(memo.to_frame())
    moved = values.copy()
    moved[100] += 5.0
    changed = consecutive_segment_tests(moved, sizes, config.unannounced_changepoint, memo=restored, **args)
    fresh = consecutive_segment_tests(moved, sizes, config.unannounced_changepoint, **args)
    assert restored.misses == 1 and np.array_equal(changed.welch.p, fresh.welch.p)
    assert memo_key(values, sizes, config.unannounced_changepoint, 5, 0.05) != memo_key(
        values, sizes, config.unannounced_changepoint, 5, 0.01
    )
    reused = consecutive_segment_tests(values, sizes, config.unannounced_changepoint, memo=restored, **args)
    assert restored.hits == 1 and np.array_equal(reused.changepoint_p_value, plain.changepoint_p_value)


def test_phase_two_reuses_phase_ones_change_points(simulated: Path, tmp_path: Path) -> None:
    root = _copy(simulated, tmp_path / "lake")
    passes = _sharded_pass(root, FULL, SHAPE.end)
    for result in passes:  # the unannounced searches (latency, work per call) of each shard with instances
        # An analysis none of whose series can hold a reportable step runs no search (steps_possible).
        assert result.memo.misses == 0, result
        assert (1 <= result.memo.hits <= 2) if result.instances else result.memo.hits == 0, result
