"""The instance's load around a moment: how much execution other statements brought, and how much slowdown
that load can explain.

The peer rule of jobs.detect.contention needs several series of the instance to slow together; an
instance with one to three statements has no peers to compare, yet the cause of its slowdown is often in
the radar's own data: a neighbour's statement appears in pg_stat_statements at that moment and adds
seconds of execution per second. This module measures that, per moment (a deploy, or the change time of
unannounced findings) and instance, over the ``load_window_samples`` snapshot intervals nearest to it on
each side (pg_stat_statements counts a statement when it completes, so a neighbour's long statements need
a longer window than the peer rule's latency medians):

  load of a series   execution seconds per wall-clock second (Σ Δtotal_exec_time / Σ interval seconds):
                     the mean number of its statements executing at once (a series absent on a side has 0);
  demand             the instance's load before, from every series; where the collector recorded
                     pg_stat_activity (``activity_snapshots``), the mean number of active backends on a CPU
                     (client backends with no wait event + parallel workers) when that is larger: a
                     statement still running at the snapshot has not reached pg_stat_statements yet;
  rise for a series  the other series' load after - before (leave the series itself out: a query's own
                     regression must not explain itself), or the rise of the active count less its own
                     rise when that is larger;
  explained ratio    processor sharing: with C cores and D runnable statements each gets min(1, C/D) of a
                     core, so a CPU-bound query slows by max(1, D_after/C) / max(1, D_before/C). C is the
                     fleet file's ``cores`` of the instance where known, else ``cores_when_unknown`` (1:
                     the most slowdown the load can explain, so an unknown instance size never turns
                     contention into a regression finding).

A load episode is a moment whose load rose by at least ``min_load_rise`` and whose explained ratio is at
least 1 + ``shift_threshold``. The statements that brought the load are named with their rise.

Pure: frames in, frames out.
"""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import polars as pl

from jobs.detect.config import ContentionConfig
from jobs.query.series import run_lengths

LOAD_COLUMNS = {
    "moment": pl.Int64,
    "load_before": pl.Float64,
    "load_after": pl.Float64,
    "brought": pl.Float64,
    "hosted_rise": pl.Float64,
    "activity_before": pl.Float64,
    "activity_after": pl.Float64,
    "cores": pl.Int32,
    "load_sources": pl.String,
}
"""Per moment: the instance's load on each side (s of execution per s), what statements brought (more calls,
new statements), the active backends on a CPU (null
without activity rows), the fleet file's cores, and the statements that brought the load."""

SERIES_LOAD_COLUMNS = {
    "moment": pl.Int64,
    "series": pl.String,
    "load_rise": pl.Float64,
    "brought": pl.Float64,
    "induced": pl.Float64,
}
_QUERY_SHOWN = 60
"""Characters of a statement's text in a load source."""


def near_moments(frame: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig) -> pl.DataFrame:
    """``frame``'s intervals (instance, interval_start, interval_end) within ``max_window`` of each moment of
    their instance, with their ``side`` (before: ending at or before it; after: starting at or after it)
    and ``distance``; an interval straddling the moment mixes both regimes and is in neither."""
    reach = _reach(config)
    # The instance's distinct intervals near each moment first (a few thousand per instance), then the
    # frame's rows of those intervals: only the rows near a moment are materialized. An equi-join of the
    # frame on the instance made every row of the history once per moment of its instance, the detection
    # run's memory peak (+3.8 GiB at 1,000 series x 1 day, issue 25). Rows in the frame's order, then the
    # moment's.
    keys = ["instance", "interval_start", "interval_end"]
    near = (
        frame.lazy()
        .select(keys)
        .unique()
        .collect(engine="streaming")
        .join(moments.select("moment", "instance", "at"), on="instance")
        .filter(
            (pl.col("interval_end") > pl.col("at") - reach)
            & (pl.col("interval_start") < pl.col("at") + reach)
        )
    )
    return (
        frame.lazy()
        .with_row_index("_row")
        .join(near.lazy(), on=keys)
        .sort("_row", "moment")
        .drop("_row")
        .collect(engine="streaming")
        .with_columns(
            pl.when(pl.col("interval_end") <= pl.col("at"))
            .then(pl.lit("before"))
            .when(pl.col("interval_start") >= pl.col("at"))
            .then(pl.lit("after"))
            .otherwise(pl.lit(None, dtype=pl.String))
            .alias("side"),
            (pl.col("interval_end") - pl.col("at")).abs().alias("distance"),
        )
        .filter(pl.col("side").is_not_null())
    )


def near_pairs(
    frame: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``near_moments`` as arrays: (frame row, moments row, after, distance) of every pair it keeps, where
    ``after`` is its side (False: before) and ``distance`` |interval_end - at| in ticks of one time unit.

    The pairs come instance by instance and side by side, the rows of each in the frame's order: within
    one (moment, series, side) they are in the frame's order, the order near_moments gives them (its ties
    and sums follow it). Found by a binary search of each instance's moment times instead
    of joins: no row is copied."""
    empty = np.zeros(0, dtype=np.int64)
    if frame.height == 0 or moments.height == 0:
        return empty, empty, np.zeros(0, dtype=bool), empty
    start, end, at, reach = _ticks(frame["interval_start"], frame["interval_end"], moments["at"], config)
    names = moments["instance"].unique().drop_nulls().sort()
    if names.len() == 0:
        return empty, empty, np.zeros(0, dtype=bool), empty
    codes = pl.int_range(names.len(), eager=True)
    # Each run of rows of one instance coded once (a frame of series is one run per instance).
    runs = run_lengths(frame, ["instance"])
    run_code = runs["instance"].replace_strict(names, codes, default=-1).to_numpy()
    row_code = np.repeat(run_code, runs["size"].to_numpy())
    if np.all(run_code[1:] >= run_code[:-1]):
        rows = np.arange(frame.height)
    else:
        rows = np.argsort(row_code, kind="stable")
    if frame["interval_start"].null_count() or frame["interval_end"].null_count():
        known = ~(frame["interval_start"].is_null() | frame["interval_end"].is_null()).to_numpy()
        rows = rows[known[rows]]
    row_bounds = np.searchsorted(row_code[rows], np.arange(names.len() + 1))
    moment_code = moments["instance"].replace_strict(names, codes, default=-1).to_numpy()
    timed = np.flatnonzero((moment_code >= 0) & ~moments["at"].is_null().to_numpy())
    timed = timed[np.lexsort((at[timed], moment_code[timed]))]
    moment_bounds = np.searchsorted(moment_code[timed], np.arange(names.len() + 1))
    pair_rows, pair_moments, pair_after = [], [], []
    for code in range(names.len()):
        mine = rows[row_bounds[code] : row_bounds[code + 1]]
        near = timed[moment_bounds[code] : moment_bounds[code + 1]]
        times = at[near]
        # Within reach: at - reach < interval_end and interval_start < at + reach. Before: ending at or
        # before the moment (at >= interval_end); else after: starting at or after it (at <= start).
        first = np.searchsorted(times, start[mine] - reach, side="right")
        last = np.searchsorted(times, end[mine] + reach, side="left")
        ended = np.maximum(np.searchsorted(times, end[mine], side="left"), first)
        started = np.minimum(np.searchsorted(times, start[mine], side="right"), ended)
        for low, high, is_after in ((first, started, True), (ended, last, False)):
            count = np.maximum(high - low, 0)
            total = int(count.sum())
            offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
            pair_rows.append(np.repeat(mine, count))
            pair_moments.append(near[np.repeat(low, count) + offset])
            pair_after.append(np.full(total, is_after))
    row = np.concatenate(pair_rows)
    moment = np.concatenate(pair_moments)
    return row, moment, np.concatenate(pair_after), np.abs(end[row] - at[moment])


def _ticks(
    start: pl.Series, end: pl.Series, at: pl.Series, config: ContentionConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Interval bounds, moment times and ``max_window`` as integers of one time unit (microseconds when
    all three are, else nanoseconds: exact for any unit); the reach as polars computes it in
    near_moments."""
    units = {s.dtype.time_unit for s in (start, end, at)}  # type: ignore[attr-defined]
    unit = "us" if units == {"us"} else "ns"
    reach_us = pl.select(_reach(config)).item() // timedelta(microseconds=1)
    ticks = [s.dt.cast_time_unit(unit).to_physical().fill_null(0).to_numpy() for s in (start, end, at)]
    return ticks[0], ticks[1], ticks[2], reach_us * (1 if unit == "us" else 1000)


def _reach(config: ContentionConfig) -> pl.Expr:
    return pl.duration(microseconds=config.max_window.total_seconds() * 1e6)


def _sides(series: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig) -> pl.DataFrame:
    """Per (moment, instance interval): its side and seconds, the ``load_window_samples`` nearest intervals
    of each instance of the moment's host on each side of the moment (an instance's snapshot intervals:
    every series of it shares them). ``moments``: (moment, instance, at), one row per instance of the host."""
    # Streamed (min does not depend on the order): eagerly, this group_by over every point of the history
    # was the detection pass's peak on a week of 500 series.
    intervals = (
        series.lazy()
        .group_by("instance", "interval_end")
        .agg(pl.col("interval_start").min())
        .collect(engine="streaming")
        .sort("instance", "interval_end")  # one order, so the sums over them below are always the same
    )
    near = (
        near_moments(intervals, moments, config)
        .with_columns(pl.col("distance").rank("ordinal").over("moment", "instance", "side").alias("nearness"))
        .filter(pl.col("nearness") <= config.load_window_samples)
    )
    return near.with_columns(
        ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() / 1e6).alias("seconds")
    ).select("moment", "instance", "interval_start", "interval_end", "side", "seconds")


def series_load_rises(series: pl.DataFrame, sides: pl.DataFrame) -> pl.DataFrame:
    """Per (moment, series of its instance seen on either side): load before, after and the rise, with the
    series' latest queryid and text."""
    seconds = sides.group_by("moment", "instance", "side").agg(pl.col("seconds").sum())
    seconds = seconds.pivot("side", index=["moment", "instance"], values="seconds")
    for side in ("before", "after"):
        if side not in seconds.columns:
            seconds = seconds.with_columns(pl.lit(None, dtype=pl.Float64).alias(side))
    has_query = "query" in series.columns
    # Only what the sums read (the series carry a dozen columns; the join copies each one per side row).
    read = [
        "instance",
        "series",
        "interval_end",
        "total_exec_time",
        "calls",
        "queryid",
        *(["query"] * has_query),
    ]
    executed = (
        series.select(read)
        .join(sides.select("moment", "instance", "interval_end", "side"), on=["instance", "interval_end"])
        .group_by("moment", "instance", "series")
        .agg(
            (pl.col("total_exec_time").filter(pl.col("side") == "before").sum() / 1000.0).alias(
                "_exec_before"
            ),
            (pl.col("total_exec_time").filter(pl.col("side") == "after").sum() / 1000.0).alias("_exec_after"),
            pl.col("calls").filter(pl.col("side") == "before").sum().alias("_calls_before"),
            pl.col("calls").filter(pl.col("side") == "after").sum().alias("_calls_after"),
            pl.col("queryid").sort_by("interval_end").last(),
            (pl.col("query").drop_nulls().last() if has_query else pl.lit(None, dtype=pl.String)).alias(
                "query"
            ),
        )
    )
    return (
        executed.join(
            seconds.rename({"before": "_s_before", "after": "_s_after"}),
            on=["moment", "instance"],
            how="left",
        )
        .with_columns(
            (pl.col("_exec_before") / pl.col("_s_before")).fill_nan(None).fill_null(0.0).alias("load_before"),
            (pl.col("_exec_after") / pl.col("_s_after")).fill_nan(None).fill_null(0.0).alias("load_after"),
            (pl.col("_calls_before") / pl.col("_s_before"))
            .fill_nan(None)
            .fill_null(0.0)
            .alias("_cps_before"),
            (pl.col("_calls_after") / pl.col("_s_after")).fill_nan(None).fill_null(0.0).alias("_cps_after"),
        )
        .with_columns((pl.col("load_after") - pl.col("load_before")).alias("load_rise"))
        .with_columns(
            # Brought: more calls, at the latency seen after (all of a new statement's load). Induced: the
            # rest, a statement's own latency rise, a consequence of contention rather than a cause. Fewer
            # calls free nothing here: a closed-loop client calls less *because* it slowed.
            pl.when(pl.col("_calls_before") == 0)
            .then(pl.col("load_after"))
            .otherwise(
                (pl.col("_cps_after") - pl.col("_cps_before")).clip(lower_bound=0.0)
                * (pl.col("_exec_after") / pl.col("_calls_after")).fill_nan(None).fill_null(0.0)
            )
            .alias("brought")
        )
        .with_columns((pl.col("load_rise") - pl.col("brought")).alias("induced"))
        .drop("_exec_before", "_exec_after", "_s_before", "_s_after", "_calls_before", "_calls_after")
        .drop("_cps_before", "_cps_after")
        .sort("moment", "instance", "series")
    )


def _activity_means(activity: pl.DataFrame | None, sides: pl.DataFrame) -> pl.DataFrame:
    """Per moment: mean active backends on a CPU on each side (snapshots inside each side's intervals),
    summed over the instances of the moment's host, and the host's cores (latest known)."""
    empty = pl.DataFrame(
        schema={
            "moment": pl.Int64,
            "activity_before": pl.Float64,
            "activity_after": pl.Float64,
            "cores": pl.Int32,
        }
    )
    if activity is None or activity.height == 0 or sides.height == 0:
        return empty
    spans = sides.group_by("moment", "instance", "side").agg(
        pl.col("interval_start").min().alias("_from"), pl.col("interval_end").max().alias("_to")
    )
    on_cpu = pl.col("active_on_cpu").cast(pl.Float64) + pl.col("parallel_workers").fill_null(0).cast(
        pl.Float64
    )
    inside = (
        activity.select("instance", "captured_at", on_cpu.alias("_on_cpu"), pl.col("cores").cast(pl.Int32))
        .join(spans, on="instance")
        .filter((pl.col("captured_at") > pl.col("_from")) & (pl.col("captured_at") <= pl.col("_to")))
    )
    # Per instance of the host its mean on each side, summed over the host's instances.
    means = (
        inside.group_by("moment", "instance", "side")
        .agg(pl.col("_on_cpu").mean())
        .group_by("moment", "side")
        .agg(pl.col("_on_cpu").sum())
        .pivot("side", index="moment", values="_on_cpu")
    )
    for side in ("before", "after"):
        if side not in means.columns:
            means = means.with_columns(pl.lit(None, dtype=pl.Float64).alias(side))
    cores = (
        activity.filter(pl.col("cores").is_not_null())
        .sort("captured_at")
        .group_by("instance")
        .agg(pl.col("cores").last().cast(pl.Int32))
        .join(sides.select("moment", "instance").unique(), on="instance")
        .group_by("moment")
        .agg(pl.col("cores").max())  # the host's CPUs (its instances give the same number)
    )
    return (
        means.rename({"before": "activity_before", "after": "activity_after"})
        .join(cores, on="moment", how="full", coalesce=True)
        .select(list(empty.columns))
        .cast(dict(empty.schema))
    )


def _one_line(text: pl.Expr) -> pl.Expr:
    """A statement's text on one line, shortened (texts are the fleet's: no control characters)."""
    flat = text.fill_null("").str.replace_all(r"[\s\x00-\x1f\x7f]+", " ").str.strip_chars()
    return (
        pl.when(flat.str.len_chars() > _QUERY_SHOWN)
        .then(flat.str.slice(0, _QUERY_SHOWN - 1) + "…")
        .otherwise(flat)
    )


def _sources(rises: pl.DataFrame, config: ContentionConfig) -> pl.DataFrame:
    """Per moment: the statements whose load rose most, as '+1.9 s/s from `SELECT …`; …'."""
    total = pl.col("load_rise").clip(lower_bound=0).sum().over("moment")
    named = (
        rises.filter(
            (pl.col("load_rise") >= config.min_source_load)
            & (pl.col("load_rise") >= config.load_source_share * total)
        )
        .with_columns(pl.col("load_rise").rank("ordinal", descending=True).over("moment").alias("_rank"))
        .filter(pl.col("_rank") <= config.max_load_sources)
        .sort("moment", "_rank")
        .with_columns(
            pl.format(
                "+{} s/s from `{}`{} (queryid {})",
                pl.col("load_rise").round(2),
                _one_line(pl.col("query")),
                pl.col("_on") if "_on" in rises.columns else pl.lit(""),
                pl.col("queryid"),
            ).alias("_source")
        )
    )
    return named.group_by("moment").agg(pl.col("_source").str.join("; ").alias("load_sources"))


def instance_hosts(activity: pl.DataFrame | None) -> pl.DataFrame:
    """(instance, host): the fleet file's ``host`` of each instance (its latest activity row); instances
    with none are their own host."""
    if activity is None or activity.height == 0 or "host" not in activity.columns:
        return pl.DataFrame(schema={"instance": pl.String, "host": pl.String})
    return (
        activity.filter(pl.col("host").is_not_null())
        .sort("captured_at")
        .group_by("instance")
        .agg(pl.col("host").last())
        .sort("instance")
    )


def host_members(moments: pl.DataFrame, hosts: pl.DataFrame) -> pl.DataFrame:
    """(moment, instance, at) for every instance that shares the moment's instance's host (itself
    included): on one machine, every database's statements compete for the same CPUs."""
    own = moments.select("moment", "instance", "at")
    if hosts.height == 0:
        return own
    shared = (
        own.join(hosts, on="instance")
        .join(hosts.rename({"instance": "_member"}), on="host")
        .select("moment", pl.col("_member").alias("instance"), "at")
    )
    return pl.concat([own, shared]).unique(maintain_order=True).sort("moment", "instance")


def points_near_moments(
    points: pl.DataFrame, moments: pl.DataFrame, config: ContentionConfig, activity: pl.DataFrame | None
) -> pl.DataFrame:
    """``points`` (samples) of the intervals within ``max_window`` of a moment of their instance or of an
    instance of its host: every sample ``series_shifts`` and ``moment_loads`` read (``near_moments`` picks
    from these), not the history. An interval is kept by its instance's earliest start with that end, at
    or before any series' own, so no interval either step would take is dropped. Rows keep their order."""
    if points.height == 0 or moments.height == 0:
        return points.head(0)
    reach = _reach(config)
    members = host_members(moments, instance_hosts(activity)).select("instance", "at")
    spans = (
        points.lazy()
        .group_by("instance", "interval_end")
        .agg(pl.col("interval_start").min())
        .join(members.lazy(), on="instance")
        .filter(
            (pl.col("interval_end") > pl.col("at") - reach)
            & (pl.col("interval_start") < pl.col("at") + reach)
        )
        .select("instance", "interval_end")
        .unique()
    )
    return (
        points.lazy()
        .join(spans, on=["instance", "interval_end"], how="semi", maintain_order="left")
        .collect(engine="streaming")
    )


def moment_loads(
    series: pl.DataFrame,
    moments: pl.DataFrame,
    config: ContentionConfig,
    activity: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per moment: LOAD_COLUMNS over every instance of its host; per (moment, series of the moment's own
    instance): SERIES_LOAD_COLUMNS and its load on each side).

    ``series``: merged interval series with ``total_exec_time``, ``calls``, ``queryid`` and (optionally)
    ``query``; ``moments``: jobs.detect.contention.moments_of output; ``activity``: activity_snapshots rows
    or None (with ``host``: instances of one host share its CPUs)."""
    if series.height == 0 or moments.height == 0:
        return pl.DataFrame(schema=LOAD_COLUMNS), pl.DataFrame(schema=SERIES_LOAD_COLUMNS)
    members = host_members(moments, instance_hosts(activity))
    sides = _sides(series, members, config)
    everything = series_load_rises(series, sides)
    own_instance = moments.select("moment", "instance")
    mine = everything.join(own_instance, on=["moment", "instance"], how="semi")
    # Another database of the host: its whole rise is a cause here (its statements are not this
    # instance's consequence); an instance whose load fell frees nothing (closed-loop clients).
    hosted = (
        everything.join(own_instance, on=["moment", "instance"], how="anti")
        .group_by("moment", "instance")
        .agg(pl.col("load_rise").sum().clip(lower_bound=0.0))
        .group_by("moment")
        .agg(pl.col("load_rise").sum().alias("hosted_rise"))
    )
    totals = (
        everything.group_by("moment")
        .agg(pl.col("load_before").sum(), pl.col("load_after").sum())
        .join(mine.group_by("moment").agg(pl.col("brought").sum()), on="moment", how="left")
        .join(hosted, on="moment", how="left")
        .with_columns(pl.col("brought", "hosted_rise").fill_null(0.0))
    )
    named = everything.join(own_instance, on="moment", suffix="_of_moment").with_columns(
        pl.when(pl.col("instance") != pl.col("instance_of_moment"))
        .then(pl.lit(" on ") + pl.col("instance"))
        .otherwise(pl.lit(""))
        .alias("_on")
    )
    loads = (
        moments.select("moment")
        .join(totals, on="moment", how="left")
        .join(_activity_means(activity, sides), on="moment", how="left")
        .join(
            _sources(named.with_columns(pl.col("brought").alias("load_rise")), config),
            on="moment",
            how="left",
        )
    )
    return loads.select(list(LOAD_COLUMNS)).cast(LOAD_COLUMNS).sort("moment"), mine


def worse_induced(
    judged: pl.DataFrame, shifts: pl.DataFrame, rises: pl.DataFrame, config: ContentionConfig
) -> pl.DataFrame:
    """Per row of ``judged`` (``_key``, ``moment``, ``series``, ``own``): the latency-induced load of
    the other series of its moment that slowed clearly more (by ``load_excess_factor``). One bad query's
    CPU slows its neighbours, so its own latency rise is a cause for them; among series that slowed alike
    it is only a consequence, and counting it would let several queries of one deploy explain each other.

    Per moment the others are sorted by their log ratio and summed from the first one past the row's bar
    (a binary search; 0 when none): the pairwise join of every judged row with every series of its moment
    made 75 M rows at 10,000 series (+4 GiB, issue 25)."""
    margin = math.log(config.load_excess_factor)
    others = (
        shifts.filter(pl.col("measured") & pl.col("log_ratio").is_not_null())
        .select("moment", "series", pl.col("log_ratio").alias("_ratio"))
        .join(rises.select("moment", "series", "induced"), on=["moment", "series"])
        .with_columns(pl.col("induced").clip(lower_bound=0.0))
        .sort("moment", "_ratio", "series")
    )
    rows = judged.select("_key", "moment", "series", pl.col("own").fill_null(0.0)).join(
        others.select(
            "moment", "series", pl.col("_ratio").alias("_self_ratio"), pl.col("induced").alias("_self")
        ),
        on=["moment", "series"],
        how="left",
    )
    if rows.height == 0 or others.height == 0:
        return pl.DataFrame(schema={"_key": judged.schema["_key"], "_worse_induced": pl.Float64})
    moment = others["moment"].to_numpy()
    ratio = others["_ratio"].to_numpy()
    induced = others["induced"].to_numpy()
    blocks, starts = np.unique(moment, return_index=True)
    ends = np.append(starts[1:], moment.shape[0])
    at = rows["moment"].to_numpy()
    bar = rows["own"].to_numpy() + margin
    block = np.clip(np.searchsorted(blocks, at), 0, blocks.shape[0] - 1)
    present = blocks[block] == at
    total = np.zeros(rows.height)
    for b in np.unique(block[present]):
        mine = np.flatnonzero(present & (block == b))
        lo, hi = int(starts[b]), int(ends[b])
        first = lo + np.searchsorted(ratio[lo:hi], bar[mine], side="right")
        suffix = np.concatenate((np.cumsum(induced[lo:hi][::-1])[::-1], [0.0]))
        total[mine] = suffix[first - lo]
    self_ratio = rows["_self_ratio"].to_numpy().astype(np.float64)
    self_counted = np.nan_to_num(self_ratio, nan=-np.inf) > bar
    total = total - np.where(self_counted, rows["_self"].fill_null(0.0).to_numpy(), 0.0)
    return rows.select("_key").with_columns(pl.Series("_worse_induced", total))


def _others_rise(own_brought: pl.Expr, worse: pl.Expr, own_rise: pl.Expr) -> pl.Expr:
    """The load the *other* statements brought (s/s) on a frame with LOAD_COLUMNS, for a series that
    brought ``own_brought`` and whose load rose by ``own_rise`` in all: their new calls and statements,
    the latency-induced load ``worse`` of series that slowed clearly more (worse_induced), the rise of the
    host's other databases, and active backends that pg_stat_statements has not seen complete
    (long-running statements)."""
    statements = pl.col("brought") - own_brought.fill_null(0.0) + worse.fill_null(0.0)
    # The active count also sees the series' own statements in progress, and a point count at each
    # snapshot measures load apart from the executions completed: the series' own rise is allowed for
    # once more before a rise of the active count counts as load no statement showed.
    unseen = (
        (pl.col("activity_after") - pl.col("activity_before"))
        - (pl.col("load_after") - pl.col("load_before"))
        - own_rise.fill_null(0.0).clip(lower_bound=0.0)
    ).clip(lower_bound=0.0)
    return statements + pl.col("hosted_rise").fill_null(0.0) + unseen.fill_null(0.0)


def explained_ratio(
    own_brought: pl.Expr, worse: pl.Expr, own_rise: pl.Expr, config: ContentionConfig
) -> pl.Expr:
    """The slowdown the other statements' load explains (processor sharing), on a frame with LOAD_COLUMNS.
    Null when the load was not measured."""
    before = pl.max_horizontal(pl.col("load_before"), pl.col("activity_before"))
    cores = pl.coalesce(pl.col("cores").cast(pl.Float64), pl.lit(float(config.cores_when_unknown)))
    after = before + _others_rise(own_brought, worse, own_rise)
    saturation_before = pl.max_horizontal(pl.lit(1.0), before / cores)
    saturation_after = pl.max_horizontal(pl.lit(1.0), after / cores)
    return pl.when(pl.col("load_before").is_null()).then(None).otherwise(saturation_after / saturation_before)


def is_load_episode(
    own_brought: pl.Expr, worse: pl.Expr, own_rise: pl.Expr, config: ContentionConfig
) -> pl.Expr:
    """The other statements brought enough load to explain a material slowdown (``load_rule`` on)."""
    if not config.load_rule:
        return pl.lit(False)
    return (
        (_others_rise(own_brought, worse, own_rise) >= config.min_load_rise)
        & (explained_ratio(own_brought, worse, own_rise, config) >= 1.0 + config.shift_threshold)
    ).fill_null(False)
