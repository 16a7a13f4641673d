"""The contention step's columnar shifts (issue 25): ``series_shifts`` over sorted arrays gives every row and
every bit the polars window rank and group-by gave, which are kept here as the reference, on random
frames with what a real one may hold (jittered intervals, gaps, nulls, NaN and zero latencies, rows in any
order, moments of one time or of no series)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from jobs.detect.config import ContentionConfig
from jobs.detect.contention import SHIFT_COLUMNS, _medians, _nearest, series_shifts
from jobs.detect.load import near_moments, near_pairs

_T0 = datetime(2026, 11, 2, tzinfo=UTC)


def reference_shifts(series: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig) -> pl.DataFrame:
    """series_shifts as it was written with polars (before issue 25's rewrite), the definition of its rows."""
    if series.height == 0 or moments.height == 0:
        return pl.DataFrame(schema=SHIFT_COLUMNS)
    near = (
        near_moments(series, moments, config)
        .with_columns(pl.col("value").clip(lower_bound=1e-6).log().alias("log_ms"))
        .with_columns(pl.col("distance").rank("ordinal").over("moment", "series", "side").alias("nearness"))
        .filter(pl.col("nearness") <= config.window_samples)
    )
    before, after = pl.col("side") == "before", pl.col("side") == "after"
    shifts = (
        near.group_by("moment", "series")
        .agg(
            pl.col("fingerprint").first(),
            pl.col("queryid").sort_by("interval_end").last(),
            before.sum().alias("before_n"),
            after.sum().alias("after_n"),
            pl.col("log_ms").filter(before).median().exp().alias("before_ms"),
            (pl.col("log_ms").filter(after).median() - pl.col("log_ms").filter(before).median()).alias(
                "log_ratio"
            ),
            (pl.col("calls").filter(before).sum() / pl.col("interval_seconds").filter(before).sum()).alias(
                "calls_per_s_before"
            ),
            (pl.col("calls").filter(after).sum() / pl.col("interval_seconds").filter(after).sum()).alias(
                "calls_per_s_after"
            ),
        )
        .with_columns(
            (
                (pl.col("before_n") >= config.min_samples_per_side)
                & (pl.col("after_n") >= config.min_samples_per_side)
            ).alias("measured")
        )
        .with_columns(
            (pl.col("measured") & (pl.col("before_ms") >= config.min_compared_latency_ms)).alias("compared")
        )
        .sort("moment", "series")
    )
    return shifts.select(list(SHIFT_COLUMNS)).cast(SHIFT_COLUMNS)


def random_series(seed: int, *, instances: int = 3, per_instance: int = 6, points: int = 90) -> pl.DataFrame:
    """Merged interval series as merge_intervals gives them (one point per series and interval end), with
    jittered snapshot times (interval seconds that are not round), gaps, overlaps, some null or NaN
    latencies and calls, and the rows shuffled when the seed is odd."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(instances):
        for s in range(per_instance):
            count = int(rng.integers(1, points))
            step = rng.choice([10, 60, 61.5])
            ends_s = np.cumsum(step + rng.normal(0, 0.2, count) + (rng.random(count) < 0.1) * step * 3)
            ends = np.unique(np.round(ends_s * 1e6).astype(np.int64))
            length = (step + rng.normal(0, 0.5, ends.shape[0])) * 1e6 * rng.choice([1.0, 1.6], ends.shape[0])
            starts = ends - np.maximum(length, 0).astype(np.int64)
            n = ends.shape[0]
            value = rng.lognormal(rng.uniform(-3, 4), 0.6, n)
            value[rng.random(n) < 0.05] = 0.0
            value[rng.random(n) < 0.03] = np.nan
            calls = rng.integers(0, 500, n)
            frames.append(
                pl.DataFrame(
                    {
                        "instance": f"i{i}",
                        "series": f"{int(rng.integers(0, 4))}:s{s}",
                        "interval_end": [_T0 + timedelta(microseconds=int(e)) for e in ends],
                        "interval_start": [_T0 + timedelta(microseconds=int(x)) for x in starts],
                        "calls": calls,
                        "interval_seconds": (ends - starts) / 1e6,
                        "value": value,
                        "queryid": rng.integers(1, 4, n),
                        "fingerprint": f"f{s}",
                    },
                    schema_overrides={
                        "interval_end": pl.Datetime("us", "UTC"),
                        "interval_start": pl.Datetime("us", "UTC"),
                    },
                ).with_columns(
                    pl.when(pl.Series(rng.random(n) < 0.03))
                    .then(None)
                    .otherwise(pl.col("value"))
                    .alias("value"),
                    pl.when(pl.Series(rng.random(n) < 0.03))
                    .then(None)
                    .otherwise(pl.col("calls"))
                    .alias("calls"),
                    pl.when(pl.Series(rng.random(n) < 0.02))
                    .then(None)
                    .otherwise(pl.col("interval_seconds"))
                    .alias("interval_seconds"),
                )
            )
    frame = pl.concat(frames)
    if seed % 2:
        frame = frame.sample(fraction=1.0, shuffle=True, seed=seed)
    return frame


def random_moments(seed: int, series: pl.DataFrame) -> pl.DataFrame:
    """Moments at series' interval bounds (sides and straddling intervals at the edge), between them, two at
    one time, and one on an instance without series."""
    rng = np.random.default_rng(seed + 1000)
    ends = series["interval_end"].to_list()
    starts = series["interval_start"].to_list()
    ats = [ends[int(i)] for i in rng.integers(0, len(ends), 6)]
    ats += [starts[int(i)] for i in rng.integers(0, len(starts), 3)]
    ats += [
        ends[int(i)] + timedelta(seconds=float(rng.uniform(0, 30))) for i in rng.integers(0, len(ends), 6)
    ]
    ats.append(ats[0])
    instances = [f"i{int(i)}" for i in rng.integers(0, 3, len(ats))]
    ats.append(ats[1])
    instances.append("elsewhere")
    order = rng.permutation(len(ats))
    return pl.DataFrame(
        {
            "moment": (np.arange(len(ats)) * 3)[order],
            "instance": instances,
            "at": ats,
        },
        schema_overrides={"moment": pl.Int64, "at": pl.Datetime("us", "UTC")},
    )


def _identical(new: pl.DataFrame, reference: pl.DataFrame) -> None:
    """Same rows, same order, same nulls and the same bits in every float."""
    assert new.schema == reference.schema
    assert new.height == reference.height
    for name in new.columns:
        a, b = new[name], reference[name]
        assert a.is_null().equals(b.is_null()), name
        if a.dtype == pl.Float64:
            bits_a = a.fill_null(0.0).to_numpy().view(np.int64)
            bits_b = b.fill_null(0.0).to_numpy().view(np.int64)
            assert np.array_equal(bits_a, bits_b), (name, np.flatnonzero(bits_a != bits_b)[:5])
        else:
            assert a.equals(b, check_dtypes=True), name


CONFIGS = [
    ContentionConfig(),
    ContentionConfig(window_samples=1, min_samples_per_side=1, max_window=timedelta(minutes=10)),
    ContentionConfig(window_samples=3, min_samples_per_side=1, min_compared_latency_ms=0.0),
    ContentionConfig(window_samples=200, max_window=timedelta(hours=2)),
    ContentionConfig(window_samples=10, max_window=timedelta(seconds=1234.5678)),
]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"w{c.window_samples}-{c.max_window}")
def test_shifts_are_the_polars_group_by_row_for_row_and_bit_for_bit(
    seed: int, config: ContentionConfig
) -> None:
    series = random_series(seed)
    moments = random_moments(seed, series)
    reference = reference_shifts(series, moments, config)
    assert reference.height > 0  # the premise: moments near series
    _identical(series_shifts(series, moments, config), reference)


def test_shifts_of_a_large_frame_are_the_polars_ones() -> None:
    # Above a couple of thousand rows polars' group-by takes other paths (a one-key group-by then adds
    # floats with Kahan's compensation); the two-key group-by of the reference still adds in row order.
    series = random_series(11, instances=4, per_instance=40, points=400)
    moments = random_moments(11, series)
    reference = reference_shifts(series, moments, ContentionConfig())
    assert reference.height > 50
    _identical(series_shifts(series, moments, ContentionConfig()), reference)


def test_no_pairs_and_no_rows_give_the_empty_frame() -> None:
    series = random_series(3)
    moments = random_moments(3, series)
    far = moments.with_columns(pl.col("at") + timedelta(days=30))
    config = ContentionConfig()
    _identical(series_shifts(series, far, config), reference_shifts(series, far, config))
    _identical(
        series_shifts(series.head(0), moments, config), reference_shifts(series.head(0), moments, config)
    )
    _identical(
        series_shifts(series, moments.head(0), config), reference_shifts(series, moments.head(0), config)
    )


@pytest.mark.parametrize("seed", range(4))
def test_near_pairs_are_the_pairs_near_moments_keeps(seed: int) -> None:
    series = random_series(seed).with_row_index("_i")
    moments = random_moments(seed, series)
    config = ContentionConfig()
    row, moment, after, distance = near_pairs(series, moments, config)
    arrays = pl.DataFrame(
        {
            "_i": row.astype(np.uint32),
            "moment": moments["moment"].gather(moment),
            "side": np.where(after, "after", "before"),
            "distance": distance,
        }
    ).with_columns(pl.col("distance").cast(pl.Duration("us")))
    reference = near_moments(series, moments, config).select("_i", "moment", "side", "distance")
    key = ["moment", "side", "_i"]
    assert arrays.sort(key).equals(reference.sort(key))


def test_the_nearest_keep_the_earlier_row_among_equal_distances() -> None:
    group = np.array([1, 0, 1, 1, 0, 1, 1])
    distance = np.array([5, 2, 3, 5, 2, 3, 9])  # of group 1: 3, 3, then 5 twice (the earlier, 0, kept)
    assert _nearest(group, distance, 3).tolist() == [1, 4, 0, 2, 5]
    many = 2**40  # too wide to pack (group, distance) in one integer: the two-key sort, same positions
    assert _nearest(group * many, distance * many, 3).tolist() == [1, 4, 0, 2, 5]


def test_medians_by_table_and_by_sort_agree() -> None:
    rng = np.random.default_rng(5)
    counts = np.concatenate([rng.integers(1, 12, 300), [3000]])  # one long group: the sort of pairs
    values = rng.normal(size=int(counts.sum()))
    values[rng.random(values.shape[0]) < 0.05] = np.nan
    missing = rng.random(values.shape[0]) < 0.05
    starts = np.append(0, np.cumsum(counts)[:-1])
    by_sort = _medians(values, missing, starts, counts)
    by_table = [
        _medians(values[s : s + c], missing[s : s + c], np.array([0]), np.array([c]))
        for s, c in zip(starts, counts, strict=True)
    ]
    assert np.array_equal(by_sort[1], [t[1][0] for t in by_table])
    assert np.array_equal(by_sort[0], [t[0][0] for t in by_table], equal_nan=True)
