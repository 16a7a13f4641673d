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
    # Carrying only some of the targets' columns: the same rows with those.
    carried = points_in_windows(points, targets, carry=("deploy_id",))
    assert carried.equals(got.select(*points.columns, "deploy_id"))
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


# ---------------------------------------------------------------------------------------------------------
# The deploy analyses' merged windows: deploy times and survivors by runs, positions by runs (issue 25).


def merged_rows(groups: list[tuple[str, str, int]]) -> pl.DataFrame:
    """(deploy_id, series, points) tuples as merged rows, each group one run, minutes 0, 1, ..."""
    rows = [(d, "i", s, T0 + timedelta(minutes=k)) for d, s, n in groups for k in range(n)]
    return pl.DataFrame(
        rows,
        schema={"deploy_id": pl.String, "instance": pl.String, "series": pl.String, "interval_end": TS},
        orient="row",
    )


INFO = pl.DataFrame(
    {
        "deploy_id": ["d1", "d2", "d3"],
        "deployed_at": [T0 + timedelta(minutes=2), T0 + timedelta(minutes=1), T0],
        "deploy_version": ["v1", "v2", "v3"],
    },
    schema={"deploy_id": pl.String, "deployed_at": TS, "deploy_version": pl.String},
)
KEYS = ["deploy_id", "instance", "series"]


@settings(max_examples=80, deadline=None)
@given(
    groups=st.lists(
        st.tuples(st.sampled_from(["d1", "d2", "d3", "d9"]), st.sampled_from("xyz"), st.integers(1, 5)),
        max_size=8,
    )
)
def test_deploy_times_by_runs_equal_the_join(groups: list[tuple[str, str, int]]) -> None:
    """Groups in runs (any order of deploys, a deploy in several runs) or not (a group split in two runs),
    a deploy unknown or not (its rows dropped, as the join drops them): the same rows as joining every
    row's deploy id."""
    from jobs.detect.deploy_analysis import with_deploy_times
    from jobs.query.series import group_runs

    merged = merged_rows(groups)
    expected = merged.join(INFO.select("deploy_id", "deployed_at"), on="deploy_id", maintain_order="left")
    expected = expected.with_columns((pl.col("interval_end") > pl.col("deployed_at")).alias("after_deploy"))
    runs = group_runs(merged, KEYS)
    keys_seen = [(d, s) for d, s, _ in groups]
    split = any(
        keys_seen[i] in keys_seen[:i] and keys_seen[i] != keys_seen[i - 1] for i in range(len(groups))
    )
    assert (runs is None) == split
    assert with_deploy_times(merged, INFO, runs).equals(expected)


def test_positions_count_from_each_run_start() -> None:
    """merged_work's position is the interval's index in its series, as ``int_range().over(keys)`` says,
    when the series are runs and when one is split (then it falls back to the window)."""
    from jobs.detect.work import _positions
    from jobs.query.series import group_runs

    for groups in (
        [("d1", "x", 3), ("d1", "y", 1), ("d2", "x", 2)],
        [("d1", "x", 2), ("d1", "y", 1), ("d1", "x", 2)],
    ):
        merged = merged_rows(groups)
        expected = merged.select(pl.int_range(pl.len(), dtype=pl.Int64).over(KEYS).alias("position"))
        got = merged.select(_positions(merged, KEYS, group_runs(merged, KEYS)))
        assert got.equals(expected), (groups, got["position"].to_list())
