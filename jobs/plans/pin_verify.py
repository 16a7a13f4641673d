"""Did an applied pin help (issue 30)? The detector's own test judges the pinned windows.

The query's interval latencies (query_samples: Δtotal_exec_time / Δcalls per interval, summed over its
users and databases, top-level rows only: nested ones are already in the top-level totals) are split at the
finding's change and at the pin's application into three levels: before the regression (the detector's
``window_before``), regressed (change → applied) and pinned (intervals wholly after the application). A pin
is **verified** when the pinned level is faster than the regressed one by Welch's test at the detector's
``p_value_threshold`` *and* back at the pre-regression level (within the detector's
``latency_change_threshold`` of it, or not significantly slower, or what is left of the slowdown at most
``residual_share`` of the regression's on a log scale: pg_hint_plan's per-execution hint lookup); it
**failed** when it has not been verified ``verify_within`` after it was applied (too few pinned samples by
then, e.g. the query id stopped running, fails it too). Until then it is pending. Pure: frames in, a
verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from jobs.detect.config import RegressionConfig
from jobs.detect.segments import piece_statistics, welch_tests

VERIFIED = "verified"
FAILED = "failed"
PENDING = "pending"


@dataclass(frozen=True)
class PinVerdict:
    """The outcome and the figures behind it (means in ms, Welch's p of pinned vs regressed and vs before)."""

    outcome: str
    reason: str
    pinned_mean_ms: float | None = None
    regressed_mean_ms: float | None = None
    before_mean_ms: float | None = None
    p_vs_regressed: float | None = None
    p_vs_before: float | None = None
    pinned_count: int = 0


def interval_latencies(samples: pl.DataFrame) -> pl.DataFrame:
    """One mean latency (ms) per interval of a query's samples: Σ Δtotal_exec_time / Σ Δcalls (top level)."""
    if samples.is_empty():
        return pl.DataFrame(
            schema={"interval_start": pl.Datetime("us", "UTC"), "interval_end": pl.Datetime("us", "UTC"),
                    "mean_ms": pl.Float64}
        )  # fmt: skip
    if "toplevel" in samples.columns:
        samples = samples.filter(pl.col("toplevel").fill_null(True))
    return (
        samples.group_by("interval_start", "interval_end")
        .agg(
            (pl.col("total_exec_time").sum() / pl.col("calls").sum()).alias("mean_ms"), pl.col("calls").sum()
        )
        .filter(pl.col("calls") > 0)
        .drop("calls")
        .sort("interval_end")
    )


def _welch(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch p of b against a (the detector's test)."""
    count_a, mean_a, squares_a = piece_statistics(a, np.zeros(a.shape[0], dtype=np.int64), 1)
    count_b, mean_b, squares_b = piece_statistics(b, np.zeros(b.shape[0], dtype=np.int64), 1)
    return float(welch_tests(count_a, mean_a, squares_a, count_b, mean_b, squares_b).p[0])


def _residual_share(before: float, regressed: float, pinned: float) -> float:
    """What is left of the slowdown, as a share of the regression's on a log scale (inf when the levels
    do not allow it: no slowdown, or a level that is not positive)."""
    if not (before > 0 and pinned > 0 and regressed > before):
        return float("inf")
    return float(np.log(pinned / before) / np.log(regressed / before))


def verify_pin(
    latencies: pl.DataFrame,
    *,
    change_at: datetime,
    applied_at: datetime,
    now: datetime,
    detector: RegressionConfig,
    verify_within: timedelta,
    min_samples: int,
    residual_share: float,
) -> PinVerdict:
    """The verdict on one applied pin from its query's ``interval_latencies``."""

    def level(frame: pl.DataFrame) -> np.ndarray:
        return frame["mean_ms"].to_numpy().astype(np.float64)

    before = level(
        latencies.filter(
            (pl.col("interval_end") <= change_at)
            & (pl.col("interval_start") >= change_at - detector.window_before)
        )
    )
    regressed = level(
        latencies.filter((pl.col("interval_start") >= change_at) & (pl.col("interval_end") <= applied_at))
    )
    pinned = level(latencies.filter(pl.col("interval_start") >= applied_at))
    overdue = now - applied_at >= verify_within
    if pinned.shape[0] < min_samples or before.shape[0] < 2 or regressed.shape[0] < 2:
        what = (
            f"{pinned.shape[0]} pinned samples (at least {min_samples} needed)"
            if pinned.shape[0] < min_samples
            else f"{before.shape[0]} samples before the regression and {regressed.shape[0]} regressed "
            "(2 each needed)"
        )
        if overdue:
            return PinVerdict(
                FAILED, f"not verified within {verify_within} of the pin: {what}", pinned_count=len(pinned)
            )
        return PinVerdict(PENDING, f"waiting: {what}", pinned_count=len(pinned))
    p_regressed, p_before = _welch(regressed, pinned), _welch(before, pinned)
    m_pinned, m_regressed, m_before = float(pinned.mean()), float(regressed.mean()), float(before.mean())
    faster = m_pinned < m_regressed and p_regressed < detector.p_value_threshold
    back = (
        m_pinned <= m_before * (1 + detector.latency_change_threshold)
        or p_before >= detector.p_value_threshold
        or _residual_share(m_before, m_regressed, m_pinned) <= residual_share
    )
    figures = (
        f"pinned {m_pinned:.3g} ms vs regressed {m_regressed:.3g} ms (Welch p = {p_regressed:.2g}) and "
        f"before {m_before:.3g} ms (p = {p_before:.2g}), {len(pinned)} pinned samples"
    )
    common = {
        "pinned_mean_ms": m_pinned,
        "regressed_mean_ms": m_regressed,
        "before_mean_ms": m_before,
        "p_vs_regressed": p_regressed,
        "p_vs_before": p_before,
        "pinned_count": len(pinned),
    }
    if faster and back:
        return PinVerdict(
            VERIFIED, f"verified: latency back at the pre-regression level: {figures}", **common
        )
    why = "not faster than the regressed level" if not faster else "faster, but not back at the level before"
    if overdue:
        return PinVerdict(FAILED, f"failed: {why} within {verify_within} of the pin: {figures}", **common)
    return PinVerdict(PENDING, f"waiting: {why} yet: {figures}", **common)
