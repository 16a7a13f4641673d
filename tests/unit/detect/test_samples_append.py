"""Append mode of the samples job: appended samples over any number of runs equal one rebuild, row for row;
a run with nothing new reads no snapshot file; a run that dies mid-way leaves no duplicate."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.detect import samples_job
from jobs.detect.config import SampleConfig
from jobs.detect.samples import SamplesError, append_samples, empty_frontier, samples_from_snapshots
from jobs.detect.samples_job import read_frontier, run_samples_job
from jobs.lake import io as lake
from jobs.schemas.collected import QUERY_SAMPLES
from tests.support.lakes import SNAPSHOT_BOOT, snapshot_frame, snapshot_row, write_snapshot_files

T0 = datetime(2026, 11, 29, 23, 40, tzinfo=UTC)  # batches cross midnight: two date partitions
BOOT = SNAPSHOT_BOOT
SAMPLE_ORDER = ["instance", "queryid", "dbid", "userid", "toplevel", "interval_end"]


@st.composite
def fleet_history(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Snapshots of two instances: entries absent from some snapshots (evicted, not yet called), counter
    resets, entry re-creation, a restart; and their snapshot_runs rows with a growing dealloc."""
    snapshots: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for instance in ("alpha", "beta"):
        steps = draw(st.integers(2, 14))
        entries = draw(st.integers(1, 4))
        counters = {q: [0, 0.0, BOOT] for q in range(entries)}
        boot, dealloc = BOOT, 0
        for step in range(steps):
            captured = T0 + timedelta(seconds=60 * step + draw(st.integers(0, 3)))
            if draw(st.integers(0, 9)) == 0:
                boot = captured - timedelta(seconds=5)  # restarted: counters from zero
                counters = {q: [0, 0.0, boot] for q in counters}
            dealloc += draw(st.integers(0, 2))
            runs.append({"instance": instance, "captured_at": captured, "status": "ok", "dealloc": dealloc})
            for queryid, state in counters.items():
                if draw(st.integers(0, 4)) == 0:
                    continue  # not in this snapshot: its next delta spans the gap
                if draw(st.integers(0, 7)) == 0:
                    state[0], state[1] = draw(st.integers(0, 3)), 0.0  # reset or eviction
                    if draw(st.booleans()):
                        state[2] = captured - timedelta(seconds=1)
                state[0] += draw(st.integers(0, 40))
                state[1] += draw(st.floats(0, 400, allow_nan=False))
                snapshots.append(
                    snapshot_row(
                        instance,
                        captured,
                        queryid,
                        state[0],
                        state[1],
                        collector_clock=captured + timedelta(milliseconds=draw(st.integers(0, 300))),
                        boot=boot,
                        blocks_per_call=2,
                        stats_reset=BOOT,
                        stats_since=state[2],
                    )
                )
    frame = snapshot_frame(snapshots)
    run_frame = pl.DataFrame(runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})
    return frame, run_frame


def sorted_samples(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(SAMPLE_ORDER)


def drop_totals(frame: pl.DataFrame) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for row in frame.iter_rows(named=True):
        key = (row["instance"], row["reason"])
        totals[key] = totals.get(key, 0) + row["count"]
    return totals


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(fleet_history(), st.lists(st.integers(0, 14 * 60), max_size=5))
def test_appended_samples_over_any_batches_equal_one_rebuild(
    history: tuple[pl.DataFrame, pl.DataFrame], cuts: list[int]
) -> None:
    snapshots, runs = history
    full = samples_from_snapshots(snapshots, runs)
    bounds = [T0 + timedelta(seconds=c) for c in sorted(set(cuts))] + [T0 + timedelta(days=1)]
    frontier, start = empty_frontier(), None
    parts, drops = [], []
    for end in bounds:
        taken = (
            pl.col("captured_at") <= end
            if start is None
            else pl.col("captured_at").is_between(start, end, "right")
        )
        batch = snapshots.filter(taken)
        result, frontier = append_samples(frontier, batch, runs.filter(taken), SampleConfig())
        parts.append(result.samples)
        drops.append(result.dropped_counts)
        start = end
    appended = pl.concat(parts)
    assert sorted_samples(appended).equals(sorted_samples(full.samples))
    assert drop_totals(pl.concat(drops)) == drop_totals(full.dropped_counts)


@settings(max_examples=20, deadline=None)
@given(fleet_history())
def test_a_batch_already_differenced_adds_nothing(history: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    snapshots, runs = history
    _, frontier = append_samples(empty_frontier(), snapshots, runs)
    again, same = append_samples(frontier, snapshots, runs)
    assert again.samples.height == 0 and again.dropped_counts.height == 0
    assert same.equals(frontier)


# ---------------------------------------------------------------------------------------------------------
# The job on a lake: snapshots arrive in batches, a run after each


def history_of(
    steps: int, entries: int = 3, instances: tuple[str, ...] = ("alpha", "beta")
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A deterministic history; queryid 2 is absent from every third snapshot."""
    rows, runs = [], []
    for instance in instances:
        for step in range(steps):
            captured = T0 + timedelta(minutes=step)
            runs.append({"instance": instance, "captured_at": captured, "status": "ok", "dealloc": step // 4})
            for queryid in range(entries):
                if queryid == 2 and step % 3 == 1:
                    continue
                calls = (step + 1) * (queryid + 3)
                rows.append(
                    snapshot_row(
                        instance,
                        captured,
                        queryid,
                        calls,
                        calls * (1.0 + queryid + (step > 12)),
                        collector_clock=captured + timedelta(milliseconds=40),
                        boot=BOOT,
                        blocks_per_call=4,
                    )
                )
    frame = snapshot_frame(rows)
    return frame, pl.DataFrame(runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})


def lake_samples(lake_root: Path) -> pl.DataFrame:
    return sorted_samples(lake.read_table(lake_root, QUERY_SAMPLES).drop("date"))


def in_batches(
    snapshots: pl.DataFrame, runs: pl.DataFrame, minutes: list[int]
) -> list[tuple[pl.DataFrame, ...]]:
    out, start = [], None
    for cut in minutes:
        end = T0 + timedelta(minutes=cut)
        taken = pl.col("captured_at") <= end
        if start is not None:
            taken = taken & (pl.col("captured_at") > start)
        out.append((snapshots.filter(taken), runs.filter(taken)))
        start = end
    return out


def test_appending_over_runs_equals_one_rebuild_and_never_deletes_a_sample_file(tmp_path: Path) -> None:
    snapshots, runs = history_of(40)
    appended, rebuilt = tmp_path / "appended", tmp_path / "rebuilt"
    seen: set[Path] = set()
    for batch in in_batches(snapshots, runs, [1, 7, 8, 19, 25, 33, 39]):
        write_snapshot_files(appended, *batch)
        write_snapshot_files(rebuilt, *batch)
        run_samples_job(appended)
        files = set(lake.table_files(appended, QUERY_SAMPLES))
        assert seen <= files, "an append deleted an older samples file"
        seen = files
    run_samples_job(rebuilt, mode="rebuild")
    assert lake_samples(appended).equals(lake_samples(rebuilt))
    assert lake_samples(appended).height == samples_from_snapshots(snapshots, runs).samples.height


def test_a_run_with_nothing_new_reads_no_snapshot_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots, runs = history_of(10)
    write_snapshot_files(tmp_path, snapshots, runs)
    run_samples_job(tmp_path)
    read: list[Path] = []
    real = lake.scan_files

    def recording(root: Path, table: Any, files: Any) -> pl.LazyFrame:
        files = list(files)
        read.extend(files)
        return real(root, table, files)

    monkeypatch.setattr(lake, "scan_files", recording)
    report = run_samples_job(tmp_path)
    assert (report.snapshot_rows, report.sample_rows, report.files_written) == (0, 0, 0)
    assert read == []
    write_snapshot_files(tmp_path, *history_of(11)[0:2])  # one new minute (the others rewritten the same)
    report = run_samples_job(tmp_path)
    assert report.sample_rows == 2 * 2  # two instances x two entries at minute 10 (queryid 2 absent)
    assert sorted({p.name[:15] for p in read}) == [lake.stem_for(T0 + timedelta(minutes=10))[:15]]


def test_a_run_that_dies_before_committing_leaves_no_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots, runs = history_of(20)
    first, second, third = in_batches(snapshots, runs, [5, 12, 19])
    write_snapshot_files(tmp_path, *first)
    run_samples_job(tmp_path)
    write_snapshot_files(tmp_path, *second)

    def crash(*_: Any) -> None:
        raise KeyboardInterrupt  # the process dies after the samples files, before the frontier

    monkeypatch.setattr(samples_job, "write_frontier", crash)
    with pytest.raises(KeyboardInterrupt):
        run_samples_job(tmp_path)
    monkeypatch.undo()
    assert (
        lake_samples(tmp_path).height > samples_from_snapshots(*first).samples.height
    )  # written, unconfirmed
    write_snapshot_files(tmp_path, *third)
    run_samples_job(tmp_path)
    assert lake_samples(tmp_path).equals(sorted_samples(samples_from_snapshots(snapshots, runs).samples))


def test_a_rebuild_of_a_day_after_appends_adds_no_duplicate(tmp_path: Path) -> None:
    snapshots, runs = history_of(30)
    for batch in in_batches(snapshots, runs, [10, 29]):
        write_snapshot_files(tmp_path, *batch)
        run_samples_job(tmp_path)
    expected = lake_samples(tmp_path)
    day = (T0 + timedelta(minutes=25)).date()  # the day after midnight: appended in two runs
    report = run_samples_job(tmp_path, mode="rebuild", dates=(day, day))
    assert report.sample_rows > 0
    assert lake_samples(tmp_path).equals(expected)
    write_snapshot_files(tmp_path, *history_of(33))
    run_samples_job(tmp_path)
    assert lake_samples(tmp_path).equals(sorted_samples(samples_from_snapshots(*history_of(33)).samples))


def test_a_lake_from_before_append_mode_is_rebuilt_once(tmp_path: Path) -> None:
    snapshots, runs = history_of(12)
    write_snapshot_files(tmp_path, snapshots, runs)
    run_samples_job(tmp_path, mode="rebuild", dates=(T0.date(), (T0 + timedelta(days=1)).date()))
    assert read_frontier(tmp_path, "alpha").height == 0  # a range rebuild keeps no frontier
    run_samples_job(tmp_path)
    assert read_frontier(tmp_path, "alpha").height == 3
    assert lake_samples(tmp_path).equals(sorted_samples(samples_from_snapshots(snapshots, runs).samples))


def test_a_date_range_is_a_rebuild_only(tmp_path: Path) -> None:
    with pytest.raises(SamplesError, match="a date range is a rebuild"):
        run_samples_job(tmp_path, mode="append", dates=(T0.date(), T0.date()))
    with pytest.raises(SamplesError, match="unknown samples mode"):
        run_samples_job(tmp_path, mode="merge")  # type: ignore[arg-type]


def test_cli_appends_rebuilds_and_runs_full_or_incremental_detection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.cli.main import main
    from jobs.schemas.analysed import ANALYSIS_RUNS

    snapshots, runs = history_of(12)
    write_snapshot_files(tmp_path, snapshots, runs)
    root = ["--lake", str(tmp_path)]
    assert main([*root, "samples"]) == 0
    assert main([*root, "samples"]) == 0
    assert "0 snapshot rows → 0 samples" in capsys.readouterr().out
    assert main([*root, "samples", "--from", "2026-11-29"]) == 2
    assert "--from/--to choose the days of a rebuild; add --rebuild" in capsys.readouterr().out
    assert main([*root, "samples", "--rebuild", "--from", "2026-11-30", "--to", "2026-11-29"]) == 2
    assert main([*root, "samples", "--rebuild", "--from", "2026-11-30"]) == 0
    assert lake_samples(tmp_path).equals(sorted_samples(samples_from_snapshots(snapshots, runs).samples))
    assert main([*root, "detect", "--full"]) == 0
    assert main([*root, "detect"]) == 0
    modes = lake.read_table(tmp_path, ANALYSIS_RUNS).sort("computed_at")["mode"].unique(maintain_order=True)
    assert modes.to_list() == ["full", "incremental"]


def test_an_unreadable_frontier_is_quarantined_and_the_instance_rebuilt_once(tmp_path: Path) -> None:
    snapshots, runs = history_of(12)
    first, second = in_batches(snapshots, runs, [6, 11])
    write_snapshot_files(tmp_path, *first)
    run_samples_job(tmp_path)
    (frontier_file,) = (tmp_path / "sample_frontier" / "instance=alpha").glob("*.parquet")
    frontier_file.write_bytes(b"PAR1 truncated")
    write_snapshot_files(tmp_path, *second)
    mark = lake.incident_mark()
    run_samples_job(tmp_path)
    assert [i.action for i in lake.incidents_since(mark)] == ["quarantined"]
    assert lake_samples(tmp_path).equals(sorted_samples(samples_from_snapshots(snapshots, runs).samples))


def test_a_truncated_new_snapshot_file_is_quarantined_and_the_rest_appended(tmp_path: Path) -> None:
    snapshots, runs = history_of(12)
    first, second = in_batches(snapshots, runs, [6, 11])
    write_snapshot_files(tmp_path, *first)
    run_samples_job(tmp_path)
    write_snapshot_files(tmp_path, *second)
    stem = lake.stem_for(T0 + timedelta(minutes=9))
    (bad,) = (tmp_path / "statement_snapshots" / "instance=beta").glob(f"date=*/{stem}-*.parquet")
    bad.write_bytes(bad.read_bytes()[:-30])
    mark = lake.incident_mark()
    report = run_samples_job(tmp_path)
    assert [i.path for i in lake.incidents_since(mark)] == [bad]
    beta = lake_samples(tmp_path).filter(pl.col("instance") == "beta")
    # minute 9 is gone: minute 10's samples span 8 → 10 (its predecessor is the entry's previous snapshot)
    ends = beta.filter(pl.col("queryid") == 0)["interval_end"].to_list()
    assert T0 + timedelta(minutes=9) not in ends and T0 + timedelta(minutes=10) in ends
    assert report.sample_rows > 0


def test_a_rebuild_that_now_yields_no_sample_for_a_day_clears_its_old_samples(tmp_path: Path) -> None:
    """A higher min_executions excludes every interval of a day: the rebuild must not leave that day's old
    samples in place (each interval here has 3 to 5 calls)."""
    snapshots, runs = history_of(30)  # crosses midnight: two days per instance
    write_snapshot_files(tmp_path, snapshots, runs)
    run_samples_job(tmp_path)
    before = lake_samples(tmp_path)
    days = sorted({d.isoformat() for d in before["interval_end"].dt.date()})
    assert len(days) == 2
    second = date.fromisoformat(days[1])
    run_samples_job(tmp_path, SampleConfig(min_executions=100), mode="rebuild", dates=(second, second))
    after = lake_samples(tmp_path)
    assert after.equals(before.filter(pl.col("interval_end").dt.date() < second))
    run_samples_job(tmp_path, SampleConfig(min_executions=100), mode="rebuild")
    assert lake_samples(tmp_path).height == 0


def test_an_append_under_other_sample_settings_rebuilds_the_instance(tmp_path: Path) -> None:
    """`radar samples --min-executions 4` then a run with other settings must not mix the two rules in one
    series (the issue: detect silently undid samples' --min-executions)."""
    snapshots, runs = history_of(20)
    first, second = in_batches(snapshots, runs, [9, 19])
    write_snapshot_files(tmp_path, *first)
    assert run_samples_job(tmp_path).rebuilt_for_settings == ()
    write_snapshot_files(tmp_path, *second)
    stricter = SampleConfig(min_executions=4)
    report = run_samples_job(tmp_path, stricter)
    assert report.rebuilt_for_settings == ("alpha", "beta")
    expected = samples_from_snapshots(snapshots, runs, stricter).samples
    assert lake_samples(tmp_path).equals(sorted_samples(expected))
    assert run_samples_job(tmp_path, stricter).rebuilt_for_settings == ()  # the same settings: an append


def test_samples_on_collect_is_read_from_the_effective_collector_table() -> None:
    """cycle_config carries [samples] only when the effective [collector] (the fleet file's with the config
    file's keys on top, passed by the CLI) says samples_on_collect."""
    from jobs.collect.fleet import CollectorConfig
    from jobs.config.sections import RadarSettings

    samples = SampleConfig(min_executions=3)
    off = RadarSettings(samples=samples)
    assert off.cycle_config().samples is None
    on = RadarSettings(samples=samples, collector=CollectorConfig(samples_on_collect=True))
    assert on.cycle_config().samples == samples
    assert off.cycle_config(CollectorConfig(samples_on_collect=True)).samples == samples
    assert on.cycle_config(CollectorConfig()).samples is None
