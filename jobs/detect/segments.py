"""The statistical steps of the detector: Welch's t-test on the segments around a change point, the
segments' boundaries and levels, consecutive-segment tests, recovery after a step."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import polars as pl
from scipy import stats

from jobs.detect.changepoint import segment_change_points
from jobs.detect.changepoint_memo import ChangePointMemo, FoundCuts, memo_key
from jobs.detect.config import ChangePointConfig, RegressionConfig

# ---------------------------------------------------------------------------------------------------------
# Statistics on many series at once


@dataclass(frozen=True)
class WelchResult:
    """Per test: segment means, counts, Welch's t and two-sided p (ddof = 1, unequal variances)."""

    before_mean: np.ndarray
    after_mean: np.ndarray
    before_count: np.ndarray
    after_count: np.ndarray
    t: np.ndarray
    p: np.ndarray


def piece_statistics(values: np.ndarray, piece: np.ndarray, pieces: int) -> tuple[np.ndarray, ...]:
    """Count, mean and sum of squared deviations per piece id, two-pass (precise for tiny variances)."""
    count = np.bincount(piece, minlength=pieces).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(piece, weights=values, minlength=pieces) / count
    deviation = values - mean[piece]
    squares = np.bincount(piece, weights=deviation * deviation, minlength=pieces)
    return count, mean, squares


def calls_per_second(series: pl.DataFrame, piece: np.ndarray, pieces: int) -> np.ndarray:
    """Calls per wall-clock second of each piece (for the added load of a slowdown)."""
    calls = np.bincount(piece, weights=series["calls"].to_numpy().astype(np.float64), minlength=pieces)
    seconds = np.bincount(piece, weights=series["interval_seconds"].to_numpy(), minlength=pieces)
    with np.errstate(invalid="ignore", divide="ignore"):
        return calls / seconds


def immaterial(
    before_ms: np.ndarray, after_ms: np.ndarray, after_rate: np.ndarray, config: RegressionConfig
) -> np.ndarray:
    """True where a slowdown adds too little load and too little latency per call to be worth an alert."""
    increase = after_ms - before_ms
    return (increase * after_rate < config.min_added_load_ms_per_s) & (
        increase < config.min_latency_increase_ms
    )


def welch_tests(
    count_a: np.ndarray,
    mean_a: np.ndarray,
    squares_a: np.ndarray,
    count_b: np.ndarray,
    mean_b: np.ndarray,
    squares_b: np.ndarray,
) -> WelchResult:
    """Welch's t-test of b against a for every pair of pieces; a zero-variance pair gets p = 0 or 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        std_a = np.sqrt(squares_a / (count_a - 1))
        std_b = np.sqrt(squares_b / (count_b - 1))
        t, p = stats.ttest_ind_from_stats(mean_b, std_b, count_b, mean_a, std_a, count_a, equal_var=False)
    t = np.asarray(t, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    degenerate = (squares_a + squares_b) == 0
    p = np.where(degenerate, np.where(mean_a == mean_b, 1.0, 0.0), p)
    t = np.where(degenerate, np.where(mean_a == mean_b, 0.0, np.sign(mean_b - mean_a) * np.inf), t)
    return WelchResult(mean_a, mean_b, count_a.astype(np.int64), count_b.astype(np.int64), t, p)


def group_offsets(group_sizes: np.ndarray) -> np.ndarray:
    offsets = np.zeros(group_sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(group_sizes, out=offsets[1:])
    return offsets


def split_values(values: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [values[offsets[i] : offsets[i + 1]] for i in range(offsets.shape[0] - 1)]


def group_extremes(values: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group of ``sizes`` consecutive values (every size > 0): its minimum and maximum."""
    if sizes.shape[0] == 0:
        return np.zeros(0), np.zeros(0)
    starts = group_offsets(sizes)[:-1]
    return np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)


def only_searched(
    series: pl.DataFrame, values: np.ndarray, sizes: np.ndarray, searched: np.ndarray
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, pl.DataFrame]:
    """The rows, values and sizes of the groups an unannounced search runs on (``searched``: their
    indices, in order, so a step's group in the search is ``searched[g]``), and (group, _searched) naming
    them, for the rows of the groups left out to say so."""
    if searched.shape[0] < sizes.shape[0]:
        kept = np.zeros(sizes.shape[0], dtype=bool)
        kept[searched] = True
        rows = np.repeat(kept, sizes)
        series, values, sizes = series.filter(pl.Series(rows)), values[rows], sizes[kept]
    return series, values, sizes, searched_flags(searched)


def searched_flags(searched: np.ndarray) -> pl.DataFrame:
    """(group, _searched) of the searched groups: the rows of the groups left out say so."""
    return pl.DataFrame(
        {"group": searched.astype(np.int64), "_searched": np.ones(searched.shape[0], dtype=bool)},
        schema={"group": pl.Int64, "_searched": pl.Boolean},
    )


@dataclass(frozen=True)
class SegmentPair:
    """The samples (indices into one series) Welch compares around one change point."""

    before: np.ndarray
    after: np.ndarray
    transition: int | None
    """The sample whose interval straddles the deploy at the change point: in neither mean."""


def past_neighbour(cut: int) -> int:
    """Where a segment that begins at change point ``cut`` begins its level: one past it when there is one
    (``cut`` > 0; the sample at a change point whose time inside its interval is unknown may mix the two
    regimes), 0 at the series' start."""
    return cut + 1 if cut > 0 else 0


def segments_around(
    cut: int,
    previous_cut: int,
    next_cut: int,
    starts_us: np.ndarray,
    ends_us: np.ndarray,
    deployed_us: int,
) -> SegmentPair:
    """Before = [previous_cut, cut), after = [cut, next_cut), each without the samples of a transition.

    The only change time known below sample resolution is the deploy's: when the interval of one of the
    two samples adjacent to the cut has interval_start < deployed_at < interval_end, that sample mixes
    both regimes and is excluded (whichever side E-divisive put it on). At a neighbouring change point
    (previous_cut > 0, next_cut < size) the change time inside its intervals is unknown, so the one
    sample of this segment adjacent to it (previous_cut, resp. next_cut - 1) is excluded: the mixed
    sample there is either that one or one outside the segment.
    """
    transition = None
    for j in (cut - 1, cut):
        if 0 <= j < starts_us.shape[0] and starts_us[j] < deployed_us < ends_us[j]:
            transition = j
    size = starts_us.shape[0]
    before = np.arange(past_neighbour(previous_cut), cut)
    after = np.arange(cut, next_cut - (1 if next_cut < size else 0))
    if transition is not None:
        before = before[before != transition]
        after = after[after != transition]
    return SegmentPair(before=before, after=after, transition=transition)


MAD_TO_SD = 1.4826  # a normal distribution's standard deviation over its median absolute deviation
MEAN_DEVIATION_TO_SD = 1.2533  # ... over its mean absolute deviation (sqrt(pi / 2))


@dataclass(frozen=True)
class Boundary:
    """Where one step's two levels meet, settled (``settle_boundary``): the samples of each level."""

    before: np.ndarray
    after: np.ndarray
    mixed: int | None
    """The sample whose interval holds the step (its mean mixes both regimes): in neither level."""
    first_new: int
    """The first sample wholly of the new regime: the onset is its interval's start."""


def _side_levels(
    x: np.ndarray, before: np.ndarray, after: np.ndarray, cut: int
) -> tuple[list[float], list[float]] | None:
    """(level, noise) of the before and after sides without the two samples at the cut: the median, and
    the larger of 1.4826 x the MAD and 1.2533 x the mean absolute deviation (the MAD alone is 0 on
    discrete values: blocks per call alternating 50, 100). None when a side has fewer than 2 left."""
    levels, noises = [], []
    for core in (before[before != cut - 1], after[after != cut]):
        if core.shape[0] < 2:
            return None
        level = float(np.median(x[core]))
        deviation = np.abs(x[core] - level)
        levels.append(level)
        noises.append(
            max(MAD_TO_SD * float(np.median(deviation)), MEAN_DEVIATION_TO_SD * float(deviation.mean()))
        )
    return levels, noises


def settle_boundary(
    values: np.ndarray, before: np.ndarray, after: np.ndarray, cut: int, config: RegressionConfig
) -> Boundary:
    """The two levels of a step at change point ``cut`` (``before``/``after``: sorted index arrays into
    ``values``), settled so that they and the onset do not depend on which run found the step.

    Why: a change point found while the new regime has fewer than ``min_segment`` samples cannot lie
    nearer the series' end than that, so it lands early with old samples in "after"; and a step inside an
    interval makes that interval's mean a mix of both regimes, which E-divisive puts on either side. One
    more interval moves both (issue 21: "0.148 ms → 37.2 ms", then "2.259 ms → 51.5 ms" two runs later).
    On log values (when all are positive: latency noise is multiplicative), with each side's level and
    noise from ``_side_levels``, a sample is *near* a level within ``mixed_noise_z`` x that side's noise
    or ``mixed_min_fraction`` of the gap between the levels, whichever is larger. First the cut moves while
    the sample at it is near the other side's level and not near its own (at least 3 samples stay on
    each side); then the sample at the cut (``cut - 1`` or ``cut``) that lies between the levels and near
    neither is the mixed one: in neither level, and the new regime begins after it. A small, noisy step
    (levels within each other's noise) moves nothing. Deterministic; ``settle_step_boundary`` off: as given.
    """
    if not config.settle_step_boundary:
        return Boundary(before, after, None, cut)
    x = values
    sides = np.concatenate([before, after])
    if np.all(values[sides] > 0):
        x = np.zeros(values.shape[0])
        x[sides] = np.log(values[sides])

    def near(value: float, side: int, levels: list[float], noises: list[float]) -> bool:
        gap = abs(levels[1] - levels[0])
        return abs(value - levels[side]) <= max(
            config.mixed_noise_z * noises[side], config.mixed_min_fraction * gap
        )

    for _ in range(sides.shape[0]):
        found = _side_levels(x, before, after, cut)
        if found is None:
            return Boundary(before, after, None, cut)
        levels, noises = found
        if levels[0] == levels[1]:
            return Boundary(before, after, None, cut)

        def belongs(j: int, side: int, levels: list[float] = levels, noises: list[float] = noises) -> bool:
            """Sample j is near ``side``'s level and not near the other's."""
            return near(float(x[j]), side, levels, noises) and not near(float(x[j]), 1 - side, levels, noises)

        if after.shape[0] > 3 and np.any(after == cut) and belongs(cut, 0):
            before, after, cut = np.append(before, cut), after[after != cut], cut + 1
        elif before.shape[0] > 3 and np.any(before == cut - 1) and belongs(cut - 1, 1):
            before, after, cut = before[before != cut - 1], np.insert(after, 0, cut - 1), cut - 1
        else:
            break
    low, high = sorted(levels)
    mixed: list[tuple[float, int]] = []
    for j, side in ((cut - 1, before), (cut, after)):
        value = float(x[j]) if 0 <= j < x.shape[0] else np.nan
        if (
            np.any(side == j)
            and low < value < high
            and not near(value, 0, levels, noises)
            and not near(value, 1, levels, noises)
        ):
            mixed.append((min(abs(value - levels[0]), abs(value - levels[1])), -j))
    if not mixed:
        return Boundary(before, after, None, cut)
    chosen = -max(mixed)[1]  # the one farther from both levels (ties: the earlier)
    return Boundary(before[before != chosen], after[after != chosen], chosen, chosen + 1)


@dataclass(frozen=True)
class PreStepSides:
    """Per step: its before side as found on the samples before it alone (``pre_step_sides``)."""

    start: np.ndarray
    """First index of the before side in its series; the side is [start, end)."""
    end: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    squares: np.ndarray
    """Sum of squared deviations from the mean (what ``welch_tests`` takes)."""


def pre_step_sides(
    values: np.ndarray,
    offsets: np.ndarray,
    groups: np.ndarray,
    first_new: np.ndarray,
    excluded: tuple[np.ndarray, ...],
    changepoint: ChangePointConfig,
    max_change_points: int,
) -> PreStepSides:
    """The before side of each step (series ``groups[i]``, first new-regime sample ``first_new[i]``): its
    samples up to the first one in neither level (``excluded``: per step the mixed or the straddling
    sample, -1 for none), else up to the first new one, from the last change point found in that prefix on
    its samples alone (``past_neighbour``), or from 0 when there is none.

    Why: the segment before a step began at the previous change point of the whole analysed window, and
    which earlier change points a search finds depends on the samples after the step (the seeded intervals
    are laid over the whole series) and, with the fleet-wide FDR, on the run's other series. So "the level
    before" of one finding moved between runs though its samples had not (the soak: 0.041 ms, then
    0.067 ms before the same 17.7 ms step, the large-step rule's reference and the segment tests taking
    turns). Found on the samples before the step, each series on its own (``max_p_value``, no batch FDR),
    it is the same in every run that places the step at the same sample. Vectorized: one batched search
    over the distinct (series, end) prefixes.
    """
    groups = np.asarray(groups, dtype=np.int64)
    ends = np.asarray(first_new, dtype=np.int64)
    for sample in excluded:
        ends = np.where((sample >= 0) & (sample < ends), sample, ends)
    start = np.zeros(groups.shape[0], dtype=np.int64)
    if groups.shape[0]:
        keys = np.stack([groups, ends], axis=1)
        distinct, back = np.unique(keys, axis=0, return_inverse=True)
        prefixes = [values[offsets[g] : offsets[g] + e] for g, e in distinct]
        found = segment_change_points(prefixes, changepoint, max_change_points=max_change_points)
        begins = np.array(
            [
                past_neighbour(max((int(p.index) for p in points if p.index is not None), default=0))
                for points in found
            ],
            dtype=np.int64,
        )
        start = begins[np.asarray(back).reshape(-1)]
    lengths = np.maximum(ends - start, 0)
    step = np.repeat(np.arange(groups.shape[0]), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(group_offsets(lengths)[:-1], lengths)
    at = offsets[groups][step] + start[step] + within
    count, mean, squares = piece_statistics(values[at], step, groups.shape[0])
    return PreStepSides(start=start, end=ends, count=count, mean=mean, squares=squares)


def pre_step_welch(
    values: np.ndarray,
    steps: SegmentSteps,
    selected: np.ndarray,
    changepoint: ChangePointConfig,
    max_change_points: int,
) -> WelchResult:
    """``steps.welch`` with the ``selected`` candidates' before sides found on the samples before each
    step alone (``pre_step_sides``; the side ends before the mixed sample, else at the first new one)."""
    chosen = np.flatnonzero(selected)
    welch = steps.welch
    if chosen.size == 0:
        return welch
    sides = pre_step_sides(
        values,
        steps.offsets,
        steps.group[chosen],
        steps.first_new[chosen],
        (steps.mixed[chosen],),
        changepoint,
        max_change_points,
    )
    after = steps.after_piece[chosen]
    retested = welch_tests(
        sides.count, sides.mean, sides.squares, steps.count[after], steps.mean[after], steps.squares[after]
    )
    fields = {}
    for name in ("before_mean", "after_mean", "before_count", "after_count", "t", "p"):
        column = getattr(welch, name).copy()
        column[chosen] = getattr(retested, name)
        fields[name] = column
    return WelchResult(**fields)


def recovery_after_step(
    values: np.ndarray,
    offsets: np.ndarray,
    later: dict[int, list[int]],
    before_mean: np.ndarray,
    latency_change_threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per series: (index of the first later change point after which the level is back within the
    latency threshold of the level before the step, or -1; the mean after the window's last change
    point, NaN when the chosen one is the last). A finding that came back down is still a finding (it
    happened at that deploy), but it is shown as recovered with both levels instead of an "after" mean
    that drifts with how much of the recovery a run's window holds."""
    recovered = np.full(offsets.shape[0] - 1, -1, dtype=np.int64)
    latest = np.full(offsets.shape[0] - 1, np.nan)
    for g, cuts in later.items():
        if not cuts:
            continue
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        bounds = [*cuts, hi - lo]
        levels = [float(values[lo + a : lo + b].mean()) for a, b in pairwise(bounds)]
        latest[g] = levels[-1]
        back = [
            c
            for c, level in zip(cuts, levels, strict=True)
            if level < before_mean[g] * (1 + latency_change_threshold)
        ]
        if back:
            recovered[g] = back[0]
    return recovered, latest


# ---------------------------------------------------------------------------------------------------------
# Consecutive segments: the tests of the unannounced analysis (and of work regressions)


@dataclass(frozen=True)
class SegmentSteps:
    """Every change point of a batch of series, each Welch-tested against the segment before it.

    Pieces are the segments between consecutive change points, numbered over the batch (series g owns
    pieces piece_base[g] .. piece_base[g + 1] - 1); one candidate per change point.
    """

    offsets: np.ndarray
    """Series g is values[offsets[g]:offsets[g + 1]]."""
    piece: np.ndarray
    """Piece id of every value."""
    piece_base: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    """Per piece."""
    group: np.ndarray
    """Per candidate: its series."""
    cut: np.ndarray
    """Per candidate: first index of the new regime in its series."""
    changepoint_p_value: np.ndarray
    after_piece: np.ndarray
    """Per candidate: the piece from the change point on (the one before it is after_piece - 1)."""
    last_piece: np.ndarray
    """Per candidate: the latest piece of its series."""
    welch: WelchResult
    first_new: np.ndarray
    """Per candidate: first index of the new regime, its boundary settled (``settle_boundary``)."""
    mixed: np.ndarray
    """Per candidate: the sample next to its cut that mixes both regimes (in no piece's statistics), -1
    when none (``settle_boundary``; only when the call was given the regression config)."""
    squares: np.ndarray
    """Per piece: the sum of squared deviations from its mean."""


def consecutive_segment_tests(
    values: np.ndarray,
    sizes: np.ndarray,
    changepoint: ChangePointConfig,
    *,
    max_change_points: int,
    fdr_q: float | None,
    memo: ChangePointMemo | None = None,
    mixed_rule: RegressionConfig | None = None,
) -> SegmentSteps:
    """Hierarchical E-divisive on each series (``values`` concatenated, ``sizes`` per series), then Welch of
    each segment against the one before it, all series at once. ``memo``: change points a sharded pass's
    phase 1 found on the same inputs (jobs.detect.changepoint_memo), reused; new ones are added to it.
    ``mixed_rule``: each cut's boundary is settled (``settle_boundary``: old-regime samples the cut left
    in the new piece move back, the sample that mixes both regimes is in no piece); None: as found."""
    offsets = group_offsets(sizes)
    memo = memo if sizes.shape[0] else None  # an empty batch (every series screened out): nothing to keep
    key = memo_key(values, sizes, changepoint, max_change_points, fdr_q) if memo is not None else ""
    known = memo.get(key) if memo is not None else None
    if known is None:
        found = segment_change_points(
            split_values(values, offsets), changepoint, max_change_points=max_change_points, fdr_q=fdr_q
        )
        cuts = [sorted({p.index for p in cps if p.index is not None}) for cps in found]
        candidate_cp_p = np.array(
            [p.p_value for cps in found for p in cps if p.index is not None], dtype=np.float64
        )
        if memo is not None:
            memo.put(key, FoundCuts(cuts, candidate_cp_p))
    else:
        cuts, candidate_cp_p = known.cuts, known.p_values
    # Pieces: the segments between consecutive change points of each series, numbered over the fleet.
    piece_base = group_offsets(np.array([len(c) + 1 for c in cuts], dtype=np.int64))
    group_of = np.repeat(np.arange(sizes.shape[0]), sizes)
    position = np.arange(values.shape[0]) - offsets[group_of]
    local_piece = np.zeros(values.shape[0], dtype=np.int64)
    for g, c in enumerate(cuts):  # one searchsorted per series with change points, never per sample
        if c:
            segment = slice(offsets[g], offsets[g + 1])
            local_piece[segment] = np.searchsorted(np.array(c), position[segment], side="right")
    piece = piece_base[group_of] + local_piece
    # Each boundary settled (``settle_boundary``): samples move between the two pieces of a cut, and the
    # mixed sample goes to one extra piece, read by no test.
    mixed = np.full(sum(len(c) for c in cuts), -1, dtype=np.int64)
    first_new = np.array([i for c in cuts for i in c], dtype=np.int64)
    if mixed_rule is not None:
        candidate = 0
        for g, c in enumerate(cuts):
            lo, hi = int(offsets[g]), int(offsets[g + 1])
            local = piece[lo:hi] - piece_base[g]
            for j, cut in enumerate(c):
                before, after = np.flatnonzero(local == j), np.flatnonzero(local == j + 1)
                settled = settle_boundary(values[lo:hi], before, after, cut, mixed_rule)
                local[settled.before] = j
                local[settled.after] = j + 1
                if settled.mixed is not None:
                    mixed[candidate] = settled.mixed
                    local[settled.mixed] = piece_base[-1] - piece_base[g]
                first_new[candidate] = settled.first_new
                candidate += 1
            piece[lo:hi] = local + piece_base[g]
    count, mean, squares = piece_statistics(values, piece, int(piece_base[-1]) + 1)
    # One candidate per change point: piece j-1 (before) against piece j (after).
    candidate_group = np.array([g for g, c in enumerate(cuts) for _ in c], dtype=np.int64)
    candidate_cut = np.array([i for c in cuts for i in c], dtype=np.int64)
    after_piece = np.array(
        [piece_base[g] + j + 1 for g, c in enumerate(cuts) for j in range(len(c))], dtype=np.int64
    )
    before_piece = after_piece - 1
    welch = welch_tests(
        count[before_piece],
        mean[before_piece],
        squares[before_piece],
        count[after_piece],
        mean[after_piece],
        squares[after_piece],
    )
    last_piece = piece_base[candidate_group] + np.array(
        [len(cuts[g]) for g in candidate_group], dtype=np.int64
    )
    return SegmentSteps(
        offsets=offsets,
        piece=piece,
        piece_base=piece_base,
        count=count,
        mean=mean,
        group=candidate_group,
        cut=candidate_cut,
        changepoint_p_value=candidate_cp_p,
        after_piece=after_piece,
        last_piece=last_piece,
        welch=welch,
        first_new=first_new,
        mixed=mixed,
        squares=squares,
    )
