"""The drift analysis' thresholds: stdlib-only (re-exported by jobs.drift)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from jobs.detect.config import RegressionConfig


@dataclass(frozen=True)
class DriftConfig:
    """Every threshold of the drift analysis, with its default."""

    current_window: timedelta = timedelta(days=1)
    """The window under test ends at ``now`` (samples by interval_end in (now - window, now])."""
    baseline_days: int = 7
    """Default baseline when no anchor applies: this many days right before the current window."""
    bins: int = 20
    """Log-spaced bins over the baseline's range (plus one underflow and one overflow bin)."""
    min_relative_range: float = 0.10
    """A baseline narrower than this (max/min - 1) gets its edges widened to it, so a very steady query
    does not turn a 2% wobble into a jump across every bin."""
    weight_by_calls: bool = True
    """Each interval weighs its calls (a mean over 1,000 calls counts more than one over 2); False: one
    interval, one vote. The exceedance test always counts intervals (calls of one interval share one
    load and one plan: they are not independent evidence)."""
    latency_floor_ms: float = 1e-6
    """Latencies are clipped to at least this before taking logs (a 0.0 ms interval mean exists)."""
    psi_epsilon: float = 1e-4
    """PSI smoothing: every bin probability gets this added (then renormalized), so an empty bin is finite."""
    psi_drift: float = 0.25
    """PSI at or above this is a significant shift (the usual convention)..."""
    psi_watch: float = 0.10
    """...and 0.10-0.25 one to watch."""
    js_drift: float = 0.15
    """Jensen-Shannon distance (base 2) that must agree with psi_drift (for smooth shifts PSI 0.25 is
    about JS 0.2; a new tail in empty bins gives JS ~0.16 for 5% of the mass)."""
    js_watch: float = 0.10
    """Jensen-Shannon distance that must agree with psi_watch."""
    min_wasserstein: float = 0.05
    """W1 of the log latencies must reach this (mass moved by ~5% on average): narrow bins alone never
    make a drift."""
    min_samples: int = 30
    """Fewer intervals than this in either window is insufficient data."""
    tail_quantile: float = 0.95
    """The exceedance test counts current intervals above the baseline's order statistic at this
    quantile, and (Bonferroni, x2) above the baseline's maximum."""
    tail_p_value: float = 0.001
    """The exceedance test's (Bonferroni-corrected) p must be below this for a drift or an improvement."""
    min_tail_increase: float = 0.20
    """Slower means the calls-weighted p95 rose by at least this fraction (faster: fell by as much)."""
    min_added_load_ms_per_s: float = RegressionConfig.min_added_load_ms_per_s
    """Materiality, as the detector: the mean latency increase x current calls/s must reach this..."""
    min_latency_increase_ms: float = RegressionConfig.min_latency_increase_ms
    """...or the p95 must have risen by at least this much (a tail of a rare slow query matters)."""

    def __post_init__(self) -> None:
        if self.bins < 1:
            raise ValueError("bins must be >= 1")
        if self.current_window <= timedelta(0) or self.baseline_days <= 0:
            raise ValueError("current_window and baseline_days must be positive")
        if not 0.0 < self.tail_quantile < 1.0 or not 0.0 < self.tail_p_value <= 1.0:
            raise ValueError("tail_quantile and tail_p_value must be in (0, 1)")
        if self.psi_epsilon <= 0 or self.latency_floor_ms <= 0 or self.min_samples < 1:
            raise ValueError("psi_epsilon, latency_floor_ms and min_samples must be positive")
        if self.psi_watch > self.psi_drift or self.js_watch > self.js_drift:
            raise ValueError("watch thresholds must not exceed drift thresholds")
