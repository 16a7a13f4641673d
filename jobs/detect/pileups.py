"""Live pile-ups: several backends running one statement far longer than it usually takes, or queued on a
lock behind one backend, seen in the snapshots' ``activity_queries`` rows while it is happening (a
statement reaches pg_stat_statements only when it finishes: a pile-up is invisible there until it ends).

A snapshot's group (instance, dbid, userid, statement fingerprint) is a pile-up when

- at least ``min_backends`` of its backends wait on a heavyweight lock and the longest has waited
  ``min_seconds`` (a lock queue), or
- at least ``min_backends`` run it and their median running time is at least ``min_seconds`` and
  ``usual_factor`` times its usual latency (its calls-weighted mean in the lake's samples before the
  episode; ``min_seconds`` alone for a query the lake has no samples of).

An episode is a run of consecutive snapshots of the instance in which the group is a pile-up: open while
the instance's latest snapshot shows it, resolved at the first snapshot that does not. Its id is stable
for its life (instance, group and first snapshot), so an alert is sent once when it opens and once when
it resolves. Pure: frames in, frames out.
"""

from __future__ import annotations

import hashlib

import polars as pl

from jobs.detect.config import PileupConfig

GROUP = ["instance", "dbid", "userid", "fingerprint"]
"""A statement of an instance: its text's fingerprint (a statement queued on a lock has no query_id yet)."""
OPEN, RESOLVED = "open", "resolved"
LOCK_QUEUE, SLOW = "lock_queue", "slow"

EPISODE_SCHEMA: dict[str, pl.DataType] = {
    "pileup_id": pl.String(),
    "instance": pl.String(),
    "dbid": pl.Int64(),
    "userid": pl.Int64(),
    "fingerprint": pl.String(),
    "queryid": pl.Int64(),
    "query": pl.String(),
    "status": pl.String(),
    "cause": pl.String(),
    "first_seen": pl.Datetime("us", "UTC"),
    "last_seen": pl.Datetime("us", "UTC"),
    "resolved_at": pl.Datetime("us", "UTC"),
    "snapshots": pl.UInt32(),
    "max_backends": pl.Int64(),
    "backends_now": pl.Int64(),
    "longest_s": pl.Float64(),
    "usual_ms": pl.Float64(),
    "wait_event": pl.String(),
    "blocker_pid": pl.Int64(),
    "blocker_state": pl.String(),
    "blocker_queryid": pl.Int64(),
    "blocker_query": pl.String(),
    "blocker_xact_s": pl.Float64(),
}
"""One row per episode (``pileup_episodes``): what an alert says."""


def usual_latency(samples: pl.DataFrame, first_seen: pl.DataFrame) -> pl.DataFrame:
    """Per group, its calls-weighted mean latency (ms) over the samples of its query id that ended before
    the group was first seen in the window (``first_seen``: GROUP, ``queryid``, ``first_seen``): the
    pile-up's own executions, which finish later, do not raise the bar it is judged by. A group without a
    query id (queued before parse analysis ended) has none."""
    if samples.height == 0 or first_seen.height == 0:
        return first_seen.select(GROUP).with_columns(pl.lit(None, dtype=pl.Float64).alias("usual_ms"))
    by_query = ["instance", "dbid", "userid", "queryid"]
    keyed = samples.join(first_seen.drop_nulls("queryid"), on=by_query, how="inner").filter(
        pl.col("interval_end") <= pl.col("first_seen")
    )
    usual = keyed.group_by(GROUP).agg(
        (pl.col("total_exec_time").sum() / pl.col("calls").sum()).alias("usual_ms")
    )
    return first_seen.select(GROUP).join(usual, on=GROUP, how="left")


def pileup_rows(running: pl.DataFrame, usual: pl.DataFrame, config: PileupConfig) -> pl.DataFrame:
    """The ``activity_queries`` rows that are a pile-up, with their ``cause`` and ``usual_ms``."""
    if running.height == 0:
        return running.with_columns(
            pl.lit(None, dtype=pl.String).alias("cause"), pl.lit(None, dtype=pl.Float64).alias("usual_ms")
        )
    rows = running.join(usual.select(*GROUP, "usual_ms"), on=GROUP, how="left")
    bar_s = pl.max_horizontal(
        pl.lit(config.min_seconds), (pl.col("usual_ms") * config.usual_factor / 1000).fill_null(0.0)
    )
    lock_queue = (pl.col("waiting_lock") >= config.min_backends) & (pl.col("longest_s") >= config.min_seconds)
    slow = (pl.col("backends") >= config.min_backends) & (pl.col("median_s") >= bar_s)
    return rows.with_columns(
        pl.when(lock_queue).then(pl.lit(LOCK_QUEUE)).when(slow).then(pl.lit(SLOW)).alias("cause")
    ).filter(pl.col("cause").is_not_null())


def _episode_id(row: dict) -> str:
    key = "|".join(str(row[c]) for c in GROUP) + "|" + row["first_seen"].isoformat()
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def pileup_episodes(snapshots: pl.DataFrame, piles: pl.DataFrame) -> pl.DataFrame:
    """Episodes (``EPISODE_SCHEMA``) from the instances' snapshot times (``snapshots``: instance,
    captured_at; every snapshot, with or without a pile-up) and the pile-up rows (``pileup_rows``)."""
    if piles.height == 0:
        return pl.DataFrame(schema=EPISODE_SCHEMA)
    numbered = (
        snapshots.select("instance", "captured_at")
        .unique()
        .sort("instance", "captured_at")
        .with_columns(pl.int_range(pl.len()).over("instance").alias("_snap"))
    )
    latest = numbered.group_by("instance").agg(pl.col("_snap").max().alias("_latest"))
    rows = (
        piles.join(numbered, on=["instance", "captured_at"], how="inner")
        .sort(*GROUP, "_snap")
        .with_columns(
            (pl.col("_snap").diff().over(GROUP).fill_null(1) != 1).cum_sum().over(GROUP).alias("_episode")
        )
    )
    episodes = (
        rows.group_by(*GROUP, "_episode", maintain_order=True)
        .agg(
            pl.col("captured_at").min().alias("first_seen"),
            pl.col("captured_at").max().alias("last_seen"),
            pl.col("_snap").max().alias("_last_snap"),
            pl.len().cast(pl.UInt32).alias("snapshots"),
            pl.col("backends").max().alias("max_backends"),
            pl.col("backends").last().alias("backends_now"),
            pl.col("longest_s").max(),
            pl.col("usual_ms").first(),
            pl.col("queryid").drop_nulls().last(),
            pl.col("query").drop_nulls().last(),
            # the cause, wait and blocker at the episode's latest snapshot
            *(
                pl.col(c).last()
                for c in (
                    "cause",
                    "wait_event",
                    "blocker_pid",
                    "blocker_state",
                    "blocker_queryid",
                    "blocker_query",
                    "blocker_xact_s",
                )
            ),
        )
        .join(latest, on="instance")
        .join(
            numbered.select(
                "instance", pl.col("_snap").alias("_next"), pl.col("captured_at").alias("resolved_at")
            ),
            left_on=["instance", pl.col("_last_snap") + 1],
            right_on=["instance", "_next"],
            how="left",
        )
        .with_columns(
            pl.when(pl.col("_last_snap") == pl.col("_latest"))
            .then(pl.lit(OPEN))
            .otherwise(pl.lit(RESOLVED))
            .alias("status")
        )
    )
    ids = [_episode_id(r) for r in episodes.select(*GROUP, "first_seen").iter_rows(named=True)]
    return (
        episodes.with_columns(pl.Series("pileup_id", ids, dtype=pl.String))
        .select(list(EPISODE_SCHEMA))
        .cast(EPISODE_SCHEMA)  # type: ignore[arg-type]
        .sort("first_seen", "pileup_id")
    )


def live_pileups(
    snapshots: pl.DataFrame,
    running: pl.DataFrame,
    samples: pl.DataFrame,
    config: PileupConfig = PileupConfig(),
) -> pl.DataFrame:
    """Episodes of the window: ``snapshots`` (instance, captured_at), ``running`` (activity_queries rows
    with their instance), ``samples`` (query_samples rows of those query ids: instance, dbid, userid,
    queryid, interval_end, calls, total_exec_time)."""
    if running.height == 0:
        return pl.DataFrame(schema=EPISODE_SCHEMA)
    first_seen = running.group_by(GROUP).agg(
        pl.col("captured_at").min().alias("first_seen"), pl.col("queryid").drop_nulls().last()
    )
    usual = usual_latency(samples, first_seen)
    return pileup_episodes(snapshots, pileup_rows(running, usual, config))
