"""The per-call work measures and the thresholds of resource regressions.

Its own module (re-exported by ``jobs.detect.work``) because ``RegressionConfig`` holds a
``ResourceConfig`` and ``jobs.detect.work`` imports the detector: the config must import without it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkMetric:
    """One per-call work measure: Σ of its sample columns / Σ calls of the merged interval."""

    name: str
    """Key in resource_regressions.metric and in ResourceConfig's ``<name>_floor`` field."""
    columns: tuple[str, ...]
    """query_samples delta columns summed into the numerator."""
    display: str
    """How a finding names it ("temp blocks" → "temp blocks per call ×4.8")."""
    unit: str
    tracked_by: str | None = None
    """A counter that must be positive on both sides for the measure to mean anything (planning time
    is all zero unless pg_stat_statements.track_planning is on): null = always tracked."""


WORK_METRICS: tuple[WorkMetric, ...] = (
    WorkMetric("temp_blocks", ("temp_blks_written",), "temp blocks", "blocks"),
    WorkMetric("shared_blocks", ("shared_blks_hit", "shared_blks_read"), "shared blocks", "blocks"),
    WorkMetric("rows", ("rows",), "rows", "rows"),
    WorkMetric("wal_bytes", ("wal_bytes",), "WAL bytes", "bytes"),
    WorkMetric("plan_ms", ("total_plan_time",), "planning time", "ms", tracked_by="plans"),
)

WORK_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [c for m in WORK_METRICS for c in m.columns] + [m.tracked_by for m in WORK_METRICS if m.tracked_by]
    )
)
"""The sample columns the work metrics read."""

DETECTION_SAMPLE_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            "instance",
            "interval_start",
            "interval_end",
            "interval_seconds",
            "userid",
            "dbid",
            "toplevel",
            "queryid",
            "calls",
            "total_exec_time",
            *WORK_COLUMNS,
        ]
    )
)
"""What a detection run reads of a sample: its key, the latency and the work metrics. The lake's samples
carry 35 columns; the 16 no analysis reads were about 45% of the run's input memory."""

WORK_METRIC_BY_NAME: dict[str, WorkMetric] = {m.name: m for m in WORK_METRICS}


@dataclass(frozen=True)
class ResourceConfig:
    """Thresholds of resource regressions (and of ``work_changed`` on latency findings).

    A work change counts when after/before per call >= ``ratio_threshold`` AND after - before per call
    >= the metric's absolute floor (a query going from 0.1 to 0.4 temp blocks per call is ×4, and
    nothing). Welch's p threshold and the change point settings are the latency detector's
    (``RegressionConfig.p_value_threshold``, ``changepoint``, ``unannounced_changepoint``, ``fdr_q``).
    """

    ratio_threshold: float = 2.0
    """Work counters per call are near-deterministic for one plan: the parameter mix moves them by tens of
    percent, a plan or memory change by multiples (×4.8 temp blocks after a work_mem cut, ×74 shared blocks
    after an index drop, both seen on PostgreSQL 18). A doubling is far outside the first and catches the
    second; latency's 20% would flag every parameter-mix drift of rows or blocks."""
    temp_blocks_floor: float = 16.0
    """Temp blocks (8 kB) written per call: 128 kB more spill per call at least."""
    shared_blocks_floor: float = 100.0
    """Shared blocks (hit + read) per call: 800 kB more buffer traffic per call at least."""
    rows_floor: float = 10.0
    """Rows per call (returned or affected)."""
    wal_bytes_floor: float = 8192.0
    """WAL bytes per call: one page more per call at least."""
    plan_ms_floor: float = 1.0
    """Planning time (ms) per call, where pg_stat_statements.track_planning is on."""

    def floor(self, metric: str) -> float:
        if metric not in WORK_METRIC_BY_NAME:
            raise ValueError(f"unknown work metric {metric!r}; known: {sorted(WORK_METRIC_BY_NAME)}")
        return float(getattr(self, f"{metric}_floor"))

    def __post_init__(self) -> None:
        if not self.ratio_threshold > 1.0:
            raise ValueError("resource ratio_threshold must be > 1 (after/before per call)")
        for metric in WORK_METRICS:
            if not self.floor(metric.name) >= 0:
                raise ValueError(f"resource {metric.name}_floor must be >= 0")
