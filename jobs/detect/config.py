"""The detector's thresholds (samples, change points, series identity, contention, findings, scope,
the regression rules): stdlib-only, so the config file loader and the CLI import them without numpy or scipy.

Each class is re-exported by the module that uses it (``jobs.detect.config.RegressionConfig`` etc.)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from jobs.detect.work_config import ResourceConfig
from jobs.query.config import IdentityConfig

_EXACT_RANK_LIMIT = 64  # C(64, 32) < 2^63: the exact Mann-Whitney null counts fit int64


@dataclass(frozen=True)
class ChangePointConfig:
    """Thresholds of the detector; defaults chosen on bench_changepoint (precision first)."""

    min_segment: int = 5  # fewest points on either side of a split (>= 2: a within term needs a pair)
    max_p_value: float = 0.01  # significance level of the change point test, after the split correction
    test: Literal["rank", "permutation"] = "rank"  # rank: ~1 location pass; permutation: ~permutations+1
    permutations: int = 199  # permutation test only
    serial_correction: bool = True  # rank test: widen its variance by the serial correlation (trends)
    serial_white_z: float = 2.0  # rank test: a lag-1 correlation below z / sqrt(n) is white noise's spread
    serial_white_max_n: int = 40  # ...applied to series (segments) of at most this many points
    # rank test: a split whose sides (without the sample next to it) do not overlap, with a gap wider than
    # either side's range (log scale on positive series), is a step no serial correlation explains
    serial_exempt_clean_steps: bool = True
    exact_rank_max_n: int = 60  # rank test: exact Mann-Whitney tail for tie-free series of at most this n
    seed: int = 0  # permutation test only; mixed with a hash of each series so results ignore batch makeup
    batch_elements: int = 1 << 17  # values per chunk: small enough for the scatters to stay in cache
    segmentation: Literal["seeded", "binary"] = "seeded"  # segment_change_points: seeded or plain binary
    seeded_decay: float = 0.71  # seeded: interval length of each scale over the previous one (~1/sqrt 2)
    # Not in repr: results do not depend on it, so changing it neither re-runs nor invalidates a search.
    threads: int = field(default=0, repr=False, compare=False)  # threads locating chunks (0: CPUs, at most 4)

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ValueError("threads must be >= 0 (0: the CPUs this process may use, at most 4)")
        if self.min_segment < 2:
            raise ValueError("min_segment must be >= 2: a within-segment term needs at least one pair")
        if not 0.0 < self.max_p_value <= 1.0:
            raise ValueError("max_p_value must be in (0, 1]")
        if self.test not in ("rank", "permutation"):
            raise ValueError(f"unknown test {self.test!r}")
        if self.permutations < 1:
            raise ValueError("permutations must be >= 1")
        if self.serial_white_z < 0 or self.serial_white_max_n < 0:
            raise ValueError("serial_white_z and serial_white_max_n must be >= 0")
        if not 0 <= self.exact_rank_max_n <= _EXACT_RANK_LIMIT:
            raise ValueError(f"exact_rank_max_n must be in [0, {_EXACT_RANK_LIMIT}] (int64 null counts)")
        if self.segmentation not in ("seeded", "binary"):
            raise ValueError(f"unknown segmentation {self.segmentation!r}")
        if not 0.5 <= self.seeded_decay < 1.0:
            raise ValueError("seeded_decay must be in [0.5, 1): larger gaps between scales can miss steps")


@dataclass(frozen=True)
class SampleConfig:
    """Thresholds of the samples job."""

    min_executions: int = 1
    """An interval with fewer calls than this is not a sample (its mean latency is too noisy or undefined)."""
    drop_when_dealloc_grew: bool = False
    """Flagged by default (``evictions`` > 0): on a busy server eviction is constant and would drop all."""
    max_clock_skew_s: float = 2.0
    """An interval whose (server clock - collector clock) offset changed by more than this is dropped
    (``clock_skew``): one of the two clocks was stepped, so the server-clock length cannot be trusted. So
    is one whose (collector clock - the collector host's boot clock) moved by more than this: both clocks
    were stepped together (their offset held), which the boot clock, never stepped, shows.
    2 s sits far above the offset's own noise (half a read's round trip, milliseconds on a LAN, and NTP
    slews at most 0.5 ms/s) and far below a typical 60 s interval, whose mean latency it would distort."""
    frontier_keep: timedelta = timedelta(days=7)
    """Append mode keeps each entry's latest snapshot row (the predecessor of its next sample) until the
    entry has been absent from the snapshots this long: the collector snapshots every entry every time, so
    an absent entry was evicted or reset, and a delta across such a gap is not an interval sample."""
    # Not in repr: the samples do not depend on it, so changing it neither rebuilds nor re-runs anything.
    rebuild_piece_rows: int = field(default=1_000_000, repr=False, compare=False)
    """A rebuild differences an instance whose snapshots have more rows than this in pieces of whole days
    of at most this many rows (a day larger alone), each from the previous piece's frontier as an append
    would: the same samples, in memory that follows the piece instead of the history (500 statements
    over 7 days: 1.9 GiB in pieces of a day, 5.0 GiB at once)."""

    rebuild_ahead: bool = field(default=True, repr=False, compare=False)
    """A whole rebuild differences the next instance on a thread while this one's files are written: the
    same files, with two instances' rows held at once (off within ``[detector.memory] budget_mib``, whose
    estimate counts one). 10 x 144,000 snapshot rows: 1.44 s instead of 1.87 s one at a time on an idle
    2-core machine; with the CPUs already busy it gains little (docs/benchmarks.md, issue 25)."""

    def __post_init__(self) -> None:
        if self.rebuild_piece_rows < 1:
            raise ValueError("rebuild_piece_rows must be >= 1")


@dataclass(frozen=True)
class ContentionConfig:
    """Every threshold of the contention step; reached as ``RegressionConfig.contention``."""

    window_samples: int = 10
    """Samples per side of the moment compared (the nearest ones): short enough that a contention episode
    of a few samples is not diluted by a long quiet window, long enough for a robust median."""
    max_window: timedelta = timedelta(minutes=30)
    """Never look farther than this from the moment (sparse series)."""
    min_samples_per_side: int = 5
    """A series with fewer samples than this on either side is not compared."""
    min_compared_latency_ms: float = 1.0
    """A series whose median latency before the moment is below this is not compared (CPU contention
    barely reaches sub-millisecond queries; see the module docstring). A finding below it is still
    judged: its own ratio is always computed."""
    shift_threshold: float = 0.20
    """A series slowed at the moment when its latency ratio is at least 1 + this (the detector's
    latency_change_threshold)."""
    min_series: int = 4
    """An episode needs at least this many series of the instance compared..."""
    min_shifted_series: int = 3
    """...at least this many of them slowed..."""
    min_shifted_share: float = 0.5
    """...and this share of all series compared slowed."""
    excess_factor: float = 3.0
    """Inside an episode a finding is reported only when its latency ratio / the common ratio is above
    this (or its work per call changed)... CPU contention slows long queries more than short ones (more
    preemptions): on a real server the heaviest light query (26 ms) went ×4.0 while the common shift was
    ×2.45, an excess of 1.64 with no change of its own; a lost index went ×630. On 740 labelled synthetic
    episodes (each series slowed common^U(0.5, 1.5), noise 5-25%;
    tests/integration/detect/test_contention.py), episodes
    reporting a contention-only query: 2.0 → 20, 2.5 → 1, 3.0 → 0; latency-only regressions of ×3-20 on
    top kept: 2.5 → 312 of 318, 3.0 → 306 of 318 (work-changed ones are kept by their work)."""
    spread_factor: float = 2.0
    """...and above ``spread_factor`` x the spread of the other series' log ratios (MAD-based), so an
    episode in which queries slowed unevenly does not pass its most sensitive query off as a regression."""
    same_moment_within: timedelta = timedelta(minutes=2)
    """Unannounced findings of one instance whose change times lie this close (chained) are one moment."""
    attach_within: timedelta = timedelta(minutes=15)
    """A detected finding whose own moment has no episode is judged at the nearest episode of its instance
    whose moment lies this close to its change time: in a contention episode the change point of one noisy
    series often lands minutes off the step the others share (8-16 min seen in bench_contention), and
    judged alone at that moment it looked like a regression of its own. 0 turns this off."""

    load_rule: bool = True
    """Also judge a finding by the instance's load (jobs.detect.load): a latency-only step at a moment when
    other statements brought at least ``min_load_rise`` of execution per second is contention unless its
    slowdown exceeds what that load explains by ``load_excess_factor``. Works with any number of series,
    including one. False: the peer rule alone (issue 8)."""
    min_load_rise: float = 0.5
    """Seconds of execution per wall-clock second the other statements must add (half a busy backend)."""
    load_window_samples: int = 20
    """Snapshot intervals of the instance on each side of the moment over which load is measured (capped
    by ``max_window``)."""
    load_excess_factor: float = 1.5
    """A finding inside a load episode is reported when its latency ratio / the explained ratio is above
    this (the explained ratio is the processor-sharing bound; queries that are not wholly CPU-bound slow
    less, and a query slowing 1.5× more than the bound has a cause of its own)."""
    peers_outweigh_load: bool = False
    """Whether peers that slowed clearly less may still make a finding the load explains a regression of its
    own (``peer_latency_share`` says which peers). False: the load decides. On a real server pinned to one
    CPU with eight CPU-bound neighbours, an unchanged md5 aggregate of 4 ms went ×2.2-3.5 in every run
    while the longer queries beside it mostly went ×0.6-1.8, within the ×5.5-6.6 the load explained, and a
    9 ms self-join building a hash table went up to ×6.5: contention stretches some queries far more than
    others of the same length, and judged against such peers they were reported as regressions of their
    own (CI: excesses of 3.69 and 4.34, with ``excess_factor`` 3). The cost: a query whose own
    latency-only step coincides with a load that explains it is counted in the episode (its
    ``max_ratio``), not reported. True: the rule of issue 24."""
    peer_latency_share: float = 0.5
    """With ``peers_outweigh_load``: peers outweigh the load only when at least ``min_series`` - 1
    compared series whose median latency before the moment is at least this share of the finding's own say
    it slowed clearly more than them. CPU contention stretches long statements most (the scheduler runs a
    briefly woken backend at once; a statement longer than its slice waits behind every runnable one): on
    a real server pinned to one CPU with eight CPU-bound neighbours, the mix's longest query (15 ms) went
    ×3.0-3.4 while the shorter ones (2-10 ms) went ×0.5-2.0, within the ×5 the load explained; judged
    against the short ones, it was reported as a regression of its own. 0 lets every compared series
    outweigh the load."""
    cores_when_unknown: float = 1.0
    """CPUs assumed for an instance whose fleet file gives no ``cores``: 1 makes the load explain the most
    (an unknown size never turns contention into a regression finding); set ``cores`` per instance."""
    min_source_load: float = 0.05
    """A statement is named among those that brought the load when its load rose by at least this (s/s)..."""
    load_source_share: float = 0.1
    """...and by at least this share of the instance's total rise..."""
    max_load_sources: int = 3
    """...at most this many, largest first."""

    def __post_init__(self) -> None:
        if self.load_window_samples < 1:
            raise ValueError("contention: load_window_samples must be >= 1")
        if not 0.0 <= self.peer_latency_share <= 1.0:
            raise ValueError("contention: peer_latency_share must be in [0, 1]")
        if self.min_load_rise <= 0 or self.load_excess_factor < 1.0 or self.cores_when_unknown <= 0:
            raise ValueError(
                "contention: need min_load_rise > 0, load_excess_factor >= 1, cores_when_unknown > 0"
            )
        if self.min_source_load < 0 or not 0.0 <= self.load_source_share <= 1.0 or self.max_load_sources < 1:
            raise ValueError(
                "contention: need min_source_load >= 0, load_source_share in [0, 1], max_load_sources >= 1"
            )
        if self.window_samples < self.min_samples_per_side or self.min_samples_per_side < 1:
            raise ValueError("contention: need window_samples >= min_samples_per_side >= 1")
        if self.min_series < 2 or self.min_shifted_series < 1:
            raise ValueError("contention: need min_series >= 2 and min_shifted_series >= 1")
        if not 0.0 < self.min_shifted_share <= 1.0:
            raise ValueError("contention: min_shifted_share must be in (0, 1]")
        if self.shift_threshold <= 0 or self.excess_factor <= 1.0 or self.spread_factor < 0:
            raise ValueError("contention: need shift_threshold > 0, excess_factor > 1, spread_factor >= 0")
        if self.min_compared_latency_ms < 0:
            raise ValueError("contention: min_compared_latency_ms must be >= 0")
        if self.max_window <= timedelta(0) or self.same_moment_within < timedelta(0):
            raise ValueError("contention: max_window must be positive, same_moment_within >= 0")
        if self.attach_within < timedelta(0):
            raise ValueError("contention: attach_within must be >= 0")


@dataclass(frozen=True)
class FindingsConfig:
    onset_tolerance_samples: int = 3
    """A detected change within this many samples of a finding's onset or latest change time is that
    finding (counted on the instance's samples, so one long sample of a slow snapshot counts once; where
    the run's samples do not reach, this many median intervals): a change point moving by a few samples
    between runs (as the post window fills) keeps its finding and its alert."""
    default_sample_interval: timedelta = timedelta(minutes=1)
    """Sample interval assumed for an instance with no samples in the run (tolerance and slack)."""
    recovery_samples: int = 5
    """Recovery re-check: at least this many samples after the series last stood at or above the midpoint
    of the finding's before and after levels, whose median is back at the old level: what remains of the
    step would not be reported by the detector (below RegressionConfig.latency_change_threshold of the
    before level, or immaterial by its min_added_load_ms_per_s / min_latency_increase_ms rule). The median,
    not the mean: on a real server one slow interval among 25 after an index came back (0.76 ms among
    0.03-0.06 ms) lifted the mean to 1.7x the old level while every other interval was back; and the
    materiality rule because a 0.09 ms query came back at 0.11 ms (+25%, 0.9 ms of work per second) after
    a 24 ms episode: back, by any measure a user has."""

    def __post_init__(self) -> None:
        if self.onset_tolerance_samples < 0:
            raise ValueError("findings.onset_tolerance_samples must be >= 0")
        if self.recovery_samples < 1:
            raise ValueError("findings.recovery_samples must be >= 1")
        if self.default_sample_interval <= timedelta(0):
            raise ValueError("findings.default_sample_interval must be positive")


@dataclass(frozen=True)
class ScopeConfig:
    """Thresholds of the incremental scope."""

    level_window: timedelta = timedelta(hours=1)
    """A series' level for the unannounced pre-filter: its calls-weighted mean latency over this long
    before the previous watermark (bounded: a run reads at most this much old data for the pre-filter)."""


@dataclass(frozen=True)
class MemoryConfig:
    """How much memory a full detection run may take (jobs.pipeline.budgeted)."""

    budget_mib: int = 0
    """A full run (``--full``, the first run, a settings change) whose estimated memory exceeds this many
    MiB analyses the instances in chunks that each fit, each pass in a fresh process; findings and
    analysis rows are those of one pass. Each instance stays whole (its contention analysis needs all its
    series), so one instance larger than the budget is a chunk of its own. 0: always one pass."""
    base_mib: int = 700
    """The estimate's fixed part: one pass's memory over no samples (interpreter, libraries, buffers)."""
    sample_bytes: int = 660
    """The estimate's part per sample row a pass analyses (all of its chunk's instances'); measured with
    ``bench_detection`` (docs/benchmarks.md, "Detection at the speed of its input")."""
    rebuild_bytes: int = 1700
    """The estimate's part per snapshot row of the largest instance (or piece of days: ``[samples]
    rebuild_piece_rows``) whose samples a pass rebuilds (the samples job differences one instance at a
    time); not counted when another job keeps the samples."""
    coordinator_mib: int = 600
    """The share of the budget kept for the process that runs the chunks' passes: it holds every chunk's
    analysis rows (about 500 MiB at 10,000 series over one day)."""
    return_freed_after_ms: int = 100
    """A pass's allocator (polars' jemalloc) gives memory it freed back to the system after this many
    milliseconds (its ``dirty_decay_ms``; ``muzzy_decay_ms`` 0), so the pass's peak is about what its steps
    hold at once, not what each once touched. 0: on every free, a few percent lower peaks at a quarter more
    time (10,000 series x 1 day in chunks of one instance: passes 941 against 970-1,087 MiB, 71 against
    57 s; docs/benchmarks.md)."""
    pass_huge_pages: bool = True
    """A pass's allocator asks for transparent huge pages (jemalloc's ``thp:always``) where the system
    allows them on request (``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` or
    ``always``): a pass that gives freed memory back soon faults it in again, one 2 MiB page at a time
    instead of 512 small ones (10,000 series x 1 day in chunks of one instance, five runs each: median
    65.4 -> 54.8 s, passes' peaks a few percent higher; docs/benchmarks.md). The one-pass run does not
    ask: there it was slower (32.7 -> 49.7 s)."""

    def __post_init__(self) -> None:
        for name in (
            "budget_mib",
            "base_mib",
            "sample_bytes",
            "rebuild_bytes",
            "coordinator_mib",
            "return_freed_after_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass(frozen=True)
class RegressionConfig:
    """Every threshold of the detector; defaults are the issue's."""

    window_before: timedelta = timedelta(minutes=30)
    """How much history before a deploy is compared."""
    window_after: timedelta = timedelta(minutes=30)
    """How much history after a deploy is compared."""
    latency_change_threshold: float = 0.20
    """Stage 0: a relative change of the naive pre/post means below this is rejected without more work,
    unless the ``local_change_samples`` samples on each side of the deploy changed by this much."""
    local_change_samples: int = 5
    """Stage 0: samples next to the deploy on each side whose means are compared too: an earlier, slower
    episode in the window (an index dropped, restored, dropped again at this deploy) can lift the naive
    pre-mean above the new level, and the deploy's own step must still reach stage 1. 0 = issue 3's
    stage 0 exactly (naive pre/post means only)."""
    changepoint_tolerance: float = 0.20
    """Stage 1: how far the change point may lie from the deploy, as a fraction of the analysis window..."""
    changepoint_tolerance_floor: timedelta = timedelta(minutes=2)
    """...but never less than this."""
    attribution_slack_samples: int = 1
    """Attribution: a deploy up to this many sample intervals after a change point still counts as "at or
    before" it (jobs.detect.attribution.attribute_to_deploys): detected_change_at is the start of the first
    new-regime interval, so a deploy inside that interval explains it, and at an interval boundary the
    change point lands one sample early about as often as on time."""
    p_value_threshold: float = 0.05
    """Stage 2: Welch's p below this is a detection."""
    settle_step_boundary: bool = True
    """Both analyses: where a step's two levels meet is settled (jobs.detect.segments.settle_boundary) so that
    the levels and the onset do not move between runs: old-regime samples a change point found early
    (fewer than min_segment new samples yet) left in "after" move back to "before", and the sample whose
    interval holds the step (its mean mixes both regimes) is in neither level; the onset is the start of
    the first wholly new interval (issue 21: "0.148 ms → 37.2 ms", then "2.259 ms → 51.5 ms" two runs
    later). False: the levels are the change point's segments as found (before issue 21)."""
    pre_step_levels: bool = True
    """Latency, both analyses and the large-step rule: the level before a step is the mean of the samples
    since the last change point found on the samples before the step alone (jobs.detect.segments.
    pre_step_sides), so it does not move when later samples, or the run's other series, change which
    earlier change points the whole window's search finds (the soak: 0.041 ms, then 0.067 ms before one
    17.7 ms step). The Welch test reads the same samples. False: from the whole window's previous change
    point (the segment tests), the large-step rule's reference (before this setting)."""
    mixed_min_fraction: float = 0.05
    """A sample is near a level (medians of each side, on log latency) within this fraction of the gap
    between the two levels...; one between the levels and near neither mixes both regimes."""
    mixed_noise_z: float = 3.0
    """...or within this many standard deviations of that side's noise (robust: 1.4826 MAD, at least
    1.2533 x the mean absolute deviation), whichever is larger: a small, noisy step's samples are near
    both levels, so nothing moves (jobs.detect.segments.settle_boundary)."""
    min_samples_per_side: int = 5
    """Fewer samples than this on either side of the deploy is insufficient data (>= min_segment)."""
    min_added_load_ms_per_s: float = 10.0
    """Materiality: a slowdown must add at least this much execution time per wall-clock second after the
    change (10 ms/s = 1% of one core)...; CPU contention from one bad query makes every tiny query on the
    host measurably slower (0.01 ms -> 0.03 ms), which is true, significant and not worth an alert."""
    min_latency_increase_ms: float = 50.0
    """...unless each call slowed by at least this much (a rare report query going 2 s -> 20 s matters)."""
    search_every_series: bool = False
    """Unannounced analyses: also run the change-point search on series whose range cannot hold a step the
    analysis could report (latency: below ``latency_change_threshold`` or immaterial, reason
    ``no_reportable_step``; work per call: below the resource ratio or floor, ``no_step_above_gates``).
    On: their rows name the step found and why it fell short, at the cost of the search (the detection
    run's largest step on a fleet of steady statements). The search's Benjamini-Hochberg family is then
    every series, as before issue 25: on the benchmarks' lakes the findings were the same either way,
    but a cut of a searched series can move (docs/benchmarks.md, "Detection at the speed of its input")."""
    unannounced_pick: Literal["largest_load", "smallest_p"] = "largest_load"
    """Unannounced analysis: which detected step of a series it reports (one per series): the one that
    adds the most load (``added_load_ms_per_s``), or the most significant (the rule before). A x700 index
    drop beside a x1.3 shift of its host's load: the shift's Welch p can be the smaller (tight noise on
    both sides), and the series' regression read "0.036 -> 0.047 ms"."""
    require_ongoing: bool = True
    """Unannounced analysis: the series' latest segment must still be above the level before the step;
    a step that came back down is a transient episode (lock contention, a backup), not a regression."""
    recovered_when_remainder_immaterial: bool = True
    """...and "above" means by a step the analysis would report: what is left (latest segment over the
    level before) past ``latency_change_threshold`` and material (``min_added_load_ms_per_s`` /
    ``min_latency_increase_ms``), as the findings' recovery re-check reads it. A x80 lock bump on a
    0.015 ms UPDATE that ended, on a host whose load later left the UPDATE x1.4, is over (the demo's
    beta, under load); false: only the threshold, the rule before."""
    changepoint: ChangePointConfig = field(default_factory=lambda: ChangePointConfig(serial_correction=False))
    """Stage 1 change point test. Without the serial correction: real latency drifts within a regime, and
    the correction left 20-vs-20-sample steps of 300x at a deploy insignificant (p 0.01-0.07) on real
    servers; the deploy prior, the tolerance and stages 0 and 2 guard precision here instead."""
    unannounced_changepoint: ChangePointConfig = field(default_factory=ChangePointConfig)
    """Change point test of the unannounced analysis: no deploy prior, so trends and walks are the main
    false alarm and the module's serially corrected default applies."""
    deploy_max_change_points: int = 5
    """Deploy analysis: change points per window at most (hierarchical segmentation; the one nearest the
    deploy is analysed). Five covers a drop, a restore and a re-drop inside one window with room to spare;
    each further split needs 2 * min_segment samples, so a 60-minute window of 1-minute samples holds
    at most 5 anyway."""
    history: timedelta = timedelta(days=7)
    """Unannounced analysis: history analysed, counted back from the latest sample of the input."""
    large_step_ratio: float = 2.0
    """Unannounced analysis, evidence that grows with the effect (jobs.detect.large_steps): a step whose
    newest 2 to large_step_max_new_samples samples are each above every sample of the reference before
    them and above this multiple of its median is confirmed without waiting for min_segment samples.
    0: off."""
    large_step_reference_samples: int = 60
    """...the reference: at most this many samples right before them (an hour of one-minute samples)..."""
    large_step_min_reference: int = 20
    """...and at least this many (a shorter history waits for the segment tests)..."""
    large_step_max_new_samples: int = 15
    """...the newest 2 to this many samples (at least min_segment - 1; min_segment - 1: the rule before,
    which left the segment tests alone from min_segment new samples on). The rank statement is exact for any
    count, and the segment tests can miss a huge step for a while: a x430 step after a small earlier level
    change went unreported by first runs with 5 to 13 new samples (the soak; docs/detect.md)..."""
    large_step_max_p: float = 1e-4
    """...and the exact rank p-value 1 / C(m + k, k) must be at most this (besides the fleet's
    Benjamini-Hochberg step it joins): with 60 reference samples 3 new ones give 2.5e-5, 2 give 5.3e-4
    (too weak: a per-minute detection looks at every series every minute, and at 1e-3 two consecutive
    spikes fired on 36 of 501 unchanged series of the change-point benchmark; at 1e-4, on none)."""
    max_change_points: int = 5
    """Unannounced analysis: change points per series at most."""
    fdr_q: float = 0.05
    """Unannounced analysis: Benjamini-Hochberg false discovery rate across all candidates of the fleet."""
    resource: ResourceConfig = field(default_factory=ResourceConfig)
    """Regressions of work (jobs.detect.work): ratio threshold and absolute floors per call."""
    contention: ContentionConfig = field(default_factory=ContentionConfig)
    """Contention vs regression (jobs.detect.contention): when the instance slowed as a whole."""
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    """Which samples make one series (jobs.query.identity): users split or merged, how much two
    queryids of one fingerprint may overlap and still be one query's succession."""

    def tolerance(self) -> timedelta:
        window = self.window_before + self.window_after
        return max(window * self.changepoint_tolerance, self.changepoint_tolerance_floor)

    def __post_init__(self) -> None:
        if self.window_before <= timedelta(0) or self.window_after <= timedelta(0):
            raise ValueError("window_before and window_after must be positive")
        if self.min_samples_per_side < self.changepoint.min_segment:
            raise ValueError("min_samples_per_side must be >= changepoint.min_segment")
        if self.local_change_samples < 0:
            raise ValueError("local_change_samples must be >= 0 (0: naive pre/post means only)")
        if self.attribution_slack_samples < 0:
            raise ValueError("attribution_slack_samples must be >= 0")
        if not 0.0 <= self.mixed_min_fraction < 1.0 or self.mixed_noise_z < 0:
            raise ValueError("mixed_min_fraction must be in [0, 1) and mixed_noise_z >= 0")
        if self.deploy_max_change_points < 1:
            raise ValueError("deploy_max_change_points must be >= 1")
        if self.unannounced_pick not in ("largest_load", "smallest_p"):
            raise ValueError(
                f"unknown unannounced_pick {self.unannounced_pick!r} (largest_load or smallest_p)"
            )
        if not (self.large_step_ratio == 0 or self.large_step_ratio > 1):
            raise ValueError("large_step_ratio must be 0 (off) or > 1")
        if not 2 <= self.large_step_min_reference <= self.large_step_reference_samples:
            raise ValueError("need 2 <= large_step_min_reference <= large_step_reference_samples")
        if self.large_step_max_new_samples < self.unannounced_changepoint.min_segment - 1:
            raise ValueError("large_step_max_new_samples must be >= unannounced min_segment - 1")
        if not 0.0 < self.large_step_max_p <= 1.0:
            raise ValueError("large_step_max_p must be in (0, 1]")
        if not isinstance(self.search_every_series, bool):
            raise ValueError("search_every_series must be true or false")
        if self.min_added_load_ms_per_s < 0 or self.min_latency_increase_ms < 0:
            raise ValueError("min_added_load_ms_per_s and min_latency_increase_ms must be >= 0")
        for name in ("changepoint_tolerance", "p_value_threshold", "fdr_q"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1]")


@dataclass(frozen=True)
class PileupConfig:
    """[pileups]: when statements running now are a pile-up, and how far back episodes are read."""

    enabled: bool = True
    """Check the latest snapshots for pile-ups when alerts are sent (needs [collector] activity)."""
    min_backends: int = 3
    """Backends of one query id (or waiting on a lock) that make a pile-up: one slow session is not one."""
    min_seconds: float = 10.0
    """...running (or waiting) at least this long: shorter waits come and go at every checkpoint."""
    usual_factor: float = 10.0
    """...and at least this many times the query's usual latency (its mean in the lake's samples): a
    report query that always runs a minute is not a pile-up at a minute."""
    lookback: timedelta = timedelta(hours=6)
    """Snapshots read back from now: an episode longer than this is seen from its start within it (a new
    id, alerted again)."""
    usual_days: int = 7
    """Days of samples its usual latency is taken from."""

    def __post_init__(self) -> None:
        if self.min_backends < 1:
            raise ValueError("[pileups] min_backends must be >= 1")
        if self.lookback <= timedelta(0):
            raise ValueError("[pileups] lookback must be > 0")
