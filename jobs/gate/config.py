"""Every knob of the gate in one frozen dataclass, with the default and the reason for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args


class GateError(RuntimeError):
    """The gate could not measure: a database unreachable, a scenario failing on the baseline or broken."""


# The one home of the gate's levels (the lowest module of the gate: every engine and the cycle judgement
# use these); their order is verdict.SEVERITY.
PASS, WARN, BLOCK, INCONCLUSIVE = "PASS", "WARN", "BLOCK", "INCONCLUSIVE"

OutlierMethod = Literal["tukey", "mad", "none"]
# The design's rules (jobs/gate/rules.py), each selectable by name.
Aggregation = Literal["minimum", "mean", "mean_minus_std", "normal_fit", "p50", "p95"]
SampleFilter = Literal["none", "drop_first", "running_mean_sigma", "fences"]
TerminationRule = Literal["normal_overlap", "probability_for_minimum", "run_at_most"]
TERMINATION_RULES: tuple[str, ...] = get_args(TerminationRule)
CycleOrder = Literal["abba", "alternate", "baseline_first"]
CycleSelectionRule = Literal["median", "best"]
CalibrationMode = Literal["off", "auto", "aa", "probe"]
MemoryAggregation = Literal["minimum", "mean", "maximum"]
UnreliableCalibration = Literal["carry", "ignore"]
AaTiming = Literal["interleaved", "before"]
VerdictRule = Literal["bounded", "design"]


@dataclass(frozen=True)
class GateConfig:
    """Thresholds and budgets of one gate run. Ratios are candidate / baseline (> 1 = candidate slower)."""

    # Reproducibility: one seed drives parameter draws, side order, query order and the bootstrap.
    seed: int = 20261129
    # Measurement. Warm-up calls fill caches and trigger psycopg's auto-prepare; they are discarded.
    warmup_calls: int = 10
    # A workload file's heaviest query runs this many times per measurement (its scenario's repeat); the
    # others their weight's share, at least 1.
    calls_per_round: int = 20
    # Fresh connections (new server backends) every this many measurements, each warmed with this many
    # discarded executions. On a busy host a backend that the scheduler keeps on a contended core is
    # slower for as long as it lives: measured on identical databases, one connection per side for a
    # whole run gave ratios of 0.7x-1.5x. New backends turn that into between-measurement variance, which
    # the bootstrap sees.
    reconnect_every_rounds: int = 1
    reconnect_warmup_calls: int = 1
    statement_timeout_ms: int = 30_000
    connect_timeout_s: int = 10
    # Under the bounded verdict rule a cycle's decision is looked at once the design's rules fired, then
    # each time the measurements grew by this fraction (a group-sequential schedule: fewer looks, less
    # optional-stopping bias, less bootstrap time).
    recheck_growth: float = 0.2
    # Confidence intervals: seeded percentile bootstrap of the ratio of the aggregates.
    confidence: float = 0.95
    bootstrap_resamples: int = 1000
    # Outliers (the `fences` filter, per side): Tukey fences at k x IQR (3 = "far out"), or
    # |x - median| > z x MAD.
    outlier_method: OutlierMethod = "tukey"
    tukey_k: float = 3.0
    mad_z: float = 5.0
    # A wallclock verdict also needs the aggregate to grow by this much: sub-20-microsecond moves are noise
    # of the client, the network and the scheduler, not a regression worth stopping a deploy for.
    min_latency_increase_ms: float = 0.02
    # A different plan shape (EXPLAIN with the first parameter set) is at least a WARN.
    plan_change_warns: bool = True
    # Exit code of a WARN: 1 fails the CI step; set False to let WARN pass (exit 0).
    fail_on_warn: bool = True
    aggregation: Aggregation = "p50"
    """How one measurement's samples become one number (jobs/gate/rules.py `aggregate`): `minimum`, `mean`,
    `mean_minus_std` (mean - aggregation_std_multiple x std), `normal_fit` (the mean of the normal fitted
    by maximum likelihood; its std is reported with it), `p50` or `p95` (point estimates; their ratio CIs
    come from the bootstrap)."""
    aggregation_std_multiple: float = 1.0
    """N in the `mean_minus_std` aggregation (mean - N x std, population std of the samples)."""
    sample_filter: SampleFilter = "fences"
    """Filter of one target's samples: `none`, `drop_first` (the first measurement), `running_mean_sigma`
    (once 3 values are kept, drop each value above the kept values' mean + running_filter_sigmas x their
    population std) or `fences` (outlier_method with tukey_k / mad_z). The tail-sensitive mean ratio
    (tail_mean_ratio) is taken on unfiltered samples whatever the filter."""
    running_filter_sigmas: float = 1.0
    """The `running_mean_sigma` filter drops a value above mean + this many population stds of the values
    kept before it."""
    tail_mean_ratio: float = 1.25
    """Tail-sensitive check, never filtered: candidate / baseline mean of the unfiltered samples (the total
    time per call) at or over this ratio is flagged, so a heavier tail under the same median is caught. As
    a wallclock BLOCK at 2t: a mean is noisier than a median; a 10%-of-calls slow mode at 12x moves it 2x."""
    termination_rules: tuple[str, ...] = TERMINATION_RULES
    """Per-target termination rules in the order they are checked; the first that fires stops the target
    and is reported: `normal_overlap`, `probability_for_minimum`, `run_at_most` (max_measurements)."""
    overlap_threshold: float = 0.99
    """`normal_overlap` fires when the overlap coefficient of the normals fitted to the first n-1 and to all
    n measurements is at or over this: one more measurement moved the fitted distribution by under 1% of
    its mass (for equal stds, the mean moved by under 0.025 std)."""
    overlap_after_measurements: int = 10
    """`normal_overlap` is checked only with more than this many measurements."""
    minimum_probability_threshold: float = 0.01
    """`probability_for_minimum` fires when P(next measurement < current minimum), under the normal fitted
    to the measurements, is below this: a new minimum is unlikely."""
    minimum_probability_after_measurements: int = 5
    """`probability_for_minimum` is checked only with more than this many measurements."""
    # Multi-cycle and calibration (issue 12, jobs/gate/selection.py)
    cycles: int = 3
    """Cycles of each scenario (scenario engine); one cycle's report per scenario is selected by the selection
    rule."""
    cycle_order: CycleOrder = "abba"
    """Which side goes first in cycle i (0-based): abba = the baseline when i % 4 is 0 or 3 (AB, BA, BA, AB,
    ...); alternate = AB, BA, ...; baseline_first = AB every cycle."""
    alternate_within_cycle: bool = True
    """Inside a cycle, every odd measurement swaps the targets that would otherwise keep their places (the
    two sides; with an interleaved copy, the candidate and the copy). With the copy always measured right
    after the candidate, identical databases on a server shared with a busy neighbour read x1.13 (the
    candidate against the copy, 1 run of the power benchmark). False: the design's order, one per cycle."""
    selection: CycleSelectionRule = "median"
    """The cycle that stands for a scenario: median (the cycle at (K - 1) // 2 by ascending ratio, the lower
    middle for even K) or best (the lowest-ratio cycle without a regression; regressed only if every cycle
    regressed). Ties: the earlier cycle."""
    calibration: CalibrationMode = "auto"
    """Side asymmetry of two servers: aa = the baseline database measured against a copy of itself on the
    candidate's server (needs --calibration-dsn), probe = a fixed CPU/IO probe timed on each server, auto =
    off on one server, else aa when a calibration copy is given and probe when not; off = none. The
    wallclock verdict is then taken on observed / asymmetry."""
    aa_timing: AaTiming = "interleaved"
    """When calibration = aa measures the asymmetry. interleaved = inside every cycle: each measurement runs
    on the baseline, the candidate and the baseline's copy on the candidate's server (same parameters, the
    order rotated ABBA-wise), so each cycle's asymmetry is measured at the same moments as the cycle it
    corrects and the corrected ratio is the candidate against the copy; before = the design's A/A cycles
    (calibration_cycles of them) before the scenario's cycles (a neighbour whose effect moves between the
    two misleads it: see the benchmark)."""
    calibration_cycles: int = 5
    """Calibration cycles (A/A comparisons or probe timings per server) the asymmetry is estimated from. Its
    CI is a t interval over the cycles: with 3% noise per cycle, 3 cycles give about ±7.5% (t = 4.30 with 2
    degrees of freedom), 5 cycles about ±3.7%."""
    calibration_probe_repeats: int = 3
    """Probe timings per server in one probe calibration cycle, alternating; the cycle keeps each server's
    fastest (a neighbour that comes and goes only adds time; one that stays is in every timing)."""
    calibration_max_half_width: float = 0.10
    """An asymmetry whose CI half-width exceeds this fraction of it (0.10 = ±10%) is reported as unreliable
    (and then handled by calibration_unreliable). Below it the asymmetry's uncertainty is carried into the
    corrected ratio's CI."""
    probe_model_uncertainty: float = 0.5
    """How far the probe's asymmetry may be from a scenario's own (a relative factor: 0.5 = x1.5 either way),
    added to the probe's own uncertainty (on the log scale, as a 95% half-width, in quadrature). The probe
    times CPU and IO work, not the scenario: measured on this host with a busy neighbour beside the
    candidate's server, a CPU-bound scan was x1.74 slower there while the probe read x2.03 (x0.86), and
    short round trips x1.3-x1.8 while it read x0.90. Without it a confident probe hid a true x1.1 and made
    a x1.3 read x1.17. 0 trusts the probe as measured."""
    calibration_unreliable: UnreliableCalibration = "carry"
    """An unreliable asymmetry: carry = applied all the same, its wide uncertainty carried into the corrected
    CI (a noisy pair of servers can then only show a regression larger than its noise); ignore = not
    applied, the raw ratios judged (the side difference can read as a regression). Measured on a server
    slowed by a CPU neighbour: the A/A asymmetry came out ×1.2-×1.8 with CIs of ±41-55%, and ignore BLOCKed
    identical databases at ×2.0."""

    # Scenario suites (issue 12: jobs/gate/scenario.py, measure.py, suite.py): one relative threshold per
    # measurement; a ratio at or over 1 + t is a regression, at or over 1 + 2t a strong regression (BLOCK),
    # at or under 1 / (1 + t) an improvement (reported, never failing).
    wallclock_threshold: float = 0.10
    """Wallclock of the measured part (between the @A and @B markers), client side."""
    memory_threshold: float = 0.20
    """The backend's own memory: the peak of pg_backend_memory_contexts (memory), and its /proc smaps_rollup
    private memory when the server is local (rss)."""
    worker_memory_threshold: float = 0.50
    """Private memory of the backend's parallel workers together (the design's second memory threshold, for
    its worker processes; local servers only). The backend's own memory (memory, rss) has memory_threshold."""
    temp_blocks_threshold: float = 0.50
    """Temp blocks written per execution (pg_stat_statements): sorts and hashes spilling to disk."""
    shared_blocks_threshold: float = 0.50
    """Shared blocks read per execution, from cache or disk (pg_stat_statements shared_blks_hit + read)."""
    wal_bytes_threshold: float = 0.50
    """WAL bytes per execution (pg_stat_statements wal_bytes)."""
    planning_threshold: float = 0.25
    """Planning time per execution (pg_stat_statements with track_planning on; else not measured)."""
    memory_min_increase_bytes: float = 1_048_576.0
    """A memory regression also needs this absolute increase (1 MiB): allocator slack is not a regression."""
    blocks_min_increase: float = 8.0
    """A temp or shared blocks regression also needs this many more blocks per execution."""
    wal_min_increase_bytes: float = 8192.0
    """A WAL regression also needs this many more bytes per execution."""
    planning_min_increase_ms: float = 0.05
    """A planning-time regression also needs this much more per execution."""
    memory_aggregation: MemoryAggregation = "minimum"
    """How the memory readings of one target and cycle become one number: minimum (allocator noise only
    adds), mean or maximum."""
    memory_executions: int = 3
    """Extra untimed executions per scenario, target and cycle that read memory."""
    min_measurements: int = 5
    """Per target and cycle, the CI-based stop rules look only from this many measurements on."""
    max_measurements: int = 60
    """`run_at_most`: a target stops after this many measurements in one cycle."""
    suite_max_seconds: float = 600.0
    """Budget of the whole scenario run, counted from its start (connections, shared sections, calibration
    and every cycle; checked between measurements, so one statement may overrun it by at most
    statement_timeout_ms); scenarios not decided when it is spent are INCONCLUSIVE (exit 4)."""
    verdict_rule: VerdictRule = "bounded"
    """How a scenario's measurement is judged on the cycle the selection rule chose. bounded (the default):
    by its CI (corrected where calibrated): BLOCK when the ratio is at or over 1 + 2t with the CI's lower
    bound at or over 1 + t, WARN when the ratio is at or over 1 + t with the lower bound over 1, PASS only
    when the upper bound is under 1 + t or the increase at the upper bound is under the measurement's
    minimum; otherwise undecided: more measurements, then more cycles (up to max_cycles, within the
    budget), then INCONCLUSIVE with the largest regression the data cannot rule out. design: the design's
    rule exactly: the chosen cycle's thresholds decide and anything not a regression PASSes (a wide CI
    too), targets stop when their rule fires or the CI is decisive, no extra cycles."""
    max_cycles: int = 7
    """Cycles an undecided scenario may run under the bounded verdict rule (each extra cycle runs every
    undecided scenario, the order alternating); never fewer than the cycles setting."""
    stop_when_decided: bool = True
    """Stop the run once its verdict cannot change (a scenario BLOCKed in enough cycles for the selection
    rule): a decisive BLOCK does not wait for unaffected scenarios."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.confidence < 1:
            problems.append(f"confidence must be in (0, 1), got {self.confidence}")
        if self.calls_per_round < 1 or self.warmup_calls < 0 or self.reconnect_warmup_calls < 0:
            problems.append("calls_per_round must be >= 1, warmup_calls and reconnect_warmup_calls >= 0")
        if self.reconnect_every_rounds < 1:
            problems.append(f"reconnect_every_rounds must be >= 1, got {self.reconnect_every_rounds}")
        if self.outlier_method not in ("tukey", "mad", "none"):
            problems.append(f"outlier_method must be tukey, mad or none, got {self.outlier_method!r}")
        if self.bootstrap_resamples < 100:
            problems.append(f"bootstrap_resamples must be >= 100, got {self.bootstrap_resamples}")
        problems += self._rule_problems()
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
        if self.aa_timing not in get_args(AaTiming):
            problems.append(f"aa_timing must be interleaved or before, got {self.aa_timing!r}")
        if self.verdict_rule not in get_args(VerdictRule):
            problems.append(f"verdict_rule must be bounded or design, got {self.verdict_rule!r}")
        if self.max_cycles < 1:
            problems.append(f"max_cycles must be >= 1, got {self.max_cycles}")
        if self.calibration not in ("off", "auto", "aa", "probe"):
            problems.append(f"calibration must be off, auto, aa or probe, got {self.calibration!r}")
        if not self.probe_model_uncertainty >= 0:
            problems.append(f"probe_model_uncertainty must be >= 0, got {self.probe_model_uncertainty}")
        if not self.calibration_max_half_width > 0:
            problems.append(f"calibration_max_half_width must be > 0, got {self.calibration_max_half_width}")
        problems += self._suite_problems()
        if problems:
            raise ValueError("GateConfig: " + "; ".join(problems))

    def _rule_problems(self) -> list[str]:
        problems = []
        for name, value, allowed in (
            ("aggregation", self.aggregation, get_args(Aggregation)),
            ("sample_filter", self.sample_filter, get_args(SampleFilter)),
        ):
            if value not in allowed:
                problems.append(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        unknown = [r for r in self.termination_rules if r not in TERMINATION_RULES]
        if unknown or len(set(self.termination_rules)) != len(self.termination_rules):
            problems.append(
                f"termination_rules must be distinct names from {', '.join(TERMINATION_RULES)}, "
                f"got {list(self.termination_rules)!r}"
            )
        if self.aggregation_std_multiple < 0 or self.running_filter_sigmas < 0:
            problems.append("aggregation_std_multiple and running_filter_sigmas must be >= 0")
        if self.tail_mean_ratio < 1:
            problems.append(f"tail_mean_ratio must be >= 1, got {self.tail_mean_ratio}")
        for name, value in (
            ("overlap_threshold", self.overlap_threshold),
            ("minimum_probability_threshold", self.minimum_probability_threshold),
        ):
            if not 0 < value <= 1:
                problems.append(f"{name} must be in (0, 1], got {value}")
        if self.overlap_after_measurements < 1 or self.minimum_probability_after_measurements < 1:
            problems.append(
                "overlap_after_measurements and minimum_probability_after_measurements must be >= 1"
            )
        return problems

    def _suite_problems(self) -> list[str]:
        problems = []
        for name in (
            "wallclock_threshold", "memory_threshold", "worker_memory_threshold", "temp_blocks_threshold",
            "shared_blocks_threshold", "wal_bytes_threshold", "planning_threshold",
        ):  # fmt: skip
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.memory_aggregation not in get_args(MemoryAggregation):
            problems.append(
                f"memory_aggregation must be minimum, mean or maximum, got {self.memory_aggregation!r}"
            )
        if (
            self.memory_executions < 0
            or self.min_measurements < 2
            or self.max_measurements < self.min_measurements
        ):
            problems.append("need memory_executions >= 0 and 2 <= min_measurements <= max_measurements")
        return problems

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
