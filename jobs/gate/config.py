"""Every knob of the gate in one frozen dataclass, with the default and the reason for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

OutlierMethod = Literal["tukey", "mad", "none"]
CycleOrder = Literal["abba", "alternate", "baseline_first"]
CycleSelectionRule = Literal["median", "best"]
CalibrationMode = Literal["off", "aa", "probe"]


@dataclass(frozen=True)
class GateConfig:
    """Thresholds and budgets of one gate run. Ratios are candidate / baseline (> 1 = candidate slower)."""

    # Reproducibility: one seed drives parameter draws, side order, query order and the bootstrap.
    seed: int = 20261129
    # Measurement. Warm-up calls fill caches and trigger psycopg's auto-prepare; they are discarded.
    warmup_calls: int = 10
    # Calls per side per round for the heaviest query (lighter ones get their weight's share, at least 1).
    calls_per_round: int = 20
    # Fresh connections (new server backends) every this many rounds, each warmed with this many
    # discarded calls per query. On a busy host a backend that the scheduler keeps on a contended core
    # is slower for as long as it lives: measured on identical databases, one connection per side for a
    # whole run gave ratios of 0.7x-1.5x. New backends per round turn that into between-round variance,
    # which the round-level bootstrap sees.
    reconnect_every_rounds: int = 1
    reconnect_warmup_calls: int = 1
    statement_timeout_ms: int = 30_000
    connect_timeout_s: int = 10
    # Statistical termination: stop once every query is settled (its p50-ratio CI is within
    # ±target_precision of the estimate, or it cannot straddle a verdict threshold any more), but never
    # before min_rounds and never after max_rounds rounds or max_seconds of measuring.
    target_precision: float = 0.05
    min_rounds: int = 10
    max_rounds: int = 200
    max_seconds: float = 120.0
    # The stop rule is checked at min_rounds, then each time the rounds grew by this fraction (a
    # group-sequential schedule: fewer looks, less optional-stopping bias, less bootstrap time).
    recheck_growth: float = 0.2
    # Confidence intervals: seeded percentile bootstrap of the ratio of medians (and of p95s).
    confidence: float = 0.95
    bootstrap_resamples: int = 1000
    # Outliers (per query, per side): Tukey fences at k x IQR (3 = "far out"), or |x - median| > z x MAD.
    outlier_method: OutlierMethod = "tukey"
    tukey_k: float = 3.0
    mad_z: float = 5.0
    # Latency thresholds (client-side). BLOCK needs the CI *lower bound* at or over the block ratio
    # (precision first); WARN needs the estimate at or over the warn ratio and the CI lower bound over
    # warn_min_ci_lower (the slowdown is real, not noise).
    p50_warn_ratio: float = 1.10
    p50_block_ratio: float = 1.25
    p95_warn_ratio: float = 1.25
    p95_block_ratio: float = 1.50
    warn_min_ci_lower: float = 1.05
    # A latency verdict also needs the median to grow by this much: sub-10-microsecond moves are noise
    # of the client, the network and the scheduler, not a regression worth stopping a deploy for.
    min_latency_increase_ms: float = 0.02
    # With pg_stat_statements on both sides, a client-side latency WARN/BLOCK also needs the server's
    # mean execution time per call to have grown by this ratio; otherwise the slowdown is the client's,
    # the network's or the scheduler's (a 0.06 ms client round trip of a 0.004 ms query), and it is
    # reported as unconfirmed instead. Planning time is not in the server's execution time.
    server_confirm_ratio: float = 1.05
    # pg_stat_statements (when installed): shared blocks (hit + read) per call.
    buffers_warn_ratio: float = 1.5
    buffers_block_ratio: float = 2.0
    # ...and the increase must be at least this many blocks per call (2 -> 4 blocks is not a regression).
    buffers_min_increase: float = 8.0
    # Rows per call differing by more than this fraction: the candidate returns other results -> WARN.
    rows_change_warn: float = 0.01
    # A different plan shape (EXPLAIN with the first parameter set) is at least a WARN.
    plan_change_warns: bool = True
    # Exit code of a WARN: 1 fails the CI step; set False to let WARN pass (exit 0).
    fail_on_warn: bool = True
    # Multi-cycle and calibration (issue 12, jobs/gate/selection.py)
    cycles: int = 3
    """Cycles of the whole suite; one cycle's report per scenario is selected by the selection rule (not read
    by the runner yet: issue 12 wiring)."""
    cycle_order: CycleOrder = "abba"
    """Which side goes first in cycle i (0-based): abba = the baseline when i % 4 is 0 or 3 (AB, BA, BA, AB,
    ...); alternate = AB, BA, ...; baseline_first = AB every cycle."""
    selection: CycleSelectionRule = "median"
    """The cycle that stands for a scenario: median (the cycle at (K - 1) // 2 by ascending ratio, the lower
    middle for even K) or best (the lowest-ratio cycle without a regression; regressed only if every cycle
    regressed). Ties: the earlier cycle."""
    calibration: CalibrationMode = "off"
    """Side asymmetry of two servers: aa = the baseline database measured against itself on both servers,
    probe = a fixed CPU/IO probe timed on each; the verdict is then taken on observed / asymmetry (not read
    by the runner yet: issue 12 wiring)."""
    calibration_cycles: int = 5
    """Calibration cycles (A/A comparisons or probe timings per server) the asymmetry is estimated from. Its
    CI is a t interval over the cycles: with 3% noise per cycle, 3 cycles give about ±7.5% (t = 4.30 with 2
    degrees of freedom), 5 cycles about ±3.7%."""
    calibration_max_half_width: float = 0.10
    """An asymmetry whose CI half-width exceeds this fraction of it (0.10 = ±10%) is reported as unreliable
    and not applied. Below it the asymmetry's uncertainty is carried into the corrected ratio's CI."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.confidence < 1:
            problems.append(f"confidence must be in (0, 1), got {self.confidence}")
        if self.target_precision <= 0:
            problems.append(f"target_precision must be > 0, got {self.target_precision}")
        if self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            problems.append(f"need 1 <= min_rounds <= max_rounds, got {self.min_rounds}, {self.max_rounds}")
        if self.calls_per_round < 1 or self.warmup_calls < 0 or self.reconnect_warmup_calls < 0:
            problems.append("calls_per_round must be >= 1, warmup_calls and reconnect_warmup_calls >= 0")
        if self.reconnect_every_rounds < 1:
            problems.append(f"reconnect_every_rounds must be >= 1, got {self.reconnect_every_rounds}")
        if self.outlier_method not in ("tukey", "mad", "none"):
            problems.append(f"outlier_method must be tukey, mad or none, got {self.outlier_method!r}")
        if not 1 <= self.p50_warn_ratio <= self.p50_block_ratio:
            problems.append("need 1 <= p50_warn_ratio <= p50_block_ratio")
        if not 1 <= self.p95_warn_ratio <= self.p95_block_ratio:
            problems.append("need 1 <= p95_warn_ratio <= p95_block_ratio")
        if not 1 <= self.buffers_warn_ratio <= self.buffers_block_ratio:
            problems.append("need 1 <= buffers_warn_ratio <= buffers_block_ratio")
        if self.bootstrap_resamples < 100:
            problems.append(f"bootstrap_resamples must be >= 100, got {self.bootstrap_resamples}")
        if self.cycles < 1 or self.calibration_cycles < 1:
            problems.append(
                f"cycles and calibration_cycles must be >= 1, got {self.cycles}, {self.calibration_cycles}"
            )
        if self.cycle_order not in ("abba", "alternate", "baseline_first"):
            problems.append(
                f"cycle_order must be abba, alternate or baseline_first, got {self.cycle_order!r}"
            )
        if self.selection not in ("median", "best"):
            problems.append(f"selection must be median or best, got {self.selection!r}")
        if self.calibration not in ("off", "aa", "probe"):
            problems.append(f"calibration must be off, aa or probe, got {self.calibration!r}")
        if not self.calibration_max_half_width > 0:
            problems.append(f"calibration_max_half_width must be > 0, got {self.calibration_max_half_width}")
        if problems:
            raise ValueError("GateConfig: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
