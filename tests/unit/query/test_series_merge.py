"""merge_intervals and series_identity on the series number give the rows the string keys give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from jobs.query.series import SERIES_ID, _stably_sorted, merge_intervals, series_identity

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _samples(rows: list[tuple[str, str, int, int, int, float]]) -> pl.DataFrame:
    """(instance, series, deploy_id, queryid, minute, exec ms) rows, two calls each."""
    frame = pl.DataFrame(
        {
            "instance": [r[0] for r in rows],
            "series": [r[1] for r in rows],
            "deploy_id": [r[2] for r in rows],
            "queryid": [r[3] for r in rows],
            "interval_start": [T0 + timedelta(minutes=r[4]) for r in rows],
            "interval_end": [T0 + timedelta(minutes=r[4] + 1) for r in rows],
            "calls": [2] * len(rows),
            "total_exec_time": [r[5] for r in rows],
            "rows_read": pl.Series([7] * len(rows), dtype=pl.Int16),  # summed as Int64
            "query": [f"select {r[3]}" for r in rows],
        }
    )
    return frame.with_columns(pl.struct("instance", "series").rank("dense").cast(pl.UInt32).alias(SERIES_ID))


ROWS = [
    ("b", "s1", 1, 11, 2, 4.0),
    ("a", "s2", 1, 21, 1, 3.0),
    ("a", "s10", 1, 31, 1, 5.0),
    ("a", "s2", 1, 21, 0, 1.0),
    ("b", "s1", 2, 11, 0, 2.0),
    ("a", "s10", 1, 31, 0, 6.0),
]


@pytest.mark.parametrize("repeated", [False, True], ids=["one_queryid", "two_queryids_one_interval"])
@pytest.mark.parametrize("presorted", [False, True])
@pytest.mark.parametrize("keys", [["instance", "series"], ["deploy_id", "instance", "series"]])
def test_numbered_merge_equals_the_string_keyed_one(repeated: bool, presorted: bool, keys: list[str]) -> None:
    rows = [*ROWS, ("a", "s2", 1, 22, 1, 9.0)] if repeated else ROWS
    numbered = _samples(rows)
    if presorted:
        numbered = numbered.sort(
            [k if k != "series" else SERIES_ID for k in keys if k != "instance"] + ["interval_end"]
        )
    plain = numbered.drop(SERIES_ID)
    expected = merge_intervals(plain, keys, ("rows_read",))
    got = merge_intervals(numbered, keys, ("rows_read",))
    assert_frame_equal(got, expected)
    assert expected.height == 6  # the two queryids of a/s2 at minute 1 are one point
    assert expected["calls"].max() == (4 if repeated else 2)
    assert got["rows_read"].dtype == expected["rows_read"].dtype


def test_a_null_series_number_falls_back_to_the_strings() -> None:
    numbered = _samples(ROWS).with_columns(pl.lit(None, dtype=pl.UInt32).alias(SERIES_ID))
    assert_frame_equal(
        merge_intervals(numbered, ["instance", "series"]),
        merge_intervals(numbered.drop(SERIES_ID), ["instance", "series"]),
    )


def test_series_identity_on_the_number_equals_the_strings() -> None:
    numbered = _samples([*ROWS, ("a", "s2", 1, 22, 1, 9.0)])
    keys = ["instance", "series"]
    assert_frame_equal(
        series_identity(numbered, keys).sort(keys), series_identity(numbered.drop(SERIES_ID), keys).sort(keys)
    )


def _runs_frame(seed: int, *, interleave: bool, ties: bool, nulls: bool) -> pl.DataFrame:
    """Series as runs of rows in time order, the runs shuffled (a detection pass's samples come so);
    optionally a series in two interleaved runs, repeated interval ends, null ends."""
    rng = np.random.default_rng(seed)
    ids, ends, values = [], [], []
    for series in rng.permutation(40):
        n = int(rng.integers(1, 9))
        minutes = np.sort(rng.integers(0, 5, n)) if ties else np.arange(n) * 2
        ids += [int(series)] * n
        ends += [T0 + timedelta(minutes=int(m)) for m in minutes]
        values += list(rng.normal(size=n))
    frame = pl.DataFrame({SERIES_ID: ids, "interval_end": ends, "v": values}).with_columns(
        pl.col(SERIES_ID).cast(pl.UInt32), pl.lit(3).alias("deploy_id")
    )
    if interleave:  # one more row of the first run's series, far from it
        frame = pl.concat([frame, frame.head(1).with_columns(pl.col("v") + 1)])
    if nulls:
        frame = frame.with_columns(
            pl.when(pl.int_range(pl.len()) % 11 == 5)
            .then(None)
            .otherwise(pl.col("interval_end"))
            .alias("interval_end")
        )
    return frame


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("interleave", "ties", "nulls"),
    [(False, False, False), (False, True, False), (True, False, False), (False, False, True)],
)
@pytest.mark.parametrize("order", [[SERIES_ID, "interval_end"], ["deploy_id", SERIES_ID, "interval_end"]])
def test_moving_runs_gives_the_stable_sort(
    seed: int, interleave: bool, ties: bool, nulls: bool, order: list[str]
) -> None:
    frame = _runs_frame(seed, interleave=interleave, ties=ties, nulls=nulls)
    assert_frame_equal(_stably_sorted(frame, order), frame.sort(order, maintain_order=True))
