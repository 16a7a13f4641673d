"""The deploy-window gather (binary search per instance) gives exactly what a join and filter gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.detect.deploy_analysis import points_in_windows

T0 = datetime(2026, 11, 30, tzinfo=UTC)
TS = pl.Datetime("us", "UTC")


def by_join(points: pl.DataFrame, targets: pl.DataFrame) -> pl.DataFrame:
    return points.join(targets, on="instance", how="inner").filter(
        (pl.col("interval_end") > pl.col("window_start")) & (pl.col("interval_end") <= pl.col("window_end"))
    )


def points_of(samples: list[tuple[str, int, int]], third: str, dtype: pl.DataType) -> pl.DataFrame:
    """(instance, minute, value) tuples as points with ``third`` a column of ``dtype``."""
    return pl.DataFrame(
        {
            "instance": [s[0] for s in samples],
            "interval_end": [T0 + timedelta(minutes=s[1]) for s in samples],
            third: [s[2] for s in samples],
        },
        schema={"instance": pl.String, "interval_end": TS, third: dtype},
    )


def targets_of(windows: list[tuple[str, int, int]]) -> pl.DataFrame:
    """(instance, start minute, length) tuples as deploy targets d0, d1, ..."""
    return pl.DataFrame(
        {
            "deploy_id": [f"d{i}" for i in range(len(windows))],
            "instance": [w[0] for w in windows],
            "window_start": [T0 + timedelta(minutes=w[1]) for w in windows],
            "window_end": [T0 + timedelta(minutes=w[1] + w[2]) for w in windows],
        },
        schema={"deploy_id": pl.String, "instance": pl.String, "window_start": TS, "window_end": TS},
    )


@settings(max_examples=120, deadline=None)
@given(
    samples=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 90), st.integers(0, 5)), max_size=60),
    windows=st.lists(
        st.tuples(st.sampled_from("abcd"), st.integers(-10, 90), st.integers(0, 40)), max_size=8
    ),
)
def test_the_gather_equals_a_join_and_filter(
    samples: list[tuple[str, int, int]], windows: list[tuple[str, int, int]]
) -> None:
    points = points_of(samples, "queryid", pl.Int64())
    targets = targets_of(windows)
    got = points_in_windows(points, targets)
    want = by_join(points, targets)
    assert got.columns == want.columns
    assert got.sort(got.columns).equals(want.sort(want.columns))
    # Deterministic order: targets in order, then the points in their input order.
    assert got["deploy_id"].to_list() == sorted(got["deploy_id"].to_list(), key=lambda d: int(d[1:]))
    numbered = points_in_windows(points.with_row_index("seq"), targets)
    for (deploy,), part in numbered.group_by("deploy_id"):
        window = targets.filter(pl.col("deploy_id") == deploy).row(0, named=True)
        inside = points.with_row_index("seq").filter(
            (pl.col("instance") == window["instance"])
            & (pl.col("interval_end") > window["window_start"])
            & (pl.col("interval_end") <= window["window_end"])
        )
        assert part["seq"].to_list() == inside["seq"].to_list()


def test_a_window_holding_nothing_and_an_instance_without_samples() -> None:
    points = pl.DataFrame(
        {"instance": ["a", "a"], "interval_end": [T0, T0 + timedelta(minutes=5)]},
        schema={"instance": pl.String, "interval_end": TS},
    )
    targets = pl.DataFrame(
        {
            "deploy_id": ["x", "y", "z"],
            "instance": ["a", "b", "a"],
            "window_start": [T0 + timedelta(minutes=10), T0, T0 - timedelta(minutes=1)],
            "window_end": [T0 + timedelta(minutes=20), T0 + timedelta(minutes=9), T0],
        },
        schema={"deploy_id": pl.String, "instance": pl.String, "window_start": TS, "window_end": TS},
    )
    got = points_in_windows(points, targets)
    assert got["deploy_id"].to_list() == ["z"] and got["interval_end"].to_list() == [T0]


@settings(max_examples=80, deadline=None)
@given(
    samples=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 30), st.integers(0, 3)), max_size=50),
    windows=st.lists(st.tuples(st.sampled_from("abc"), st.integers(-5, 30), st.integers(0, 20)), max_size=6),
)
def test_numbered_points_come_by_number_then_time_then_input_order(
    samples: list[tuple[str, int, int]], windows: list[tuple[str, int, int]]
) -> None:
    """With ``numbered`` (the series number), a window's rows are ordered by it, then interval_end, then
    their input order: the deploy analyses' merge then finds them in its key order and sorts nothing."""
    points = points_of(samples, "number", pl.UInt32()).with_row_index("seq")
    targets = targets_of(windows)
    # Instances interleaved (rows found by a group_by) and in one run each (row ranges).
    for frame in (points, points.sort("instance", maintain_order=True)):
        got = points_in_windows(frame, targets, "number")
        want = by_join(frame, targets)
        assert got.sort("deploy_id", "seq").equals(want.select(got.columns).sort("deploy_id", "seq"))
        for (_deploy,), part in got.group_by("deploy_id", maintain_order=True):
            assert part.equals(part.sort("number", "interval_end", "seq"))
        assert got["deploy_id"].to_list() == sorted(got["deploy_id"].to_list(), key=lambda d: int(d[1:]))
