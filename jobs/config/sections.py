"""The sections of the one configuration file (``data/radar.toml``): one frozen dataclass per table.

Each table is the config class of the code it tunes, so a key is the field that code reads, with its
default and its validation; a section that needs more than that class (where output goes, whether plans
are captured) is a subclass adding those fields. Everything imported here is stdlib-only or the lake's
writer module, so loading the file costs no numpy or scipy."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeVar

from jobs.collect.deploys import DeployInboxConfig
from jobs.collect.fleet import CollectorConfig
from jobs.detect.config import (
    FindingsConfig,
    MemoryConfig,
    PileupConfig,
    RegressionConfig,
    SampleConfig,
    ScopeConfig,
)
from jobs.drift.config import DriftConfig
from jobs.errors import ConfigError
from jobs.gate.config import GateConfig
from jobs.lake.locks import LakeConfig
from jobs.plans.config import AutoExplainConfig, PinningConfig, PlanCaptureConfig, PlanDiffConfig
from jobs.publish.config import MetricsConfig, WeeklyReportConfig

if TYPE_CHECKING:
    from jobs.pipeline.collection import CycleConfig
    from jobs.pipeline.detection import DetectionConfig
from jobs.alerts.config import AlertsConfig

T = TypeVar("T")


def as_base(base: type[T], section: object) -> T:
    """A section as the plain config class it extends (its own fields dropped): the code it tunes gets the
    class it always got, so its repr, and anything derived from it, is as before the file."""
    return base(**{f.name: getattr(section, f.name) for f in fields(base)})


@dataclass(frozen=True)
class DetectorSettings(RegressionConfig):
    """[detector]: the regression detector's thresholds, with the finding and scope rules beside them."""

    findings: FindingsConfig = field(default_factory=FindingsConfig)
    """Finding identity (onset tolerance) and the recovery re-check."""
    scope: ScopeConfig = field(default_factory=ScopeConfig)
    """What an incremental run re-examines."""
    unannounced: bool = True
    """Also look for regressions no deploy explains (multiple change points, Benjamini-Hochberg)."""
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """The memory budget of a full run (chunks of instances)."""

    def regression_config(self) -> RegressionConfig:
        """The plain detector config (its repr, and so anything derived from it, as before the file)."""
        return as_base(RegressionConfig, self)


@dataclass(frozen=True)
class PlansSettings(PlanCaptureConfig):
    """[plans]: whether each collection cycle captures plans and reads auto_explain logs, and how."""

    capture_plans: bool = False
    """Capture the top queries' plans each snapshot cycle (pg_store_plans or EXPLAIN GENERIC_PLAN); off by
    default: EXPLAIN costs server time."""
    ingest_auto_explain: bool = False
    """Read new auto_explain JSON records from each instance's log_dir each cycle."""
    auto_explain: AutoExplainConfig = field(default_factory=AutoExplainConfig)
    """Limits of the auto_explain log reader."""
    diff: PlanDiffConfig = field(default_factory=PlanDiffConfig)
    """What counts as a changed plan between before and after a regression."""

    def capture_config(self) -> PlanCaptureConfig:
        return as_base(PlanCaptureConfig, self)


@dataclass(frozen=True)
class ReportSettings(WeeklyReportConfig):
    """[report]: the weekly regression report."""

    out: str = "data/reports"
    """Folder the weekly reports are written to (one sub-folder per ISO week)."""


@dataclass(frozen=True)
class LakeSettings(LakeConfig):
    """[lake]: where the Parquet lake is and the rules of its writers."""

    root: str = "data/lake"
    """Root of the hive-partitioned Parquet lake: a folder, ``file://…``, or an object store (``s3://bucket/
    prefix``, ``gs://…``, ``az://…``) whose credentials and endpoint come from the store's usual environment
    chain (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``, instance metadata), never from this file."""


@dataclass(frozen=True)
class DeploysSettings(DeployInboxConfig):
    """[deploys]: the deploy inbox and the limits on what a deploy file may hold."""

    inbox: str = "data/deploys"
    """Folder deploy tools drop CSV/JSON deploy files into (read by `radar deploy ingest` and the sensor)."""


@dataclass(frozen=True)
class ScheduleSettings:
    """[schedules]: when Dagster's schedules start their jobs (cron expressions, UTC), and over how many
    shards (separate runs) the fleet is split."""

    snapshot: str = "* * * * *"
    """A fleet snapshot (and the plan capture, when on)."""
    samples: str = "*/15 * * * *"
    """Today's samples from today's snapshots (the per-minute detection appends them itself too)."""
    detection: str = "* * * * *"
    """Detection, plan diffs and regression alerts (``detection_job``), each run appending the samples
    first: every minute, a regression alerts within about 3 minutes of its step (docs/scripting.md, Time to
    alert). A tick is skipped while the previous run is still going. Unsharded fleets (with shard_count
    above 1 the sharded detection runs in ``analysis``)."""
    detection_in_process: bool = True
    """``detection_job``'s steps run in one process (Dagster's in_process executor): a per-minute run
    spent most of its time starting a process per step (2-4 s each). False: a process per step, so a
    step that dies (out of memory) fails alone."""
    analysis: str = "5-59/15 * * * *"
    """The drift analyses (latency and per-execution); with shard_count above 1, the sharded detection,
    its plan diffs and alerts too."""
    compaction: str = "30 1 * * *"
    """Merging each closed day's files (and expiring old analysis rows)."""
    freshness_periods: float = 3.0
    """A collection asset (statement_snapshots, plan_snapshots, query_samples) is late (its Dagster
    freshness policy fails) when its last materialization, by a Dagster run or a `radar` CLI run, is older
    than this many periods of its schedule (snapshot, samples): 3 tolerates two missed ticks."""
    shard_count: int = 1
    """Dagster runs the collection and the samples once per shard (partitions shard-0..shard-<n-1>); an
    instance's shard is a stable hash of its name (jobs.collect.shards). 1: one run covers the whole fleet,
    the assets are not partitioned by shard. Changing it moves instances between shards (nothing is lost:
    the lake is keyed by instance). Above 1 the detection also runs per shard, in two phases
    (jobs.pipeline.sharded): the analysis schedule starts each shard's detection_candidates, and the shard
    analysis sensor starts every shard's detection once all of them are recorded."""
    shard_wait_s: float = 600.0
    """Sharded detection: how long after the first shard recorded its candidates the others are waited
    for; then every shard's detection starts, a missing shard counting with its previous candidates."""

    def __post_init__(self) -> None:
        from jobs.collect.shards import MAX_SHARDS  # stdlib-only module

        count = self.shard_count
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SHARDS:
            raise ConfigError(
                f"[schedules] shard_count must be an integer between 1 and {MAX_SHARDS}, not {count!r}"
            )
        if not self.freshness_periods >= 1:
            raise ConfigError(
                "[schedules] freshness_periods must be at least 1 (a schedule period), "
                f"not {self.freshness_periods}"
            )
        if not isinstance(self.detection_in_process, bool):
            raise ConfigError(
                f"[schedules] detection_in_process must be true or false, not {self.detection_in_process!r}"
            )
        if not self.shard_wait_s >= 0:
            raise ConfigError(f"[schedules] shard_wait_s must be >= 0 seconds, not {self.shard_wait_s}")
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("freshness_periods", "shard_count", "shard_wait_s", "detection_in_process"):
                continue
            if not isinstance(value, str) or len(value.split()) != 5:
                raise ConfigError(
                    f"[schedules] {item.name} must be a cron expression of 5 fields "
                    f"(minute hour day month weekday), not {value!r}"
                )


SECRET_KEYS = frozenset({"alerts.slack_webhook_url", "alerts.webhook_url"})
"""Keys whose values are never shown (``radar config show`` prints ``<set>``)."""


@dataclass(frozen=True)
class RadarSettings:
    """The whole configuration: one field per table of ``data/radar.toml``."""

    collector: CollectorConfig = field(default_factory=CollectorConfig)
    """How one snapshot reads a server (also accepted in the fleet file's [collector] table)."""
    samples: SampleConfig = field(default_factory=SampleConfig)
    """Which snapshot intervals become samples."""
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    """The regression detector."""
    plans: PlansSettings = field(default_factory=PlansSettings)
    """Plan capture, auto_explain ingest and plan diffs."""
    pinning: PinningConfig = field(default_factory=PinningConfig)
    """Plan pins: a plan-change finding's last good plan proposed as a pg_hint_plan hint (docs/pins.md)."""
    drift: DriftConfig = field(default_factory=DriftConfig)
    """Latency distribution drift."""
    gate: GateConfig = field(default_factory=GateConfig)
    """The benchmark gate (`radar gate`)."""
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    """Alert sinks and delivery."""
    pileups: PileupConfig = field(default_factory=PileupConfig)
    """Live pile-ups (statements piling up now, from pg_stat_activity): alerted with the others."""
    report: ReportSettings = field(default_factory=ReportSettings)
    """The weekly report."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """The Prometheus exposition (`radar metrics`, `radar serve-metrics`)."""
    lake: LakeSettings = field(default_factory=LakeSettings)
    """The lake's location and writers."""
    deploys: DeploysSettings = field(default_factory=DeploysSettings)
    """Deploy files."""
    schedules: ScheduleSettings = field(default_factory=ScheduleSettings)
    """When Dagster's schedules run (the weekly report's is fixed: Monday 06:00 UTC, its weeks' start)."""

    def detection_config(self, *, incremental: bool = True, rebuild_samples: bool = True) -> DetectionConfig:
        """The detector's config from [samples], [detector], [plans.diff] and [lake]."""
        from jobs.pipeline.detection import DetectionConfig

        return DetectionConfig(
            samples=self.samples,
            regression=self.detector.regression_config(),
            plan_diff=self.plans.diff,
            rebuild_samples=rebuild_samples,
            incremental=incremental,
            scope=self.detector.scope,
            unannounced=self.detector.unannounced,
            lake=self.lake_config(),
            findings=self.detector.findings,
            memory=self.detector.memory,
            analyze_before_plan_change=self.drift.samples.analyze_before_plan_change,
        )

    def lake_config(self) -> LakeConfig:
        return as_base(LakeConfig, self.lake)

    def deploy_inbox_config(self) -> DeployInboxConfig:
        return as_base(DeployInboxConfig, self.deploys)

    def report_config(self) -> WeeklyReportConfig:
        return as_base(WeeklyReportConfig, self.report)

    def cycle_config(self, collector: CollectorConfig | None = None) -> CycleConfig:
        """One collection cycle's config from [plans], and [samples] when ``collector`` (the effective
        [collector], e.g. the fleet file's with this file's keys on top; else this file's) says
        samples_on_collect."""
        from jobs.pipeline.collection import CycleConfig

        return CycleConfig(
            capture_plans=self.plans.capture_plans,
            ingest_auto_explain=self.plans.ingest_auto_explain,
            plans=self.plans.capture_config(),
            auto_explain=self.plans.auto_explain,
            samples=self.samples if (collector or self.collector).samples_on_collect else None,
            lake=self.lake_config(),
        )
