"""The drift stage's thresholds (interval drift and the design's scorer): stdlib-only, so the config file
loader and the CLI read them without numpy."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar

from jobs.detect.config import RegressionConfig

PROFILES = ("calibrated", "calibrated_linear", "design")
"""The drift scorer's profiles: the noise-calibrated default (its grid in log space), the same in the
metric's own unit (the default before issue 27: blind to heavy tails), and the design's rule exactly."""


@dataclass(frozen=True)
class DriftScoreConfig:
    """Every constant of the drift scorer, with the design's default."""

    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        "js_block_threshold": "js_block",
        "psi_block_threshold": "psi_block",
        "js_warn_threshold": "js_warn",
        "psi_warn_threshold": "psi_warn",
        "smoothing_epsilon": "smoothing",
    }
    """The design's names of these keys, accepted in the config file, the environment and --set
    (``n_bins`` and ``min_samples`` are the same in both)."""

    n_bins: int = 32
    """Bins of the one grid over the union support of both sides."""
    winsor_quantile: float = 0.99
    """The candidate is winsorized at this quantile (numpy 'linear') before binning."""
    smoothing: float = 1e-9
    """Added to every bin's frequency before normalisation (an empty bin stays finite)."""
    js_block: float = 0.25
    """JS divergence (base 2) above this blocks."""
    psi_block: float = 0.25
    """PSI above this blocks."""
    js_warn: float = 0.1
    """JS divergence above this warns."""
    psi_warn: float = 0.1
    """PSI at or above this warns (the design's >=, unlike the other three bands)."""
    min_samples: int = 200
    """Fewer samples than this on either side: WARN insufficient_samples, never PASS."""
    psi_data_quality: float = 10.0
    """PSI above this is a data-quality flag: the PSI is not trusted and the flag falls back to JS."""
    profile: str = "calibrated"
    """'calibrated' (bands count only over the pair's noise quantile; the grid over log(v + offset)),
    'calibrated_linear' (the same on the raw values) or 'design' (the rule, exactly)."""
    log_offset_share: float = 0.01
    """Calibrated: the log space is log(v + offset), offset = this share of the baseline's median (of the
    mean positive sample when that median is 0), so zeros are finite and the space is unit-free."""
    shift_warn_ratio: float = 1.1
    """Calibrated: a significant shift (the mean log value moved beyond its permutation noise quantile)
    whose geometric-mean ratio is at least this (or at most its inverse) warns..."""
    shift_block_ratio: float = 1.5
    """...and at least this blocks."""
    tail_quantiles: tuple[float, ...] = (0.90, 0.95, 0.99)
    """Calibrated: the slow-tail test counts the candidate's samples above each of these baseline
    quantiles (one exact hypergeometric p each: p90 sees a tail spread over the upper tenth, p99 one far
    beyond a tight body; a new 10% x5 tail of lognormal sigma 0.5 was flagged in 88% of the calibration's
    pairs with p90 alone, 99% with all three)..."""
    tail_p_value: float = 0.003
    """...and the smallest of those p, at its exact level over all the quantiles (the probability under
    no change that any count reaches its critical value), must be below this to warn (0.001 until issue
    27's last round: 0.003 spends the A/A budget the other rules leave, +4 to +7 points of new-tail recall
    on three shapes, A/A flagged at most 0.80% on 3,000 held-out pairs a shape)..."""
    tail_block_p_value: float = 0.001
    """...and below this to block: a tail BLOCK at 0.003 rose to 0.60% of held-out bimodal A/A pairs (a
    10% slow mode puts p90 on the boundary between the modes), over the 0.5% a BLOCK may spend."""
    tail_warn_ratio: float = 1.25
    """Calibrated: a significantly slower tail whose largest p90/p95/p99 ratio (candidate / baseline) is
    at least this warns..."""
    tail_block_ratio: float = 2.0
    """...and at least this (significant at ``tail_block_p_value``) blocks."""
    slow_mode_p_value: float = 0.0025
    """Calibrated: the slow-mode test warns below this (0: off). It asks whether some of the candidate's
    executions became several times slower (a share in ``slow_mode_shares``, a factor in
    ``slow_mode_factors``), scoring each pooled sample by how much likelier it is under that than under
    the pair's pooled density (a kernel estimate in the log space), the largest candidate sum of the
    grid against the same sum over ``slow_mode_permutations`` relabellings of the pooled samples. It sees
    a slow mode between a body and an old slow mode, which quantile counts miss (the calibration's
    bimodal 10% x5 tails: 76.6% -> 86.6% flagged at 0.001). 0.0025 spends the share of the A/A budget
    the noise floor's stricter quantile freed (``null_quantile``): bimodal 90.1%, held-out pairs 84.8 ->
    88.9%. Run only where nothing else flags."""
    slow_mode_shares: tuple[float, ...] = (0.05, 0.10, 0.20)
    """Calibrated: the shares of slower executions the slow-mode test looks for..."""
    slow_mode_factors: tuple[float, ...] = (2.0, 3.0, 5.0, 10.0)
    """...and how many times slower they became (each > 1)."""
    slow_mode_permutations: int = 2000
    """Calibrated: relabellings of the slow-mode test (its p is (1 + exceedances) / (1 + this): at least
    1 / ``slow_mode_p_value`` - 1 for the test to be able to warn)."""
    slow_mode_screen_z: float = 2.5
    """Calibrated: the slow-mode test relabels only pairs whose best standardised sum (exact permutation
    mean and variance) reaches this: a cost cut (none of the calibration's pairs that the test found at
    0.002, in a scratch run over 8,000 of its pairs, was under 2.5)."""
    slow_mode_max_pooled: int = 10_000
    """Calibrated: pairs with more pooled samples than this skip the slow-mode test (relabelling costs
    samples x permutations; from 1,000 samples a side the other rules find 98-100% of the calibration's
    new tails already)."""
    null_resamples: int = 2000
    """Calibrated: permutation relabellings per pair for the noise null (~20-30 ms a flagged pair)."""
    null_quantile: float = 0.9995
    """Calibrated: the null's quantile (numpy 'linear') a distance must exceed: with 2,000 relabellings a
    level of about 0.1% per distance. 1,000 / 0.999 (until issue 27's last round; about 0.2%) let PSI
    alone flag 0.2-0.5% of unchanged pairs, the largest share of the A/A budget, for no new-tail recall;
    2,000 / 0.9995 halves that (psi_block 13 -> 4 of the calibration's 4,000 A/A pairs) and costs the
    moderate shifts a little BLOCK share (lognormal sigma 0.5 x1.5 BLOCKed 93.4 -> 91.6%), each flag
    still a WARN at least. (400 / 0.995 gave 1.3-1.4% false BLOCKs on 1,000 lognormal pairs.)"""
    seed: int = 20260111
    """Calibrated: base seed, mixed with each pair's key (SHA-256) into the pair's own generator."""
    shard_count: int = 64
    """Shard key = int(query_hash[-8:], 16) % shard_count."""
    compute_wasserstein: bool = False
    """Compute W1 (metadata only, never a flag) when asked (issue 27: "computed only when asked"). Off, the
    ``wasserstein`` column is null (never 0): on pairs of ragged sizes W1 was over half of the kernel's
    CPU time."""
    threads: int = 0
    """Threads of the scorer's kernel (0: one per CPU), at most one per two chunks of 1,024 pairs (fewer
    pairs run on one thread: two only contended for the GIL). Pairs are independent, so any number gives
    the same bytes."""

    def __post_init__(self) -> None:
        if self.n_bins < 1 or self.min_samples < 0 or self.shard_count < 1 or self.null_resamples < 1:
            raise ValueError("n_bins, null_resamples and shard_count must be >= 1, min_samples >= 0")
        if self.threads < 0:
            raise ValueError("threads must be >= 0 (0: one per CPU)")
        if (
            not self.tail_quantiles
            or not all(0.0 < q < 1.0 for q in self.tail_quantiles)
            or not 0.0 < self.tail_block_p_value <= self.tail_p_value < 1.0
        ):
            raise ValueError(
                "tail_quantiles (at least one), tail_p_value and tail_block_p_value must be in (0, 1), "
                "tail_block_p_value <= tail_p_value"
            )
        if (
            not 0.0 <= self.slow_mode_p_value < 1.0
            or not self.slow_mode_shares
            or not all(0.0 < e < 1.0 for e in self.slow_mode_shares)
            or not self.slow_mode_factors
            or not all(k > 1.0 for k in self.slow_mode_factors)
            or self.slow_mode_permutations < 1
            or self.slow_mode_max_pooled < 2
        ):
            raise ValueError(
                "slow_mode_p_value must be in [0, 1), slow_mode_shares in (0, 1), slow_mode_factors > 1 "
                "(at least one each), slow_mode_permutations >= 1, slow_mode_max_pooled >= 2"
            )
        if not 0.0 < self.winsor_quantile <= 1.0 or not 0.0 < self.null_quantile <= 1.0:
            raise ValueError("winsor_quantile and null_quantile must be in (0, 1]")
        if not self.smoothing > 0 or not self.log_offset_share > 0:
            raise ValueError("smoothing and log_offset_share must be > 0")
        if self.js_warn > self.js_block or self.psi_warn > self.psi_block:
            raise ValueError("warn bands must not exceed block bands")
        if not 1.0 < self.shift_warn_ratio <= self.shift_block_ratio or not (
            1.0 < self.tail_warn_ratio <= self.tail_block_ratio
        ):
            raise ValueError("shift and tail ratios must be > 1, warn <= block")
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {self.profile!r}")


@dataclass(frozen=True)
class SampleDriftConfig:
    """The per-execution drift stage: auto_explain samples scored against anchored baselines."""

    current_window: timedelta = timedelta(minutes=10)
    """The candidate of a scoring run: execution samples logged in (now - current_window, now]."""
    max_baseline_samples: int = 5000
    """An anchored baseline keeps at most this many samples per (query_hash, metric): a seeded uniform
    subsample of its window, so a baseline row stays small and scoring stays bounded."""
    seed: int = 20261201
    """Seed of the baseline subsample (mixed with the pair's key: a pair never depends on the others)."""
    stale_block_share: float = 0.05
    """Asset check: a BLOCK share of scored pairs above this over ``stale_window`` means the baseline is
    likely stale (names the tables analysed within ``analyze_lookback``, suggests a re-anchor)."""
    stale_window: timedelta = timedelta(minutes=10)
    """The window of the stale-baseline check."""
    stale_min_block_pairs: int = 3
    """...and at least this many BLOCKed pairs: 2 of 15 pairs over a 5% share once read a dropped index as
    a stale baseline."""
    analyze_lookback: timedelta = timedelta(minutes=30)
    """Tables analysed (ANALYZE or autoanalyze) within this before the check are named as the likely cause."""
    degenerate_share: float = 0.10
    """Asset check: an insufficient_samples share of scored pairs above this says "widen the capture
    window" (or raise auto_explain.sample_rate)."""
    analyze_before_plan_change: timedelta = timedelta(minutes=30)
    """Plan diffs and findings mention an ANALYZE of one of the query's tables this long before the change."""
    instance_shift_share: float = 0.5
    """A busy host slows every query at once: when at least this share of an instance's scored latency
    pairs is WARN/BLOCK, a latency flag whose cost and cardinality PASS (the plan and its estimates are
    unchanged) is the instance's, not the query's: it becomes WARN ``instance_wide_latency`` (never BLOCK,
    never a silent PASS)."""
    instance_shift_min_pairs: int = 5
    """The guard needs at least this many scored latency pairs on the instance (fewer tell nothing apart;
    a very large number turns the guard off)."""

    def __post_init__(self) -> None:
        if self.current_window <= timedelta(0) or self.stale_window <= timedelta(0):
            raise ValueError("current_window and stale_window must be positive")
        if self.max_baseline_samples < 1 or self.stale_min_block_pairs < 1:
            raise ValueError("max_baseline_samples and stale_min_block_pairs must be >= 1")
        if not 0.0 < self.instance_shift_share <= 1.0 or self.instance_shift_min_pairs < 1:
            raise ValueError("instance_shift_share must be in (0, 1] and instance_shift_min_pairs >= 1")
        if not 0.0 <= self.stale_block_share <= 1.0 or not 0.0 <= self.degenerate_share <= 1.0:
            raise ValueError("stale_block_share and degenerate_share must be in [0, 1]")


@dataclass(frozen=True)
class DriftConfig:
    """Every threshold of the drift analysis, with its default."""

    current_window: timedelta = timedelta(days=1)
    """The window under test ends at ``now`` (samples by interval_end in (now - window, now])."""
    max_payload_bytes: int = 64 * 1024 * 1024
    """A CI drift payload (`radar drift score --payload`) larger than this is refused unread past it
    (exit 3): 64 MiB holds about 7 M samples."""
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
    score: DriftScoreConfig = field(default_factory=DriftScoreConfig)
    """The design's scorer of per-execution samples ([drift.score])."""
    samples: SampleDriftConfig = field(default_factory=SampleDriftConfig)
    """The per-execution drift stage ([drift.samples]): windows, baselines, asset checks."""

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
