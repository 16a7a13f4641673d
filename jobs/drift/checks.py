"""Checks of the per-execution drift stage (pure; the Dagster asset checks and `radar drift` call them).

- ``stale_baseline_check``: of the pairs scored over the last ``[drift.samples] stale_window`` (each pair's
  latest row; insufficient_samples and no_baseline rows are no verdict and do not count), a BLOCK share
  above ``stale_block_share`` means the baseline is likely stale rather than every query regressed at
  once: typically an ANALYZE re-costed the plans. It names the tables of the BLOCKing instances analysed
  within ``analyze_lookback`` (table_stats_snapshots: last_analyze / last_autoanalyze in the lookback, or
  moved, or analyze_count / autoanalyze_count grew since the snapshot before it) and suggests the
  re-anchor command.
- ``degenerate_samples_check``: of the same pairs (no_baseline rows left out: they need an anchor, not a
  wider window), an insufficient_samples share above ``degenerate_share`` says "widen the capture window"
  (``current_window``) or raise ``auto_explain.sample_rate``.

Both pass when there is nothing to judge (no scored pair in the window).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from jobs.drift.clock import as_utc
from jobs.drift.config import DriftConfig
from jobs.drift.scorer import BLOCK, INSUFFICIENT_SAMPLES
from jobs.durations import format_duration

NO_BASELINE = "no_baseline"
"""Reason of a candidate pair that has no anchored baseline (flag WARN: never a silent PASS)."""
UNSCORED_REASONS = (INSUFFICIENT_SAMPLES, NO_BASELINE)
"""Reasons of rows whose flag is not a verdict on the distributions."""

STALE_BASELINE = "stale_baseline"
DEGENERATE_SAMPLES = "degenerate_samples"
PAIR = ["instance", "query_hash", "metric"]
TABLE = ["instance", "dbname", "relid"]


@dataclass(frozen=True)
class DriftCheck:
    """One check's result: passed, a sentence for people, and figures for machines."""

    name: str
    passed: bool
    description: str
    metadata: dict[str, object] = field(default_factory=dict)


def latest_scores(drift: pl.DataFrame, now: datetime, window: timedelta) -> pl.DataFrame:
    """Each pair's latest execution_drift row scored in (now - window, now]."""
    end = as_utc(now)
    return (
        drift.filter((pl.col("scored_at") > end - window) & (pl.col("scored_at") <= end))
        .sort(*PAIR, "scored_at", descending=[False, False, False, True])
        .unique(PAIR, keep="first", maintain_order=True)
    )


def analysed_tables(table_stats: pl.DataFrame, now: datetime, lookback: timedelta) -> pl.DataFrame:
    """Tables analysed (ANALYZE or autoanalyze) in (now - lookback, now], from table_stats_snapshots rows
    (with ``instance``): instance, dbname, schemaname, relname, analysed_at (the later of last_analyze and
    last_autoanalyze at the latest snapshot), sorted by instance and name."""
    columns = {"instance": pl.String, "dbname": pl.String, "schemaname": pl.String, "relname": pl.String}
    empty = pl.DataFrame(schema={**columns, "analysed_at": pl.Datetime("us", "UTC")})
    end = as_utc(now)
    start = end - lookback
    stats = table_stats.filter(pl.col("captured_at") <= end).with_columns(
        pl.max_horizontal("last_analyze", "last_autoanalyze").alias("analysed_at"),
        (pl.col("analyze_count").fill_null(0) + pl.col("autoanalyze_count").fill_null(0)).alias("analyses"),
    )
    if stats.height == 0:
        return empty
    ordered = stats.sort(*TABLE, "captured_at")
    latest = ordered.unique(TABLE, keep="last", maintain_order=True)
    # the reference: the latest snapshot at or before the lookback's start, else the earliest after it
    before = ordered.filter(pl.col("captured_at") <= start).unique(TABLE, keep="last", maintain_order=True)
    after = ordered.filter(pl.col("captured_at") > start).unique(TABLE, keep="first", maintain_order=True)
    reference = pl.concat([before, after.join(before.select(TABLE), on=TABLE, how="anti")]).select(
        *TABLE,
        pl.col("analysed_at").alias("ref_analysed_at"),
        pl.col("analyses").alias("ref_analyses"),
        pl.col("captured_at").alias("ref_captured_at"),
    )
    joined = latest.join(reference, on=TABLE, how="left")
    moved = (
        (pl.col("analysed_at") > start)
        | (
            (pl.col("ref_captured_at") < pl.col("captured_at"))
            & (
                (pl.col("analyses") > pl.col("ref_analyses"))
                | (pl.col("analysed_at") > pl.col("ref_analysed_at"))
                | (pl.col("analysed_at").is_not_null() & pl.col("ref_analysed_at").is_null())
            )
        )
    ).fill_null(False)
    found = joined.filter(moved).select(*columns, "analysed_at")
    return found.sort("instance", "dbname", "schemaname", "relname") if found.height else empty


def table_names(tables: pl.DataFrame) -> list[str]:
    """``instance:dbname.schema.table`` of each row of ``analysed_tables``."""
    return [
        f"{r['instance']}:{r['dbname']}.{r['schemaname']}.{r['relname']}"
        for r in tables.iter_rows(named=True)
    ]


def reanchor_command(now: datetime, start: datetime, instances: list[str]) -> str:
    """The suggested `radar drift anchor-samples` of a new version over (start, now]."""
    end = as_utc(now)
    scope = f" --instance {instances[0]}" if len(instances) == 1 else ""
    return (
        f"radar drift anchor-samples --version reanchor-{end:%Y%m%dT%H%M%SZ} "
        f"--start {as_utc(start).isoformat().replace('+00:00', 'Z')} "
        f"--end {end.isoformat().replace('+00:00', 'Z')}{scope}"
    )


def _anchored_until(blocks: pl.DataFrame, anchors: pl.DataFrame | None) -> datetime | None:
    """The latest end of the anchor windows the BLOCKed pairs were scored against (their baseline
    versions' ``window_end``); None when unknown (no anchors given or none matches)."""
    if anchors is None or anchors.height == 0 or blocks.height == 0 or "baseline_version" not in blocks:
        return None
    keys = ["baseline_version", "instance", "query_hash", "metric"]
    ends = blocks.select(keys).join(anchors.select(*keys, "window_end"), on=keys, how="inner")["window_end"]
    return ends.max() if ends.len() else None  # type: ignore[return-value]


def stale_baseline_check(
    drift: pl.DataFrame,
    table_stats: pl.DataFrame,
    now: datetime,
    config: DriftConfig = DriftConfig(),
    relations: pl.DataFrame | None = None,
    anchors: pl.DataFrame | None = None,
) -> DriftCheck:
    """BLOCK share of the pairs scored over the last stale_window above stale_block_share, with at least
    stale_min_block_pairs of them: "baseline likely stale", naming the tables analysed in the last
    analyze_lookback (those the BLOCKed queries' plans read when ``relations``, instance, query_hash,
    relation, names any, else every analysed table of the BLOCKing instances).

    A re-anchor is proposed only from a stats event after the baseline was anchored (``anchors``: the
    drift_sample_baselines rows, their ``window_end``): an ANALYZE before the anchor explains nothing the
    baseline did not already see, and a real regression then reads as a stale baseline. The proposed
    window starts at that event and ends at the first BLOCK scored after it: never one that spans the good
    baseline, or later phases, with the regressed one."""
    samples = config.samples
    window = format_duration(samples.stale_window)
    scored = latest_scores(drift, now, samples.stale_window).filter(~pl.col("reason").is_in(UNSCORED_REASONS))
    blocks = scored.filter(pl.col("flag") == BLOCK)
    share = blocks.height / scored.height if scored.height else 0.0
    passed = share <= samples.stale_block_share or blocks.height < samples.stale_min_block_pairs
    metadata: dict[str, object] = {
        "scored_pairs": scored.height,
        "block_pairs": blocks.height,
        "block_share": share,
        "stale_block_share": samples.stale_block_share,
        "stale_min_block_pairs": samples.stale_min_block_pairs,
        "stale_window": window,
    }
    if passed:
        return DriftCheck(
            STALE_BASELINE,
            True,
            f"{blocks.height} of {scored.height} scored pairs BLOCK over the last {window} ({share:.1%}, "
            f"limit {samples.stale_block_share:.1%} and {samples.stale_min_block_pairs} pairs)",
            metadata,
        )
    instances = sorted(set(blocks["instance"].to_list()))
    tables = analysed_tables(table_stats, now, samples.analyze_lookback).filter(
        pl.col("instance").is_in(instances)
    )
    anchored = _anchored_until(blocks, anchors)
    if anchored is not None:  # only stats events the baseline did not already see
        tables = tables.filter(pl.col("analysed_at") > anchored)
    if relations is not None and relations.height:
        read = relations.join(blocks.select("instance", "query_hash").unique(), on=["instance", "query_hash"])
        theirs = tables.join(
            read.select("instance", pl.col("relation").alias("relname")).unique(), on=["instance", "relname"]
        )
        if theirs.height:  # the BLOCKed queries' own tables: the likely cause, named alone
            tables = theirs.sort("instance", "dbname", "schemaname", "relname")
    metadata["tables_of_blocked_queries"] = relations is not None and relations.height > 0
    names = table_names(tables)
    lookback = format_duration(samples.analyze_lookback)
    since = " since the baseline was anchored" if anchored is not None else ""
    command = None
    if tables.height:
        start = tables["analysed_at"].max()
        blocked = drift.join(blocks.select(PAIR), on=PAIR, how="semi").filter(pl.col("flag") == BLOCK)
        after = blocked.filter((pl.col("scored_at") > start) & (pl.col("scored_at") <= as_utc(now)))[
            "scored_at"
        ]
        if after.len():  # the new plans' samples up to the first BLOCK that judged them
            command = reanchor_command(after.min(), start, instances)  # type: ignore[arg-type]
    metadata |= {"analysed_tables": names, "reanchor": command}
    figures = (
        f"{blocks.height} of {scored.height} scored pairs ({share:.1%}) BLOCK over the last {window} "
        f"(limit {samples.stale_block_share:.1%})"
    )
    if not names:
        return DriftCheck(
            STALE_BASELINE,
            False,
            f"{figures}; no table of {', '.join(instances)} was analysed in the last {lookback}{since}: no "
            "stats event explains them, so no re-anchor is proposed; look at them as regressions",
            metadata,
        )
    advice = (
        f"if the new plans are the expected ones, re-anchor: {command}"
        if command
        else "no BLOCK was scored after them yet: no window to re-anchor"
    )
    return DriftCheck(
        STALE_BASELINE,
        False,
        f"baseline likely stale: {figures}; tables analysed in the last {lookback}{since}: "
        f"{', '.join(names)}; {advice}",
        metadata,
    )


def degenerate_samples_check(
    drift: pl.DataFrame, now: datetime, config: DriftConfig = DriftConfig()
) -> DriftCheck:
    """insufficient_samples share of the pairs scored over the last stale_window above degenerate_share:
    "widen the capture window"."""
    samples = config.samples
    latest = latest_scores(drift, now, samples.stale_window)
    judged = latest.filter(pl.col("reason") != NO_BASELINE)
    thin = judged.filter(pl.col("reason") == INSUFFICIENT_SAMPLES)
    floor = config.score.min_samples
    share = thin.height / judged.height if judged.height else 0.0
    metadata: dict[str, object] = {
        "pairs": judged.height,
        "insufficient_samples": thin.height,
        "insufficient_share": share,
        "degenerate_share": samples.degenerate_share,
        "thin_candidate": thin.filter(pl.col("n_candidate") < floor).height,
        "thin_baseline": thin.filter(pl.col("n_baseline") < floor).height,
        "no_baseline": latest.height - judged.height,
    }
    if share <= samples.degenerate_share:
        return DriftCheck(
            DEGENERATE_SAMPLES,
            True,
            f"{thin.height} of {judged.height} pairs have fewer than {floor} samples on a side ({share:.1%},"
            f" limit {samples.degenerate_share:.1%})",
            metadata,
        )
    return DriftCheck(
        DEGENERATE_SAMPLES,
        False,
        f"{thin.height} of {judged.height} pairs ({share:.1%}, limit {samples.degenerate_share:.1%}) have "
        f"fewer than {floor} samples on a side ({metadata['thin_candidate']} in the current window, "
        f"{metadata['thin_baseline']} in the baseline): widen the capture window ([drift.samples] "
        f"current_window, now {format_duration(samples.current_window)}; a thin baseline: re-anchor over a "
        "longer window) or raise auto_explain.sample_rate",
        metadata,
    )


def drift_checks(
    drift: pl.DataFrame,
    table_stats: pl.DataFrame,
    now: datetime,
    config: DriftConfig = DriftConfig(),
    relations: pl.DataFrame | None = None,
    anchors: pl.DataFrame | None = None,
) -> list[DriftCheck]:
    """Both checks, stale baseline first (``anchors``: drift_sample_baselines rows, their windows)."""
    return [
        stale_baseline_check(drift, table_stats, now, config, relations, anchors),
        degenerate_samples_check(drift, now, config),
    ]
