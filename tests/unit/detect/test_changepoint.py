"""The change point statistics: batched E-divisive must equal the O(n^2) definition, find steps, ignore
noise and spikes, and be reproducible byte for byte."""

from __future__ import annotations

import itertools
import pickle
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jobs.detect.changepoint import (
    ChangePoint,
    _rank_p_values,
    benjamini_hochberg,
    change_point_arrays,
    most_significant_change_points,
    seeded_intervals,
    segment_change_points,
)
from jobs.detect.config import ChangePointConfig, RegressionConfig
from jobs.detect.energy import energy_pass, energy_statistic_reference, energy_statistics
from jobs.detect.unannounced import detect_unannounced_regressions
from tests.support.lakes import series_samples, series_texts

STEP = np.array([10.0, 11, 9, 10, 12, 10, 9, 11, 10, 10, 20, 21, 19, 22, 20, 21, 19, 20, 22, 21])
FLAT = np.array([10.0, 11, 9, 10, 12, 10, 9, 11, 10, 10, 11, 9, 10, 12, 10, 9, 11, 10, 10, 11])


def _noise(rng: np.random.Generator, n: int, spikes: int = 0) -> np.ndarray:
    values = rng.lognormal(0.0, 0.3, n)
    if spikes:
        values[rng.choice(n, spikes, replace=False)] *= 20.0
    return values


def test_step_is_found_at_its_first_new_index() -> None:
    (point,) = most_significant_change_points([STEP])
    assert point.index == 10
    assert point.significant
    assert point.statistic > 0


def test_flat_series_has_no_significant_change() -> None:
    (point,) = most_significant_change_points([FLAT])
    assert not point.significant
    assert point.p_value > 0.01


def test_constant_short_and_tied_series_give_no_change() -> None:
    constant, short, two_values = most_significant_change_points(
        [np.full(30, 7.0), np.arange(9.0), np.tile([1.0, 2.0], 15)]
    )
    assert constant.index is None and not constant.significant
    assert short.index is None and not short.significant  # 9 < 2 * min_segment
    assert not two_values.significant


def test_single_spikes_do_not_make_a_change_but_do_not_hide_one() -> None:
    spiky_flat = np.tile(FLAT, 2)
    spiky_flat[[3, 15, 33]] = 500.0
    spiky_step = np.r_[FLAT[:10], FLAT[10:], STEP[10:], STEP[10:]]
    spiky_step[[3, 15, 33]] = 500.0
    flat_point, step_point = most_significant_change_points([spiky_flat, spiky_step])
    assert not flat_point.significant
    assert step_point.significant and step_point.index == 20


def test_false_positive_rate_on_spiky_lognormal_noise_is_at_most_one_percent() -> None:
    rng = np.random.default_rng(7)
    series = [_noise(rng, n, spikes=n // 30) for n in (40, 120) for _ in range(1500)]
    points = most_significant_change_points(series)
    rate = np.mean([p.significant for p in points])
    assert rate <= 0.01


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([0.0, 1.0, 2.5])),
        min_size=4,
        max_size=70,
    ),
    min_segment=st.integers(2, 6),
)
def test_batched_energy_statistic_equals_the_quadratic_definition(
    data: list[float], min_segment: int
) -> None:
    values = np.array(data)
    reference = energy_statistic_reference(values, min_segment)
    batched = energy_statistics(np.stack([values, values[::-1]]), min_segment)
    allowed = np.isfinite(reference)
    scale = max(1.0, float(np.abs(values).max()) * len(values))
    assert np.all(np.isneginf(batched[0][~allowed]))
    np.testing.assert_allclose(batched[0][allowed], reference[allowed], rtol=1e-9, atol=1e-9 * scale)
    reversed_reference = energy_statistic_reference(values[::-1], min_segment)
    np.testing.assert_allclose(batched[1][allowed], reversed_reference[allowed], rtol=1e-9, atol=1e-9 * scale)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(10, 300), batch=st.integers(1, 5))
def test_batched_energy_statistic_matches_reference_on_lognormal_batches(
    seed: int, n: int, batch: int
) -> None:
    rng = np.random.default_rng(seed)
    stack = rng.lognormal(0.0, 1.0, (batch, n))
    batched = energy_statistics(stack, 5)
    for row in range(batch):
        reference = energy_statistic_reference(stack[row], 5)
        allowed = np.isfinite(reference)
        np.testing.assert_allclose(batched[row][allowed], reference[allowed], rtol=1e-9, atol=1e-9)


def test_identical_inputs_give_byte_identical_outputs_whatever_the_neighbours() -> None:
    rng = np.random.default_rng(3)
    series = [_noise(rng, 80, spikes=2) for _ in range(20)] + [STEP, FLAT]
    for test in ("rank", "permutation"):
        config = ChangePointConfig(test=test, permutations=49)
        first = pickle.dumps(most_significant_change_points(series, config))
        again = pickle.dumps(most_significant_change_points([s.copy() for s in series], config))
        assert first == again
        alone = most_significant_change_points([series[5]], config)[0]
        shuffled = most_significant_change_points(series[::-1], config)[len(series) - 1 - 5]
        assert pickle.dumps(alone) == pickle.dumps(shuffled)


def test_permutation_test_finds_the_step_and_not_the_flat_series() -> None:
    config = ChangePointConfig(test="permutation", permutations=199)
    step, flat = most_significant_change_points([STEP, FLAT], config)
    assert step.significant and step.index == 10
    assert step.p_value == pytest.approx(1 / 200)
    assert not flat.significant


def test_array_api_agrees_with_list_api_and_marks_no_change_with_minus_one() -> None:
    rng = np.random.default_rng(11)
    stack = np.stack([_noise(rng, 50) for _ in range(30)] + [np.r_[_noise(rng, 25), 3 + _noise(rng, 25)]])
    stack[0] = 4.0
    arrays = change_point_arrays(stack)
    points = most_significant_change_points(list(stack))
    assert arrays.index[0] == -1 and points[0].index is None
    for row, point in enumerate(points[1:], start=1):
        assert point == ChangePoint(
            int(arrays.index[row]),
            float(arrays.statistic[row]),
            float(arrays.p_value[row]),
            bool(arrays.significant[row]),
        )
    assert arrays.significant[-1] and abs(int(arrays.index[-1]) - 25) <= 2


def test_segmentation_finds_each_step_and_respects_the_minimum_segment() -> None:
    rng = np.random.default_rng(5)
    levels = np.repeat([1.0, 3.0, 1.5, 4.0], [60, 40, 50, 30])
    series = levels * _noise(rng, levels.size, spikes=4)
    (points,) = segment_change_points([series], ChangePointConfig(min_segment=8))
    found = [p.index for p in points]
    assert len(found) == 3
    for true_index, index in zip([60, 100, 150], found, strict=True):
        assert index is not None and abs(index - true_index) <= 3
    bounds = [0, *found, series.size]
    assert all(b - a >= 8 for a, b in itertools.pairwise(bounds))
    assert all(p.significant for p in points)


def test_segmentation_of_noise_finds_nothing_and_caps_the_count() -> None:
    rng = np.random.default_rng(9)
    noise = [_noise(rng, 200, spikes=5) for _ in range(50)]
    assert sum(len(points) for points in segment_change_points(noise)) <= 1
    levels = np.repeat([0.0, 2.0, 4.0, 6.0, 8.0], 40) + rng.normal(0, 0.5, 200)
    (uncapped,) = segment_change_points([levels])
    (capped,) = segment_change_points([levels], max_change_points=2)
    assert [p.index for p in uncapped] == [40, 80, 120, 160]
    assert len(capped) == 2


def test_benjamini_hochberg_controls_and_reports_false_discoveries() -> None:
    p_values = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    mask = benjamini_hochberg(p_values, 0.05)
    # BH: largest k with p_(k) <= k q / m is k = 2 (0.008 <= 0.01; 0.039 > 0.015, 0.042 > 0.025 ...).
    assert mask.tolist() == [True, True] + [False] * 8
    assert benjamini_hochberg(np.array([]), 0.05).size == 0
    points = most_significant_change_points([STEP, FLAT], fdr_q=0.05)
    assert points[0].q_value is not None and points[0].significant
    assert points[1].q_value is not None and points[1].q_value >= points[1].p_value
    assert not points[1].significant


def test_serial_correction_keeps_a_random_walk_from_looking_like_steps() -> None:
    rng = np.random.default_rng(13)
    walks = [np.cumsum(rng.normal(0, 1, 300)) for _ in range(20)]
    corrected = segment_change_points(walks)
    uncorrected = segment_change_points(walks, ChangePointConfig(serial_correction=False))
    # Why the correction exists: E-divisive with an independence test cuts walks into many "steps".
    assert sum(map(len, corrected)) < sum(map(len, uncorrected)) / 2


# CI's demo (alpha's orders query, rebuilt from a synthetic run of the same shape, ms per call, one sample
# a second): 0.036 ms, a small shift to 0.046 ms at 25 (the host's load), the index dropped at 42 (x700),
# then a new regime that wanders between 9 and 48 ms, as a seq scan on a busy 2-core host does.
WANDERING_AFTER_A_DROP = np.r_[
    [0.037, 0.038, 0.037, 0.034, 0.038, 0.037, 0.035, 0.037, 0.037, 0.037, 0.036, 0.037, 0.035, 0.036],
    [0.035, 0.037, 0.036, 0.035, 0.035, 0.036, 0.036, 0.036, 0.038, 0.038, 0.031, 0.046, 0.045, 0.047],
    [0.047, 0.052, 0.044, 0.046, 0.051, 0.048, 0.048, 0.045, 0.043, 0.047, 0.047, 0.044, 0.045, 0.046],
    [30.671, 30.488, 28.88, 32.238, 33.211, 38.225, 44.633, 39.455, 45.296, 37.268, 45.456, 41.401],
    [36.614, 10.568, 9.322, 9.206, 10.491, 9.815, 10.529, 35.787, 43.29, 47.7, 40.965, 34.442, 36.727],
    [32.441, 28.955, 33.213, 32.116, 36.287, 34.61, 36.151, 44.505],
]


def test_a_clean_step_beside_a_wandering_regime_is_not_widened_away() -> None:
    """The serial correction read the new regime's wander as correlation: confirmed between its neighbours
    (25 and the end), the x700 step got p = 0.06 and was dropped, leaving 25 with both regimes after it
    (CI's demo: an unannounced "0.039 -> 15.3 ms" 17 s before the deploy, beside the deploy's finding)."""
    x = WANDERING_AFTER_A_DROP
    (found,) = segment_change_points([x], max_change_points=5, fdr_q=0.05)
    assert [p.index for p in found] == [25, 42]
    widened = ChangePointConfig(serial_exempt_clean_steps=False)
    (before,) = segment_change_points([x], widened, max_change_points=5, fdr_q=0.05)
    assert [p.index for p in before] == [25]
    # What the unannounced analysis reports: the drop, against the level just before it.
    regression = RegressionConfig()
    samples = series_samples(x, calls=6000, instance="alpha", queryid=7, first=0)
    texts = series_texts([("alpha", 7, "select count(*) from demo_orders where customer_id = $1")])
    row = detect_unannounced_regressions(samples, texts, regression).row(0, named=True)
    assert (row["status"], row["changepoint_index"]) == ("detected", 42)
    assert row["before_mean_ms"] == pytest.approx(x[25:42].mean(), rel=0.01)
    assert row["after_mean_ms"] == pytest.approx(x[42:].mean())
    widened_regression = replace(regression, unannounced_changepoint=widened)
    row = detect_unannounced_regressions(samples, texts, widened_regression).row(0, named=True)
    assert row["changepoint_index"] == 25 and row["after_mean_ms"] < 0.7 * x[42:].mean()
    # The exemption needs a gap wider than each side's range: the same step shrunk into the noise of a
    # walk is widened as before, and a random walk is never clean at its split.
    config = ChangePointConfig()
    rng = np.random.default_rng(3)
    walks = np.exp(np.cumsum(rng.normal(0, 0.05, (200, 60)), axis=1))
    assert np.array_equal(
        change_point_arrays(walks, config).p_value,
        change_point_arrays(walks, replace(config, serial_exempt_clean_steps=False)).p_value,
    )


def test_only_rows_out_of_order_in_at_most_n_pairs_can_be_clean_steps() -> None:
    """The rank test looks for clean steps only where min(U, m k - U) <= n (the two samples at the split
    are the only ones out of order): every row ``_clean_steps`` accepts must be among them."""
    from jobs.detect.changepoint import _clean_steps

    rng = np.random.default_rng(11)
    n, rows = 30, 4000
    split = rng.integers(5, n - 4, rows)
    base = rng.lognormal(0.0, rng.uniform(0.01, 0.5, (rows, 1)), (rows, n))
    jump = np.exp(rng.uniform(-6, 6, (rows, 1)))
    stack = np.where(np.arange(n)[None, :] >= split[:, None], base * jump, base)
    mixed = rng.random(rows) < 0.5  # the interval holding the step: anywhere between the two levels
    at = np.where(rng.random(rows) < 0.5, split - 1, split)
    stack[mixed, at[mixed]] = np.exp(rng.uniform(np.log(stack.min(axis=1)), np.log(stack.max(axis=1))))[mixed]
    clean = _clean_steps(stack, split)
    ranks = stats.rankdata(stack, axis=1)
    m = split.astype(np.float64)
    u = (ranks * (np.arange(n)[None, :] < split[:, None])).sum(axis=1) - m * (m + 1) / 2
    assert clean.sum() > rows // 4  # the property is exercised
    assert np.all(np.minimum(u, m * (n - m) - u)[clean] <= n)


def test_config_rejects_thresholds_that_cannot_work() -> None:
    with pytest.raises(ValueError):
        ChangePointConfig(min_segment=1)
    with pytest.raises(ValueError):
        ChangePointConfig(max_p_value=0.0)
    with pytest.raises(ValueError):
        change_point_arrays(np.array([[1.0, np.nan, 2.0, 3.0]]))


def test_benchmark_f1_follows_the_tcpd_definition() -> None:
    from tests.benchmarks.cp_data import tcpd_f1

    # Precision against the union {0, 10, 50}: both predictions {0, 12} match; recall 1 and 2/3.
    assert tcpd_f1({"a": [10], "b": [10, 50]}, [12]) == pytest.approx(2 * (5 / 6) / (1 + 5 / 6))
    # One true point matches one prediction only: 9 and 11 cannot both count for 10.
    assert tcpd_f1({"a": [10]}, [9, 11]) == pytest.approx(2 * (2 / 3) / (1 + 2 / 3))
    assert tcpd_f1({"a": [], "b": []}, []) == 1.0
    assert tcpd_f1({"a": [40]}, [20]) < tcpd_f1({"a": [40]}, [])


# ----------------------------------------------------------------------------------------------------------
# Seeded segmentation and short-series power


FAST_SLOW_FAST_SLOW = np.repeat([1.0, 2.0, 1.0, 2.0], 12) * np.random.default_rng(21).lognormal(0.0, 0.05, 48)


def test_seeded_segmentation_finds_every_step_of_fast_slow_fast_slow_where_binary_finds_none() -> None:
    config = ChangePointConfig(serial_correction=False)  # as the deploy analysis' stage 1
    (binary,) = segment_change_points([FAST_SLOW_FAST_SLOW], replace(config, segmentation="binary"))
    (seeded,) = segment_change_points([FAST_SLOW_FAST_SLOW], config)
    # The global split of fast-slow-fast-slow is mixed: binary segmentation never gets to split.
    assert binary == []
    assert [p.index for p in seeded] == [12, 24, 36]
    assert all(p.significant and p.p_value <= config.max_p_value for p in seeded)
    # The default (serially corrected) test finds them too.
    assert [p.index for p in segment_change_points([FAST_SLOW_FAST_SLOW])[0]] == [12, 24, 36]


def test_seeded_segmentation_over_many_up_down_up_series_finds_each_step() -> None:
    rng = np.random.default_rng(22)
    series = [np.repeat([1.0, 2.0, 1.0, 2.0], 20) * rng.lognormal(0.0, 0.05, 80) for _ in range(40)]
    config = ChangePointConfig(serial_correction=False)
    seeded = segment_change_points(series, config, max_change_points=5)
    binary = segment_change_points(series, replace(config, segmentation="binary"), max_change_points=5)
    exact = sum([p.index for p in points] == [20, 40, 60] for points in seeded)
    assert exact >= 38, exact
    assert sum([p.index for p in points] == [20, 40, 60] for points in binary) <= 20


def test_seeded_intervals_halve_overlap_and_shrink_geometrically() -> None:
    intervals = seeded_intervals(100, 10, 0.5)
    assert intervals[0] == (0, 100)
    lengths = sorted({end - start for start, end in intervals}, reverse=True)
    assert lengths == [100, 50, 25, 12, 10]
    for length in lengths[1:]:
        starts = sorted(start for start, end in intervals if end - start == length)
        assert starts[0] == 0 and starts[-1] + length == 100
        assert max(b - a for a, b in itertools.pairwise(starts)) <= length // 2 + 1  # about half overlap
    assert all(0 <= start < end <= 100 for start, end in intervals)
    assert seeded_intervals(9, 10, 0.5) == []


def test_each_accepted_point_is_confirmed_on_the_segment_between_its_neighbours() -> None:
    # 200 noise series: many seeded intervals pass the screen by chance; the confirmation removes them.
    rng = np.random.default_rng(23)
    noise = [_noise(rng, 120, spikes=3) for _ in range(200)]
    assert sum(map(len, segment_change_points(noise))) <= 2
    # The p of a confirmed point is the test at its split on the segment between its neighbours.
    (points,) = segment_change_points([FAST_SLOW_FAST_SLOW], ChangePointConfig(serial_correction=False))
    middle = points[1]
    segment = FAST_SLOW_FAST_SLOW[points[0].index : points[2].index]
    (alone,) = most_significant_change_points([segment], ChangePointConfig(serial_correction=False))
    assert alone.index == middle.index - points[0].index  # type: ignore[operator]
    assert middle.p_value == pytest.approx(alone.p_value, rel=1e-12)


def test_seeded_segmentation_is_byte_identical_whatever_the_neighbours() -> None:
    rng = np.random.default_rng(24)
    others = [_noise(rng, n, spikes=2) for n in (60, 80, 60, 200)]
    alone = segment_change_points([FAST_SLOW_FAST_SLOW])
    crowded = segment_change_points([others[0], FAST_SLOW_FAST_SLOW, *others[1:]])
    assert pickle.dumps(alone[0]) == pickle.dumps(crowded[1])


def test_exact_rank_tail_matches_scipy_and_gives_short_steps_their_power() -> None:
    rng = np.random.default_rng(25)
    for left, right in ((5, 5), (10, 10), (12, 11), (7, 30)):
        x, y = rng.normal(size=left), rng.normal(size=right) + 1.0
        series = np.concatenate([x, y])
        expected = stats.mannwhitneyu(x, y, method="exact").pvalue
        split = np.array([left])
        config = ChangePointConfig(serial_correction=False, min_segment=5)
        energy = energy_pass(series[None, :], config.min_segment)
        got = _rank_p_values(series[None, :], energy, split, config)[0]
        assert got == pytest.approx(min(1.0, expected * (series.size - 9)), rel=1e-9)
    # 10 clean points a side: perfectly separated ranks, exact p = 2 / C(20, 10) times 11 splits.
    ten = np.concatenate([rng.lognormal(0, 0.05, 10), 2 * rng.lognormal(0, 0.05, 10)])
    (point,) = most_significant_change_points([ten])
    assert point.index == 10 and point.p_value == pytest.approx(11 * 2 / 184756)


def test_short_clean_steps_are_significant_despite_the_serial_correction() -> None:
    """Why serial_white_z and the exact tail: at 10 points a side the lag-1 correlation of white noise
    has a spread of about 0.2, and with the normal tail that alone left one clean x2 step in eight
    insignificant (measured: 13% at 10 + 10, 8% at 12 + 11)."""
    rng = np.random.default_rng(26)
    steps = np.concatenate(
        [rng.lognormal(0, 0.05, (400, 10)), 2.0 * rng.lognormal(0, 0.05, (400, 10))], axis=1
    )
    found = change_point_arrays(steps)
    assert found.significant.mean() >= 0.99
    quiet = change_point_arrays(rng.lognormal(0, 0.05, (400, 20)))
    assert quiet.significant.mean() <= 0.01


def test_new_thresholds_are_config_fields_with_their_defaults() -> None:
    config = ChangePointConfig()
    assert config.segmentation == "seeded" and config.seeded_decay == 0.71
    assert config.serial_white_z == 2.0 and config.serial_white_max_n == 40 and config.exact_rank_max_n == 60
    with pytest.raises(ValueError):
        ChangePointConfig(segmentation="wild")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ChangePointConfig(seeded_decay=0.3)
    with pytest.raises(ValueError):
        ChangePointConfig(exact_rank_max_n=65)


def test_scale_screen_keeps_short_intervals_from_adding_points_inside_a_regime() -> None:
    # 200 quiet up-down-up series of 4 x 40: without the screen's Bonferroni over each scale's intervals,
    # chance perfect separations in 20-point intervals add 8 points inside regimes (in 6 series); with it 4.
    rng = np.random.default_rng(8)
    series = [np.repeat([1.0, 2.0, 1.0, 2.0], 40) * rng.lognormal(0.0, 0.05, 160) for _ in range(200)]
    found = segment_change_points(series, ChangePointConfig(serial_correction=False), max_change_points=5)
    inside = [p.index for points in found for p in points if min(abs(p.index - c) for c in (40, 80, 120)) > 1]
    assert all(any(abs(p.index - c) <= 1 for p in points) for points in found for c in (40, 80, 120))
    assert len(inside) <= 4, inside


def test_fdr_confirmation_counts_every_series_not_only_those_with_candidates() -> None:
    # 30 clear steps among 300 noise series: BH over the confirmed points alone would be dominated by the
    # 30 tiny p-values and let 3 noise series through at q = 0.05; over every series' test it lets none.
    rng = np.random.default_rng(9)
    steps = [np.r_[rng.lognormal(0, 0.1, 50), 2 * rng.lognormal(0, 0.1, 50)] for _ in range(30)]
    noise = [rng.lognormal(0, 0.3, int(rng.integers(30, 200))) for _ in range(300)]
    found = segment_change_points(steps + noise, fdr_q=0.05)
    assert [len(points) for points in found[:30]] == [1] * 30
    assert all(points[0].q_value is not None and points[0].q_value <= 0.05 for points in found[:30])
    assert sum(map(len, found[30:])) == 0


def test_chunks_on_threads_give_the_arrays_of_one_thread() -> None:
    """The stack's chunks are located on several threads (``threads``); each lands in its own rows."""
    rng = np.random.default_rng(7)
    stack = rng.lognormal(0.0, 0.3, (64, 120))
    stack[::3, 60:] *= 1.8  # a step in every third series
    one = change_point_arrays(stack, ChangePointConfig(batch_elements=600, threads=1))
    many = change_point_arrays(stack, ChangePointConfig(batch_elements=600, threads=4))
    assert one.significant[::3].all() and not one.significant[1::3].all()
    for name in ("index", "statistic", "p_value", "significant"):
        assert np.array_equal(getattr(one, name), getattr(many, name)), name


@pytest.mark.parametrize("serial_correction", [True, False])
def test_no_split_of_any_series_tests_below_the_smallest_rank_p_value(serial_correction: bool) -> None:
    """The seeded search skips intervals whose p cannot pass their screen; that is exact only if no series
    of that length, with or without ties, can give a p below ``smallest_rank_p_value`` (perfect steps
    reach it)."""
    from jobs.detect.changepoint import _locate_chunk, smallest_rank_p_value

    config = ChangePointConfig(serial_correction=serial_correction)
    rng = np.random.default_rng(11)
    reached = False
    for n in range(10, 66):
        rows = []
        for m in range(5, n - 4):
            rows.append(np.r_[np.arange(m), 1000.0 + np.arange(n - m)])  # a perfect step, no ties
            rows.append(np.r_[np.zeros(m), np.ones(n - m)])  # two tie groups
        rows += list(np.round(rng.lognormal(size=(50, n)), 0))
        rows += list(rng.lognormal(size=(50, n)))
        _, _, p_value = _locate_chunk(np.array(rows), config)
        bound = smallest_rank_p_value(n, config)
        assert p_value.min() >= bound * (1 - 1e-12), n
        reached = reached or p_value.min() <= bound * (1 + 1e-9)
    assert reached or serial_correction  # without the widening it is tight somewhere, not merely safe


@pytest.mark.parametrize("n", [10, 23, 60, 61, 140])
@pytest.mark.parametrize("serial_correction", [True, False])
def test_a_row_ruled_out_by_its_ranks_never_passes_its_screen(n: int, serial_correction: bool) -> None:
    """The seeded search skips an interval when ``_may_pass_screen`` says no split's p can be within its
    screen; exact only if every such row's located p is indeed above it (noise, steps, trends, ties)."""
    from jobs.detect.changepoint import _locate_chunk, _may_pass_screen

    config = ChangePointConfig(serial_correction=serial_correction)
    rng = np.random.default_rng(n)
    rows = [rng.lognormal(size=n) for _ in range(300)]
    rows += [np.r_[rng.normal(size=n // 2), s + rng.normal(size=n - n // 2)] for s in (0.5, 1, 2, 4, 50)]
    rows += [np.cumsum(rng.normal(size=n)) for _ in range(50)]  # random walks: serially correlated
    rows += [np.round(rng.lognormal(size=n), 0) for _ in range(50)]  # ties
    stack = np.array(rows)
    _, _, p_value = _locate_chunk(stack, config)
    for screen in (1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.5):
        screens = np.full(stack.shape[0], screen)
        may = _may_pass_screen(stack, screens, config)
        assert np.all(may | (p_value > screen)), (n, screen)
        if screen <= 1e-3:
            assert not may.all()  # it does rule rows out


@pytest.mark.parametrize("n", [10, 17, 40, 60])
def test_the_exact_screen_keeps_the_rows_the_tail_per_split_keeps(n: int) -> None:
    """``_may_pass_screen``'s exact path compares each split's lattice point with the largest one that
    passes; it must keep exactly the rows the p per row and split (``_exact_two_sided``) keeps."""
    from jobs.detect.changepoint import _exact_two_sided, _may_pass_screen

    config = ChangePointConfig()
    rng = np.random.default_rng(n)
    rows = [rng.lognormal(size=n) for _ in range(400)]
    rows += [np.r_[rng.normal(size=n // 2), s + rng.normal(size=n - n // 2)] for s in (0.3, 0.7, 1, 2, 9)]
    stack = np.array(rows)
    screens = rng.choice([1e-6, 1e-4, 3e-4, 1e-3, 0.01, 0.05, 0.5], size=stack.shape[0]) * 1.01
    low = config.min_segment
    ranks = np.argsort(np.argsort(stack, axis=1), axis=1) + 1.0
    splits = np.arange(low, n - low + 1)
    spread = np.abs(np.cumsum(ranks, axis=1)[:, low - 1 : n - low] - splits * (n + 1) / 2.0)
    two_sided = np.ones(stack.shape[0])
    for column, split in enumerate(splits.tolist()):
        size = np.full(stack.shape[0], split, dtype=np.int64)
        tail = _exact_two_sided(size, n - size, spread[:, column])
        two_sided = np.minimum(two_sided, tail)
    expected = np.minimum(1.0, two_sided * (n - 2 * low + 1)) <= screens
    kept = _may_pass_screen(stack, screens, config)
    assert np.array_equal(kept, expected)
    assert 0 < kept.sum() < kept.size


def test_the_screen_in_chunks_on_threads_is_the_screen_of_the_whole_stack() -> None:
    """``_screened`` splits a stack into chunks of ``batch_elements`` values over the search's threads;
    the rows it keeps are the ones one call over the whole stack keeps, in order."""
    from jobs.detect.changepoint import _may_pass_screen, _screened

    rng = np.random.default_rng(5)
    for n in (20, 80):
        stack = np.array(
            [np.r_[rng.normal(size=n // 2), s + rng.normal(size=n - n // 2)] for s in rng.random(700)]
        )
        screens = rng.choice([1e-4, 1e-3, 0.05], size=stack.shape[0])
        whole = _may_pass_screen(stack, screens, ChangePointConfig())
        chunked = _screened(stack, screens, ChangePointConfig(batch_elements=n * 37, threads=2))
        assert np.array_equal(whole, chunked)
        assert 0 < whole.sum() < whole.size
