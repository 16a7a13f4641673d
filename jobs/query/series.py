"""What a series is: the samples of one query (``SERIES_KEY``), merged per interval, and the sample
intervals. The detector, work, contention, drift and plots all build series the same way."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from jobs.query.config import IdentityConfig
from jobs.query.identity import identify_samples
from jobs.query.texts import is_utility_statement

DEFAULT_IDENTITY = IdentityConfig()

SERIES_KEY = ("instance", "series")
"""The columns naming a series: ``series`` is ``jobs.query.identity``'s name (database, fingerprint,
chain of successive queryids) and is unique within an instance."""


class RegressionInputError(ValueError):
    """Input frames lack columns or hold values the detector cannot use; the message names which."""


# ---------------------------------------------------------------------------------------------------------
# Series: merge queryids of one fingerprint per interval


def require_columns(frame: pl.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise RegressionInputError(f"{what}: missing columns {missing}")


# Marks a frame ``fingerprinted_samples`` identified (a column, so it survives filters and joins).
IDENTIFIED = "_identified"


def fingerprinted_samples(
    samples: pl.DataFrame, texts: pl.DataFrame, identity: IdentityConfig = DEFAULT_IDENTITY
) -> pl.DataFrame:
    """Samples with ``fingerprint``, ``query``, ``series`` and ``database`` (``jobs.query.identity``);
    texts: raw query_texts or fingerprint_texts output.

    Samples that already carry ``series`` (identified by this function: lake samples never do) are
    returned as they are, so one detection pass identifies its samples once (``detect_from_frames``)
    and every step that calls this on them reuses that: on a 10k-series day each identification cost
    GiBs and a run did it seven times."""
    if IDENTIFIED in samples.columns and "series" in samples.columns:
        return samples
    require_columns(
        samples,
        ("instance", "queryid", "interval_start", "interval_end", "calls", "total_exec_time"),
        "samples",
    )
    bad = samples.filter(~pl.col("total_exec_time").is_finite() | (pl.col("calls") <= 0))
    if bad.height:
        row = bad.row(0, named=True)
        raise RegressionInputError(
            f"samples: instance {row['instance']} queryid {row['queryid']} at {row['interval_end']}: "
            "calls must be positive and exec time finite (build samples with jobs.detect.samples)"
        )
    samples = without_utility_statements(samples, texts, identity)
    # Numbered in the order of (instance, series): grouping and sorting on the number orders series as
    # the strings do, at the cost of integers (merge_intervals: 1.0 -> 0.1 s per call at 1,000 series).
    identified = identify_samples(samples, texts, identity, number_as=SERIES_ID)
    # hstack, not with_columns: with_columns copied every column of the samples into one chunk (+575 MiB
    # over 5 M samples read from a week of files) to add a constant.
    return identified.hstack([pl.repeat(True, identified.height, eager=True).alias(IDENTIFIED)])


def utility_queryids(texts: pl.DataFrame, keywords: tuple[str, ...]) -> pl.DataFrame:
    """(instance, queryid) of the texts that are utility statements (``is_utility_statement``); each
    distinct text is read once."""
    schema = {"instance": pl.String, "queryid": pl.Int64}
    if not keywords or texts.height == 0 or not {"instance", "queryid", "query"} <= set(texts.columns):
        return pl.DataFrame(schema=schema)
    distinct = texts.select(pl.col("query").cast(pl.String).drop_nulls().unique())["query"]
    utility = [q for q in distinct if is_utility_statement(q, keywords)]
    if not utility:
        return pl.DataFrame(schema=schema)
    return (
        texts.filter(pl.col("query").cast(pl.String).is_in(utility))
        .select(pl.col("instance").cast(pl.String), pl.col("queryid").cast(pl.Int64))
        .unique()
    )


def without_utility_statements(
    samples: pl.DataFrame, texts: pl.DataFrame, identity: IdentityConfig = DEFAULT_IDENTITY
) -> pl.DataFrame:
    """``samples`` without those of utility statements (``IdentityConfig.utility_statements``: BEGIN,
    COMMIT, SET, SHOW, …): they are never a series. A queryid with no known text is kept."""
    utility = utility_queryids(texts, identity.utility_statements)
    if utility.height == 0:
        return samples
    return samples.join(
        utility.with_columns(
            pl.col("instance").cast(samples.schema["instance"]),
            pl.col("queryid").cast(samples.schema["queryid"]),
        ),
        on=["instance", "queryid"],
        how="anti",
        maintain_order="left",
    )


SERIES_ID = "_series_id"
"""An identified sample's series as a number, dense and ordered as (instance, series) sort: only ever
compared within the frame ``fingerprinted_samples`` numbered (filters and joins keep it)."""


def merge_intervals(frame: pl.DataFrame, keys: list[str], sums: tuple[str, ...] = ()) -> pl.DataFrame:
    """One point per (keys, interval_end): calls-weighted mean latency over the merged queryids (and the
    totals of the ``sums`` columns, for per-call work), sorted by keys and interval_end."""
    aggregated = (
        pl.col("interval_start").min(),
        pl.col("calls").sum(),
        pl.col("total_exec_time").sum(),
        *(pl.col(c).sum() for c in sums),
    )
    order = _numbered_order(frame, keys)
    if order is not None:
        merged = _merged_by_number(frame, keys, order, aggregated)
    else:
        merged = frame.group_by([*keys, "interval_end"]).agg(*aggregated).sort([*keys, "interval_end"])
    return merged.with_columns(
        ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() / 1e6).alias(
            "interval_seconds"
        )
    ).with_columns((pl.col("total_exec_time") / pl.col("calls")).alias("value"))


def _numbered_order(frame: pl.DataFrame, keys: list[str]) -> list[str] | None:
    """``keys`` with (instance, series) as the series number, or None where the frame is not numbered:
    the pair must be adjacent (then the orders agree) and the number and the other keys never null."""
    at = next((i for i in range(len(keys) - 1) if keys[i : i + 2] == list(SERIES_KEY)), None)
    if at is None or SERIES_ID not in frame.columns or frame.height == 0:
        return None
    order = [*keys[:at], SERIES_ID, *keys[at + 2 :]]
    if any(frame[c].null_count() for c in order):
        return None
    return order


def _merged_by_number(
    frame: pl.DataFrame, keys: list[str], key_order: list[str], aggregated: tuple[pl.Expr, ...]
) -> pl.DataFrame:
    """``merge_intervals`` on the series number: the samples in that order already (one check) are not
    sorted again, and without two samples of one point (one queryid per series, the usual case) nothing
    is grouped; the result is the same frame, with the columns and types of the grouped one."""
    order = [*key_order, "interval_end"]
    names = [*keys, "interval_end", *(e.meta.output_name() for e in aggregated)]
    shape = frame.head(0).group_by([*keys, "interval_end"]).agg(*aggregated).schema
    narrow = frame.select(*dict.fromkeys([*order, *names]))
    if not _ascending(narrow, order):
        # Stable: samples of one point (two queryids of a series) are summed in their input order.
        narrow = _stably_sorted(narrow, order)
    if _repeats(narrow, order):
        rest = [c for c in names if c not in order]
        narrow = (
            narrow.group_by(order, maintain_order=True)
            .agg(*(pl.col(c).first() for c in SERIES_KEY), *aggregated)
            .select(*order, *rest)
        )
    return narrow.select(pl.col(c).cast(shape[c]) for c in names)


def _stably_sorted(frame: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """``frame.sort(order, maintain_order=True)``, by moving whole runs where it can.

    Why: a detection pass's samples come per instance in pg_stat_statements entry order, each entry's
    samples in time order, while the series numbers follow the series' names; so the rows are already
    runs in order, only the runs are out of place. Where each group of the keys (``order`` but its last
    column) is one such run, ascending in the last column, the stable sort is those runs ordered by
    their keys: 10,000 runs sorted instead of 14.4 M rows (0.7-1.4 s -> 0.2-0.4 s a merge at 10,000
    series x 1 day, scratch). Anything else (a series of two queryids, interleaved) is sorted."""
    keys, last = order[:-1], order[-1]
    if not keys or frame.height < 2:
        return frame.sort(order, maintain_order=True)
    starts = frame.select(
        (
            pl.any_horizontal(pl.col(k) != pl.col(k).shift(1) for k in keys)
            | (pl.col(last) < pl.col(last).shift(1))
        )
        .fill_null(True)
        .arg_true()
    ).to_series()
    runs = frame[starts].select(keys).with_row_index("_run")
    if runs.height == frame.height or not runs.select(keys).is_unique().all():
        return frame.sort(order, maintain_order=True)
    placed = runs.sort(keys)["_run"].to_numpy()
    first = starts.to_numpy().astype(np.int64)
    sizes = np.diff(np.append(first, frame.height))[placed]
    # Row i of the result is row i + shift of its run (the run placed there, at i's offset into it). In
    # polars' own index type where it fits: uint32 arithmetic wraps, and every sum is a row number.
    index = np.uint32 if frame.height < 1 << 32 else np.int64
    rows = np.arange(frame.height, dtype=index)
    rows += np.repeat((first[placed] - (np.cumsum(sizes) - sizes)).astype(index), sizes)
    return frame[pl.Series(rows)]


def _ascending(frame: pl.DataFrame, order: list[str]) -> bool:
    """Rows in ``order`` (ties allowed): each row compared with the one before, last key first."""
    rule: pl.Expr | None = None
    for column in reversed(order):
        now, before = pl.col(column), pl.col(column).shift(1)
        rule = now >= before if rule is None else (now > before) | ((now == before) & rule)
    assert rule is not None
    return bool(frame.select(rule.fill_null(True).all()).item())


def _repeats(frame: pl.DataFrame, order: list[str]) -> bool:
    same = pl.all_horizontal(pl.col(c) == pl.col(c).shift(1) for c in order)
    return bool(frame.select(same.fill_null(False).any()).item())


SERIES_COLUMNS = ("fingerprint", "dbid", "database")
# What the latency analyses read of an identified sample (the lake's samples carry ~40 columns).
ANALYSED_COLUMNS = (
    *SERIES_KEY,
    SERIES_ID,
    "queryid",
    "query",
    *SERIES_COLUMNS,
    "interval_start",
    "interval_end",
    "calls",
    "total_exec_time",
)


def run_lengths(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """(keys, size) per run of equal ``keys`` in row order: for a frame whose groups are contiguous (as
    ``work_per_call`` returns them) the rows of ``group_by(keys, maintain_order=True).agg(pl.len())``,
    by comparing neighbours instead of hashing: that group_by over the fleet's stacked work series
    (three string keys, 2.4M rows on 5 instances x 1000 statements x 2 h) was the detection pass's peak,
    0.35 GiB of transient hash state."""
    # A run starts where any key differs from the row before (the first row always): comparing each key
    # column with its neighbour, not a run-length encoding of a struct of strings (3x the time).
    starts = frame.select(
        (
            pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys)
            | (pl.int_range(pl.len()) == 0)
        ).arg_true()
    ).to_series()
    bounds = np.append(starts.to_numpy(), frame.height)
    return (
        frame[starts].select(keys).with_columns(pl.Series("size", np.diff(bounds), dtype=pl.get_index_type()))
    )


def group_runs(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame | None:
    """``run_lengths(frame, keys)`` when each ``keys`` group is one run of rows (``merge_intervals`` returns
    each series so), else None: then a group's rows are its run, found without hashing its keys."""
    runs = run_lengths(frame, keys)
    return runs if runs.select(keys).is_unique().all() else None


def analysed_columns(points: pl.DataFrame, extra: tuple[str, ...] = ()) -> pl.DataFrame:
    """``points`` cut to what an analysis reads (plus ``extra``): the window gather and the sorts copy
    every column, and at 10k series × 1 day the unused ones cost GiBs (the benchmark's profile)."""
    wanted = set(ANALYSED_COLUMNS) | set(extra)
    return points.select([c for c in points.columns if c in wanted])


def series_identity(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per series: the queryid with the latest sample (ties: lowest queryid) and that queryid's own text,
    all queryids, and the series' fingerprint, dbid and database."""
    described = [c for c in SERIES_COLUMNS if c in frame.columns and c not in keys]
    # One row per (series, queryid) first, grouped on the series number where the frame has one: then
    # only those few rows are sorted (sorting every sample by its series cost ~1 s per call at 1,000
    # series). A queryid's text, and a series' fingerprint, dbid and database, are the same on each of
    # its samples, so any sample's stand for the latest one's.
    # Streamed: eagerly this group_by over 5 M samples held 1 GiB of transient state; max does not depend
    # on the order rows are met in, and the firsts are of values equal on every row of their group.
    order = _numbered_order(frame, keys) or keys
    per_queryid = (
        frame.lazy()
        .group_by([*order, "queryid"])
        .agg(
            pl.col("interval_end").max(),
            *(pl.col(c).first() for c in dict.fromkeys([*keys, "query", *described]) if c not in order),
        )
        .collect(engine="streaming")
    )
    latest = (
        per_queryid.sort(
            [*order, "interval_end", "queryid"],
            descending=[*([False] * len(order)), True, False],
            nulls_last=True,
        )
        .unique(order, keep="first", maintain_order=True)
        .select(*keys, "queryid", pl.col("query").cast(pl.String), *described)
    )
    merged = per_queryid.group_by(order).agg(
        *(pl.col(k).first() for k in keys if k not in order),
        pl.col("queryid").unique().sort().cast(pl.String).str.join(",").alias("queryids"),
    )
    return latest.join(merged.select(*keys, "queryids"), on=keys, how="left", maintain_order="left")


def sample_intervals(samples: pl.DataFrame) -> dict[str, timedelta]:
    """Per instance: the median sample interval (interval_end - interval_start), the granularity of its
    change times."""
    if samples.height == 0:
        return {}
    medians = samples.group_by("instance").agg(
        (pl.col("interval_end") - pl.col("interval_start")).median().alias("interval")
    )
    return {row["instance"]: row["interval"] for row in medians.iter_rows(named=True)}


def sample_starts(samples: pl.DataFrame, instances: list[str]) -> dict[str, pl.Series]:
    """Per instance of ``instances``: the sorted distinct ``interval_start`` of its samples (an instance's
    samples share the snapshots' boundaries). Two change times are so many samples apart, whatever each
    sample lasted: one slow snapshot makes one long sample, not several (``sample_intervals`` is a median)."""
    if samples.height == 0 or not instances:
        return {}
    starts = (
        samples.filter(pl.col("instance").is_in(instances))
        .select("instance", "interval_start")
        .unique()
        .sort("instance", "interval_start")
    )
    return {
        str(name[0]): part["interval_start"]
        for name, part in starts.group_by("instance", maintain_order=True)
    }
