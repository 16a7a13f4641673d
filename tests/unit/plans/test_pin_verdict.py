"""Did a plan pin help: verified, failed or pending (jobs.plans.pin_verdict), on tiny inline series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from jobs.plans.pin_verdict import FAILED, PENDING, VERIFIED, PinVerdictConfig, judge_pins

T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GOOD, REGRESSED = 40, 30  # minutes of each window before the pin


def _samples(levels_ms: list[float], noise: float = 0.05, seed: int = 1) -> pl.DataFrame:
    """One-minute samples of one query, 100 calls each, at the given mean latencies (ms) with noise."""
    rng = np.random.default_rng(seed)
    ms = np.asarray(levels_ms) * rng.lognormal(0.0, noise, len(levels_ms))
    return pl.DataFrame(
        {
            "instance": "alpha",
            "queryid": 7,
            "interval_start": [T0 + i * MINUTE for i in range(len(ms))],
            "interval_end": [T0 + (i + 1) * MINUTE for i in range(len(ms))],
            "calls": 100,
            "total_exec_time": ms * 100,
        }
    )


def _pin(pinned_minutes: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "pin_id": ["p1"],
            "instance": ["alpha"],
            "queryid": [7],
            "onset": [T0 + GOOD * MINUTE],
            "applied_at": [T0 + (GOOD + REGRESSED) * MINUTE + timedelta(seconds=20)],  # mid-interval
        }
    ), pinned_minutes


def _judge(pinned_level: float, pinned_minutes: int, **config: float) -> dict:
    pins, minutes = _pin(pinned_minutes)
    levels = [1.0] * GOOD + [10.0] * REGRESSED + [10.0] + [pinned_level] * minutes  # +1: the straddling one
    return judge_pins(pins, _samples(levels), PinVerdictConfig(**config)).row(0, named=True)  # type: ignore[arg-type]


def test_a_pin_that_brings_the_good_level_back_is_verified_at_min_samples() -> None:
    row = _judge(1.0, 5)
    assert (row["verdict"], row["pinned_n"]) == (VERIFIED, 5)
    assert row["p_below_regressed"] < 0.01 and row["regressed_mean_ms"] == pytest.approx(10, rel=0.05)


def test_the_interval_straddling_the_pin_is_in_no_window() -> None:
    row = _judge(1.0, 5)
    assert (row["good_n"], row["regressed_n"], row["pinned_n"]) == (30, 30, 5)  # window_samples 30


def test_a_pin_that_changes_nothing_fails_as_not_back() -> None:
    row = _judge(10.0, 5)
    assert (row["verdict"], row["reason"].split(":")[0]) == (FAILED, "not_back")


def test_a_pin_that_helps_only_half_way_fails_it_is_not_back() -> None:
    row = _judge(5.0, 10)
    assert row["verdict"] == FAILED and row["p_below_regressed"] < 0.01  # better, yet not back


def test_too_few_pinned_samples_is_pending() -> None:
    row = _judge(1.0, 4)
    assert (row["verdict"], row["pinned_n"]) == (PENDING, 4)


def test_an_undecided_pin_fails_after_max_samples_and_not_before() -> None:
    # 1.25× the good level: not within back_within (20%), not significantly above 1.2× with this noise
    early = _judge(1.25, 8, max_samples=12)
    late = _judge(1.25, 12, max_samples=12)
    assert early["verdict"] == PENDING
    assert (late["verdict"], late["reason"].split(":")[0]) == (FAILED, "not_shown")


def test_the_verdict_is_the_same_for_any_row_order() -> None:
    pins, _ = _pin(6)
    samples = _samples([1.0] * GOOD + [10.0] * (REGRESSED + 1) + [1.0] * 6)
    first = judge_pins(pins, samples, PinVerdictConfig())
    assert first.equals(
        judge_pins(pins, samples.sample(fraction=1.0, shuffle=True, seed=3), PinVerdictConfig())
    )


def test_bad_settings_are_refused() -> None:
    for bad in (
        {"alpha": 0.0},
        {"back_within": -0.1},
        {"min_samples": 1},
        {"min_samples": 9, "max_samples": 8},
    ):
        with pytest.raises(ValueError, match="pinning"):
            PinVerdictConfig(**bad)  # type: ignore[arg-type]
