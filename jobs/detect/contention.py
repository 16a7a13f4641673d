"""Contention is not a regression of the query: tell "this query changed" from "its instance slowed".

When a CPU-heavy neighbour saturates a host, every query on it gets slower at the same moment, and each
one is a significant, material step to the latency detector. This step looks, for each instance and each
moment under test (a deploy; the change time of unannounced findings, the lower median of the change
times of one instance's findings chained within ``same_moment_within``), at every series of the instance
with enough samples on both sides, not only the detected ones:

  per series   log latency ratio = median log latency of the ``window_samples`` samples starting at or
               after the moment - the same of the samples ending at or before it (a sample whose
               interval straddles the moment is in neither: it mixes both regimes);
  compared     a series with ``min_samples_per_side`` samples on each side and a median latency before
               of at least ``min_compared_latency_ms``: CPU contention reaches a query through the
               scheduler preempting it, which a sub-millisecond query rarely is (on a real server with six
               CPU-bound neighbours on 2 cores, queries of 0.03-0.6 ms kept ratios 0.86-1.0 while those of
               3-12 ms went ×1.3-2.9), so tiny queries say nothing about whether the instance slowed;
  episode      at least ``min_series`` series compared, at least ``min_shifted_series`` of them (and
               ``min_shifted_share`` of all) slowed by ``1 + shift_threshold`` or more: one
               ``instance_slowdowns`` row (which queries, how much, calls/s, work per call);
  per finding  common shift = median log ratio of the *other* series (leave the finding out), spread =
               1.4826 x their median absolute deviation. Its own slowdown "clearly exceeds" the common
               one when own - common > max(log ``excess_factor``, ``spread_factor`` x spread).

A detected finding gets ``kind``:
  plan_or_work  no episode at its moment: reported as before (a query that tripled alone is a regression
                even with the same work per call: lock waits, CPU-bound plan changes);
  both          inside an episode, but ``work_changed`` is true or its slowdown clearly exceeds the
                common one: reported;
  contention    inside an episode, work not changed (false or unknown) and no clear excess: not reported
                (status no_regression, reason ``instance_slowdown``), counted in the episode instead.
``work_changed`` comes from jobs.detect.work (attach_work_evidence); missing or null means unknown, and
the finding is judged on its latency excess alone.

Pure: frames in, frames out; vectorized with joins and group-bys over the whole fleet.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from jobs.detect.config import ContentionConfig
from jobs.detect.load import (
    LOAD_COLUMNS,
    SERIES_LOAD_COLUMNS,
    explained_ratio,
    is_load_episode,
    moment_loads,
    near_pairs,
    points_near_moments,
    worse_induced,
)
from jobs.query.config import IdentityConfig
from jobs.query.series import run_lengths
from jobs.readable import ratio_number
from jobs.schemas.analysed import INSTANCE_SLOWDOWNS

if TYPE_CHECKING:
    from jobs.detect.config import RegressionConfig

PLAN_OR_WORK = "plan_or_work"
CONTENTION = "contention"
BOTH = "both"
INSTANCE_SLOWDOWN_REASON = "instance_slowdown"

MAD_TO_SIGMA = 1.4826
"""Median absolute deviation x this = standard deviation for normal data."""
_FLOOR_MS = 1e-6
"""Latency floor before taking logs (an interval of 0 ms execution time)."""


# ---------------------------------------------------------------------------------------------------------
# Moments under test


MOMENT_COLUMNS = {
    "moment": pl.Int64,
    "instance": pl.String,
    "analysis": pl.String,
    "deploy_id": pl.String,
    "deploy_version": pl.String,
    "at": pl.Datetime("us", "UTC"),
}


def moments_of(findings: pl.DataFrame, config: ContentionConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(moments, findings with a ``moment`` id): every (deploy, instance) the deploy analysis looked at,
    and the change times of detected unannounced findings, chained per instance when close."""
    rows = findings.with_row_index("_row")
    deploy = (
        rows.filter((pl.col("analysis") == "deploy") & pl.col("deployed_at").is_not_null())
        .select("instance", "analysis", "deploy_id", "deploy_version", pl.col("deployed_at").alias("at"))
        .unique(["instance", "deploy_id"])
    )
    detected_unannounced = rows.filter(
        (pl.col("analysis") == "unannounced")
        & (pl.col("status") == "detected")
        & pl.col("detected_change_at").is_not_null()
    ).sort("instance", "detected_change_at", "_row")
    chained = detected_unannounced.with_columns(
        (
            (pl.col("instance") != pl.col("instance").shift(1)).fill_null(True)
            | (
                (pl.col("detected_change_at") - pl.col("detected_change_at").shift(1))
                > pl.duration(microseconds=config.same_moment_within // timedelta(microseconds=1))
            ).fill_null(True)
        )
        .cum_sum()
        .alias("_chain")
    )
    unannounced = chained.group_by("_chain").agg(
        pl.col("instance").first(),
        pl.lit("unannounced").alias("analysis"),
        pl.lit(None, dtype=pl.String).alias("deploy_id"),
        pl.lit(None, dtype=pl.String).alias("deploy_version"),
        # The lower median of the chain's change times: one series whose change point noise put early
        # must not move the moment off the step the others share.
        pl.col("detected_change_at").sort().get((pl.len() - 1) // 2).alias("at"),
    )
    moments = (
        pl.concat(
            [
                deploy.select(list(MOMENT_COLUMNS)[1:]).cast(dict(list(MOMENT_COLUMNS.items())[1:])),
                unannounced.select(list(MOMENT_COLUMNS)[1:]).cast(dict(list(MOMENT_COLUMNS.items())[1:])),
            ]
        )
        .sort("analysis", "instance", "at", "deploy_id", nulls_last=True)
        .with_row_index("moment")
        .with_columns(pl.col("moment").cast(pl.Int64))
    )
    unannounced_ids = chained.select("_row", "_chain").join(
        unannounced.select("_chain", "instance", "at"), on="_chain"
    )
    unannounced_ids = unannounced_ids.join(
        moments.filter(pl.col("analysis") == "unannounced").select("moment", "instance", "at"),
        on=["instance", "at"],
    ).select("_row", "moment")
    deploy_ids = (
        rows.filter(pl.col("analysis") == "deploy")
        .select("_row", "instance", "deploy_id")
        .join(
            moments.filter(pl.col("analysis") == "deploy").select("moment", "instance", "deploy_id"),
            on=["instance", "deploy_id"],
        )
        .select("_row", "moment")
    )
    ids = pl.concat([deploy_ids, unannounced_ids])
    tagged = rows.join(ids, on="_row", how="left").sort("_row").drop("_row")
    return moments, tagged


# ---------------------------------------------------------------------------------------------------------
# Per-series shifts at each moment


SHIFT_COLUMNS = {
    "moment": pl.Int64,
    "series": pl.String,
    "fingerprint": pl.String,
    "queryid": pl.Int64,
    "before_n": pl.UInt32,
    "after_n": pl.UInt32,
    "before_ms": pl.Float64,
    "log_ratio": pl.Float64,
    "calls_per_s_before": pl.Float64,
    "calls_per_s_after": pl.Float64,
    "measured": pl.Boolean,
    "compared": pl.Boolean,
}


def series_shifts(series: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig) -> pl.DataFrame:
    """Per (moment, series of its instance): log latency ratio over the nearest samples on each side.

    ``series``: merged interval series (jobs.query.series.merge_intervals over ``SERIES_KEY``) with
    ``queryid`` (the latest of the series) and ``fingerprint``; ``moments``: moments_of output.

    Columnar over the pairs (row, moment) near_pairs finds: the ``window_samples`` nearest of each (moment,
    series, side) by one stable sort, medians by a sort within those groups, sums in the rows' order. Each
    figure is the one polars' group-by gave (tests/unit/detect/test_contention_shifts.py compares them
    with it): the median is lower + (upper - lower) x 0.5 with NaN above every number, and a filtered float
    sum is Kahan-compensated in the rows' order. About a quarter of the CPU time of the window rank and
    group-by, and none of the joined copy of the series (issue 25)."""
    if series.height == 0 or moments.height == 0:
        return pl.DataFrame(schema=SHIFT_COLUMNS)
    row, moment_row, after, distance = near_pairs(series, moments, config)
    number, names = _series_numbers(series)
    moment_rank = (moments["moment"].rank("dense").cast(pl.Int64) - 1).to_numpy()
    ranks = int(moment_rank.max()) + 1
    side = (number[row] * ranks + moment_rank[moment_row]) * 2 + after
    kept = _nearest(side, distance, config.window_samples)
    if kept.shape[0] == 0:
        return pl.DataFrame(schema=SHIFT_COLUMNS)
    side, row = side[kept], row[kept]
    starts = _starts(side)
    counts = _sizes(starts, side.shape[0])
    log_ms = series["value"].clip(lower_bound=_FLOOR_MS).log()
    median, has_median = _medians(log_ms.to_numpy()[row], log_ms.is_null().to_numpy()[row], starts, counts)
    calls = np.add.reduceat(series["calls"].fill_null(0).to_numpy()[row], starts)
    seconds_of = series["interval_seconds"]
    seconds = _sums_in_order(seconds_of.to_numpy()[row], seconds_of.is_null().to_numpy()[row], starts, counts)
    # The groups of one (series, moment) are adjacent, its before group first.
    key = side[starts]
    pair = key // 2
    pair_starts = _starts(pair)
    pair_of = np.cumsum(np.append(True, pair[1:] != pair[:-1])) - 1
    is_after = (key % 2) == 1
    pairs = pair_starts.shape[0]

    def by_side(values: np.ndarray, on_after: bool, fill: float | int) -> np.ndarray:
        out = np.full(pairs, fill, dtype=values.dtype)
        mine = is_after == on_after
        out[pair_of[mine]] = values[mine]
        return out

    # fingerprint: the first of the group's rows; queryid: the one of its latest interval (the last row
    # of those when several end then).
    first_row = np.minimum.reduceat(np.minimum.reduceat(row, starts), pair_starts)
    end = series["interval_end"].to_physical().fill_null(0).to_numpy()[row]
    row_pair_starts = starts[pair_starts]
    latest = np.repeat(np.maximum.reduceat(end, row_pair_starts), _sizes(row_pair_starts, row.shape[0]))
    last_row = np.maximum.reduceat(np.where(end == latest, row, -1), row_pair_starts)
    moment_of_rank = np.empty(ranks, dtype=np.int64)
    moment_of_rank[moment_rank] = moments["moment"].to_numpy()
    shifts = (
        pl.DataFrame(
            {
                "moment": moment_of_rank[pair[pair_starts] % ranks],
                "series": names["series"].gather(pair[pair_starts] // ranks),
                "fingerprint": series["fingerprint"].gather(first_row),
                "queryid": series["queryid"].gather(last_row),
                "before_n": by_side(counts, False, 0),
                "after_n": by_side(counts, True, 0),
                "_before": by_side(median, False, np.nan),
                "_has_before": by_side(has_median, False, False),
                "_after": by_side(median, True, np.nan),
                "_has_after": by_side(has_median, True, False),
                "_calls_before": by_side(calls, False, 0),
                "_calls_after": by_side(calls, True, 0),
                "_seconds_before": by_side(seconds, False, 0.0),
                "_seconds_after": by_side(seconds, True, 0.0),
            },
            nan_to_null=False,
        )
        .with_columns(
            pl.when(pl.col("_has_before")).then(pl.col("_before")).alias("_before"),
            pl.when(pl.col("_has_after")).then(pl.col("_after")).alias("_after"),
        )
        .with_columns(
            pl.col("_before").exp().alias("before_ms"),
            (pl.col("_after") - pl.col("_before")).alias("log_ratio"),
            (pl.col("_calls_before") / pl.col("_seconds_before")).alias("calls_per_s_before"),
            (pl.col("_calls_after") / pl.col("_seconds_after")).alias("calls_per_s_after"),
        )
        .with_columns(
            (
                (pl.col("before_n") >= config.min_samples_per_side)
                & (pl.col("after_n") >= config.min_samples_per_side)
            ).alias("measured")
        )
        .with_columns(
            (pl.col("measured") & (pl.col("before_ms") >= config.min_compared_latency_ms)).alias("compared")
        )
        .sort("moment", "series")
    )
    return shifts.select(list(SHIFT_COLUMNS)).cast(SHIFT_COLUMNS)


def _series_numbers(frame: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Per row the number of its (instance, series), and per number (its row of the second frame) the
    instance and series: found over runs of equal rows (a merged frame is one run per series)."""
    runs = run_lengths(frame, ["instance", "series"])
    names = runs.select("instance", "series").unique(maintain_order=True)
    numbered = runs.join(
        names.with_row_index("_number"),
        on=["instance", "series"],
        how="left",
        nulls_equal=True,
        maintain_order="left",
    )["_number"].to_numpy()
    return np.repeat(numbered.astype(np.int64), runs["size"].to_numpy()), names


def _starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Where each run of equal keys begins."""
    return np.flatnonzero(np.append(True, sorted_keys[1:] != sorted_keys[:-1]))


def _sizes(starts: np.ndarray, total: int) -> np.ndarray:
    """The length of each run beginning at ``starts`` (ascending) among ``total`` positions."""
    return np.diff(np.append(starts, total))


def _nearest(group: np.ndarray, distance: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` smallest distances of each group (equal distances: the earlier position
    first, as rank("ordinal") over the rows in that order), sorted by group, then position."""
    if group.shape[0] == 0:
        return group
    span = int(distance.max()) + 1
    if int(group.max()) < (2**62) // span:
        order = np.argsort(group * span + distance, kind="stable")
    else:
        order = np.lexsort((distance, group))
    grouped = group[order]
    starts = _starts(grouped)
    rank = np.arange(grouped.shape[0]) - np.repeat(starts, _sizes(starts, grouped.shape[0]))
    keep = np.zeros(group.shape[0], dtype=bool)
    keep[order[rank < count]] = True
    chosen = np.flatnonzero(keep)
    return chosen[np.argsort(group[chosen], kind="stable")]


def _medians(
    values: np.ndarray, missing: np.ndarray, starts: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(median of each group's values leaving out the missing ones, whether it has one), as polars takes
    it: NaN sorts above every number, and of an even count the mean is lower + (upper - lower) x 0.5.
    Groups are sorted as rows of a table as wide as the largest (a few values: one sort of short rows),
    or, when that table would be much larger than the values, by one sort of (group, value)."""
    groups, width = starts.shape[0], int(counts.max(initial=0))
    segment = np.repeat(np.arange(groups), counts)
    padded = np.where(missing, np.nan, values)  # missing ones sort with NaN, after every counted value
    if groups * width <= 4 * values.shape[0] + 4096:
        table = np.full((groups, width), np.nan)
        table[segment, np.arange(values.shape[0]) - np.repeat(starts, counts)] = padded
        table.sort(axis=1)
        ordered, first = table.reshape(-1), np.arange(groups) * width
    else:
        ordered, first = padded[np.lexsort((padded, segment))], starts
    valid = counts - np.add.reduceat(missing.astype(np.int64), starts)
    lower = ordered[first + np.maximum(valid - 1, 0) // 2]
    upper = ordered[first + valid // 2]
    with np.errstate(invalid="ignore"):
        median = np.where(valid % 2 == 1, lower, lower + (upper - lower) * 0.5)
    return median, valid > 0


def _sums_in_order(
    values: np.ndarray, missing: np.ndarray, starts: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """Each group's sum of its values that are not missing, as polars' group-by adds a filtered float
    column: in the group's order, with Kahan's compensation (its last bit differs from a plain or a
    pairwise sum, np.add.reduceat's). Vectorized over the groups, one position at a time."""
    total = np.zeros(starts.shape[0])
    carried = np.zeros(starts.shape[0])
    for at in range(int(counts.max(initial=0))):
        live = np.flatnonzero(counts > at)
        live = live[~missing[starts[live] + at]]
        term = values[starts[live] + at] - carried[live]
        before = total[live]
        after = before + term
        carried[live] = (after - before) - term
        total[live] = after
    return total


def _shifted(config: ContentionConfig) -> pl.Expr:
    return pl.col("log_ratio") >= math.log1p(config.shift_threshold)


def instance_slowdowns(
    shifts: pl.DataFrame,
    moments: pl.DataFrame,
    config: ContentionConfig,
    loads: pl.DataFrame | None = None,
    rises: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per moment with an episode: the INSTANCE_SLOWDOWNS row (without the findings' work evidence:
    ``work_unchanged`` null, ``findings_suppressed`` 0; separate_contention fills them). An episode is a
    peer episode (enough compared series slowed together) or a load episode (jobs.detect.load: other
    statements brought load, and some measured series slowed), or both."""
    compared = shifts.filter(pl.col("compared"))
    shifted = _shifted(config)
    per_moment = compared.group_by("moment").agg(
        pl.len().alias("series_compared"),
        shifted.sum().cast(pl.Int64).alias("queries"),
        pl.col("log_ratio").median().exp().alias("median_ratio"),
        pl.col("log_ratio").max().exp().alias("max_ratio"),
        pl.col("queryid").filter(shifted).sort().cast(pl.String).str.join(",").alias("queryids"),
        pl.col("fingerprint").filter(shifted).unique().sort().str.join(",").alias("fingerprints"),
        pl.col("calls_per_s_before").sum(),
        pl.col("calls_per_s_after").sum(),
    )
    loads = loads if loads is not None else pl.DataFrame(schema=LOAD_COLUMNS)
    rises = rises if rises is not None else pl.DataFrame(schema=SERIES_LOAD_COLUMNS)
    # A load episode needs a slowed series whose slowdown the load of the *others* explains: a query
    # whose own regression raised the instance's load is no load episode by itself.
    own_brought, worse = pl.col("_own_brought"), pl.col("_worse_induced")
    measured = (
        shifts.filter(pl.col("measured"))
        .select("moment", "series", pl.col("log_ratio").alias("own"))
        .with_row_index("_key")
    )
    slowed = (
        measured.join(_own_load(rises), on=["moment", "series"], how="left")
        .join(worse_induced(measured, shifts, rises, config), on="_key", how="left")
        .rename({"own": "log_ratio"})
        .join(loads, on="moment", how="left")
        .with_columns(
            (shifted & is_load_episode(own_brought, worse, pl.col("_own_rise"), config)).alias("_by_load"),
            explained_ratio(own_brought, worse, pl.col("_own_rise"), config).alias("_explained"),
        )
        .group_by("moment")
        .agg(
            pl.col("_by_load").any().alias("_load"),
            pl.col("_explained").filter(pl.col("_by_load")).max().alias("load_explained_ratio"),
            pl.len().alias("_measured"),
            pl.col("_by_load").sum().cast(pl.Int64).alias("_by_load_n"),
            pl.col("log_ratio").filter(pl.col("_by_load")).median().exp().alias("_load_median"),
            pl.col("log_ratio").filter(pl.col("_by_load")).max().exp().alias("_load_max"),
        )
    )
    peers = (
        (pl.col("series_compared") >= config.min_series)
        & (pl.col("queries") >= config.min_shifted_series)
        & (pl.col("queries") >= config.min_shifted_share * pl.col("series_compared"))
    ).fill_null(False)
    # The calls/s of a load episode alone are those of its measured series (the peer rule's compared ones
    # may be none), as its series_compared and queries are.
    measured_calls = (
        shifts.filter(pl.col("measured"))
        .group_by("moment")
        .agg(
            pl.col("calls_per_s_before").sum().alias("_measured_calls_before"),
            pl.col("calls_per_s_after").sum().alias("_measured_calls_after"),
        )
    )
    table = (
        moments.join(per_moment, on="moment", how="left")
        .join(slowed, on="moment", how="left")
        .join(measured_calls, on="moment", how="left")
        .join(loads, on="moment", how="left")
        .with_columns(peers.alias("_peers"), pl.col("_load").fill_null(False))
        .with_columns(
            pl.when(pl.col("_peers") & pl.col("_load"))
            .then(pl.lit("peers+load"))
            .when(pl.col("_peers"))
            .then(pl.lit("peers"))
            .when(pl.col("_load"))
            .then(pl.lit("load"))
            .otherwise(pl.lit(None, dtype=pl.String))
            .alias("evidence")
        )
    )
    # A load episode alone counts the measured series the load explains (of every measured one): the
    # peer rule's compared series may be none (sub-millisecond queries).
    load_only = pl.col("evidence") == "load"
    rows = table.filter(pl.col("evidence").is_not_null()).with_columns(
        pl.col("at").alias("began_at"),
        pl.when(load_only)
        .then(pl.col("_measured"))
        .otherwise(pl.col("series_compared"))
        .fill_null(0)
        .alias("series_compared"),
        pl.when(load_only)
        .then(pl.col("_by_load_n"))
        .otherwise(pl.col("queries"))
        .fill_null(0)
        .alias("queries"),
        pl.when(load_only)
        .then(pl.col("_load_median"))
        .otherwise(pl.col("median_ratio"))
        .alias("median_ratio"),
        pl.when(load_only).then(pl.col("_load_max")).otherwise(pl.col("max_ratio")).alias("max_ratio"),
        *(
            pl.when(load_only)
            .then(pl.col(f"_measured_calls_{side}"))
            .otherwise(pl.col(f"calls_per_s_{side}"))
            .alias(f"calls_per_s_{side}")
            for side in ("before", "after")
        ),
        pl.lit(None, dtype=pl.Boolean).alias("work_unchanged"),
        pl.lit(0, dtype=pl.Int64).alias("findings_suppressed"),
        pl.lit(None, dtype=pl.String).alias("summary"),
    )
    return rows.select("moment", *INSTANCE_SLOWDOWNS.columns_of(rows)).sort("moment")


def _spread(values: pl.Expr) -> pl.Expr:
    """The values' spread around their median: ``MAD_TO_SIGMA`` x the median absolute deviation."""
    return (values - values.median()).abs().median() * MAD_TO_SIGMA


def _own_load(rises: pl.DataFrame) -> pl.DataFrame:
    """Per (moment, series): the load the series itself brought (left out of what explains its own
    slowdown)."""
    return rises.select(
        "moment", "series", pl.col("brought").alias("_own_brought"), pl.col("load_rise").alias("_own_rise")
    )


def _judged_at(
    detected: pl.DataFrame,
    moment: str,
    shifts: pl.DataFrame,
    config: ContentionConfig,
    loads: pl.DataFrame,
    rises: pl.DataFrame,
) -> pl.DataFrame:
    """Per detected finding (``_row``) at the moment in column ``moment``: its own log ratio, the
    leave-one-out common shift of the other compared series, their spread and count, whether its own
    slowdown clearly exceeds the common one; and the load the other statements brought (jobs.detect.load):
    whether it is a load episode for this finding, the slowdown it explains and whether the finding's
    slowdown exceeds that by ``load_excess_factor``."""
    at = detected.select("_row", pl.col(moment).alias("moment"), "series")
    own = at.join(
        shifts.filter(pl.col("measured")).select(
            "moment", "series", pl.col("log_ratio").alias("own"), pl.col("before_ms").alias("_own_ms")
        ),
        on=["moment", "series"],
        how="left",
    )
    log_ratio = pl.col("log_ratio")
    # The peers at least ``peer_latency_share`` as long as the finding before the moment (a finding with no
    # latency before has none): the only ones that may outweigh the load (ContentionConfig).
    long = log_ratio.filter(pl.col("before_ms") >= config.peer_latency_share * pl.col("_own_ms"))
    others = (
        own.select("_row", "moment", "series", "_own_ms")
        .join(shifts.filter(pl.col("compared")), on="moment", suffix="_other")
        .filter(pl.col("series") != pl.col("series_other"))
        .group_by("_row")
        .agg(
            pl.len().alias("others"),
            log_ratio.median().alias("common"),
            _spread(log_ratio).alias("spread"),
            long.len().alias("_long_others"),
            long.median().alias("_long_common"),
            _spread(long).alias("_long_spread"),
        )
    )

    def clearly_above(common: str, spread: str) -> pl.Expr:
        excess = pl.max_horizontal(
            pl.lit(math.log(config.excess_factor)), config.spread_factor * pl.col(spread)
        )
        return ((pl.col("own") - pl.col(common)) > excess).fill_null(False)

    own_brought, worse = pl.col("_own_brought"), pl.col("_worse_induced")
    keyed = own.with_columns(pl.col("_row").alias("_key"))
    return (
        own.join(others, on="_row", how="left")
        .join(worse_induced(keyed, shifts, rises, config).rename({"_key": "_row"}), on="_row", how="left")
        .join(
            at.join(_own_load(rises), on=["moment", "series"]).select("_row", "_own_brought", "_own_rise"),
            on="_row",
            how="left",
        )
        .join(loads, on="moment", how="left")
        .with_columns(
            clearly_above("common", "spread").alias("exceeds"),
            (
                pl.lit(config.peers_outweigh_load)
                & (pl.col("_long_others").fill_null(0) >= config.min_series - 1)
                & clearly_above("_long_common", "_long_spread")
            ).alias("peers_outweigh"),
            is_load_episode(own_brought, worse, pl.col("_own_rise"), config).alias("load_episode"),
            explained_ratio(own_brought, worse, pl.col("_own_rise"), config).log().alias("explained"),
        )
        .with_columns(
            ((pl.col("own") - pl.col("explained")) > math.log(config.load_excess_factor))
            .fill_null(False)
            .alias("exceeds_load"),
            # Judged at a moment it was moved from (attach_to_nearby_episode): a clear excess, as for peers.
            ((pl.col("own") - pl.col("explained").fill_null(0.0)) > math.log(config.excess_factor))
            .fill_null(False)
            .alias("exceeds_load_clearly"),
        )
        .select(
            "_row",
            "own",
            "others",
            "common",
            "exceeds",
            "peers_outweigh",
            "load_episode",
            "explained",
            "exceeds_load",
            "exceeds_load_clearly",
        )
    )


def attach_to_nearby_episode(
    tagged: pl.DataFrame, moments: pl.DataFrame, episodes: pl.DataFrame, config: ContentionConfig
) -> pl.DataFrame:
    """Findings whose own moment has no episode move to the nearest episode moment of their instance
    within ``config.attach_within`` of their change time (see that field); the others keep theirs. The
    moment they had is kept in ``_own_moment``."""
    tagged = tagged.with_columns(pl.col("moment").alias("_own_moment"))
    if episodes.height == 0 or config.attach_within <= timedelta(0):
        return tagged
    rows = tagged.with_row_index("_attach_row")
    lonely = rows.filter(
        pl.col("moment").is_not_null()
        & pl.col("detected_change_at").is_not_null()
        & ~pl.col("moment").is_in(episodes["moment"].implode())
    )
    if lonely.height == 0:
        return tagged
    targets = (
        episodes.select("moment", "instance", pl.col("began_at").alias("_episode_at"))
        .rename({"moment": "_episode_moment"})
        .sort("_episode_at")
    )
    nearest = (
        lonely.select("_attach_row", "instance", "detected_change_at")
        .sort("detected_change_at")
        .join_asof(
            targets,
            left_on="detected_change_at",
            right_on="_episode_at",
            by="instance",
            strategy="nearest",
            tolerance=config.attach_within,
            check_sortedness=False,  # sorted by time; the by-groups need not be contiguous
        )
        .select("_attach_row", "_episode_moment")
    )
    return (
        rows.join(nearest, on="_attach_row", how="left")
        .with_columns(pl.coalesce("_episode_moment", "moment").alias("moment"))
        .sort("_attach_row")
        .drop("_attach_row", "_episode_moment")
    )


def _ratio_digits(ratio: pl.Expr) -> pl.Expr:
    """A ratio's digits as every surface prints them (jobs.readable.ratio_number: 2.3, 1.25, 749); an
    instance has few slowdown rows, so a Python call per row costs nothing."""
    return ratio.map_elements(ratio_number, return_dtype=pl.String, skip_nulls=True)


def _summary() -> pl.Expr:
    where = (
        pl.when(pl.col("deploy_version").is_not_null())
        .then(pl.lit(" at deploy ") + pl.col("deploy_version"))
        .otherwise(pl.lit(" from ") + pl.col("began_at").dt.strftime("%Y-%m-%d %H:%M:%S UTC"))
    )
    work = (
        pl.when(pl.col("work_unchanged"))
        .then(pl.lit("work per call unchanged"))
        .when(pl.col("work_unchanged").not_())
        .then(pl.lit("work per call changed for some"))
        .otherwise(pl.lit("work per call not measured"))
    )
    cores = (
        pl.when(pl.col("cores").is_not_null())
        .then(pl.format(" on {} cores", pl.col("cores")))
        .otherwise(pl.lit(" (cores unknown)"))
    )
    load = (
        pl.when(pl.col("evidence").str.ends_with("load"))
        .then(
            pl.format(
                "; load {} → {} s of execution per second{}{}, explains up to {}×{}",
                pl.col("load_before").round(2),
                pl.col("load_after").round(2),
                pl.when(pl.col("activity_before").is_not_null() & pl.col("activity_after").is_not_null())
                .then(
                    pl.format(
                        ", {} → {} active backends on a CPU",
                        pl.col("activity_before").round(2),
                        pl.col("activity_after").round(2),
                    )
                )
                .otherwise(pl.lit("")),
                cores,
                _ratio_digits(pl.col("load_explained_ratio")),
                pl.when(pl.col("load_sources").is_not_null())
                .then(
                    pl.lit("; ")
                    + pl.col("load_sources")
                    + pl.lit(" since ")
                    + pl.col("began_at").dt.strftime("%Y-%m-%d %H:%M:%S UTC")
                )
                .otherwise(pl.lit("")),
            )
        )
        .otherwise(pl.lit(""))
    )
    return pl.format(
        "{} of {} queries on {} {}× slower{}; {}; calls/s {} → {}{}",
        pl.col("queries"),
        pl.col("series_compared"),
        pl.col("instance"),
        _ratio_digits(pl.coalesce(pl.col("median_ratio"), pl.col("max_ratio"))),
        where,
        work,
        pl.col("calls_per_s_before").round(1).cast(pl.String).fill_null("-"),
        pl.col("calls_per_s_after").round(1).cast(pl.String).fill_null("-"),
        load,
    )


# ---------------------------------------------------------------------------------------------------------
# The step of the pipeline


def separate_contention(
    findings: pl.DataFrame,
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: ContentionConfig | RegressionConfig = ContentionConfig(),
    activity: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(findings with kind, instance_slowdown_ratio, slowdown_excess and contention-only detections turned
    into no_regression / instance_slowdown; the INSTANCE_SLOWDOWNS rows of every episode).

    ``findings``: detect_regressions and/or detect_unannounced_regressions rows (optionally with
    ``work_changed``, Boolean, null = not measured); ``samples``/``texts``: the frames the detector was
    given; ``config``: a ContentionConfig, or a RegressionConfig (its ``contention``); ``activity``:
    activity_snapshots rows (the instance's active backends and cores; None: load from pg_stat_statements
    alone). Rows keep their order.
    """
    # Imported here: jobs.detect.deploy_analysis imports this module for ContentionConfig (RegressionConfig
    # field).
    from jobs.detect.verdicts import DETECTED, NO_REGRESSION
    from jobs.query.series import (
        SERIES_KEY,
        RegressionInputError,
        fingerprinted_samples,
        merge_intervals,
        series_identity,
    )

    # The findings' series were named by the RegressionConfig's identity rules: the same rules here.
    identity = IdentityConfig() if isinstance(config, ContentionConfig) else config.identity
    config = config if isinstance(config, ContentionConfig) else config.contention
    missing = sorted({"analysis", "instance", "series", "status", "reason"} - set(findings.columns))
    if missing:
        raise RegressionInputError(f"findings: missing columns {missing} (pass detect_regressions output)")
    work_type = findings.schema.get("work_changed", pl.Null)
    if work_type not in (pl.Boolean, pl.Null):
        raise RegressionInputError(
            f"findings: work_changed must be Boolean (true / false / null), not {work_type}"
        )

    findings = findings.with_columns(
        *(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in _OUTPUT_COLUMNS.items()
            if name not in findings.columns
        )
    )
    has_work = "work_changed" in findings.columns
    work_changed = pl.col("work_changed").cast(pl.Boolean) if has_work else pl.lit(None, dtype=pl.Boolean)
    if findings.height == 0 or samples.height == 0:
        return findings, INSTANCE_SLOWDOWNS.empty()
    moments, tagged = moments_of(findings, config)
    points = fingerprinted_samples(samples, texts, identity)
    keys = list(SERIES_KEY)
    # Series over the intervals near the moments only (what the shifts and loads read; a week of 500
    # series merged and joined with its identity was the pass's largest frame), named as over the history.
    series = (
        merge_intervals(points_near_moments(points, moments, config, activity), keys)
        .lazy()
        .join(
            series_identity(points, keys).select(*keys, "queryid", "fingerprint", "query").lazy(),
            on=keys,
            how="left",
            maintain_order="left",
        )
        .collect(engine="streaming")
    )
    shifts = series_shifts(series, moments, config)
    loads, rises = moment_loads(series, moments, config, activity)

    def judge(loads: pl.DataFrame, rises: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """(episodes, findings tagged with their moment, per detected finding its judgement)."""
        episodes = instance_slowdowns(shifts, moments, config, loads, rises)
        tagged_at = attach_to_nearby_episode(tagged, moments, episodes, config)
        detected = tagged_at.with_row_index("_row").filter(
            (pl.col("status") == DETECTED) & pl.col("moment").is_not_null()
        )
        at_own = _judged_at(detected, "_own_moment", shifts, config, loads, rises).select(
            "_row",
            pl.col("exceeds").alias("_exceeds_own"),
            pl.col("peers_outweigh").alias("_peers_outweigh_own"),
            pl.col("exceeds_load_clearly").alias("_exceeds_load_own"),
        )
        peer_moments = episodes.filter(pl.col("evidence").str.starts_with("peers")).select(
            "moment", pl.lit(True).alias("_peer_episode")
        )
        moved = pl.col("moment") != pl.col("_own_moment")
        judged = (
            _judged_at(detected, "moment", shifts, config, loads, rises)
            .join(detected.select("_row", "moment", "_own_moment"), on="_row", how="left")
            .join(peer_moments, on="moment", how="left")
            .join(at_own, on="_row", how="left")
            .with_columns(
                # The peer episode is the instance's (its row counts every compared series); the finding is
                # judged inside it against the others, so a row never says "3 of 5 slowed" while its
                # findings are called regressions of their own for want of a third shifted neighbour.
                (pl.col("_peer_episode").fill_null(False) & (pl.col("others").fill_null(0) >= 1)).alias(
                    "in_peers"
                ),
                # A finding moved to a nearby episode also exceeds when it clearly exceeds at its own
                # moment: a query that lost its index minutes after a slowdown began is flat at the
                # episode's moment.
                (pl.col("exceeds") | (moved & pl.col("_exceeds_own").fill_null(False))).alias("exceeds"),
                (pl.col("exceeds_load") | (moved & pl.col("_exceeds_load_own").fill_null(False))).alias(
                    "exceeds_load"
                ),
                (pl.col("peers_outweigh") | (moved & pl.col("_peers_outweigh_own").fill_null(False))).alias(
                    "peers_outweigh"
                ),
            )
            .with_columns(
                (pl.col("in_peers") & ~pl.col("exceeds")).alias("peers_explain"),
                (
                    pl.col("load_episode")
                    & ~pl.col("exceeds_load")
                    # Where allowed, enough peers about as long as this query that say it slowed clearly
                    # more than they did outweigh the load (ContentionConfig.peers_outweigh_load).
                    & ~pl.col("peers_outweigh")
                ).alias("load_explains"),
            )
            .with_columns((pl.col("in_peers") | pl.col("load_episode")).alias("in_episode"))
            .select("_row", *_JUDGED)
        )
        return episodes, tagged_at, judged

    episodes, tagged_at, judged = judge(loads, rises)
    tagged = tagged_at
    out = tagged.with_row_index("_row").join(judged, on="_row", how="left").sort("_row")
    is_detected = pl.col("status") == DETECTED
    in_episode = pl.col("in_episode").fill_null(False)
    explained = pl.col("peers_explain").fill_null(False) | pl.col("load_explains").fill_null(False)
    kind = (
        pl.when(~is_detected)
        .then(pl.col("kind"))
        .when(~in_episode)
        .then(pl.lit(PLAN_OR_WORK))
        .when(~work_changed.fill_null(False) & explained)
        .then(pl.lit(CONTENTION))
        .otherwise(pl.lit(BOTH))
    )
    # The instance's slowdown the finding is measured against: the one that explains it (its peers'
    # common one, else the load's), else its peers' common one inside a peer episode, else the load's.
    baseline = (
        pl.when(pl.col("peers_explain").fill_null(False))
        .then(pl.col("common"))
        .when(pl.col("load_explains").fill_null(False))
        .then(pl.col("explained"))
        .when(pl.col("in_peers").fill_null(False))
        .then(pl.col("common"))
        .when(in_episode)
        .then(pl.col("explained"))
        .otherwise(pl.col("common"))
    )
    out = out.with_columns(kind.alias("kind"), baseline.alias("_baseline")).with_columns(
        pl.when(is_detected & in_episode)
        .then(pl.col("_baseline").exp())
        .otherwise(pl.col("instance_slowdown_ratio"))
        .alias("instance_slowdown_ratio"),
        pl.when(is_detected & pl.col("_baseline").is_not_null())
        .then((pl.col("own") - pl.col("_baseline")).exp())
        .otherwise(pl.col("slowdown_excess"))
        .alias("slowdown_excess"),
    )
    suppressed = is_detected & (pl.col("kind") == CONTENTION)
    # The episode's work evidence, from the findings judged inside it.
    evidence = (
        out.filter(is_detected & pl.col("in_episode").fill_null(False))
        .with_columns(work_changed.alias("_work"))
        .group_by("moment")
        .agg(
            pl.col("_work").fill_null(False).any().alias("_any_changed"),
            pl.col("_work").is_not_null().any().alias("_any_known"),
            (pl.col("kind") == CONTENTION).sum().cast(pl.Int64).alias("_suppressed"),
        )
        .with_columns(
            pl.when(pl.col("_any_changed"))
            .then(pl.lit(False))
            .when(pl.col("_any_known"))
            .then(pl.lit(True))
            .otherwise(pl.lit(None, dtype=pl.Boolean))
            .alias("_work_unchanged")
        )
    )
    episodes = (
        episodes.join(evidence, on="moment", how="left")
        .with_columns(
            pl.col("_work_unchanged").alias("work_unchanged"),
            pl.col("_suppressed").fill_null(0).alias("findings_suppressed"),
        )
        .with_columns(_summary().alias("summary"))
        .sort("analysis", "instance", "began_at", "deploy_id", nulls_last=True)
    )
    out = out.with_columns(
        pl.when(suppressed).then(pl.lit(NO_REGRESSION)).otherwise(pl.col("status")).alias("status"),
        pl.when(suppressed)
        .then(pl.lit(INSTANCE_SLOWDOWN_REASON))
        .otherwise(pl.col("reason"))
        .alias("reason"),
    )
    return (
        out.drop("_row", "moment", "_own_moment", "_baseline", *_JUDGED),
        INSTANCE_SLOWDOWNS.conform(episodes.select(INSTANCE_SLOWDOWNS.columns_of(episodes))),
    )


_JUDGED = ("own", "common", "explained", "in_peers", "in_episode", "peers_explain", "load_explains")
"""Per detected finding, what the judgement at its moment found (dropped from the output)."""
_OUTPUT_COLUMNS = {"kind": pl.String, "instance_slowdown_ratio": pl.Float64, "slowdown_excess": pl.Float64}


def one_row_per_slowdown(slowdowns: pl.DataFrame, same_moment_within: timedelta) -> pl.DataFrame:
    """INSTANCE_SLOWDOWNS rows for people: an unannounced episode that began within ``same_moment_within``
    of a deploy episode of its instance is that deploy's slowdown found again by the other analysis (the
    demo printed one slowdown twice, 45 ms apart); it is left out and the deploy row's summary says so.
    Each analysis keeps its own row in the lake: this is a view of them, never a change to them."""
    if slowdowns.height == 0 or "analysis" not in slowdowns.columns:
        return slowdowns
    rows = slowdowns.with_row_index("_shown_row")
    deploys = rows.filter(pl.col("analysis") == "deploy").select(
        "instance", pl.col("began_at").alias("_deploy_at"), pl.col("_shown_row").alias("_deploy_row")
    )
    within = pl.duration(microseconds=same_moment_within // timedelta(microseconds=1))
    repeats = (
        rows.filter(pl.col("analysis") == "unannounced")
        .join(deploys, on="instance")
        .filter((pl.col("began_at") - pl.col("_deploy_at")).abs() <= within)
        .sort("_shown_row", (pl.col("began_at") - pl.col("_deploy_at")).abs(), "_deploy_row")
        .unique("_shown_row", keep="first", maintain_order=True)
        .select("_shown_row", "_deploy_row", "began_at")
    )
    if repeats.height == 0:
        return slowdowns
    also = repeats.group_by("_deploy_row").agg(pl.col("began_at").min().alias("_also_at"))
    return (
        rows.filter(~pl.col("_shown_row").is_in(repeats["_shown_row"].implode()))
        .join(also, left_on="_shown_row", right_on="_deploy_row", how="left")
        .with_columns(
            pl.when(pl.col("_also_at").is_not_null())
            .then(
                pl.col("summary").fill_null("")
                + pl.lit(" (found again by the unannounced analysis from ")
                + pl.col("_also_at").dt.strftime("%Y-%m-%d %H:%M:%S UTC")
                + pl.lit(")")
            )
            .otherwise(pl.col("summary"))
            .alias("summary")
        )
        .sort("_shown_row")
        .drop("_shown_row", "_also_at")
    )
