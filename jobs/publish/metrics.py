"""The Prometheus exposition of the lake: what a Prometheus/Grafana shop alerts on (issue 29, item 5).

Every figure is read from the lake, never from a running process, so `radar metrics` (a textfile for
node_exporter, or stdout) and `radar serve-metrics` (an HTTP endpoint) show the same numbers whichever
process wrote the rows. Reads are column-pruned lazy scans aggregated in polars (``lake.read_table`` with a
``select``): the full history of a table is never held, only its few columns' aggregates.

Counters (``_total``, histogram buckets) are derived only from append-only records that nothing expires
(snapshot_runs, plan_capture_log, execution_drift, alerts_sent, alert_dead_letters: compaction merges their
files but keeps every row; the analysis retention deletes none of them), so they never go down unless the
lake does. Gauges are the latest state (last snapshot, open findings).

The designs' names are kept as they were written: ``pg_regression_radar_collector_explain_statements_
skipped_total`` (detector design) and ``plan_drift_score``, ``plan_drift_verdict_total``,
``plan_drift_degenerate_total`` (drift design); everything else is ``pg_regression_radar_*``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from jobs.alerts.sinks import FILE, SLACK, WEBHOOK
from jobs.detect.contention import BOTH, PLAN_OR_WORK
from jobs.detect.findings import latest_states
from jobs.detect.work_findings import WORK
from jobs.drift.checks import NO_BASELINE
from jobs.drift.scorer import BLOCK, INSUFFICIENT_SAMPLES, METRICS, PASS, WARN
from jobs.lake import io as lake
from jobs.lake.locks import LakeError
from jobs.publish.config import MetricsConfig
from jobs.schemas.analysed import ALERT_DEAD_LETTERS, ALERTS_SENT, EXECUTION_DRIFT, FINDING_STATES
from jobs.schemas.collected import PLAN_CAPTURE_LOG, SNAPSHOT_RUNS
from jobs.schemas.table import TableSchema

if TYPE_CHECKING:
    from jobs.drift.config import SampleDriftConfig
    from jobs.lake.storage import LakePath

PREFIX = "pg_regression_radar_"
EXPLAIN_SKIPPED = "pg_regression_radar_collector_explain_statements_skipped"
OTHERS_EXPLAIN_ROWS = "pg_regression_radar_snapshot_others_explain_rows"
SNAPSHOT_ATTEMPTS = "pg_regression_radar_snapshot_attempts"
SNAPSHOT_LAST_SUCCESS = "pg_regression_radar_snapshot_last_success_timestamp_seconds"
SNAPSHOT_LAG = "pg_regression_radar_snapshot_lag_seconds"
SNAPSHOT_READ_SECONDS = "pg_regression_radar_snapshot_server_read_seconds"
SNAPSHOT_LAST_FAILED = "pg_regression_radar_snapshot_last_attempt_failed"
SNAPSHOT_DEGRADED = "pg_regression_radar_snapshot_degraded"
PLAN_CAPTURE_ATTEMPTS = "pg_regression_radar_plan_capture_attempts"
DRIFT_SCORE = "plan_drift_score"
DRIFT_VERDICTS = "plan_drift_verdict"
DRIFT_DEGENERATE = "plan_drift_degenerate"
DRIFT_NO_BASELINE = "plan_drift_no_baseline"
FINDINGS_OPEN = "pg_regression_radar_findings_open"
INSTANCE_FINDINGS_OPEN = "pg_regression_radar_instance_findings_open"
ALERTS_SENT_TOTAL = "pg_regression_radar_alerts_sent"
ALERTS_DEAD_LETTERED = "pg_regression_radar_alerts_dead_lettered"
TABLE_READABLE = "pg_regression_radar_lake_table_readable"
READ_SECONDS = "pg_regression_radar_metrics_lake_read_seconds"

VERDICTS = (PASS, WARN, BLOCK)
FINDING_KINDS = (PLAN_OR_WORK, BOTH, WORK)
ANALYSES = ("deploy", "unannounced")
SINKS = (FILE, SLACK, WEBHOOK)
ALERT_STATES = ("open", "recovered", "superseded")
UNKNOWN = "unknown"
"""Label value of a null in the lake (a row written before the column existed)."""

EXPOSED_TYPES: dict[str, str] = {
    f"{EXPLAIN_SKIPPED}_total": "counter",
    OTHERS_EXPLAIN_ROWS: "gauge",
    f"{SNAPSHOT_ATTEMPTS}_total": "counter",
    SNAPSHOT_LAST_SUCCESS: "gauge",
    SNAPSHOT_LAG: "gauge",
    SNAPSHOT_READ_SECONDS: "gauge",
    SNAPSHOT_LAST_FAILED: "gauge",
    SNAPSHOT_DEGRADED: "gauge",
    f"{PLAN_CAPTURE_ATTEMPTS}_total": "counter",
    DRIFT_SCORE: "histogram",
    f"{DRIFT_VERDICTS}_total": "counter",
    f"{DRIFT_DEGENERATE}_total": "counter",
    f"{DRIFT_NO_BASELINE}_total": "counter",
    FINDINGS_OPEN: "gauge",
    INSTANCE_FINDINGS_OPEN: "gauge",
    f"{ALERTS_SENT_TOTAL}_total": "counter",
    f"{ALERTS_DEAD_LETTERED}_total": "counter",
    TABLE_READABLE: "gauge",
    READ_SECONDS: "gauge",
}
"""Every metric the exposition has (names as they appear in it: counters with ``_total``), with its type:
the test, the rules file and the dashboard are checked against this."""


def exposed_series_names() -> set[str]:
    """The sample names a query may use: a histogram's ``_bucket``, ``_sum`` and ``_count`` included."""
    names = set(EXPOSED_TYPES)
    for name, kind in EXPOSED_TYPES.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def _label(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.String).fill_null(UNKNOWN)


@dataclass
class _Reader:
    """Reads one table at a time; a table the lake cannot read is recorded (``readable``) and counts as
    empty, so one bad table never hides the others' metrics."""

    root: LakePath
    readable: dict[str, bool]

    def read(self, table: TableSchema, query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> pl.DataFrame | None:
        try:
            frame = lake.read_table(self.root, table, query)
        except LakeError:
            self.readable[table.name] = False
            return None
        self.readable[table.name] = True
        return frame


def _collection_metrics(reader: _Reader, now: datetime) -> tuple[list[Metric], list[str]]:
    """Collection health per instance from snapshot_runs (append-only; failed attempts have rows too)."""
    skipped = CounterMetricFamily(
        EXPLAIN_SKIPPED,
        "EXPLAIN statements of the collector's own plan capture found in pg_stat_statements and skipped, "
        "summed over snapshots (snapshot_runs.own_explain_rows_dropped)",
        labels=["instance"],
    )
    others = GaugeMetricFamily(
        OTHERS_EXPLAIN_ROWS,
        "EXPLAIN entries other sessions ran, skipped by the last successful snapshot "
        "(snapshot_runs.explain_rows_dropped)",
        labels=["instance"],
    )
    attempts = CounterMetricFamily(
        SNAPSHOT_ATTEMPTS, "Snapshot attempts by outcome (status ok or failed)", labels=["instance", "status"]
    )
    last_success = GaugeMetricFamily(
        SNAPSHOT_LAST_SUCCESS,
        "Collector clock of the last successful snapshot (Unix time)",
        labels=["instance"],
    )
    lag = GaugeMetricFamily(
        SNAPSHOT_LAG, "Seconds since the last successful snapshot, at the lake read", labels=["instance"]
    )
    read_seconds = GaugeMetricFamily(
        SNAPSHOT_READ_SECONDS,
        "Server time of the last successful snapshot's reads (snapshot_runs.server_ms / 1000)",
        labels=["instance"],
    )
    last_failed = GaugeMetricFamily(
        SNAPSHOT_LAST_FAILED, "1 when the instance's latest snapshot attempt failed", labels=["instance"]
    )
    degraded = GaugeMetricFamily(
        SNAPSHOT_DEGRADED,
        "1 when the last successful snapshot was degraded (read, but the server records less than it should)",
        labels=["instance"],
    )
    families: list[Metric] = [
        skipped,
        others,
        attempts,
        last_success,
        lag,
        read_seconds,
        last_failed,
        degraded,
    ]
    ok = pl.col("status") == "ok"
    runs = reader.read(
        SNAPSHOT_RUNS,
        lambda f: (
            f.select(
                "instance",
                "captured_at",
                pl.coalesce("collector_clock", "captured_at").alias("clock"),
                "status",
                "health",
                "server_ms",
                "explain_rows_dropped",
                "own_explain_rows_dropped",
            )
            .group_by("instance")
            .agg(
                pl.col("own_explain_rows_dropped").fill_null(0).sum().alias("own_explain"),
                (pl.col("status") == "ok").sum().alias("ok"),
                (pl.col("status") != "ok").sum().alias("failed"),
                (pl.col("status").sort_by("captured_at").last() != "ok").alias("last_failed"),
                pl.col("clock").filter(ok).max().alias("last_ok"),
                *(
                    pl.col(c).filter(ok).sort_by(pl.col("captured_at").filter(ok)).last().alias(c)
                    for c in ("server_ms", "explain_rows_dropped", "health")
                ),
            )
            .sort("instance")
        ),
    )
    if runs is None:
        return families, []
    for row in runs.iter_rows(named=True):
        name = row["instance"]
        skipped.add_metric([name], float(row["own_explain"]))
        attempts.add_metric([name, "ok"], float(row["ok"]))
        attempts.add_metric([name, "failed"], float(row["failed"]))
        last_failed.add_metric([name], 1.0 if row["last_failed"] else 0.0)
        if row["last_ok"] is not None:
            last_success.add_metric([name], row["last_ok"].timestamp())
            lag.add_metric([name], max(0.0, (now - row["last_ok"]).total_seconds()))
            degraded.add_metric([name], 0.0 if row["health"] in (None, "ok") else 1.0)
        if row["server_ms"] is not None:
            read_seconds.add_metric([name], row["server_ms"] / 1000)
        if row["explain_rows_dropped"] is not None:
            others.add_metric([name], float(row["explain_rows_dropped"]))
    return families, runs["instance"].to_list()


def _plan_capture_metrics(reader: _Reader) -> list[Metric]:
    attempts = CounterMetricFamily(
        PLAN_CAPTURE_ATTEMPTS,
        "Plan capture attempts, one per candidate query and source tried (plan_capture_log), by status",
        labels=["instance", "source", "status"],
    )
    counts = reader.read(
        PLAN_CAPTURE_LOG,
        lambda f: (
            f.select(_label("instance"), _label("source"), _label("status"))
            .group_by("instance", "source", "status")
            .len()
            .sort("instance", "source", "status")
        ),
    )
    for row in counts.iter_rows() if counts is not None else ():
        attempts.add_metric(list(row[:3]), float(row[3]))
    return [attempts]


def _drift_metrics(reader: _Reader, buckets: tuple[float, ...]) -> list[Metric]:
    """The drift design's metrics over every execution_drift row: a row with a verdict on the distributions
    counts in ``plan_drift_verdict_total`` and ``plan_drift_score``; an insufficient_samples row in
    ``plan_drift_degenerate_total``; a no_baseline row in ``plan_drift_no_baseline_total``. So the share the
    degenerate check judges is degenerate / (verdicts + degenerate), as in jobs.drift.checks."""
    score = HistogramMetricFamily(
        DRIFT_SCORE,
        "Jensen-Shannon divergence (base 2) of every scored execution_drift row; rate() over a window gives "
        "the distribution of the latest scores",
        labels=["metric"],
    )
    verdicts = CounterMetricFamily(
        DRIFT_VERDICTS,
        "execution_drift rows with a verdict on the distributions, by verdict (PASS, WARN, BLOCK) and metric",
        labels=["verdict", "metric"],
    )
    degenerate = CounterMetricFamily(
        DRIFT_DEGENERATE,
        "execution_drift rows with too few samples on a side to judge (reason insufficient_samples)",
        labels=["metric"],
    )
    no_baseline = CounterMetricFamily(
        DRIFT_NO_BASELINE,
        "execution_drift rows of a pair without an anchored baseline (reason no_baseline)",
        labels=["metric"],
    )
    families: list[Metric] = [score, verdicts, degenerate, no_baseline]
    scored = ~pl.col("reason").fill_null("").is_in([INSUFFICIENT_SAMPLES, NO_BASELINE])
    by_metric = reader.read(
        EXECUTION_DRIFT,
        lambda f: (
            f.select("metric", "flag", "reason", "js")
            .group_by("metric")
            .agg(
                *((scored & (pl.col("flag") == v)).sum().alias(v) for v in VERDICTS),
                (pl.col("reason") == INSUFFICIENT_SAMPLES).sum().alias("degenerate"),
                (pl.col("reason") == NO_BASELINE).sum().alias("no_baseline"),
                *(
                    (scored & pl.col("js").is_not_null() & (pl.col("js") <= b)).sum().alias(f"le_{i}")
                    for i, b in enumerate(buckets)
                ),
                (scored & pl.col("js").is_not_null()).sum().alias("scores"),
                pl.col("js").filter(scored).sum().alias("js_sum"),
            )
        ),
    )
    rows = {r["metric"]: r for r in by_metric.iter_rows(named=True)} if by_metric is not None else {}
    for metric in sorted(set(METRICS) | {m for m in rows if m is not None}):
        row = rows.get(metric, {})
        for verdict in VERDICTS:
            verdicts.add_metric([verdict, metric], float(row.get(verdict, 0) or 0))
        degenerate.add_metric([metric], float(row.get("degenerate", 0) or 0))
        no_baseline.add_metric([metric], float(row.get("no_baseline", 0) or 0))
        cumulative = [(repr(b), float(row.get(f"le_{i}", 0) or 0)) for i, b in enumerate(buckets)]
        score.add_metric(
            [metric],
            [*cumulative, ("+Inf", float(row.get("scores", 0) or 0))],
            sum_value=float(row.get("js_sum", 0) or 0),
        )
    return families


def _finding_metrics(reader: _Reader, instances: Iterable[str]) -> list[Metric]:
    """Open findings from the latest row of each finding (``latest_states``: what the findings view shows)."""
    by_kind = GaugeMetricFamily(
        FINDINGS_OPEN, "Findings open now, by kind and analysis", labels=["kind", "analysis"]
    )
    by_instance = GaugeMetricFamily(
        INSTANCE_FINDINGS_OPEN, "Findings open now, by instance", labels=["instance"]
    )
    states = reader.read(
        FINDING_STATES,
        lambda f: f.select("finding_id", "run_id", "computed_at", "status", "instance", "kind", "analysis"),
    )
    open_now = (
        latest_states(states)
        .filter(pl.col("status") == "open")
        .select(_label("instance"), _label("kind"), _label("analysis"))
        if states is not None
        else pl.DataFrame(schema={"instance": pl.String, "kind": pl.String, "analysis": pl.String})
    )
    kinds = {(r[0], r[1]): r[2] for r in open_now.group_by("kind", "analysis").len().iter_rows()}
    for kind, analysis in sorted({(k, a) for k in FINDING_KINDS for a in ANALYSES} | set(kinds)):
        by_kind.add_metric([kind, analysis], float(kinds.get((kind, analysis), 0)))
    per_instance = dict(open_now.group_by("instance").len().iter_rows())
    for name in sorted(set(instances) | set(per_instance)):
        by_instance.add_metric([name], float(per_instance.get(name, 0)))
    return [by_kind, by_instance]


def _alert_metrics(reader: _Reader) -> list[Metric]:
    sent = CounterMetricFamily(
        ALERTS_SENT_TOTAL,
        "Alerts a sink accepted (alerts_sent rows; sink 'unknown': rows from before per-sink records)",
        labels=["sink", "state"],
    )
    dead = CounterMetricFamily(
        ALERTS_DEAD_LETTERED,
        "Alerts a sink refused for good or that ran out of attempts (alert_dead_letters rows)",
        labels=["sink", "state"],
    )
    for family, table in ((sent, ALERTS_SENT), (dead, ALERT_DEAD_LETTERS)):
        counts = reader.read(
            table, lambda f: f.select(_label("sink"), _label("state")).group_by("sink", "state").len()
        )
        found = {(r[0], r[1]): r[2] for r in counts.iter_rows()} if counts is not None else {}
        for sink, state in sorted({(s, t) for s in SINKS for t in ALERT_STATES} | set(found)):
            family.add_metric([sink, state], float(found.get((sink, state), 0)))
    return [sent, dead]


def metric_families(
    lake_root: LakePath, config: MetricsConfig | None = None, now: datetime | None = None
) -> list[Metric]:
    """Every metric family of the exposition, read from the lake once."""
    config = config or MetricsConfig()
    now = now or datetime.now(UTC)
    started = time.perf_counter()
    reader = _Reader(lake_root, {})
    collection, instances = _collection_metrics(reader, now)
    families = [
        *collection,
        *_plan_capture_metrics(reader),
        *_drift_metrics(reader, config.score_buckets),
        *_finding_metrics(reader, instances),
        *_alert_metrics(reader),
    ]
    readable = GaugeMetricFamily(
        TABLE_READABLE, "1 when the lake table was read, 0 when the read failed", labels=["table"]
    )
    for name, ok in sorted(reader.readable.items()):
        readable.add_metric([name], 1.0 if ok else 0.0)
    seconds = GaugeMetricFamily(READ_SECONDS, "Seconds this exposition's lake read took")
    seconds.add_metric([], time.perf_counter() - started)
    return [*families, readable, seconds]


class LakeCollector:
    """A prometheus_client collector over the lake: the families are read again when the last read is
    older than ``cache_s`` (a scrape in between gets the last ones), one read at a time."""

    def __init__(
        self,
        lake_root: LakePath,
        config: MetricsConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lake_root = lake_root
        self.config = config or MetricsConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._families: list[Metric] | None = None
        self._read_at = 0.0
        self.reads = 0

    def describe(self) -> list[Metric]:
        """Nothing: registering must not read the lake (the names are known only from a read)."""
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._families is None or self._clock() - self._read_at >= self.config.cache_s:
                self._families = metric_families(self.lake_root, self.config)
                self._read_at = self._clock()
                self.reads += 1
            families = self._families
        yield from families


def lake_registry(lake_root: LakePath, config: MetricsConfig | None = None) -> CollectorRegistry:
    """A registry of the lake's metrics alone (no process or platform collectors: they describe the radar
    process, which for a textfile is a short-lived cron job)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakeCollector(lake_root, config))  # type: ignore[arg-type]
    return registry


def exposition_text(lake_root: LakePath, config: MetricsConfig | None = None) -> str:
    """The Prometheus text format (0.0.4) of the lake's metrics."""
    return generate_latest(lake_registry(lake_root, config)).decode()


def exposition_rows(lake_root: LakePath, config: MetricsConfig | None = None) -> list[dict[str, object]]:
    """The same metrics as JSON-ready rows, one per sample: family, type, sample name, labels, value (for
    scripts that do not parse the Prometheus text format)."""
    rows: list[dict[str, object]] = []
    for family in lake_registry(lake_root, config).collect():
        for sample in family.samples:
            rows.append(
                {
                    "family": family.name,
                    "type": family.type,
                    "name": sample.name,
                    "labels": dict(sample.labels),
                    "value": sample.value,
                }
            )
    return rows


def write_textfile(path: Path, lake_root: LakePath, config: MetricsConfig | None = None) -> None:
    """The exposition written whole or not at all (a temp file beside it renamed over it), as node_exporter's
    textfile collector needs: it never reads a half-written file."""
    write_to_textfile(str(path), lake_registry(lake_root, config))


# ---------------------------------------------------------------------------------------------------------
# The drift design's two alert rules, from the same thresholds as the drift asset checks


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    summary: str


def alert_rules(samples: SampleDriftConfig) -> list[AlertRule]:
    """The BLOCK storm (a BLOCK share of the verdicts over ``stale_window`` above ``stale_block_share``,
    with at least ``stale_min_block_pairs`` BLOCKs) and the degenerate share (insufficient_samples rows
    over the same window above ``degenerate_share`` of the judged rows): jobs.drift.checks' two checks,
    over counters instead of each pair's latest row."""
    from jobs.durations import format_duration

    window = format_duration(samples.stale_window)
    blocks = f'sum(increase({DRIFT_VERDICTS}_total{{verdict="{BLOCK}"}}[{window}]))'
    verdicts = f"sum(increase({DRIFT_VERDICTS}_total[{window}]))"
    thin = f"sum(increase({DRIFT_DEGENERATE}_total[{window}]))"
    return [
        AlertRule(
            "PlanDriftBlockStorm",
            f"({blocks} / {verdicts}) > {samples.stale_block_share!r} "
            f"and {blocks} >= {samples.stale_min_block_pairs}",
            f"More than {samples.stale_block_share:.0%} of the drift verdicts over the last {window} are "
            f"BLOCK (at least {samples.stale_min_block_pairs}): a stale baseline (an ANALYZE re-costed the "
            "plans) rather than every query regressing at once; `radar drift checks` names the tables and "
            "the re-anchor command",
        ),
        AlertRule(
            "PlanDriftDegenerateShare",
            f"({thin} / ({verdicts} + {thin})) > {samples.degenerate_share!r}",
            f"More than {samples.degenerate_share:.0%} of the drift pairs scored over the last {window} have "
            "too few samples on a side: widen [drift.samples] current_window or raise "
            "auto_explain.sample_rate",
        ),
    ]


def rules_yaml(samples: SampleDriftConfig, alert_for: timedelta = timedelta(0)) -> str:
    """A Prometheus rules file of ``alert_rules`` (written by hand: the runtime has no YAML writer)."""
    import json

    from jobs.durations import format_duration

    lines = [
        "# pg-regression-radar: the drift design's alert rules over `radar metrics` / `radar serve-metrics`.",
        "# Generated by `radar metrics --rules` from [drift.samples] and [metrics] alert_for; do not edit.",
        "groups:",
        "  - name: pg_regression_radar_drift",
        "    rules:",
    ]

    def quoted(text: str) -> str:  # YAML single quotes read best around PromQL's double-quoted labels
        return f"'{text}'" if "'" not in text else json.dumps(text)

    for rule in alert_rules(samples):
        lines += [f"      - alert: {rule.name}", f"        expr: {quoted(rule.expr)}"]
        if alert_for > timedelta(0):
            lines.append(f"        for: {format_duration(alert_for)}")
        lines += [
            "        labels:",
            "          severity: warning",
            "        annotations:",
            f"          summary: {quoted(rule.summary)}",
        ]
    return "\n".join(lines) + "\n"
