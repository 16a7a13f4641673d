"""Anchored per-execution baselines (``drift_sample_baselines``): explicit rows, never a rolling window.

A baseline is anchored under a *version* (a release, a commit, a label) from the execution samples logged
in a window ``(window_start, window_end]``: one row per (baseline_version, instance, query_hash, metric)
holding at most ``[drift.samples] max_baseline_samples`` of the window's values of that metric
(``SAMPLE_METRICS``: latency = latency_ms, cost = total_cost, cardinality = the plan's worst q-error). When a
pair has more, a seeded uniform subsample is kept: the pair's own generator, seeded with ``seed`` and the
pair's key (instance, query_hash, metric), draws which of its samples (in logged order) stay, so a pair
never depends on the others and the same window gives the same bytes twice, in any row order.

A re-anchor is a new version (a version, once anchored for an instance, is never rewritten). Scoring uses
the newest version of each pair (by ``created_at``) unless one is named (``select_baselines``).

Pure: ``baseline_rows``, ``select_baselines``; I/O edge: ``anchor_sample_baselines``,
``load_sample_baselines``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from jobs.drift.clock import as_utc
from jobs.drift.config import SampleDriftConfig
from jobs.lake import io as lake
from jobs.schemas.analysed import DRIFT_SAMPLE_BASELINES
from jobs.schemas.collected import EXECUTION_SAMPLES

SAMPLE_METRICS: dict[str, str] = {"latency": "latency_ms", "cost": "total_cost", "cardinality": "cardinality"}
"""Each drift metric and the execution_samples column it is read from."""
PAIR_KEY = ("instance", "query_hash", "metric")
SAMPLE_ORDER = ("logged_at", "session_id", "line_num")
"""The order of a pair's samples (the sample's identity, so any input row order gives the same baseline)."""


class BaselineError(ValueError):
    """A baseline cannot be anchored or found; the message names the version, window or instance."""


def long_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """Execution samples as one row per (sample, metric) with a value: instance, query_hash, metric, value,
    fingerprint, queryid and the sample's order columns. A null value (the metric was not measured for
    that execution) is no sample of that metric; a negative or non-finite one is an error naming it."""
    parts = []
    for metric, column in SAMPLE_METRICS.items():
        parts.append(
            samples.filter(pl.col(column).is_not_null() & pl.col("query_hash").is_not_null()).select(
                pl.col("instance").cast(pl.String),
                pl.col("query_hash").cast(pl.String),
                pl.lit(metric, dtype=pl.String).alias("metric"),
                pl.col(column).cast(pl.Float64).alias("value"),
                pl.col("fingerprint").cast(pl.String),
                pl.col("queryid").cast(pl.Int64),
                *(pl.col(c) for c in SAMPLE_ORDER),
            )
        )
    out = pl.concat(parts) if parts else pl.DataFrame()
    bad = out.filter(~pl.col("value").is_finite() | (pl.col("value") < 0))
    if bad.height:
        row = bad.sort(*PAIR_KEY, *SAMPLE_ORDER).row(0, named=True)
        raise BaselineError(
            f"execution sample of instance {row['instance']}, query_hash {row['query_hash']} logged at "
            f"{row['logged_at']} (session {row['session_id']}, line {row['line_num']}): {row['metric']} "
            f"value {row['value']!r} is negative or not finite (rejected, not clipped)"
        )
    return out


def plan_shapes(samples: pl.DataFrame) -> pl.DataFrame:
    """Per (instance, query_hash): the plan shapes (shape_hash) its execution samples ran, sorted; the
    baseline keeps them so a later BLOCK can say whether the plan changed (the design's stronger signal)."""
    if "shape_hash" not in samples.columns or samples.height == 0:
        return pl.DataFrame(
            schema={"instance": pl.String(), "query_hash": pl.String(), "shapes": pl.List(pl.String())}
        )
    return (
        samples.filter(pl.col("query_hash").is_not_null() & pl.col("shape_hash").is_not_null())
        .group_by(pl.col("instance").cast(pl.String), pl.col("query_hash").cast(pl.String))
        .agg(pl.col("shape_hash").cast(pl.String).unique().sort().alias("shapes"))
    )


def _pair_generator(seed: int, instance: str, query_hash: str, metric: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{instance}\x00{query_hash}\x00{metric}".encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:16], "big")])


def subsample(values: np.ndarray, keep: int, generator: np.random.Generator) -> np.ndarray:
    """At most ``keep`` of ``values``, a uniform draw without replacement, in their original order."""
    if values.size <= keep:
        return values
    chosen = np.sort(generator.choice(values.size, size=keep, replace=False))
    return values[chosen]


def _modes(long: pl.DataFrame) -> pl.DataFrame:
    """Per pair: the fingerprint and the queryid seen most often (ties: the smallest), for the row."""
    out = long.group_by(*PAIR_KEY).agg(pl.len().alias("n_window"))
    for column in ("fingerprint", "queryid"):
        counted = (
            long.filter(pl.col(column).is_not_null())
            .group_by(*PAIR_KEY, column)
            .len()
            .sort(*PAIR_KEY, "len", column, descending=[False, False, False, True, False])
            .unique(PAIR_KEY, keep="first")
            .select(*PAIR_KEY, column)
        )
        out = out.join(counted, on=list(PAIR_KEY), how="left")
    return out


def baseline_rows(
    samples: pl.DataFrame,
    *,
    version: str,
    window_start: datetime,
    window_end: datetime,
    created_at: datetime,
    config: SampleDriftConfig = SampleDriftConfig(),
    instance: str | None = None,
) -> pl.DataFrame:
    """The drift_sample_baselines rows of one anchor (pure): every (instance, query_hash, metric) with a
    sample logged in (window_start, window_end] (of ``instance`` only, when given), sorted by that key.

    Refused (BaselineError): an empty version, a window that is not start < end, a window without samples.
    """
    if not version or not version.strip():
        raise BaselineError("baseline version must not be empty (name it after a release, commit or date)")
    start, end = as_utc(window_start), as_utc(window_end)
    if not start < end:
        raise BaselineError(f"baseline window: start {start.isoformat()} is not before end {end.isoformat()}")
    scope = f" of instance {instance}" if instance else ""
    window = samples.filter((pl.col("logged_at") > start) & (pl.col("logged_at") <= end))
    if instance:
        window = window.filter(pl.col("instance") == instance)
    long = long_samples(window)
    if long.height == 0:
        raise BaselineError(
            f"no execution samples{scope} logged in ({start.isoformat()}, {end.isoformat()}]: nothing to "
            "anchor (is the auto_explain sampler on and collected? widen the window)"
        )
    grouped = (
        long.sort(*PAIR_KEY, *SAMPLE_ORDER, "value")
        .group_by(*PAIR_KEY, maintain_order=True)
        .agg(pl.col("value").alias("samples"))
    )
    kept = [
        subsample(
            np.asarray(values, dtype=np.float64),
            config.max_baseline_samples,
            _pair_generator(config.seed, inst, qh, metric),
        ).tolist()
        for inst, qh, metric, values in grouped.iter_rows()
    ]
    rows = (
        grouped.with_columns(pl.Series("samples", kept, dtype=pl.List(pl.Float64)))
        .join(_modes(long), on=list(PAIR_KEY), how="left")
        .join(plan_shapes(window), on=["instance", "query_hash"], how="left")
    )
    return DRIFT_SAMPLE_BASELINES.conform(
        rows.with_columns(
            pl.lit(version, dtype=pl.String).alias("baseline_version"),
            pl.lit(start, dtype=pl.Datetime("us", "UTC")).alias("window_start"),
            pl.lit(end, dtype=pl.Datetime("us", "UTC")).alias("window_end"),
            pl.lit(as_utc(created_at), dtype=pl.Datetime("us", "UTC")).alias("created_at"),
        )
    ).sort("instance", "query_hash", "metric")


def select_baselines(baselines: pl.DataFrame, version: str | None = None) -> pl.DataFrame:
    """The baseline each pair is scored against: rows of ``version`` when named (BaselineError when it has
    none), else each (instance, query_hash, metric)'s newest version (latest created_at; a tie: the
    greatest version label)."""
    if version is not None:
        chosen = baselines.filter(pl.col("baseline_version") == version)
        if chosen.height == 0:
            known = sorted(baselines["baseline_version"].unique().to_list()) if baselines.height else []
            raise BaselineError(
                f"no anchored baseline of version {version!r} (known versions: {', '.join(known) or 'none'};"
                " anchor one with `radar drift anchor-samples`)"
            )
        return chosen.sort(*PAIR_KEY)
    return (
        baselines.sort(
            *PAIR_KEY, "created_at", "baseline_version", descending=[False, False, False, True, True]
        )
        .unique(PAIR_KEY, keep="first", maintain_order=True)
        .sort(*PAIR_KEY)
    )


# ---------------------------------------------------------------------------------------------------------
# I/O edge


def load_sample_baselines(lake_root: Path) -> pl.DataFrame:
    """Every anchored baseline row of the lake (drift_sample_baselines, file columns)."""
    return lake.read_table(lake_root, DRIFT_SAMPLE_BASELINES).select(DRIFT_SAMPLE_BASELINES.column_names)


def read_execution_samples(
    lake_root: Path, start: datetime, end: datetime, instance: str | None = None
) -> pl.DataFrame:
    """execution_samples logged in (start, end] (of one instance when given), with the instance column."""
    start, end = as_utc(start), as_utc(end)

    def query(frame: pl.LazyFrame) -> pl.LazyFrame:
        frame = frame.filter(
            (pl.col("date") >= start.date().isoformat()) & (pl.col("date") <= end.date().isoformat())
        )
        if instance:
            frame = frame.filter(pl.col("instance") == instance)
        return frame.filter((pl.col("logged_at") > start) & (pl.col("logged_at") <= end))

    return lake.read_table(lake_root, EXECUTION_SAMPLES, query)


def anchor_sample_baselines(
    lake_root: Path,
    *,
    version: str,
    start: datetime,
    end: datetime,
    instance: str | None = None,
    config: SampleDriftConfig = SampleDriftConfig(),
    now: datetime | None = None,
) -> pl.DataFrame:
    """Anchor (or re-anchor, under a new version) the baselines of a window and write them to the lake.

    A version already anchored for one of the instances is refused (BaselineError): baselines are never
    rewritten in place; a re-anchor names a new version. Returns the rows written."""
    created = as_utc(now or datetime.now(UTC))
    samples = read_execution_samples(lake_root, start, end, instance)
    rows = baseline_rows(
        samples,
        version=version,
        window_start=start,
        window_end=end,
        created_at=created,
        config=config,
        instance=instance,
    )
    existing = load_sample_baselines(lake_root).filter(pl.col("baseline_version") == version)
    clash = sorted(set(existing["instance"].to_list()) & set(rows["instance"].to_list()))
    if clash:
        raise BaselineError(
            f"baseline version {version!r} is already anchored for instance {', '.join(clash)}: a re-anchor "
            "names a new version (baselines are never rewritten)"
        )
    digest = hashlib.sha256(f"{version}\x00{instance or ''}".encode()).hexdigest()[:12]
    stem = f"{lake.stem_for(created)}-{digest}"
    lake.write_table(lake_root, DRIFT_SAMPLE_BASELINES, rows, {"date": created.date().isoformat()}, stem)
    return rows
