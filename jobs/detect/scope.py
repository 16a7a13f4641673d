"""What an incremental detection run re-examines, so its cost depends on what is new, not on the history.

A run's state is kept in the lake: ``analysis_runs`` (one row per run and instance: the latest
query_samples ``interval_end`` the run saw, its *samples watermark*) and ``analysed_deploys`` (every deploy
marker a run has seen). The next run's scope (``AnalysisScope``):

- **Deploys.** A deploy is re-examined when its window ``(deployed_at - window_before, deployed_at +
  window_after]`` received new samples on an instance it applies to (samples with ``interval_end`` after the
  instance's previous watermark, up to its current one), or when no run has seen the deploy yet (a marker
  recorded late, for a window whose samples were already there). Inside a re-examined deploy only the
  series with new samples in the window are analysed again: a series' deploy verdict depends on its window
  samples only, so the others' verdicts are the ones already in the lake. Everything else is left alone.
- **Unannounced.** Every busy series gets new samples every minute, so "series with new samples" would be
  every series. Instead each series with new samples is pre-filtered cheaply: the calls-weighted mean of its
  new samples against its level, the calls-weighted mean over ``ScopeConfig.level_window`` before the
  previous watermark. The full change-point search over the history runs only for series that moved by at
  least ``RegressionConfig.latency_change_threshold`` either way (a step up, or a recovery), and for series
  with no level yet (new queries). Benjamini-Hochberg then controls the false discovery rate over the
  candidates of the series searched, not of the whole fleet (an intended difference from a full run).
- **Instances** with no previous run row are analysed in full (a new instance, or the first run).

A full run (``DetectionConfig(incremental=False)``, or no state yet) has ``scope = None``: everything, as
before. Both write the run state, so an incremental run can follow a full one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import polars as pl

from jobs.collect.deploys import deploys_for_instances
from jobs.detect.config import RegressionConfig, ScopeConfig
from jobs.detect.findings import run_id_for
from jobs.detect.work_config import DETECTION_SAMPLE_COLUMNS
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.storage import LakePath, lake_path
from jobs.query.identity import attach_fingerprints, fingerprint_texts
from jobs.query.series import SERIES_KEY, fingerprinted_samples, merge_intervals
from jobs.schemas.analysed import ANALYSED_DEPLOYS, ANALYSIS_RUNS
from jobs.schemas.collected import QUERY_SAMPLES

_STAMP_LENGTH = len("20261129T120000000000Z")


@dataclass(frozen=True)
class AnalysisScope:
    """What a run re-examines; ``None`` in its place means everything (a full run)."""

    previous: Mapping[str, datetime | None]
    """Per instance with samples: the previous run's samples watermark (samples with a later
    ``interval_end`` are new); None when no run has analysed the instance (all its samples are new)."""
    current: Mapping[str, datetime]
    """Per instance: the samples watermark of this run."""
    new_deploy_ids: frozenset[str] = frozenset()
    """Deploys no earlier run has seen: re-examined whatever their window's samples."""
    unannounced_series: pl.DataFrame | None = None
    """``SERIES_KEY`` rows the unannounced analyses search; None = every series."""

    def new_ranges(self) -> pl.DataFrame:
        """(instance, new_after, new_until): the range of ``interval_end`` that is new per instance (only
        instances with something new; new_after null = from the start)."""
        rows = [
            {"instance": name, "new_after": self.previous.get(name), "new_until": until}
            for name, until in sorted(self.current.items())
            if self.previous.get(name) is None or until > self.previous[name]  # type: ignore[operator]
        ]
        schema = {"instance": pl.String, "new_after": lake_ts(), "new_until": lake_ts()}
        return pl.DataFrame(rows, schema=schema)

    @property
    def nothing_new(self) -> bool:
        return self.new_ranges().height == 0 and not self.new_deploy_ids


def lake_ts() -> pl.DataType:
    return QUERY_SAMPLES.polars_schema["interval_end"]


# ---------------------------------------------------------------------------------------------------------
# Pure: which deploys and series


def deploy_targets_in_scope(
    deploys: pl.DataFrame, instances: list[str], scope: AnalysisScope, config: RegressionConfig
) -> pl.DataFrame:
    """(deploy_id, instance) pairs to re-examine: the deploy is new, or its window on that instance
    intersects the instance's new range (new_after, new_until]."""
    targets = deploys_for_instances(deploys, instances).select("deploy_id", "instance", "deployed_at")
    ranges = scope.new_ranges()
    windows = targets.join(ranges, on="instance", how="left")
    start, end = pl.col("deployed_at") - config.window_before, pl.col("deployed_at") + config.window_after
    receives = (
        pl.col("new_until").is_not_null()
        & (pl.col("new_after").is_null() | (end > pl.col("new_after")))
        & (start < pl.col("new_until"))
    )
    is_new = pl.col("deploy_id").is_in(list(scope.new_deploy_ids))
    return windows.filter(receives | is_new).select("deploy_id", "instance").unique(maintain_order=True)


def deploys_in_scope(
    deploys: pl.DataFrame, instances: list[str], scope: AnalysisScope | None, config: RegressionConfig
) -> pl.DataFrame:
    """The deploy_events rows a run re-examines (every row when ``scope`` is None)."""
    if scope is None or deploys.height == 0:
        return deploys
    chosen = deploy_targets_in_scope(deploys, instances, scope, config)["deploy_id"].unique()
    return deploys.filter(pl.col("deploy_id").is_in(chosen.implode()))


def windowed_in_scope(windowed: pl.DataFrame, keys: list[str], scope: AnalysisScope | None) -> pl.DataFrame:
    """Deploy-window points of the (deploy, series) pairs to re-examine: those with a new sample in the
    window, or of a deploy no run has seen. ``windowed``: ``deploy_window_points`` output."""
    if scope is None or windowed.height == 0:
        return windowed
    ranges = scope.new_ranges().select("instance", "new_after")
    marked = windowed.join(ranges, on="instance", how="left").with_columns(
        (
            pl.col("instance").is_in(ranges["instance"].implode())
            & (pl.col("new_after").is_null() | (pl.col("interval_end") > pl.col("new_after")))
        ).alias("_new")
    )
    fresh = marked.filter(pl.col("_new") | pl.col("deploy_id").is_in(list(scope.new_deploy_ids)))
    return windowed.join(fresh.select(keys).unique(), on=keys, how="semi", maintain_order="left")


def series_in_scope(points: pl.DataFrame, scope: AnalysisScope | None) -> pl.DataFrame:
    """Points of the series the unannounced analyses search (every point when the scope says every series)."""
    if scope is None or scope.unannounced_series is None:
        return points
    return points.join(scope.unannounced_series, on=list(SERIES_KEY), how="semi", maintain_order="left")


def moved_series(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    previous: Mapping[str, datetime | None],
    config: RegressionConfig,
    scope_config: ScopeConfig = ScopeConfig(),
) -> pl.DataFrame:
    """``SERIES_KEY`` rows whose new samples moved from their level by ≥ ``latency_change_threshold``
    (either way), or that have new samples and no level (no sample in the level window); pure.

    ``samples``: query_samples rows plus ``instance``, at least those after ``previous[instance] -
    level_window``. An instance whose previous watermark is None: every series of it (all new).
    """
    keys = list(SERIES_KEY)
    empty = pl.DataFrame(schema={k: pl.String for k in [*keys, "fingerprint"]})
    if samples.height == 0:
        return empty
    marks = pl.DataFrame(
        {"instance": list(previous), "new_after": list(previous.values())},
        schema={"instance": pl.String, "new_after": lake_ts()},
    )
    points = fingerprinted_samples(samples, texts, config.identity).join(marks, on="instance", how="left")
    everything_new = points.filter(pl.col("new_after").is_null()).select(keys).unique()
    known = points.filter(pl.col("new_after").is_not_null())
    merged = merge_intervals(known, [*keys, "new_after"])
    new = pl.col("interval_end") > pl.col("new_after")
    level = ~new & (pl.col("interval_end") > pl.col("new_after") - scope_config.level_window)
    summary = merged.group_by(keys).agg(
        (pl.col("total_exec_time").filter(new).sum() / pl.col("calls").filter(new).sum()).alias("new_mean"),
        (pl.col("total_exec_time").filter(level).sum() / pl.col("calls").filter(level).sum()).alias("level"),
        new.any().alias("has_new"),
        level.any().alias("has_level"),
    )
    change = ((pl.col("new_mean") - pl.col("level")) / pl.col("level")).abs()
    moved = summary.filter(
        pl.col("has_new")
        & (~pl.col("has_level") | (change >= config.latency_change_threshold).fill_null(True))
    )
    # The fingerprint rides along: ``_history_of`` finds the queryids of a series' history by it.
    prints = points.select(*keys, "fingerprint").unique(keys)
    chosen = pl.concat([everything_new, moved.select(keys)], how="vertical_relaxed").unique()
    return chosen.join(prints, on=keys, how="left").sort(keys)


# ---------------------------------------------------------------------------------------------------------
# The lake: watermarks and run state


def samples_watermarks(lake_root: LakePath, instances: Iterable[str] | None = None) -> dict[str, datetime]:
    """Per instance (``instances``: only those, e.g. a shard's): the latest query_samples ``interval_end``,
    from the newest date partition's file names (the samples job names a file after its latest interval
    end); a partition whose names say nothing is read (its ``interval_end`` column only)."""
    base = lake_path(lake_root) / QUERY_SAMPLES.name
    wanted = None if instances is None else set(instances)
    marks: dict[str, datetime] = {}
    for folder in sorted(base.glob("instance=*")) if base.exists() else []:
        instance = folder.name.removeprefix("instance=")
        if wanted is not None and instance not in wanted:
            continue
        for day in sorted(folder.glob("date=*"), reverse=True):
            files = sorted(day.glob("*.parquet"))
            if not files:
                continue
            stems = [p.stem for p in files]
            if all(len(s) == _STAMP_LENGTH and s[8] == "T" and s.endswith("Z") for s in stems):
                marks[instance] = datetime.strptime(max(stems), "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
            else:
                latest = lake.scan_files(lake_root, QUERY_SAMPLES, files).select(pl.col("interval_end").max())
                value = latest.collect().item()
                if value is None:
                    continue
                marks[instance] = value
            break
    return marks


def latest_run(lake_root: LakePath) -> pl.DataFrame | None:
    """The latest run's ``analysis_runs`` rows (from the newest partition); None when no run was recorded."""
    base = lake_path(lake_root) / ANALYSIS_RUNS.name
    days = sorted(base.glob("date=*"), reverse=True) if base.exists() else []
    for day in days:
        files = sorted(day.glob("*.parquet"))
        if not files:
            continue
        runs = lake.scan_files(lake_root, ANALYSIS_RUNS, files).collect()
        if runs.height == 0:
            continue
        return runs.filter(pl.col("run_id") == runs["run_id"].max())
    return None


def previous_watermarks(
    lake_root: LakePath, instances: Iterable[str] | None = None, since: datetime | None = None
) -> dict[str, datetime | None] | None:
    """The samples watermark per instance of the latest run that analysed it (``instances``: of those,
    looked for back to ``since``; None: the latest run's instances); None when no run has been recorded
    (for any of them). Per instance, not "the latest run's": a shard's pass records only its instances."""
    if instances is None:
        latest = latest_run(lake_root)
        if latest is None:
            return None
        return dict(zip(latest["instance"].to_list(), latest["samples_watermark"].to_list(), strict=True))
    rows = latest_rows_per_instance(lake_root, instances, since)
    marks = dict(zip(rows["instance"].to_list(), rows["samples_watermark"].to_list(), strict=True))
    return marks or None


def latest_rows_per_instance(
    lake_root: LakePath, instances: Iterable[str], since: datetime | None = None
) -> pl.DataFrame:
    """Per instance of ``instances``, its row of the latest run that analysed it (a shard's pass analyses
    only its instances, so "the latest run" is per instance). Day partitions are read newest first until
    every instance is found, none before ``since``'s day (a watermark older than the history says no more
    than none: every sample in the history is new)."""
    base = lake_path(lake_root) / ANALYSIS_RUNS.name
    wanted = set(instances)
    found: list[pl.DataFrame] = []
    for day in sorted(base.glob("date=*"), reverse=True) if base.exists() else []:
        if not wanted or (since is not None and day.name.removeprefix("date=") < since.date().isoformat()):
            break
        files = sorted(day.glob("*.parquet"))
        if not files:
            continue
        rows = (
            lake.scan_files(lake_root, ANALYSIS_RUNS, files)
            .filter(pl.col("instance").is_in(sorted(wanted)))
            .select("run_id", "instance", "samples_watermark", "config_digest")
            .collect()
        )
        if rows.height:
            latest = rows.sort("run_id", "instance").unique("instance", keep="last", maintain_order=True)
            found.append(latest)
            wanted -= set(latest["instance"].to_list())
    if not found:
        return ANALYSIS_RUNS.empty().select("run_id", "instance", "samples_watermark", "config_digest")
    return pl.concat(found, how="vertical").sort("instance")


def analysis_config_digest(*parts: object) -> str:
    """A stable hash of the settings that decide a run's verdicts (frozen dataclasses' reprs): a changed
    threshold must re-examine what earlier runs judged with the old one."""
    return hashlib.sha256("|".join(repr(part) for part in parts).encode()).hexdigest()[:16]


def settings_changed_since_last_run(lake_root: LakePath, digest: str) -> bool:
    """True when the last recorded run used other analysis settings (a run before issue 10 recorded none:
    not a change)."""
    latest = latest_run(lake_root)
    if latest is None or "config_digest" not in latest.columns:
        return False
    recorded = set(latest["config_digest"].drop_nulls().to_list())
    return bool(recorded) and recorded != {digest}


def seen_deploy_ids(lake_root: LakePath, shard: str | None = None) -> set[str]:
    """Deploys a run has seen: those a whole-fleet run saw; for a shard's pass (``shard``, ``shard-k of
    n``) also those its own passes saw (another shard's pass saw the deploy on other instances); for a
    whole-fleet run also those every shard of one shard count saw."""
    seen = lake.read_table(lake_root, ANALYSED_DEPLOYS, lambda f: f.select("deploy_id", "shard"))
    ids = set(seen.filter(pl.col("shard").is_null())["deploy_id"].to_list())
    if shard is not None:
        return ids | set(seen.filter(pl.col("shard") == shard)["deploy_id"].to_list())
    by_shard = seen.filter(pl.col("shard").is_not_null()).with_columns(
        pl.col("shard").str.extract(r" of (\d+)$").cast(pl.Int64).alias("count")
    )
    covered = by_shard.group_by("deploy_id", "count").agg(pl.col("shard").n_unique().alias("shards"))
    return ids | set(covered.filter(pl.col("shards") == pl.col("count"))["deploy_id"].to_list())


@dataclass(frozen=True)
class ShardOfRun:
    """Which instances a shard's pass analyses (jobs.pipeline.sharded)."""

    label: str
    """``shard-k of n``."""
    instances: tuple[str, ...]
    since: datetime | None = None
    """How far back the previous watermarks are looked for (the history's start)."""


@dataclass(frozen=True)
class RunState:
    """What a run read of the lake's state and will commit when it is done."""

    run_id: str
    computed_at: datetime
    current: dict[str, datetime]
    scope: AnalysisScope | None
    new_deploys: pl.DataFrame = field(default_factory=ANALYSED_DEPLOYS.empty)
    """deploy_events rows no run had seen (written to ``analysed_deploys`` at commit)."""
    config_digest: str | None = None
    """``analysis_config_digest`` of the run's settings (recorded in ``analysis_runs``)."""
    shard: str | None = None
    """The shard a pass covers (``shard-k of n``; None = the whole fleet): recorded with the deploys it saw,
    and in its files' names (shards' passes may write at the same microsecond)."""

    @property
    def stem(self) -> str:
        stem = lake.stem_for(self.computed_at)
        return stem if self.shard is None else f"{stem}-{self.shard.split()[0]}"


def plan_run(
    lake_root: LakePath,
    deploys: pl.DataFrame,
    computed_at: datetime,
    incremental: bool,
    config_digest: str | None = None,
    shard: ShardOfRun | None = None,
) -> RunState:
    """The run's watermarks and scope: None (everything) for a full run or when no run was recorded.
    ``shard``: a shard's pass, over its instances only, each with the watermark of the latest run that
    analysed it."""
    label = None if shard is None else shard.label
    current = samples_watermarks(lake_root, None if shard is None else shard.instances)
    seen = seen_deploy_ids(lake_root, label)
    new_deploys = deploys.filter(~pl.col("deploy_id").is_in(list(seen))) if deploys.height else deploys
    previous = None
    if incremental:  # a full run needs no previous watermark: nothing of analysis_runs is read
        previous = previous_watermarks(lake_root, current, None if shard is None else shard.since)
    scope = None
    if previous is not None:
        scope = AnalysisScope(
            previous={name: previous.get(name) for name in current},
            current=current,
            new_deploy_ids=frozenset(new_deploys["deploy_id"].to_list()) if deploys.height else frozenset(),
        )
    return RunState(run_id_for(computed_at), computed_at, current, scope, new_deploys, config_digest, label)


def commit_run(
    lake_root: LakePath, state: RunState, examined: pl.DataFrame, config: locks.LakeConfig | None = None
) -> list[LakePath]:
    """Write the run state, last (after the analysis rows): the deploys first seen, then the per-instance
    watermarks. A run that dies before this leaves the previous state, so the next run re-examines the
    same scope (its rows come again under a new run_id; nothing is skipped). ``examined``: per instance,
    ``deploys_examined`` and ``series_examined``."""
    day = {"date": state.computed_at.strftime("%Y-%m-%d")}
    stem = state.stem
    files = []
    if state.new_deploys.height:
        seen = (
            state.new_deploys.select("deploy_id")
            .unique()
            .with_columns(
                pl.lit(state.run_id).alias("run_id"),
                pl.lit(state.computed_at).alias("computed_at"),
                pl.lit(state.shard, dtype=pl.String).alias("shard"),
            )
        )
        files.append(lake.write_table(lake_root, ANALYSED_DEPLOYS, seen, day, stem, config=config))
    if state.current:
        runs = pl.DataFrame(
            {"instance": list(state.current), "samples_watermark": list(state.current.values())},
            schema={"instance": pl.String, "samples_watermark": lake_ts()},
        ).join(examined, on="instance", how="left")
        runs = runs.with_columns(
            pl.col(c).fill_null(0).cast(pl.Int64) if c in runs.columns else pl.lit(0, dtype=pl.Int64).alias(c)
            for c in ("deploys_examined", "series_examined")
        )
        runs = runs.with_columns(
            pl.lit(state.run_id).alias("run_id"),
            pl.lit(state.computed_at).alias("computed_at"),
            pl.lit("full" if state.scope is None else "incremental").alias("mode"),
            pl.lit(state.config_digest, dtype=pl.String).alias("config_digest"),
        )
        files.append(lake.write_table(lake_root, ANALYSIS_RUNS, runs, day, stem, config=config))
    return files


# ---------------------------------------------------------------------------------------------------------
# Reading only what a scope needs


def merged_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """(instance, start, end) intervals of ``interval_end`` (start exclusive, null = unbounded) merged where
    they overlap, per instance; pure."""
    if ranges.height == 0:
        return ranges
    ordered = ranges.with_columns(pl.col("start").fill_null(datetime.min.replace(tzinfo=UTC))).sort(
        "instance", "start"
    )
    opened = ordered.with_columns(
        (pl.col("start") > pl.col("end").cum_max().shift(1).over("instance"))
        .fill_null(True)
        .cum_sum()
        .over("instance")
        .alias("_block")
    )
    return (
        opened.group_by("instance", "_block", maintain_order=True)
        .agg(pl.col("start").min(), pl.col("end").max())
        .drop("_block")
    )


def _in_ranges(ranges: pl.DataFrame) -> pl.Expr:
    """A filter of query_samples rows inside any of the ranges (the date partition too, so files of other
    days are not opened)."""
    conditions = []
    for row in ranges.iter_rows(named=True):
        start, end = row["start"], row["end"]
        conditions.append(
            (pl.col("instance") == row["instance"])
            & (pl.col("date") >= start.date().isoformat())
            & (pl.col("date") <= end.date().isoformat())
            & (pl.col("interval_end") > start)
            & (pl.col("interval_end") <= end)
        )
    return pl.any_horizontal(conditions) if conditions else pl.lit(False)


def read_detection_samples(
    lake_root: LakePath, query: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None
) -> pl.DataFrame:
    """query_samples rows (through ``query``, a filter) with only the columns a detection run reads
    (``DETECTION_SAMPLE_COLUMNS``): every read of samples for a run goes through here.

    In one chunk per column: read from a file per day, each column came in chunks, and every eager
    select or with_columns of the run on the samples (a dozen) copied them into one again, 300-570 MiB
    each over 5 M samples; one copy here is the only one."""
    return lake.read_table(
        lake_root,
        QUERY_SAMPLES,
        lambda f: (f if query is None else query(f)).select(DETECTION_SAMPLE_COLUMNS),
    ).rechunk()


def read_samples_in_ranges(lake_root: LakePath, ranges: pl.DataFrame) -> pl.DataFrame:
    merged = merged_ranges(ranges)
    if merged.height == 0:  # no file opened
        return pl.DataFrame(schema=QUERY_SAMPLES.scan_schema()).select(DETECTION_SAMPLE_COLUMNS)
    return read_detection_samples(lake_root, lambda f: f.filter(_in_ranges(merged)))


@dataclass(frozen=True)
class ScopedSamples:
    samples: pl.DataFrame
    scope: AnalysisScope


def read_scoped_samples(
    lake_root: LakePath,
    scope: AnalysisScope,
    deploys: pl.DataFrame,
    texts: pl.DataFrame,
    config: RegressionConfig,
    scope_config: ScopeConfig = ScopeConfig(),
) -> ScopedSamples:
    """The samples an incremental run needs, and its scope with the unannounced series filled in.

    Read: (1) the windows of the deploys to re-examine, (2) per instance with something new, its new
    samples and the level window before them (the pre-filter's input), (3) the last ``config.history`` of
    the series the pre-filter chose (their queryids, by text). What is read grows with what is new and
    the number of series that moved, not with the length of the history.
    """
    instances = sorted(scope.current)
    ts = lake_ts()
    new = scope.new_ranges()
    windows = deploy_targets_in_scope(deploys, instances, scope, config) if deploys.height else None
    frames = []
    if windows is not None and windows.height:
        targets = deploys_for_instances(deploys, instances).join(windows, on=["deploy_id", "instance"])
        frames.append(
            targets.select(
                "instance",
                (pl.col("deployed_at") - config.window_before).alias("start"),
                (pl.col("deployed_at") + config.window_after).alias("end"),
            )
        )
    recent = new.select(
        "instance",
        (pl.col("new_after") - scope_config.level_window).alias("start"),
        pl.col("new_until").alias("end"),
    )
    history_start = {name: until - config.history for name, until in scope.current.items()}
    recent = recent.with_columns(
        pl.when(pl.col("start").is_null())
        .then(pl.col("instance").replace_strict(history_start, return_dtype=ts, default=None))
        .otherwise(pl.col("start"))
        .alias("start")
    )
    frames.append(recent)
    ranges = pl.concat([f.cast({"start": ts, "end": ts}) for f in frames], how="vertical")
    first = read_samples_in_ranges(lake_root, ranges)
    pre = first.join(recent.rename({"start": "_from", "end": "_to"}), on="instance", how="inner").filter(
        (pl.col("interval_end") > pl.col("_from")) & (pl.col("interval_end") <= pl.col("_to"))
    )
    moved = moved_series(pre.drop("_from", "_to"), texts, scope.previous, config, scope_config)
    history = _history_of(lake_root, moved, first, texts, scope, config)
    samples = pl.concat([first, history], how="vertical_relaxed").unique(
        list(QUERY_SAMPLES.primary_key), keep="first", maintain_order=True
    )
    return ScopedSamples(samples, replace(scope, unannounced_series=moved))


def _history_of(
    lake_root: LakePath,
    moved: pl.DataFrame,
    first: pl.DataFrame,
    texts: pl.DataFrame,
    scope: AnalysisScope,
    config: RegressionConfig,
) -> pl.DataFrame:
    """The last ``config.history`` of the moved series: samples of their queryids (every queryid whose text
    maps to the series, so a rotated-away queryid's history comes too)."""
    if moved.height == 0:
        return first.head(0)
    known = pl.concat(
        [first.select("instance", "queryid"), texts.select("instance", "queryid")], how="vertical_relaxed"
    ).unique()
    # Only queryid -> fingerprint is needed here: no series naming (which chains queryids of one
    # fingerprint by the spans of their samples, and these rows have no samples).
    prints = texts if "fingerprint" in texts.columns else fingerprint_texts(texts)
    mapped = attach_fingerprints(known, prints)
    # By fingerprint, not series: a queryid maps to its database only through samples, and a superset
    # costs only reading (series_in_scope keeps the moved series' points).
    wanted = (
        mapped.join(moved.select("instance", "fingerprint"), on=["instance", "fingerprint"], how="semi")
        .select("instance", "queryid")
        .unique()
    )
    ranges = pl.DataFrame(
        [
            {"instance": name, "start": scope.current[name] - config.history, "end": scope.current[name]}
            for name in sorted(set(wanted["instance"].to_list()))
        ],
        schema={"instance": pl.String, "start": lake_ts(), "end": lake_ts()},
    )
    merged = merged_ranges(ranges)
    if merged.height == 0:
        return first.head(0)
    pairs = wanted.select(pl.concat_str("instance", pl.col("queryid").cast(pl.String), separator="\x1f"))
    key = pl.concat_str("instance", pl.col("queryid").cast(pl.String), separator="\x1f")
    return read_detection_samples(
        lake_root, lambda f: f.filter(_in_ranges(merged) & key.is_in(pairs.to_series().implode()))
    )
