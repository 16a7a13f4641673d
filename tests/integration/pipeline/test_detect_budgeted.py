"""A full detection within a memory budget (issue 25, jobs.pipeline.budgeted): the instances analysed in
chunks, one after the other in one process, with the fleet-wide Benjamini-Hochberg step between the two
phases. On a simulated fleet a run split into chunks writes the rows, verdicts, adjusted p-values, findings
and run state of one pass; an incremental run after it is not split and finds nothing new."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs.cli.main import main
from jobs.detect.config import MemoryConfig
from jobs.detect.findings import latest_states
from jobs.detect.scope import ShardOfRun
from jobs.lake import io as lake
from jobs.local.simulate.writer import write_fleet
from jobs.pipeline.budgeted import (
    ALLOCATOR_ENV,
    MIB,
    PACKED_FRAMES,
    PackedOutcome,
    estimated_mib,
    in_own_process,
    plan_chunks,
    returning_freed,
    run_detection_in_budget,
)
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.schemas.analysed import (
    ANALYSIS_RUNS,
    FINDING_STATES,
    INSTANCE_SLOWDOWNS,
    PERFORMANCE_REGRESSIONS,
    RESOURCE_REGRESSIONS,
)
from tests.support.budget_lakes import SHAPE, budget_of_two_instances
from tests.support.procs import alive, process_stats

BATCH_COLUMNS = ["run_id", "computed_at", "fdr_method", "window_start", "window_end", "date"]


# ---------------------------------------------------------------------------------------------------------
# Pure: the chunks


def test_chunks_hold_every_instance_once_and_fit_the_budget() -> None:
    rows = {f"i{k:02d}": r for k, r in enumerate([900, 100, 400, 400, 250, 50, 700, 300, 20, 600])}
    # room: 1,000 rows a chunk (the analysis; the samples rebuild's share is below it)
    memory = MemoryConfig(
        budget_mib=2, base_mib=1, sample_bytes=MIB // 1000, rebuild_bytes=1, coordinator_mib=0
    )
    chunks = plan_chunks(rows, memory)
    assert sorted(n for c in chunks for n in c) == sorted(rows)
    assert all(estimated_mib([rows[n] for n in c], memory) <= memory.budget_mib for c in chunks)
    assert len(chunks) == 4  # 3,720 rows: the fewest chunks of 1,000 that first fit (largest first) finds
    assert plan_chunks(dict(reversed(rows.items())), memory) == chunks  # the same lake, the same chunks


def test_no_budget_or_a_fleet_that_fits_is_one_chunk_and_a_large_instance_is_alone() -> None:
    rows = {"a": 10, "b": 5_000, "c": 20}
    assert plan_chunks(rows, MemoryConfig(budget_mib=0, base_mib=1, sample_bytes=MIB)) == (("a", "b", "c"),)
    assert plan_chunks(rows, MemoryConfig(budget_mib=10_000, base_mib=1, sample_bytes=1)) == (
        ("a", "b", "c"),
    )
    tight = MemoryConfig(
        budget_mib=2, base_mib=1, sample_bytes=MIB // 100, coordinator_mib=0
    )  # room: 100 rows
    assert plan_chunks(rows, tight) == (("b",), ("a", "c"))
    assert plan_chunks({}, tight) == ()


def test_a_pass_that_rebuilds_samples_counts_its_largest_instances_rebuild() -> None:
    """The samples job differences one instance at a time: its memory follows the largest instance, the
    analysis' follows every instance of the pass."""
    memory = MemoryConfig(budget_mib=3, base_mib=1, sample_bytes=MIB // 1000, rebuild_bytes=MIB // 400)
    assert estimated_mib([800, 300], memory) == pytest.approx(1 + 2.0, abs=0.01)  # the rebuild of 800
    assert estimated_mib([800, 300], memory, rebuilds=False) == pytest.approx(1 + 1.1, abs=0.01)
    assert estimated_mib([300, 300, 300, 300], memory) == pytest.approx(1 + 1.2, abs=0.01)  # the analysis
    rows = {"a": 800, "b": 300, "c": 300}
    tight = MemoryConfig(
        budget_mib=3, base_mib=1, sample_bytes=MIB // 1000, rebuild_bytes=MIB // 364, coordinator_mib=0
    )
    assert plan_chunks(rows, tight) == (("a",), ("b", "c"))  # a's rebuild alone: 1 + 2.2 MiB
    assert plan_chunks(rows, tight, rebuilds=False) == (("a", "b", "c"),)  # analysis: 1 + 1.4 MiB
    # the samples job rebuilds an instance a piece of days at a time: its largest piece counts
    assert estimated_mib([800, 300], memory, piece_rows=500) == pytest.approx(1 + 1.25, abs=0.01)
    assert plan_chunks(rows, tight, piece_rows=400) == (("a", "b", "c"),)


def test_a_negative_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="budget_mib must be >= 0"):
        MemoryConfig(budget_mib=-1)


# ---------------------------------------------------------------------------------------------------------
# On a simulated fleet (snapshots only: the chunks' passes build the samples)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("budgeted") / "lake"
    write_fleet(root, SHAPE)
    return root


def _table(root: Path, table: str) -> pl.DataFrame:
    frame = lake.read_table(root, table).drop(BATCH_COLUMNS, strict=False)
    return frame.sort(frame.columns, nulls_last=True)


def test_a_run_split_into_chunks_writes_one_pass_rows(simulated: Path, tmp_path: Path) -> None:
    whole, chunked = (shutil.copytree(simulated, tmp_path / name) for name in ("whole", "chunked"))
    full = DetectionConfig(incremental=False)
    outcome = run_detection(whole, full, now=SHAPE.end)
    assert outcome.detected.height > 0, "the simulated regressions must be found"
    memory = budget_of_two_instances(chunked)
    run = run_detection_in_budget(chunked, DetectionConfig(incremental=False, memory=memory), SHAPE.end)
    assert [len(c) for c in run.chunks] == [2, 2, 2]
    for table in (PERFORMANCE_REGRESSIONS, RESOURCE_REGRESSIONS, INSTANCE_SLOWDOWNS):
        left, right = _table(whole, table.name), _table(chunked, table.name)
        assert left.equals(right), table.name  # statuses, p-values, BH-adjusted p-values
    assert _table(whole, PERFORMANCE_REGRESSIONS.name).filter(pl.col("status") == "detected").height > 0
    # the fleet's candidate count is what every chunk's rows say they were adjusted among
    assert set(outcome.unannounced["fdr_method"]) == set(run.outcome.unannounced["fdr_method"])
    keys = ["finding_id", "status", "instance", "series", "p_value", "onset"]
    lake_findings = [latest_states(lake.read_table(r, FINDING_STATES)).select(keys) for r in (whole, chunked)]
    assert lake_findings[0].height > 0
    assert lake_findings[0].sort("finding_id").equals(lake_findings[1].sort("finding_id"))
    assert (
        outcome.findings.select(keys)
        .sort("finding_id")
        .equals(run.outcome.findings.select(keys).sort("finding_id"))
    )
    assert run.outcome.samples_report is not None and run.outcome.samples_report.instances == SHAPE.instances
    # The passes' rows travel packed (compressed Arrow IPC): the same frames come out, types and all.
    for name in ("regressions", "unannounced", "resource_regressions", "instance_slowdowns"):
        assert getattr(run.outcome, name).schema == getattr(outcome, name).schema, name
        assert getattr(run.outcome, name).height == getattr(outcome, name).height, name
    back = PackedOutcome.of(outcome).unpacked()
    assert all(getattr(back, name).equals(getattr(outcome, name)) for name in PACKED_FRAMES)
    runs = lake.read_table(chunked, ANALYSIS_RUNS)  # every instance's watermark once, one run id
    assert runs["instance"].is_unique().all() and runs["run_id"].n_unique() == 1
    assert sorted(runs["instance"]) == sorted(lake.read_table(whole, ANALYSIS_RUNS)["instance"])
    # an incremental run after it reads only what is new: not split, nothing re-examined
    again = run_detection_in_budget(chunked, DetectionConfig(memory=memory), SHAPE.end + timedelta(minutes=5))
    assert again.chunks == () and not again.outcome.settings_changed
    assert again.outcome.regressions.height == again.outcome.unannounced.height == 0
    assert again.outcome.finding_changes.height == 0


@pytest.mark.slow  # two full runs through the CLI, one of six passes in their own processes
def test_radar_detect_within_a_budget_prints_the_same_findings(
    simulated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = []
    for name, extra in (("whole", []), ("chunked", ["--memory-budget-mib", "2"])):
        root = shutil.copytree(simulated, tmp_path / name)
        sample_bytes = budget_of_two_instances(root).sample_bytes
        memory = {"base_mib": 1, "coordinator_mib": 0, "sample_bytes": sample_bytes, "rebuild_bytes": 1}
        flags = [f for key, value in memory.items() for f in ("--set", f"detector.memory.{key}={value}")]
        assert main(["--lake", str(root), *flags, "detect", "--full", "--format", "json", *extra]) == 0
        out = capsys.readouterr()
        shown.append(sorted((r["finding_id"], r["status"], r["p_value"]) for r in json.loads(out.out)))
        assert ("3 chunks of 2, 2, 2 instances" in out.err) == (name == "chunked")
    assert shown[0] and shown[0] == shown[1]


def test_a_pass_gives_freed_memory_back_and_the_run_keeps_its_environment() -> None:
    """Each pass is started with polars' allocator told to return freed memory soon ([detector.memory]
    return_freed_after_ms: its peak is about what it holds, not what it once touched), as huge pages where
    the system grants them ([detector.memory] pass_huge_pages); the run's own
    environment is as it was."""
    before = os.environ.get(ALLOCATOR_ENV)
    of_run = ShardOfRun(label="chunk-0 of 1", instances=("a",), since=SHAPE.end)
    seen = in_own_process(os.getenv, of_run, ALLOCATOR_ENV)
    memory = MemoryConfig()
    expected = returning_freed(memory.return_freed_after_ms, memory.pass_huge_pages)
    assert seen is not None and seen.endswith(expected) and "thp:always" in seen, seen
    assert os.environ.get(ALLOCATOR_ENV) == before
    assert "thp:always" not in returning_freed(memory.return_freed_after_ms, huge_pages=False)


def _descendants(root: int) -> set[int]:
    """Every live process under ``root`` (ended ones not yet reaped left out)."""
    children: dict[int, list[int]] = {}
    for pid, (state, parent) in process_stats().items():
        if state != "Z":
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def touch_and_sleep(path: str, seconds: float) -> None:
    """A pass that says it is up (the file), then works for ``seconds``."""
    import time

    Path(path).touch()
    time.sleep(seconds)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc (Linux)")
def test_a_killed_run_leaves_no_pass_behind(tmp_path: Path) -> None:
    """A run killed mid-pass (a cron timeout's SIGKILL) takes its pass with it, and whatever process
    starts the passes: nothing goes on analysing and writing beside the next run."""
    import signal
    import subprocess
    import sys
    import time

    up = tmp_path / "pass-is-up"
    script = (
        "from datetime import UTC, datetime\n"
        "from jobs.detect.scope import ShardOfRun\n"
        "from jobs.pipeline.budgeted import in_own_process\n"
        "from tests.integration.pipeline.test_detect_budgeted import touch_and_sleep\n"
        "of_run = ShardOfRun(label='chunk-0 of 1', instances=('a',), since=datetime.now(UTC))\n"
        f"in_own_process(touch_and_sleep, of_run, {str(up)!r}, 120.0)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[3])
    under: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not up.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.1)
        assert up.exists(), f"the pass never started (run exit {run.poll()})"
        under |= _descendants(run.pid)
        assert under, "the run's pass is not under it"
        run.send_signal(signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(p) for p in under):
            time.sleep(0.2)
        assert not [p for p in under if alive(p)], "processes of the killed run are still running"
    finally:
        if run.poll() is None:
            run.kill()
        for pid in under:  # a red run leaves nothing either
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
