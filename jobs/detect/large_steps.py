"""Evidence that grows with the effect (issue 26): a large step is confirmed with fewer new samples.

The change-point search needs ``min_segment`` (5) samples on each side of a split, so a step waits five
snapshot intervals whatever its size: a x3,000 step as long as a x1.3 one. A large step needs less
evidence. The newest k samples of a series (2 <= k <= ``large_step_max_new_samples``, 15) are a *large
step* when each of them
is above every one of the m samples before them (the reference) and above ``large_step_ratio`` times
their median. If the series did not change, its samples are exchangeable and the chance that the newest
k are the k largest of m + k is exactly 1 / C(m + k, k), whatever the distribution of the noise (0.00053
for k = 2 after an hour of one-minute samples, 2.5e-5 for k = 3; the default bound, 1e-4, takes 3: a
per-minute detection looks at every series every minute). That rank p-value joins the
unannounced analysis's Benjamini-Hochberg family beside the segment tests' Welch p-values, so the false
discovery rate is the same one; it must also be below ``large_step_max_p``. A step that later reaches
``min_segment`` samples is found by the change-point search at the same place: the same finding, its
levels refined (jobs.detect.findings' identity), not a second one. The rule keeps looking past
``min_segment`` - 1 new samples because the search can miss a huge step for a while: after a small
earlier level change the rank test reads that change as serial correlation (a x430 step, unreported by
first runs with 5 to 13 new samples in the soak); both paths read the same levels and onset, so which one
reports the step does not change the finding.

Why both conditions: above the reference's maximum makes the p-value exact (a rank statement); above the
ratio of its median keeps ordinary noise, and a x1.5 noisy neighbour, out of the fast path (those wait
for the segment tests). Pure and vectorized over every series of a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from jobs.detect.config import RegressionConfig
from jobs.detect.segments import pre_step_sides, settle_boundary


@dataclass(frozen=True)
class LargeSteps:
    """Per series with a large step at its end (one row each)."""

    group: np.ndarray
    """The series (index into the batch's sizes)."""
    cut: np.ndarray
    """First index of the new regime in its series (size - k)."""
    new_samples: np.ndarray
    """k: the samples after the step that confirmed it."""
    reference_samples: np.ndarray
    """m: the samples before them that they all exceed."""
    p_value: np.ndarray
    """1 / C(m + k, k)."""
    before_mean: np.ndarray
    """The level before the step: over its before samples (``before_samples``)."""
    before_samples: np.ndarray
    """The samples of that level: the reference but the mixed sample, or with ``pre_step_levels`` those since
    the last change point found on the samples before the step (jobs.detect.segments.pre_step_sides)."""
    after_mean: np.ndarray
    mixed: np.ndarray
    """The sample whose interval holds the step (its mean mixes both regimes), in neither level, as the
    segment tests settle it (jobs.detect.segments.settle_boundary); -1: none. ``cut`` is after it."""


def _empty() -> LargeSteps:
    none = np.zeros(0, dtype=np.int64)
    return LargeSteps(none, none, none, none, np.zeros(0), np.zeros(0), none, np.zeros(0), none)


def large_steps_at_end(values: np.ndarray, sizes: np.ndarray, config: RegressionConfig) -> LargeSteps:
    """Every series (``sizes`` consecutive values each) whose newest k samples, for the largest k in
    [2, ``large_step_max_new_samples``] that qualifies, are a large step (module docstring) with p <=
    ``large_step_max_p``. Off (no rows) when ``large_step_ratio`` is 0."""
    ratio = config.large_step_ratio
    longest = config.large_step_max_new_samples
    if ratio <= 0 or longest < 2 or sizes.size == 0:
        return _empty()
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    reference = config.large_step_reference_samples
    found_k = np.zeros(sizes.size, dtype=np.int64)
    found_m = np.zeros(sizes.size, dtype=np.int64)
    before = np.full(sizes.size, np.nan)
    after = np.full(sizes.size, np.nan)
    for k in range(longest, 1, -1):  # the longest run of new samples first: the most evidence
        m = np.minimum(reference, sizes - k)
        able = np.flatnonzero((m >= config.large_step_min_reference) & (found_k == 0))
        if able.size == 0:
            continue
        width = int(m[able].max())
        # (series, reference) gather, padded with NaN where a series has fewer than ``width``
        column = np.arange(width)[None, :]
        start = (ends[able] - k - m[able])[:, None]
        inside = column < m[able][:, None]
        ref = np.where(inside, values[np.minimum(start + column, values.size - 1)], np.nan)
        tail = values[(ends[able] - k)[:, None] + np.arange(k)[None, :]]
        low_tail = tail.min(axis=1)
        ref_max = np.nanmax(ref, axis=1)
        ref_median = np.nanmedian(ref, axis=1)
        qualifies = (low_tail > ref_max) & (low_tail >= ratio * ref_median) & (ref_median > 0)
        hit = able[qualifies]
        found_k[hit] = k
        found_m[hit] = m[hit]
        before[hit] = np.nanmean(ref[qualifies], axis=1)
        after[hit] = tail[qualifies].mean(axis=1)
    # For a clean step j samples old only k = j qualifies (for k < j the reference holds new-regime
    # samples, for k > j the newest k hold old-regime ones); a rising one (30, 31, 32) can qualify at
    # several, and the longest is kept.
    groups = np.flatnonzero(found_k > 0)
    if groups.size == 0:
        return _empty()
    k = found_k[groups]
    m = found_m[groups]
    p = 1.0 / special.comb(m + k, k, exact=False)
    keep = p <= config.large_step_max_p
    groups, k, m, p = groups[keep], k[keep], m[keep], p[keep]
    cut = sizes[groups] - k
    before_mean, after_mean = before[groups], after[groups]
    before_samples = m.copy()
    mixed = np.full(groups.size, -1, dtype=np.int64)
    # The levels and the onset as the segment tests will settle them when the step has min_segment
    # samples, so that the finding does not move then: the sample holding the step is in neither level.
    for i, g in enumerate(groups):
        lo = int(ends[g] - sizes[g])
        series = values[lo : int(ends[g])]
        c = int(cut[i])
        settled = settle_boundary(series, np.arange(c - int(m[i]), c), np.arange(c, series.size), c, config)
        if settled.mixed is None and settled.first_new == c:
            continue
        # Settled: a sample holding the step is in neither level, and one wholly of the new regime that the
        # reference held (the longest run of new samples is large_step_max_new_samples, so a step older
        # than that leaves its first new sample in the reference) moves to the new level. Kept whenever
        # the boundary moved, not only with a mixed sample: the soak once read a before-level of 0.698 ms
        # (one 16 ms sample among 0.03 ms ones) where its other runs read 0.032 ms.
        mixed[i] = -1 if settled.mixed is None else settled.mixed
        cut[i] = settled.first_new
        before_mean[i] = float(series[settled.before].mean())
        before_samples[i] = settled.before.size
        after_mean[i] = float(series[settled.after].mean())
    if config.pre_step_levels:  # the level before as the segment tests will read it (one definition)
        sides = pre_step_sides(
            values,
            ends - sizes,
            groups,
            cut,
            (mixed,),
            config.unannounced_changepoint,
            config.max_change_points,
        )
        before_mean, before_samples = sides.mean, sides.count.astype(np.int64)
    return LargeSteps(
        group=groups,
        cut=cut,
        new_samples=k,
        reference_samples=m,
        p_value=p,
        before_mean=before_mean,
        before_samples=before_samples,
        after_mean=after_mean,
        mixed=mixed,
    )
