"""Per-execution drift: the current window's execution samples scored against the anchored baselines.

The candidate of a run at ``now`` is every execution sample logged in (now - ``[drift.samples]
current_window``, now]; each (instance, query_hash, metric) of it is scored against that pair's baseline
(``jobs.drift.baselines.select_baselines``: the newest version, or the one named) by the design's scorer
(``jobs.drift.scorer.score_drift``, ``[drift.score]``). One row per pair in ``EXECUTION_DRIFT``; nothing is
dropped silently:

- a baseline pair with too few (or no) candidate samples: the scorer's WARN ``insufficient_samples``
  (n_candidate says how many);
- a candidate pair without any anchored baseline: WARN ``no_baseline`` (n_baseline 0, no distances): the
  query is new since the anchor, or the anchor left its instance out; anchor one.

Pure: ``score_execution_drift``; I/O edge: ``run_execution_drift`` (reads the lake, writes execution_drift).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.drift.baselines import (
    PAIR_KEY,
    SAMPLE_METRICS,
    load_sample_baselines,
    long_samples,
    plan_shapes,
    read_execution_samples,
    select_baselines,
)
from jobs.drift.checks import NO_BASELINE, UNSCORED_REASONS
from jobs.drift.clock import as_utc
from jobs.drift.config import DriftConfig
from jobs.drift.scorer import INSUFFICIENT_SAMPLES, OUTPUT_SCHEMA, WARN, score_drift_segments, shard_expr
from jobs.lake import io as lake
from jobs.schemas.analysed import DRIFT_SAMPLE_BASELINES, EXECUTION_DRIFT
from jobs.schemas.collected import TABLE_STATS_SNAPSHOTS

INSTANCE_WIDE_LATENCY = "instance_wide_latency"
"""Reason of a latency flag downgraded to WARN: most of the instance's queries moved together, their plans
did not (``SampleDriftConfig.instance_shift_share``)."""
FLAG_ORDER = {"PASS": 0, "WARN": 1, "BLOCK": 2}


def candidate_window(now: datetime, config: DriftConfig) -> tuple[datetime, datetime]:
    """(start, end] of the candidate samples of a run at ``now``."""
    end = as_utc(now)
    return end - config.samples.current_window, end


def candidate_lists(in_window: pl.DataFrame) -> pl.DataFrame:
    """The window's samples per (instance, query_hash, metric) with a value: ``value`` (the pair's values,
    a list in no particular order: the scorer sorts them) and ``n_candidate``. One group-by over the
    executions, one row each: the string keys are hashed once per execution, not once per (execution,
    metric) and again to find each pair's baseline (that was most of the scoring's time)."""
    frame = in_window.filter(pl.col("query_hash").is_not_null())
    bad = [
        (~pl.col(column).cast(pl.Float64).is_finite() | (pl.col(column).cast(pl.Float64) < 0)).fill_null(
            False
        )
        for column in SAMPLE_METRICS.values()
    ]
    if frame.height and frame.select(pl.any_horizontal(bad).any()).item():
        long_samples(frame)  # raises the long frame's error, naming the first bad sample
    grouped = frame.group_by(pl.col("instance").cast(pl.String), pl.col("query_hash").cast(pl.String)).agg(
        pl.col(column).filter(pl.col(column).is_not_null()).cast(pl.Float64).alias(metric)
        for metric, column in SAMPLE_METRICS.items()
    )
    return pl.concat(
        grouped.select(
            "instance",
            "query_hash",
            pl.lit(metric, dtype=pl.String).alias("metric"),
            pl.col(metric).alias("value"),
            pl.col(metric).list.len().cast(pl.Int64).alias("n_candidate"),
        ).filter(pl.col("n_candidate") > 0)
        for metric in SAMPLE_METRICS
    )


def candidate_identity(in_window: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Per pair of ``pairs`` (instance, query_hash, metric): the fingerprint and queryid its samples in the
    window logged most often (ties: the smallest). Only for the rows that need them (no baseline, or a
    baseline that does not name them), so only those queries' executions are read again."""
    schema = {"instance": pl.String(), "query_hash": pl.String(), "metric": pl.String()}
    if pairs.height == 0:
        return pl.DataFrame(schema={**schema, "fingerprint": pl.String(), "queryid": pl.Int64()})
    hashes = pairs["query_hash"].unique()
    long = long_samples(in_window.filter(pl.col("query_hash").cast(pl.String).is_in(hashes.implode())))
    return (
        long.join(pairs.select(PAIR_KEY), on=list(PAIR_KEY), how="semi")
        .group_by(*PAIR_KEY)
        .agg(
            pl.col("fingerprint").drop_nulls().mode().sort().first(),
            pl.col("queryid").drop_nulls().mode().sort().first(),
        )
    )


def _score_instance(base: pl.DataFrame, candidates: pl.DataFrame, config: DriftConfig) -> pl.DataFrame:
    """One instance's anchored pairs scored on the batched kernel: each pair's baseline samples and
    candidate values (a list per pair on each side, ``candidate_lists``) as flat arrays with offsets; no
    frame of one row per sample, no string key per sample. Pairs with no sample on either side are left
    to the caller (rows without a score), as before."""
    key = ["query_hash", "metric"]
    samples = base["samples"]
    sides: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for column, lists in (("samples", samples), ("value", candidates["value"])):
        flat = lists.explode(empty_as_null=False, keep_nulls=False)  # every element, no row for an empty list
        if flat.null_count():  # a null sample inside a list: dropped (a copy of every list, only then)
            lists = lists.list.drop_nulls()
            flat = lists.explode(empty_as_null=False, keep_nulls=False)
        if column == "samples":
            samples = lists
        sizes = lists.list.len().fill_null(0).to_numpy().astype(np.int64)
        sides.append((flat.cast(pl.Float64).to_numpy(), np.cumsum(sizes) - sizes, sizes))
    # the pairs: keys only are joined (moving the lists through a join and a sort copied every sample)
    pairs = (
        base.select(key)
        .with_row_index("b")
        .join(candidates.select(key).with_row_index("c"), on=key, how="left")
    )
    b_row = pairs["b"].to_numpy().astype(np.int64)
    c_row = pairs["c"].fill_null(0).to_numpy().astype(np.int64)
    has_c = pairs["c"].is_not_null().to_numpy()
    (b_val, b_starts, b_sizes), (c_val, c_starts, c_sizes) = sides
    b_n = b_sizes[b_row]
    c_n = np.where(has_c, c_sizes[c_row] if c_sizes.size else 0, 0)
    keep = ((b_n + c_n) > 0) & samples.is_not_null().to_numpy()[b_row]  # a null list: left to the caller
    return score_drift_segments(
        pairs.select(key).filter(pl.Series(keep)),
        b_val,
        b_starts[b_row][keep],
        b_n[keep],
        c_val,
        np.where(has_c, c_starts[c_row] if c_starts.size else 0, 0)[keep],
        c_n[keep],
        config.score,
    )


def score_execution_drift(
    samples: pl.DataFrame,
    baselines: pl.DataFrame,
    now: datetime,
    config: DriftConfig = DriftConfig(),
    *,
    version: str | None = None,
) -> pl.DataFrame:
    """Score the execution samples of the window ending at ``now`` against the baselines (pure).

    ``samples``: execution_samples rows with ``instance`` (only those in the window are used);
    ``baselines``: drift_sample_baselines rows (every version: the newest per pair is chosen, or
    ``version``). Returns EXECUTION_DRIFT rows sorted by (instance, query_hash, metric)."""
    start, end = candidate_window(now, config)
    in_window = samples.filter((pl.col("logged_at") > start) & (pl.col("logged_at") <= end))
    candidate = candidate_lists(in_window)
    chosen = select_baselines(baselines, version) if (baselines.height or version) else baselines
    base = chosen.select(*PAIR_KEY, "baseline_version", "fingerprint", "queryid", "samples")
    named = base.filter(pl.col("fingerprint").is_not_null() & pl.col("queryid").is_not_null())
    cand_meta = candidate_identity(
        in_window, candidate.select(PAIR_KEY).join(named.select(PAIR_KEY), on=list(PAIR_KEY), how="anti")
    )
    scored_parts: list[pl.DataFrame] = []
    instances = sorted(set(base["instance"].to_list()))
    for instance in instances:  # the scorer's pair is (query_hash, metric): one call per instance
        scored = _score_instance(
            base.filter(pl.col("instance") == instance),
            candidate.filter(pl.col("instance") == instance),
            config,
        )
        scored_parts.append(scored.with_columns(pl.lit(instance, dtype=pl.String).alias("instance")))
    scored = (
        pl.concat(scored_parts)
        if scored_parts
        else pl.DataFrame(schema={**OUTPUT_SCHEMA, "instance": pl.String()})
    )
    scored = scored.join(
        base.select(*PAIR_KEY, "baseline_version", "fingerprint", "queryid"), on=list(PAIR_KEY), how="left"
    )
    # a baseline row without samples and no candidate gives the scorer nothing: still a visible row
    empty = base.join(scored.select(PAIR_KEY), on=list(PAIR_KEY), how="anti").with_columns(
        shard_expr(config.score.shard_count),
        pl.lit(0, dtype=pl.Int64).alias("n_baseline"),
        pl.lit(0, dtype=pl.Int64).alias("n_candidate"),
        pl.lit(WARN).alias("flag"),
        pl.lit(INSUFFICIENT_SAMPLES).alias("reason"),
        pl.lit(False).alias("psi_data_quality"),
        pl.lit(config.score.profile).alias("profile"),
    )
    unanchored = (
        candidate.select(PAIR_KEY)
        .join(base.select(PAIR_KEY), on=list(PAIR_KEY), how="anti")
        .join(cand_meta, on=list(PAIR_KEY), how="left")
    )
    counts = candidate.select(*PAIR_KEY, "n_candidate")
    no_baseline = unanchored.join(counts, on=list(PAIR_KEY)).with_columns(
        shard_expr(config.score.shard_count),
        pl.lit(0, dtype=pl.Int64).alias("n_baseline"),
        pl.lit(WARN).alias("flag"),
        pl.lit(NO_BASELINE).alias("reason"),
        pl.lit(False).alias("psi_data_quality"),
        pl.lit(config.score.profile).alias("profile"),
    )
    rows = pl.concat([scored, empty.drop("samples"), no_baseline], how="diagonal_relaxed")
    # the candidate's identity when the baseline has none
    rows = rows.join(
        cand_meta.rename({"fingerprint": "_cand_fp", "queryid": "_cand_qid"}), on=list(PAIR_KEY), how="left"
    ).with_columns(
        pl.coalesce("fingerprint", "_cand_fp").alias("fingerprint"),
        pl.coalesce("queryid", "_cand_qid").alias("queryid"),
        pl.lit(end, dtype=pl.Datetime("us", "UTC")).alias("scored_at"),
        pl.lit(start, dtype=pl.Datetime("us", "UTC")).alias("window_start"),
        pl.lit(end, dtype=pl.Datetime("us", "UTC")).alias("window_end"),
    )
    empty_side = (pl.col("n_baseline") == 0) | (pl.col("n_candidate") == 0)
    rows = (
        rows.with_columns(  # no distance between a side and nothing (the scorer's smoothing would give one)
            *(
                pl.when(empty_side).then(None).otherwise(pl.col(c)).alias(c)
                for c in ("js", "psi", "wasserstein")
            )
        )
    )
    rows = with_plan_change(rows, chosen, in_window)
    rows = instance_wide_latency(EXECUTION_DRIFT.conform(rows.drop("_cand_fp", "_cand_qid")), config)
    return rows.sort("instance", "query_hash", "metric")


def with_plan_change(rows: pl.DataFrame, baselines: pl.DataFrame, in_window: pl.DataFrame) -> pl.DataFrame:
    """``plan_changed`` and ``new_shapes`` of each row: did the candidate window run a plan shape the
    baseline's anchor window never did (the design's stronger signal beside a BLOCK)? Null when a side's
    shapes are unknown (a baseline anchored before shapes were kept, or no shape logged)."""
    query = ["instance", "query_hash"]
    if "shapes" not in baselines.columns:  # rows anchored before the column: shapes unknown
        baselines = baselines.with_columns(pl.lit(None, dtype=pl.List(pl.String())).alias("shapes"))
    before = baselines.select(*query, "baseline_version", "shapes").unique([*query, "baseline_version"])
    now = plan_shapes(in_window).rename({"shapes": "_now"})
    joined = rows.join(before, on=[*query, "baseline_version"], how="left").join(now, on=query, how="left")
    known = pl.col("shapes").list.len().fill_null(0).gt(0) & pl.col("_now").list.len().fill_null(0).gt(0)
    new = pl.col("_now").list.set_difference(pl.col("shapes")).list.sort()
    return joined.with_columns(
        pl.when(known).then(new.list.len() > 0).otherwise(None).alias("plan_changed"),
        pl.when(known).then(new).otherwise(None).alias("new_shapes"),
    ).drop("shapes", "_now")


def instance_wide_latency(drift: pl.DataFrame, config: DriftConfig = DriftConfig()) -> pl.DataFrame:
    """Downgrade the latency flags that belong to the host, not the query (pure).

    Per instance, over its latency pairs with a real verdict (not insufficient_samples / no_baseline): when
    there are at least ``instance_shift_min_pairs`` and at least ``instance_shift_share`` of them are WARN
    or BLOCK, each flagged latency pair whose cost and cardinality both PASS becomes WARN with reason
    ``instance_wide_latency``: CPU contention, a noisy neighbour or a slower server moves every query's
    latency and no plan. A pair whose cost or cardinality moved too keeps its flag (a plan changed), and so
    does every pair of an instance where only a few queries slowed."""
    cfg = config.samples
    verdict = ~pl.col("reason").is_in(list(UNSCORED_REASONS)).fill_null(False)
    latency = drift.filter((pl.col("metric") == "latency") & verdict)
    shifted = (
        latency.group_by("instance")
        .agg(pl.len().alias("pairs"), (pl.col("flag") != "PASS").sum().alias("flagged"))
        .filter(
            (pl.col("pairs") >= cfg.instance_shift_min_pairs)
            & (pl.col("flagged") >= cfg.instance_shift_share * pl.col("pairs"))
        )
        .select("instance")
    )
    if shifted.height == 0:
        return drift
    plan_moved = (
        drift.filter(pl.col("metric").is_in(["cost", "cardinality"]) & (pl.col("flag") != "PASS") & verdict)
        .select("instance", "query_hash")
        .unique()
    )
    host = (
        latency.join(shifted, on="instance", how="semi")
        .filter(pl.col("flag") != "PASS")
        .join(plan_moved, on=["instance", "query_hash"], how="anti")
        .select("instance", "query_hash", pl.lit(True).alias("_host"))
    )
    marked = drift.join(host, on=["instance", "query_hash"], how="left").with_columns(
        (pl.col("_host").fill_null(False) & (pl.col("metric") == "latency")).alias("_host")
    )
    return marked.with_columns(
        pl.when("_host").then(pl.lit(WARN)).otherwise("flag").alias("flag"),
        pl.when("_host").then(pl.lit(INSTANCE_WIDE_LATENCY)).otherwise("reason").alias("reason"),
    ).drop("_host")


def worst_flag(drift: pl.DataFrame) -> str | None:
    """The worst flag of the rows (BLOCK > WARN > PASS); None when there is none."""
    flags = [f for f in drift["flag"].unique().to_list() if f is not None] if drift.height else []
    return max(flags, key=FLAG_ORDER.__getitem__) if flags else None


def flag_counts(drift: pl.DataFrame) -> dict[str, int]:
    """Rows per flag (PASS, WARN, BLOCK: every flag, 0 when absent)."""
    found = dict(drift.group_by("flag").len().iter_rows()) if drift.height else {}
    return {flag: int(found.get(flag, 0)) for flag in FLAG_ORDER}


def counts_by_metric(drift: pl.DataFrame) -> pl.DataFrame:
    """One row per metric: PASS, WARN, BLOCK, insufficient_samples and no_baseline counts."""
    return (
        drift.group_by("metric")
        .agg(
            *(pl.col("flag").eq(flag).sum().alias(flag) for flag in FLAG_ORDER),
            *(pl.col("reason").eq(reason).sum().alias(reason) for reason in UNSCORED_REASONS),
        )
        .sort("metric")
    )


def degenerate_count(drift: pl.DataFrame, config: DriftConfig = DriftConfig()) -> int:
    """Rows with fewer than ``[drift.score] min_samples`` samples on either side (no_baseline included)."""
    if drift.height == 0:
        return 0
    floor = config.score.min_samples
    return int(drift.filter((pl.col("n_baseline") < floor) | (pl.col("n_candidate") < floor)).height)


# ---------------------------------------------------------------------------------------------------------
# I/O edge


def run_execution_drift(
    lake_root: Path,
    config: DriftConfig = DriftConfig(),
    now: datetime | None = None,
    version: str | None = None,
) -> pl.DataFrame:
    """Score the lake's current window (ending at ``now``, default the wall clock) against its anchored
    baselines and write the rows to execution_drift (one file per run; none when there is no row)."""
    end = as_utc(now or datetime.now(UTC))
    start, _ = candidate_window(end, config)
    samples = read_execution_samples(lake_root, start, end)
    drift = score_execution_drift(samples, load_sample_baselines(lake_root), end, config, version=version)
    if drift.height:
        lake.write_table(
            lake_root, EXECUTION_DRIFT, drift, {"date": end.date().isoformat()}, lake.stem_for(end)
        )
    return drift


def read_recent_drift(lake_root: Path, now: datetime, window: timedelta) -> pl.DataFrame:
    """execution_drift rows scored in (now - window, now]."""
    end = as_utc(now)
    start = end - window

    def query(frame: pl.LazyFrame) -> pl.LazyFrame:
        days = (pl.col("date") >= start.date().isoformat()) & (pl.col("date") <= end.date().isoformat())
        return frame.filter(days & (pl.col("scored_at") > start) & (pl.col("scored_at") <= end))

    return lake.read_table(lake_root, EXECUTION_DRIFT, query)


def read_table_stats(lake_root: Path, now: datetime, lookback: timedelta) -> pl.DataFrame:
    """table_stats_snapshots captured in (now - 2 x lookback, now]: the lookback and a reference before."""
    end = as_utc(now)
    start = end - 2 * lookback

    def query(frame: pl.LazyFrame) -> pl.LazyFrame:
        days = (pl.col("date") >= start.date().isoformat()) & (pl.col("date") <= end.date().isoformat())
        return frame.filter(days & (pl.col("captured_at") > start) & (pl.col("captured_at") <= end))

    return lake.read_table(lake_root, TABLE_STATS_SNAPSHOTS, query)


def latest_scored_at(lake_root: Path) -> datetime | None:
    """The as-of time of the lake's latest scoring run (None before the first)."""
    latest = lake.read_table(lake_root, EXECUTION_DRIFT, lambda f: f.select(pl.col("scored_at").max()))
    return latest.item() if latest.height else None


def check_lake(
    lake_root: Path, config: DriftConfig = DriftConfig(), now: datetime | None = None
) -> list[Any]:
    """The stage's checks (jobs.drift.checks) over the lake, as of ``now`` (default: the latest scoring
    run's time, so the checks judge the last run; the wall clock before any)."""
    from jobs.drift.checks import drift_checks

    at = as_utc(now) if now else (latest_scored_at(lake_root) or datetime.now(UTC))
    samples = config.samples
    drift = read_recent_drift(lake_root, at, samples.stale_window)
    stats = read_table_stats(lake_root, at, samples.analyze_lookback)
    recent = read_execution_samples(lake_root, at - samples.stale_window - samples.current_window, at)
    relations = (
        recent.select("instance", "query_hash", pl.col("relations").alias("relation"))
        .explode("relation")
        .drop_nulls()
        .unique()
        if recent.height
        else None
    )
    anchors = lake.read_table(
        lake_root,
        DRIFT_SAMPLE_BASELINES,
        lambda f: f.select("baseline_version", "instance", "query_hash", "metric", "window_end"),
    )
    return drift_checks(drift, stats, at, config, relations, anchors)
