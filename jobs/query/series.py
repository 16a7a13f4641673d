"""What a series is: the samples of one query (``SERIES_KEY``), merged per interval, and the sample
intervals. The detector, work, contention, drift and plots all build series the same way."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from jobs.query.config import IdentityConfig
from jobs.query.identity import identify_samples

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
    return identify_samples(samples, texts, identity).with_columns(pl.lit(True).alias(IDENTIFIED))


def merge_intervals(frame: pl.DataFrame, keys: list[str], sums: tuple[str, ...] = ()) -> pl.DataFrame:
    """One point per (keys, interval_end): calls-weighted mean latency over the merged queryids (and the
    totals of the ``sums`` columns, for per-call work)."""
    return (
        frame.group_by([*keys, "interval_end"])
        .agg(
            pl.col("interval_start").min(),
            pl.col("calls").sum(),
            pl.col("total_exec_time").sum(),
            *(pl.col(c).sum() for c in sums),
        )
        .with_columns(
            ((pl.col("interval_end") - pl.col("interval_start")).dt.total_microseconds() / 1e6).alias(
                "interval_seconds"
            )
        )
        .with_columns((pl.col("total_exec_time") / pl.col("calls")).alias("value"))
        .sort([*keys, "interval_end"])
    )


SERIES_COLUMNS = ("fingerprint", "dbid", "database")
# What the latency analyses read of an identified sample (the lake's samples carry ~40 columns).
ANALYSED_COLUMNS = (
    *SERIES_KEY,
    "queryid",
    "query",
    *SERIES_COLUMNS,
    "interval_start",
    "interval_end",
    "calls",
    "total_exec_time",
)


def analysed_columns(points: pl.DataFrame, extra: tuple[str, ...] = ()) -> pl.DataFrame:
    """``points`` cut to what an analysis reads (plus ``extra``): the window gather and the sorts copy
    every column, and at 10k series × 1 day the unused ones cost GiBs (the benchmark's profile)."""
    wanted = set(ANALYSED_COLUMNS) | set(extra)
    return points.select([c for c in points.columns if c in wanted])


def series_identity(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per series: the queryid with the latest sample (ties: lowest queryid) and that queryid's own text,
    all queryids, and the series' fingerprint, dbid and database."""
    described = [c for c in SERIES_COLUMNS if c in frame.columns and c not in keys]
    # Sorted on the columns read only: sorting the whole frame copied its every column (texts included).
    read = dict.fromkeys([*keys, "interval_end", "queryid", "query", *described])
    latest = (
        frame.select(*read)
        .sort(
            [*keys, "interval_end", "queryid"],
            descending=[*([False] * len(keys)), True, False],
            nulls_last=True,
        )
        .unique(keys, keep="first", maintain_order=True)
        .select(*keys, "queryid", "query", *described)
    )
    merged = frame.group_by(keys).agg(
        pl.col("queryid").unique().sort().cast(pl.String).str.join(",").alias("queryids")
    )
    return latest.join(merged, on=keys, how="left")


def sample_intervals(samples: pl.DataFrame) -> dict[str, timedelta]:
    """Per instance: the median sample interval (interval_end - interval_start), the granularity of its
    change times."""
    if samples.height == 0:
        return {}
    medians = samples.group_by("instance").agg(
        (pl.col("interval_end") - pl.col("interval_start")).median().alias("interval")
    )
    return {row["instance"]: row["interval"] for row in medians.iter_rows(named=True)}
