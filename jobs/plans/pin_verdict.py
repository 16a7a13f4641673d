"""Did a plan pin help? The judgement of issue 30's verification step, apart from any server.

A pin is applied after a regression was found. Its query's per-interval latency then has three windows:
*good* (before the regression's onset), *regressed* (from the onset to the pin) and *pinned* (intervals that
start after the pin was applied; the one straddling it is in neither). The same Welch test that found the
regression judges the pinned window:

- **verified**: the pinned level is significantly below the regressed one (one-sided, ``alpha``) and back
  within ``back_within`` of the good level (the detector's latency_change_threshold: a level it would not
  call a regression of the good one);
- **failed**: the pinned level is significantly above ``good × (1 + back_within)`` (it did not bring latency
  back), or ``max_samples`` pinned intervals passed without a verdict (not shown to help: a pin stays only
  while it is shown to help);
- **pending**: fewer than ``min_samples`` pinned intervals, or neither yet.

The latest ``window_samples`` intervals of the good and regressed windows are compared (the levels next to
the pin, as the deploy analysis compares the windows next to a deploy).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import polars as pl

from jobs.detect.segments import welch_tests

VERIFIED, FAILED, PENDING = "verified", "failed", "pending"

PIN_VERDICT_COLUMNS = {
    "pin_id": pl.String,
    "verdict": pl.String,
    "reason": pl.String,
    "good_mean_ms": pl.Float64,
    "regressed_mean_ms": pl.Float64,
    "pinned_mean_ms": pl.Float64,
    "good_n": pl.Int64,
    "regressed_n": pl.Int64,
    "pinned_n": pl.Int64,
    "p_below_regressed": pl.Float64,
    "p_above_good": pl.Float64,
}


@dataclass(frozen=True)
class PinVerdictConfig:
    """Thresholds of the pin verification (``[pinning]`` in the config file)."""

    alpha: float = 0.01
    """One-sided significance of both tests."""
    back_within: float = 0.20
    """The pinned level counts as back when at most this share above the good level."""
    min_samples: int = 5
    """Pinned intervals needed before any verdict."""
    max_samples: int = 30
    """Pinned intervals after which a pin with no verdict has failed."""
    window_samples: int = 30
    """The latest intervals of the good and the regressed window compared."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError("pinning: alpha must be in (0, 1)")
        if self.back_within < 0:
            raise ValueError("pinning: back_within must be >= 0")
        if not 2 <= self.min_samples <= self.max_samples:
            raise ValueError("pinning: need 2 <= min_samples <= max_samples")
        if self.window_samples < 2:
            raise ValueError("pinning: window_samples must be >= 2")


@dataclass(frozen=True)
class PinWindows:
    """One pin's per-interval mean latencies (ms), oldest first, in its three windows."""

    good: np.ndarray
    regressed: np.ndarray
    pinned: np.ndarray


def pin_windows(
    samples: pl.DataFrame, onset: datetime, applied_at: datetime, window_samples: int
) -> PinWindows:
    """Split one query's samples (``interval_start``, ``interval_end``, ``total_exec_time``, ``calls``;
    several queryids of a series merged per interval) into the three windows. Intervals without calls
    carry no latency and are left out; an interval straddling the onset or the pin is in no window."""
    merged = (
        samples.filter(pl.col("calls") > 0)
        .group_by("interval_end")
        .agg(pl.col("interval_start").min(), pl.col("total_exec_time").sum(), pl.col("calls").sum())
        .sort("interval_end")
        .with_columns((pl.col("total_exec_time") / pl.col("calls")).alias("ms"))
    )
    start, end = merged["interval_start"], merged["interval_end"]
    good = merged.filter(end <= onset)["ms"].to_numpy()
    regressed = merged.filter((start >= onset) & (end <= applied_at))["ms"].to_numpy()
    pinned = merged.filter(start >= applied_at)["ms"].to_numpy()
    return PinWindows(good[-window_samples:], regressed[-window_samples:], pinned)


def _one_sided(two_sided_p: float, t: float, below: bool) -> float:
    """One-sided p of 'the second sample's mean is below (above) the first's' from Welch's two-sided p."""
    if np.isnan(two_sided_p):
        return float("nan")
    right_side = t < 0 if below else t > 0
    return two_sided_p / 2 if right_side else 1 - two_sided_p / 2


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(t, two-sided p) of b against a."""
    stats = [
        (np.array([len(x)]), np.array([x.mean()]), np.array([((x - x.mean()) ** 2).sum()])) for x in (a, b)
    ]
    result = welch_tests(*stats[0], *stats[1])
    return float(result.t[0]), float(result.p[0])


def judge_pin(pin_id: str, windows: PinWindows, config: PinVerdictConfig) -> dict[str, object]:
    """One PIN_VERDICT_COLUMNS row."""
    good, regressed, pinned = windows.good, windows.regressed, windows.pinned
    row: dict[str, object] = {
        "pin_id": pin_id,
        "good_mean_ms": float(good.mean()) if len(good) else None,
        "regressed_mean_ms": float(regressed.mean()) if len(regressed) else None,
        "pinned_mean_ms": float(pinned.mean()) if len(pinned) else None,
        "good_n": len(good),
        "regressed_n": len(regressed),
        "pinned_n": len(pinned),
        "p_below_regressed": None,
        "p_above_good": None,
    }
    if len(good) < 2 or len(regressed) < 2:
        return {**row, "verdict": FAILED, "reason": "no_baseline: too few samples before the pin to judge it"}
    if len(pinned) < config.min_samples:
        return {
            **row,
            "verdict": PENDING,
            "reason": f"waiting: {len(pinned)} of {config.min_samples} samples",
        }
    pinned = pinned[: config.max_samples]
    t, p = _welch(regressed, pinned)
    p_below = _one_sided(p, t, below=True)
    back_level = good * (1 + config.back_within)
    t_good, p_good = _welch(back_level, pinned)
    p_above = _one_sided(p_good, t_good, below=False)
    row = {**row, "pinned_mean_ms": float(pinned.mean()), "pinned_n": len(pinned)}
    row |= {"p_below_regressed": p_below, "p_above_good": p_above}
    if p_below <= config.alpha and pinned.mean() <= back_level.mean():
        return {
            **row,
            "verdict": VERIFIED,
            "reason": "back: below the regressed level, within back_within of the good",
        }
    if p_above <= config.alpha:
        return {**row, "verdict": FAILED, "reason": "not_back: significantly above the good level"}
    if len(pinned) >= config.max_samples:
        return {
            **row,
            "verdict": FAILED,
            "reason": f"not_shown: no verdict after {config.max_samples} samples",
        }
    return {**row, "verdict": PENDING, "reason": "undecided: neither back nor shown not back yet"}


def judge_pins(pins: pl.DataFrame, samples: pl.DataFrame, config: PinVerdictConfig) -> pl.DataFrame:
    """Per pin (``pin_id``, ``instance``, ``queryid``, ``onset``, ``applied_at``): its verdict from the
    samples of its query id on its instance. Pins are few (one per pinned query), so one pass each."""
    rows = []
    for pin in pins.sort("pin_id").iter_rows(named=True):
        own = samples.filter((pl.col("instance") == pin["instance"]) & (pl.col("queryid") == pin["queryid"]))
        windows = pin_windows(own, pin["onset"], pin["applied_at"], config.window_samples)
        rows.append(judge_pin(pin["pin_id"], windows, config))
    return (
        pl.DataFrame(rows, schema=PIN_VERDICT_COLUMNS, orient="row")
        if rows
        else pl.DataFrame(schema=PIN_VERDICT_COLUMNS)
    )
