"""A rebuild in pieces of days (issue 25): an instance whose snapshots exceed ``[samples] rebuild_piece_rows``
is differenced a piece of whole days at a time, each piece from the previous one's frontier (the append
path), so its memory follows the piece, not the history; the samples, collection health, frontier and drop
counts are those of one rebuild."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import given, settings

from jobs.detect.config import SampleConfig
from jobs.detect.samples_job import day_pieces, run_samples_job
from jobs.lake import io as lake
from jobs.schemas.collected import COLLECTION_HEALTH, SAMPLE_FRONTIER
from tests.support.lakes import write_snapshot_files
from tests.unit.detect.test_samples_append import drop_totals, fleet_history, history_of, lake_samples

IN_PIECES = SampleConfig(rebuild_piece_rows=1)  # every day its own piece


def _sorted(root: Path, table: object) -> pl.DataFrame:
    frame = lake.read_table(root, table)  # type: ignore[arg-type]
    return frame.sort(frame.columns, nulls_last=True)


def _same_tables(whole: Path, pieces: Path) -> None:
    assert lake_samples(whole).height > 0
    assert lake_samples(whole).equals(lake_samples(pieces))
    assert _sorted(whole, COLLECTION_HEALTH).equals(_sorted(pieces, COLLECTION_HEALTH))
    assert _sorted(whole, SAMPLE_FRONTIER).equals(_sorted(pieces, SAMPLE_FRONTIER))


def test_days_are_grouped_into_pieces_of_at_most_the_rows() -> None:
    days = [("2026-11-01", 400), ("2026-11-02", 500), ("2026-11-03", 200), ("2026-11-04", 900)]
    assert day_pieces(days, 1_000) == [["2026-11-01", "2026-11-02"], ["2026-11-03"], ["2026-11-04"]]
    assert day_pieces(days, 1) == [[d] for d, _ in days]  # a day is never split
    assert day_pieces(days, 10_000) == [[d for d, _ in days]]
    assert day_pieces([], 1) == []


def test_a_rebuild_in_pieces_of_days_writes_one_rebuilds_tables(tmp_path: Path) -> None:
    snapshots, runs = history_of(40)  # from 23:40: two days
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    for root in (whole, pieces):
        write_snapshot_files(root, snapshots, runs)
    one = run_samples_job(whole, mode="rebuild")
    split = run_samples_job(pieces, IN_PIECES, mode="rebuild")
    _same_tables(whole, pieces)
    assert (one.snapshot_rows, one.sample_rows) == (split.snapshot_rows, split.sample_rows)
    assert drop_totals(one.dropped_counts) == drop_totals(split.dropped_counts)
    # again, over its own files: replaced, nothing duplicated; an append after it continues the same way
    run_samples_job(pieces, IN_PIECES, mode="rebuild")
    _same_tables(whole, pieces)
    more, more_runs = history_of(55)
    later = more.filter(pl.col("captured_at") > snapshots["captured_at"].max())
    for root in (whole, pieces):
        write_snapshot_files(
            root, later, more_runs.filter(pl.col("captured_at").is_in(later["captured_at"].implode()))
        )
        run_samples_job(root)
    _same_tables(whole, pieces)


@settings(max_examples=15, deadline=None)
@given(fleet_history())
def test_any_history_rebuilt_in_pieces_equals_one_rebuild(
    tmp_path_factory: object, history: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    base = tmp_path_factory.mktemp("pieces")  # type: ignore[attr-defined]
    whole, pieces = base / "whole", base / "pieces"
    for root in (whole, pieces):
        write_snapshot_files(root, *history)
    one = run_samples_job(whole, mode="rebuild")
    split = run_samples_job(pieces, IN_PIECES, mode="rebuild")
    assert lake_samples(whole).equals(lake_samples(pieces))
    assert _sorted(whole, SAMPLE_FRONTIER).equals(_sorted(pieces, SAMPLE_FRONTIER))
    assert drop_totals(one.dropped_counts) == drop_totals(split.dropped_counts)


def test_a_foreign_partition_name_does_not_stop_a_rebuild_in_pieces(tmp_path: Path) -> None:
    """A folder ``date=<not a date>`` of snapshots (not the collector's) is one more piece, not a crash."""
    snapshots, runs = history_of(40)
    write_snapshot_files(tmp_path, snapshots, runs)
    day = next((tmp_path / "statement_snapshots" / "instance=alpha").glob("date=*"))
    day.rename(day.with_name("date=someday"))
    report = run_samples_job(tmp_path, IN_PIECES, mode="rebuild")
    assert report.snapshot_rows == snapshots.height
