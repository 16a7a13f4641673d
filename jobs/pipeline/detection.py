"""The detection pipeline: samples → deploy-aware and unannounced regressions → work evidence → resource
regressions → contention → plan diffs.

``detect_from_frames`` is pure (frames in, frames out); ``run_detection`` reads the lake, calls it and
writes ``performance_regressions``, ``resource_regressions``, ``instance_slowdowns`` and ``plan_diffs``.
The CLI (`radar detect`), the demo and the Dagster assets all go through here, so they cannot disagree."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from jobs.collect.deploys import load_deploy_events
from jobs.detect.attribution import attribute_large_steps, attribute_to_deploys
from jobs.detect.changepoint_memo import ChangePointMemo
from jobs.detect.config import FindingsConfig, MemoryConfig, RegressionConfig, SampleConfig, ScopeConfig
from jobs.detect.contention import separate_contention
from jobs.detect.deploy_analysis import detect_regressions, one_row_per_finding, scoped_deploy_windows
from jobs.detect.findings import (
    OPEN,
    latest_states,
    recheck_targets,
    recovery_points,
    recovery_samples_wanted,
    run_id_for,
    update_findings,
)
from jobs.detect.fleet_fdr import LATENCY, RESOURCE, FleetFdr
from jobs.detect.samples_job import SamplesJobReport, run_samples_job
from jobs.detect.scope import (
    AnalysisScope,
    RunState,
    ShardOfRun,
    analysis_config_digest,
    commit_run,
    latest_rows_per_instance,
    plan_run,
    read_detection_samples,
    read_scoped_samples,
    settings_changed_since_last_run,
)
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.detect.verdicts import DETECTED
from jobs.detect.work import (
    attach_work_evidence,
    deploy_resource_regressions,
    deploy_series,
    detect_resource_regressions,
)
from jobs.detect.work_config import WORK_COLUMNS
from jobs.detect.work_findings import finding_rows_with_work
from jobs.lake import io as lake
from jobs.lake.locks import LakeConfig, LakeStorageError
from jobs.plans.analyses import DEFAULT_WINDOW as ANALYZE_WINDOW
from jobs.plans.analyses import table_analyses
from jobs.plans.config import PlanDiffConfig
from jobs.plans.diff import attach_plan_diffs, plan_diffs_for_regressions
from jobs.query.series import fingerprinted_samples, sample_intervals, sample_starts
from jobs.schemas.analysed import (
    FINDING_STATES,
    INSTANCE_SLOWDOWNS,
    PERFORMANCE_REGRESSIONS,
    PLAN_DIFFS,
    RESOURCE_REGRESSIONS,
)
from jobs.schemas.collected import (
    ACTIVITY_SNAPSHOTS,
    PLAN_CAPTURE_LOG,
    PLAN_SNAPSHOTS,
    QUERY_SAMPLES,
    QUERY_TEXTS,
    TABLE_STATS_SNAPSHOTS,
)
from jobs.schemas.table import TableSchema

DETECTION_ASSETS = (
    "performance_regressions",
    "resource_regressions",
    "instance_slowdowns",
    "plan_diffs",
    "findings",
)
"""The Dagster assets one detection run produces (orchestration/assets/regressions.py), whoever runs it."""


@dataclass(frozen=True)
class DetectionConfig:
    samples: SampleConfig = field(default_factory=SampleConfig)
    regression: RegressionConfig = field(default_factory=RegressionConfig)
    plan_diff: PlanDiffConfig = field(default_factory=PlanDiffConfig)
    rebuild_samples: bool = True
    """Bring query_samples up to date from the snapshots first: an append when ``incremental``, else a full
    rebuild (idempotent either way). False when another job keeps the samples (Dagster's query_samples)."""
    incremental: bool = True
    """Re-examine only what received new samples since the last run (jobs.detect.scope); False = a full run
    over every deploy and series (and a full samples rebuild). Both record the run in ``analysis_runs``."""
    scope: ScopeConfig = field(default_factory=ScopeConfig)
    """The incremental unannounced pre-filter's level window."""
    unannounced: bool = True
    """Also look for regressions no deploy explains (multiple change points, Benjamini-Hochberg)."""
    lake: LakeConfig = field(default_factory=LakeConfig)
    """Lock wait and temp-file rules of the samples rebuild."""
    findings: FindingsConfig = field(default_factory=FindingsConfig)
    """Finding identity (onset tolerance) and the recovery re-check (jobs.detect.findings)."""
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """How much memory a full run may take (jobs.pipeline.budgeted; not a verdict setting: the same findings
    whatever the chunks)."""
    analyze_before_plan_change: timedelta = ANALYZE_WINDOW
    """[drift.samples] analyze_before_plan_change: an ANALYZE of a table of the query at most this long
    before a regression's change is named in its plan diff and finding (jobs.plans.analyses)."""


@dataclass(frozen=True)
class DetectionFrames:
    """What one detection pass over the fleet found (``detect_from_frames``)."""

    regressions: pl.DataFrame
    """Deploy-aware latency results (every analysed series): work evidence, contention kind and plan diff
    summary attached."""
    unannounced: pl.DataFrame
    """Unannounced latency results, the same columns."""
    plan_diffs: pl.DataFrame
    resource_regressions: pl.DataFrame = field(default_factory=RESOURCE_REGRESSIONS.empty)
    """Work per call (temp blocks, shared blocks, rows, WAL, planning) of every analysed series, both
    analyses (jobs.detect.work)."""
    instance_slowdowns: pl.DataFrame = field(default_factory=INSTANCE_SLOWDOWNS.empty)
    """Episodes of many queries of one instance slowing together (jobs.detect.contention)."""


@dataclass
class DetectionOutcome:
    regressions: pl.DataFrame
    """Deploy-aware results (every analysed series), plan_diff_summary attached to detected rows."""
    unannounced: pl.DataFrame
    plan_diffs: pl.DataFrame
    samples_report: SamplesJobReport | None = None
    files: list[Path] = field(default_factory=list)
    resource_regressions: pl.DataFrame = field(default_factory=RESOURCE_REGRESSIONS.empty)
    instance_slowdowns: pl.DataFrame = field(default_factory=INSTANCE_SLOWDOWNS.empty)
    findings: pl.DataFrame = field(default_factory=FINDING_STATES.empty)
    """Latest state of every finding after this run (the `findings` view)."""
    finding_changes: pl.DataFrame = field(default_factory=FINDING_STATES.empty)
    """The finding_states rows this run appended (findings opened or changed)."""
    settings_changed: bool = False
    """The analysis settings differ from the last run's, so this incremental run ran as a full one."""

    @property
    def shown_findings(self) -> pl.DataFrame:
        """What `radar detect` prints: every open finding and every finding this run changed, once."""
        changed = self.finding_changes["finding_id"].implode()
        return self.findings.filter((pl.col("status") == OPEN) | pl.col("finding_id").is_in(changed))

    @property
    def detected(self) -> pl.DataFrame:
        return self.regressions.filter(pl.col("status") == DETECTED)

    @property
    def resource_detected(self) -> pl.DataFrame:
        return self.resource_regressions.filter(pl.col("status") == DETECTED)


def detect_from_frames(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    deploys: pl.DataFrame,
    plan_snapshots: pl.DataFrame,
    config: DetectionConfig = DetectionConfig(),
    scope: AnalysisScope | None = None,
    table_stats: pl.DataFrame | None = None,
    fleet: FleetFdr | None = None,
    memo: ChangePointMemo | None = None,
    capture_log: pl.LazyFrame | pl.DataFrame | None = None,
    activity: pl.DataFrame | None = None,
) -> DetectionFrames:
    """Latency findings of both analyses with their work evidence, contention separated and plan diffs
    attached; resource regressions; instance slowdowns. ``scope``: what an incremental run re-examines
    (jobs.detect.scope; None = everything). ``table_stats``: table_stats_snapshots rows, so a plan diff
    names an ANALYZE of the query's tables shortly before the change (None: not looked for). ``fleet``:
    a shard's pass adjusts its unannounced candidates among every shard's (jobs.detect.fleet_fdr; None =
    among this call's). ``memo``: change points its phase 1 found (jobs.detect.changepoint_memo).
    ``capture_log``: plan_capture_log rows, so a finding without plans says why (None: "not tried").
    ``activity``: activity_snapshots rows, the instances' active backends and cores for the contention
    step's load (None: load from pg_stat_statements alone, cores unknown)."""
    fleet = fleet or FleetFdr()
    # Identified once here; every step below reuses it (fingerprinted_samples passes identified frames).
    if samples.height:
        samples = fingerprinted_samples(samples, texts, config.regression.identity)
    # The deploy windows once, for the latency and the work analysis, each run while they are held.
    windows = (
        scoped_deploy_windows(samples, texts, deploys, config.regression, scope, WORK_COLUMNS)
        if samples.height and deploys.height
        else None
    )
    # Their series' identity and merged intervals once too (the same in both analyses).
    shared = deploy_series(windows[0]) if windows is not None and windows[0].height else None
    regressions = detect_regressions(samples, texts, deploys, config.regression, scope, windows, shared)
    deploy_resources = deploy_resource_regressions(
        samples, texts, deploys, config.regression, scope, windows, shared
    )
    del windows, shared
    unannounced = (
        detect_unannounced_regressions(
            samples, texts, config.regression, scope, fleet.adjust(LATENCY), fleet.tests(LATENCY), memo
        )
        if config.unannounced
        else PERFORMANCE_REGRESSIONS.empty()
    )
    regressions = attach_work_evidence(regressions, samples, texts, config.regression)
    unannounced = attach_work_evidence(unannounced, samples, texts, config.regression)
    resources = detect_resource_regressions(
        samples,
        texts,
        deploys,
        config.regression,
        unannounced=config.unannounced,
        scope=scope,
        fdr=fleet.adjust(RESOURCE),
        fleet_tests=fleet.tests(RESOURCE),
        memo=memo,
        deploy_rows=deploy_resources,
    )
    # Both analyses in one call: a deploy and an unannounced change are different moments (episodes).
    both, slowdowns = separate_contention(
        pl.concat([regressions, unannounced], how="diagonal_relaxed"),
        samples,
        texts,
        config.regression,  # its contention config, and the identity rules that named the findings' series
        activity,
    )
    # One step, one deploy: the latest deploy at or before the change point, the others listed.
    regressions = attribute_to_deploys(
        both.filter(pl.col("analysis") == "deploy"), deploys, sample_intervals(samples), config.regression
    )
    unannounced = both.filter(pl.col("analysis") == "unannounced")
    # One diff per finding: both analyses often find the same change.
    detected = one_row_per_finding(
        pl.concat([regressions, unannounced], how="diagonal_relaxed").filter(pl.col("status") == DETECTED)
    )
    diffs = plan_diffs_for_regressions(
        detected,
        plan_snapshots,
        config.plan_diff,
        analyses=table_analyses(table_stats),
        analyze_window=config.analyze_before_plan_change,
        capture_log=capture_log,
    )
    return DetectionFrames(
        regressions=attach_plan_diffs(regressions, diffs),
        unannounced=attach_plan_diffs(unannounced, diffs),
        plan_diffs=diffs,
        resource_regressions=resources,
        instance_slowdowns=slowdowns,
    )


def read_inputs(lake_root: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    samples = lake.read_table(lake_root, QUERY_SAMPLES)
    texts = lake.read_table(lake_root, QUERY_TEXTS)
    deploys = load_deploy_events(lake_root)
    plans = lake.read_table(lake_root, PLAN_SNAPSHOTS)
    return samples, texts, deploys, plans


def of_instances(shard: ShardOfRun | None) -> Callable[[pl.LazyFrame], pl.LazyFrame] | None:
    """A read's filter to a shard's instances (None: the whole fleet, no filter)."""
    if shard is None:
        return None
    return lambda frame: frame.filter(pl.col("instance").is_in(list(shard.instances)))


def read_inputs_in_scope(
    lake_root: Path,
    config: DetectionConfig,
    computed_at: datetime,
    config_digest: str | None = None,
    shard: ShardOfRun | None = None,
) -> tuple[RunState, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The run's state and inputs: every sample for a full run (or the first one), else only the samples
    its scope needs (``jobs.detect.scope.read_scoped_samples``), with the scope's unannounced series.
    ``shard``: a shard's pass reads its instances' rows only."""
    only = of_instances(shard)
    texts = lake.read_table(lake_root, QUERY_TEXTS, only)
    deploys = load_deploy_events(lake_root)
    plans = lake.read_table(lake_root, PLAN_SNAPSHOTS, only)
    state = plan_run(lake_root, deploys, computed_at, config.incremental, config_digest, shard)
    if state.scope is None:
        return state, read_detection_samples(lake_root, only), texts, deploys, plans
    scoped = read_scoped_samples(lake_root, state.scope, deploys, texts, config.regression, config.scope)
    return replace(state, scope=scoped.scope), scoped.samples, texts, deploys, plans


def read_activity(lake_root: Path, samples: pl.DataFrame, shard: ShardOfRun | None = None) -> pl.DataFrame:
    """The activity_snapshots rows of the samples' instances and time span (the contention step's load)."""
    if samples.height == 0:
        return ACTIVITY_SNAPSHOTS.empty()
    since = samples["interval_start"].min()
    only = of_instances(shard)
    return lake.read_table(
        lake_root,
        ACTIVITY_SNAPSHOTS,
        lambda frame: (only(frame) if only else frame).filter(pl.col("captured_at") >= since),
    )


def examined_per_instance(found: DetectionFrames) -> pl.DataFrame:
    """Per instance: how many deploys and unannounced series this run analysed (for ``analysis_runs``)."""
    deploys = found.regressions.group_by("instance").agg(
        pl.col("deploy_id").n_unique().alias("deploys_examined")
    )
    series = found.unannounced.group_by("instance").agg(pl.len().alias("series_examined"))
    return deploys.join(series, on="instance", how="full", coalesce=True).with_columns(
        pl.col("deploys_examined", "series_examined").fill_null(0).cast(pl.Int64)
    )


def read_regressions_with_plan_diffs(lake_root: Path) -> pl.DataFrame:
    """Every performance_regressions row in the lake, with plan_diff_summary where a diff was computed."""
    regressions = lake.read_table(lake_root, PERFORMANCE_REGRESSIONS)
    diffs = lake.read_table(lake_root, PLAN_DIFFS)
    return attach_plan_diffs(regressions, diffs) if diffs.height else regressions


def write_run_table(
    lake_root: Path, table: TableSchema, frame: pl.DataFrame, computed_at: datetime, stem: str | None = None
) -> Path | None:
    """One file of ``table`` per analysis run, partitioned by the run's date; nothing for an empty frame.
    ``stem``: the file's name (default: the run's time; a shard's pass adds its shard)."""
    if frame.is_empty():
        return None
    columns = [c for c in frame.columns if c in table.column_names]
    return lake.write_table(
        lake_root,
        table,
        frame.select(columns),
        {"date": computed_at.strftime("%Y-%m-%d")},
        stem or lake.stem_for(computed_at),
    )


def settings_changed_for(lake_root: Path, digest: str, shard: ShardOfRun | None) -> bool:
    """The last run (per instance, for a shard's pass) used other analysis settings."""
    if shard is None:
        return settings_changed_since_last_run(lake_root, digest)
    rows = latest_rows_per_instance(lake_root, shard.instances, shard.since)
    recorded = set(rows["config_digest"].drop_nulls().to_list())
    return bool(recorded) and recorded != {digest}


def run_detection(
    lake_root: Path,
    config: DetectionConfig = DetectionConfig(),
    now: datetime | None = None,
    shard: ShardOfRun | None = None,
    fleet: FleetFdr | None = None,
    memo: ChangePointMemo | None = None,
) -> DetectionOutcome:
    """One detection run. An incremental run whose analysis settings differ from the last run's (a
    threshold changed in the config file) runs as a full one: verdicts of earlier runs were judged with the
    old settings, and the samples (``min_executions``) may have been built with others.

    ``shard`` and ``fleet``: a shard's pass (jobs.pipeline.sharded) analyses, records findings of and commits
    only its instances, and adjusts its unannounced candidates among every shard's; ``memo``: the change
    points its phase 1 found."""
    computed_at = (now or datetime.now(UTC)).astimezone(UTC)
    digest = detection_config_digest(config)
    settings_changed = config.incremental and settings_changed_for(lake_root, digest, shard)
    if settings_changed:
        config = replace(config, incremental=False)
    report = None
    if config.rebuild_samples:
        mode = "append" if config.incremental else "rebuild"
        instances = None if shard is None else list(shard.instances)
        report = run_samples_job(
            lake_root, config.samples, instances=instances, lake_config=config.lake, mode=mode
        )
    state, samples, texts, deploys, plans = read_inputs_in_scope(
        lake_root, config, computed_at, digest, shard
    )
    table_stats = lake.read_table(lake_root, TABLE_STATS_SNAPSHOTS, of_instances(shard))
    activity = read_activity(lake_root, samples, shard)
    found = stamp_run(
        detect_from_frames(
            samples,
            texts,
            deploys,
            plans,
            config,
            state.scope,
            table_stats,
            fleet,
            memo,
            capture_log=lake.scan_table(lake_root, PLAN_CAPTURE_LOG),
            activity=activity,
        ),
        computed_at,
    )
    latency = pl.concat([found.regressions, found.unannounced], how="diagonal_relaxed")
    # Work steps are findings too (kind work), or name the work change of the latency finding they share.
    intervals = sample_intervals(samples)
    steps = finding_rows_with_work(latency, found.resource_regressions, intervals, config.findings)
    # A large step, confirmed before the deploy analysis has its samples, blamed as that analysis will.
    steps = attribute_large_steps(steps, deploys, intervals, config.regression)
    previous, changes = findings_of_run(
        lake_root, steps, samples, texts, computed_at, config, None if shard is None else shard.instances
    )
    stem = state.stem
    try:
        files = [
            path
            for path in (
                write_run_table(lake_root, PERFORMANCE_REGRESSIONS, latency, computed_at, stem),
                write_run_table(
                    lake_root, RESOURCE_REGRESSIONS, found.resource_regressions, computed_at, stem
                ),
                write_run_table(lake_root, INSTANCE_SLOWDOWNS, found.instance_slowdowns, computed_at, stem),
                write_run_table(lake_root, PLAN_DIFFS, found.plan_diffs, computed_at, stem),
                write_run_table(lake_root, FINDING_STATES, changes, computed_at, stem),
            )
            if path is not None
        ]
        files += commit_run(lake_root, state, examined_per_instance(found), config.lake)
    except LakeStorageError as exc:
        samples_note = "the samples this run brought up to date are committed; " if report is not None else ""
        raise exc.keeping(
            f"{samples_note}this detection run is not committed (analysis_runs unchanged): the next run "
            "analyses the same samples again"
        ) from exc
    return DetectionOutcome(
        found.regressions,
        found.unannounced,
        found.plan_diffs,
        report,
        files,
        resource_regressions=found.resource_regressions,
        instance_slowdowns=found.instance_slowdowns,
        findings=latest_states(pl.concat([previous, changes], how="diagonal_relaxed")),
        finding_changes=changes,
        settings_changed=settings_changed,
    )


def stamp_run(found: DetectionFrames, computed_at: datetime) -> DetectionFrames:
    """Every analysis row with the run's id and time (issue 9: which run wrote what)."""

    def stamp(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(
            pl.lit(run_id_for(computed_at)).alias("run_id"),
            pl.lit(computed_at).cast(pl.Datetime("us", "UTC")).alias("computed_at"),
        )

    return DetectionFrames(
        regressions=stamp(found.regressions),
        unannounced=stamp(found.unannounced),
        plan_diffs=stamp(found.plan_diffs),
        resource_regressions=stamp(found.resource_regressions),
        instance_slowdowns=stamp(found.instance_slowdowns),
    )


def findings_of_run(
    lake_root: Path,
    latency: pl.DataFrame,
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    computed_at: datetime,
    config: DetectionConfig,
    instances: tuple[str, ...] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(latest state per finding before this run, the finding_states rows this run changes).
    ``instances``: a shard's pass sees and changes only its instances' findings (the others are other
    shards')."""
    previous = latest_states(lake.read_table(lake_root, FINDING_STATES))
    mine = previous if instances is None else previous.filter(pl.col("instance").is_in(list(instances)))
    open_before = mine.filter(pl.col("status") == OPEN)
    targets = recheck_targets(open_before, latency)
    changes = update_findings(
        mine,
        latency,
        computed_at=computed_at,
        intervals=sample_intervals(samples),
        starts=sample_starts(
            samples, latency.filter(pl.col("status") == DETECTED)["instance"].unique().to_list()
        ),
        points=recovery_points(recovery_samples(lake_root, samples, targets), targets),
        config=config.findings,
        regression=config.regression,
    )
    return mine, changes


def recovery_samples(lake_root: Path, samples: pl.DataFrame, targets: pl.DataFrame) -> pl.DataFrame:
    """The samples the recovery re-check needs: those of open (and new) findings' queryids since their
    change, read from the lake (an incremental run's own samples may not reach back that far), with the
    run's samples; bounded by what is open, not by the history."""
    wanted = recovery_samples_wanted(targets)
    if wanted.height == 0:
        return samples.head(0)
    pairs = wanted.select("instance", "queryid").unique()
    since = wanted["since"].min()
    # Integer and name tests first, the exact (instance, queryid) pairs by a semi-join of what passed: a
    # string key built for every sample (instance and queryid joined) held 0.4 GiB over 5 M samples.
    maybe = pl.col("queryid").is_in(pairs["queryid"].implode()) & pl.col("instance").is_in(
        pairs["instance"].unique().implode()
    )
    stored = read_detection_samples(
        lake_root, lambda f: f.filter((pl.col("interval_start") >= since) & maybe)
    ).join(pairs, on=["instance", "queryid"], how="semi", maintain_order="left")
    # Only the run's samples of the wanted queryids (recovery_points reads no other): concatenating and
    # de-duplicating every sample of the run doubled the pass's samples for a moment (its peak on 5
    # instances once the analyses' own peaks were cut). A sample's key holds its instance and queryid,
    # so which copy of a key is kept does not change.
    samples = samples.filter(maybe).join(pairs, on=["instance", "queryid"], how="semi", maintain_order="left")
    if stored.height == 0:
        return samples
    both = pl.concat([samples, stored], how="diagonal_relaxed")
    return both.unique(list(QUERY_SAMPLES.primary_key), keep="first", maintain_order=True)


def detection_config_digest(config: DetectionConfig) -> str:
    """The settings that decide verdicts (not the lake's lock waits or the run's mode)."""
    return analysis_config_digest(
        config.samples, config.regression, config.plan_diff, config.scope, config.unannounced, config.findings
    )
