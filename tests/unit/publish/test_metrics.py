"""The lake's Prometheus exposition (jobs.publish.metrics) on tiny inline lakes: every named metric with its
type, the figures each one is read from, counters that never go down, the serve cache, and the shipped
alert rules and dashboard checked against the exposition (promtool is not installed here: the rules are
evaluated by tests/support/promql_subset.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jobs.drift.config import SampleDriftConfig
from jobs.lake import io as lake
from jobs.lake.locks import LakeError
from jobs.publish import metrics as m
from jobs.publish.config import MetricsConfig
from jobs.schemas.analysed import ALERT_DEAD_LETTERS, ALERTS_SENT
from jobs.schemas.collected import PLAN_CAPTURE_LOG, SNAPSHOT_RUNS
from tests.support.drift_frames import drift_row, write_drift
from tests.support.findings_lakes import finding_row, write_findings
from tests.support.promql_subset import evaluate, samples_of

REPO = Path(__file__).resolve().parents[3]
RULES_FILE = REPO / "data" / "prometheus" / "radar.rules.yml"
DASHBOARD_FILE = REPO / "data" / "grafana" / "radar-dashboard.json"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=10)


def write_runs(root: Path, instance: str, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        at = row["captured_at"]
        frame = SNAPSHOT_RUNS.conform(pl.DataFrame([row]))
        parts = {"instance": instance, "date": at.date().isoformat()}
        lake.write_table(root, SNAPSHOT_RUNS, frame, parts, f"{lake.stem_for(at)}-0123456789")


def run(at: datetime, status: str = "ok", **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"captured_at": at, "status": status}
    if status == "ok":
        row |= {"collector_clock": at, "health": "ok", "server_ms": 12.0, "explain_rows_dropped": 4}
        row |= {"own_rows_dropped": 3, "own_explain_rows_dropped": 2}
    return row | over


def write_alert_rows(root: Path) -> None:
    sent = ALERTS_SENT.conform(
        pl.DataFrame(
            [
                {"alert_id": "a1", "sent_at": T0, "finding_id": "f1", "state": "open", "sink": "file"},
                {"alert_id": "a1", "sent_at": T0, "finding_id": "f1", "state": "open", "sink": "slack"},
                {"alert_id": "a2", "sent_at": T0, "finding_id": "f2", "state": "recovered", "sink": None},
            ]
        )
    )
    lake.write_table(root, ALERTS_SENT, sent, {"date": "2026-11-29"}, "sent-1")
    dead = ALERT_DEAD_LETTERS.conform(
        pl.DataFrame([{"alert_id": "a3", "dead_lettered_at": T0, "sink": "webhook", "state": "open"}])
    )
    lake.write_table(root, ALERT_DEAD_LETTERS, dead, {"date": "2026-11-29"}, "dead-1")


def write_capture_log(root: Path) -> None:
    rows = pl.DataFrame(
        {
            "captured_at": [T0] * 3,
            "queryid": [1, 2, 3],
            "dbid": [5, 5, 5],
            "source": ["generic_explain"] * 3,
            "status": ["captured", "captured", "refused"],
        }
    )
    frame = PLAN_CAPTURE_LOG.conform(rows)
    lake.write_table(root, PLAN_CAPTURE_LOG, frame, {"instance": "alpha", "date": "2026-11-29"}, "cap-1")


@pytest.fixture
def small_lake(tmp_path: Path) -> Path:
    """Two instances (alpha's last attempt failed), a capture log, one scoring run, findings, alerts."""
    root = tmp_path / "lake"
    write_runs(
        root,
        "alpha",
        [
            run(T0),
            run(T0 + timedelta(minutes=1), own_explain_rows_dropped=3, server_ms=40.0),
            run(T0 + timedelta(minutes=2), "failed", error="boom", failed_phase="connect"),
        ],
    )
    write_runs(root, "beta", [run(T0, health="degraded", explain_rows_dropped=9)])
    write_capture_log(root)
    write_drift(
        root,
        [
            drift_row("q1", "latency", "PASS", js=0.01, scored_at=T0),
            drift_row("q2", "latency", "BLOCK", js=0.4, scored_at=T0),
            drift_row("q3", "cost", "WARN", js=0.15, scored_at=T0),
            drift_row("q4", "latency", "WARN", reason="insufficient_samples", js=None, scored_at=T0),
            drift_row("q5", "latency", "WARN", reason="no_baseline", js=None, scored_at=T0),
        ],
    )
    write_findings(
        root,
        [
            finding_row(1, kind="plan_or_work"),
            finding_row(2, kind="work", analysis="unannounced"),
            finding_row(3, kind="plan_or_work", instance="beta"),
        ],
        run="r1",
    )
    # finding 3 recovered in a later run: its latest row is not open
    later = T0 + timedelta(hours=2)
    write_findings(
        root,
        [finding_row(3, kind="plan_or_work", instance="beta", status="recovered", computed_at=later)],
        run="r2",
    )
    write_alert_rows(root)
    return root


def exposition(root: Path, now: datetime = T0 + timedelta(minutes=5), **config: Any) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    families = m.metric_families(root, MetricsConfig(**config), now=now)

    class Fixed:
        def collect(self) -> list[Any]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def test_every_named_metric_is_exposed_with_its_type(small_lake: Path) -> None:
    text = exposition(small_lake)
    types = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        types[name] = family.type
    assert types == m.EXPOSED_TYPES
    for design_name in (
        "pg_regression_radar_collector_explain_statements_skipped_total",
        "plan_drift_score",
        "plan_drift_verdict_total",
        "plan_drift_degenerate_total",
    ):
        assert design_name in types


def test_collection_health_per_instance(small_lake: Path) -> None:
    s = samples_of(exposition(small_lake))
    # the capture's own EXPLAINs (2 + 3), not the 4 + 4 other sessions ran
    assert value(s, "pg_regression_radar_collector_explain_statements_skipped_total", instance="alpha") == 5
    assert value(s, "pg_regression_radar_collector_explain_statements_skipped_total", instance="beta") == 2
    assert value(s, "pg_regression_radar_snapshot_others_explain_rows", instance="beta") == 9
    assert value(s, "pg_regression_radar_snapshot_attempts_total", instance="alpha", status="ok") == 2
    assert value(s, "pg_regression_radar_snapshot_attempts_total", instance="alpha", status="failed") == 1
    assert value(s, "pg_regression_radar_snapshot_last_attempt_failed", instance="alpha") == 1
    assert value(s, "pg_regression_radar_snapshot_last_attempt_failed", instance="beta") == 0
    # lag from the last successful snapshot (T0 + 1 min), not from the failed attempt after it
    assert value(s, "pg_regression_radar_snapshot_lag_seconds", instance="alpha") == 240
    assert value(s, "pg_regression_radar_snapshot_last_success_timestamp_seconds", instance="beta") == (
        T0.timestamp()
    )
    assert value(s, "pg_regression_radar_snapshot_server_read_seconds", instance="alpha") == 0.04
    assert value(s, "pg_regression_radar_snapshot_degraded", instance="beta") == 1
    assert value(s, "pg_regression_radar_snapshot_degraded", instance="alpha") == 0
    assert value(s, "pg_regression_radar_plan_capture_attempts_total", status="captured") == 2
    assert value(s, "pg_regression_radar_plan_capture_attempts_total", status="refused") == 1


def test_drift_verdicts_degenerate_and_scores(small_lake: Path) -> None:
    s = samples_of(exposition(small_lake))
    verdict = "plan_drift_verdict_total"
    assert value(s, verdict, verdict="BLOCK", metric="latency") == 1
    assert value(s, verdict, verdict="PASS", metric="latency") == 1
    # an insufficient_samples or no_baseline row is WARN in the lake but no verdict on the distributions
    assert value(s, verdict, verdict="WARN", metric="latency") == 0
    assert value(s, verdict, verdict="WARN", metric="cost") == 1
    assert value(s, verdict, verdict="BLOCK", metric="cardinality") == 0  # every series exists from the start
    assert value(s, "plan_drift_degenerate_total", metric="latency") == 1
    assert value(s, "plan_drift_no_baseline_total", metric="latency") == 1
    assert value(s, "plan_drift_score_bucket", metric="latency", le="0.01") == 1
    assert value(s, "plan_drift_score_bucket", metric="latency", le="0.3") == 1
    assert value(s, "plan_drift_score_bucket", metric="latency", le="0.5") == 2
    assert value(s, "plan_drift_score_bucket", metric="latency", le="+Inf") == 2
    assert value(s, "plan_drift_score_count", metric="latency") == 2
    assert value(s, "plan_drift_score_sum", metric="latency") == pytest.approx(0.41)


def test_drift_buckets_come_from_the_config(small_lake: Path) -> None:
    s = samples_of(exposition(small_lake, score_buckets=(0.2, 0.9)))
    assert {labels["le"] for labels, _ in s["plan_drift_score_bucket"]} == {"0.2", "0.9", "+Inf"}


def test_findings_open_by_kind_from_each_findings_latest_row(small_lake: Path) -> None:
    s = samples_of(exposition(small_lake))
    assert value(s, "pg_regression_radar_findings_open", kind="plan_or_work", analysis="deploy") == 1
    assert value(s, "pg_regression_radar_findings_open", kind="work", analysis="unannounced") == 1
    assert value(s, "pg_regression_radar_findings_open", kind="both", analysis="deploy") == 0
    assert value(s, "pg_regression_radar_instance_findings_open", instance="alpha") == 0  # db1's findings
    assert value(s, "pg_regression_radar_instance_findings_open", instance="db1") == 2
    assert value(s, "pg_regression_radar_instance_findings_open", instance="beta") == 0  # recovered


def test_alerts_sent_and_dead_lettered(small_lake: Path) -> None:
    s = samples_of(exposition(small_lake))
    assert value(s, "pg_regression_radar_alerts_sent_total", sink="file", state="open") == 1
    assert value(s, "pg_regression_radar_alerts_sent_total", sink="slack", state="open") == 1
    assert value(s, "pg_regression_radar_alerts_sent_total", sink="unknown", state="recovered") == 1
    assert value(s, "pg_regression_radar_alerts_sent_total", sink="webhook", state="open") == 0
    assert value(s, "pg_regression_radar_alerts_dead_lettered_total", sink="webhook", state="open") == 1


def counter_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type in ("counter", "histogram"):
            for sample in family.samples:
                if sample.name.endswith(("_total", "_bucket", "_count", "_sum")):
                    out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def test_counters_never_go_down_as_the_lake_grows(small_lake: Path) -> None:
    """A later scoring run where the BLOCKed pair passes, another snapshot and a recovered finding: every
    counter and histogram series keeps or raises its value (Prometheus reads a drop as a reset and a
    rate() spike)."""
    before = counter_samples(exposition(small_lake))
    later = T0 + timedelta(minutes=10)
    write_drift(
        small_lake,
        [
            drift_row("q1", "latency", "PASS", js=0.01, scored_at=later),
            drift_row("q2", "latency", "PASS", js=0.02, scored_at=later),
        ],
    )
    write_runs(small_lake, "beta", [run(later, own_explain_rows_dropped=0)])
    write_findings(small_lake, [finding_row(1, kind="plan_or_work", status="recovered")], run="r3")
    after = counter_samples(exposition(small_lake, now=later))
    assert set(before) <= set(after)
    dropped = {key: (before[key], after[key]) for key in before if after[key] < before[key]}
    assert not dropped
    assert after[("plan_drift_verdict_total", frozenset({("verdict", "PASS"), ("metric", "latency")}))] == 3


def test_a_table_that_cannot_be_read_is_reported_and_the_others_stay(
    small_lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lake.read_table

    def failing(root: Any, table: Any, query: Any = None) -> pl.DataFrame:
        if getattr(table, "name", table) == "execution_drift":
            raise LakeError("cannot read lake table execution_drift: broken")
        return real(root, table, query)

    monkeypatch.setattr(lake, "read_table", failing)
    s = samples_of(exposition(small_lake))
    assert value(s, "pg_regression_radar_lake_table_readable", table="execution_drift") == 0
    assert value(s, "pg_regression_radar_lake_table_readable", table="snapshot_runs") == 1
    assert value(s, "plan_drift_verdict_total", verdict="BLOCK", metric="latency") == 0
    assert value(s, "pg_regression_radar_snapshot_attempts_total", instance="alpha", status="ok") == 2


def test_the_collector_reads_the_lake_at_most_once_per_cache_interval(small_lake: Path) -> None:
    now = [100.0]
    collector = m.LakeCollector(small_lake, MetricsConfig(cache_s=15.0), clock=lambda: now[0])
    list(collector.collect())
    now[0] += 10
    list(collector.collect())
    assert collector.reads == 1
    now[0] += 6
    list(collector.collect())
    assert collector.reads == 2


def test_textfile_is_written_whole(small_lake: Path, tmp_path: Path) -> None:
    target = tmp_path / "radar.prom"
    m.write_textfile(target, small_lake)
    assert "plan_drift_verdict_total" in target.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name != "lake"] == ["radar.prom"]  # no temp file left


def test_a_failed_textfile_write_leaves_the_last_file_whole(
    small_lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node_exporter may read the file at any moment: a write that fails keeps the previous exposition."""
    target = tmp_path / "radar.prom"
    m.write_textfile(target, small_lake)
    previous = target.read_text()

    def broken(*_: Any, **__: Any) -> list[Any]:
        raise LakeError("cannot read lake table snapshot_runs: broken")

    monkeypatch.setattr(m, "metric_families", broken)
    with pytest.raises(LakeError):
        m.write_textfile(target, small_lake)
    assert target.read_text() == previous
    assert [p.name for p in tmp_path.iterdir() if p.name != "lake"] == ["radar.prom"]


# ---------------------------------------------------------------------------------------------------------
# The shipped rules file and dashboard


def shipped_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES_FILE.read_text())["groups"] for rule in group["rules"]]


def test_the_rules_file_is_the_default_settings_rules() -> None:
    assert RULES_FILE.read_text() == m.rules_yaml(SampleDriftConfig())  # regenerate: radar metrics --rules
    assert {r["alert"] for r in shipped_rules()} == {"PlanDriftBlockStorm", "PlanDriftDegenerateShare"}


def test_the_rules_follow_the_config() -> None:
    text = m.rules_yaml(
        SampleDriftConfig(stale_block_share=0.2, stale_window=timedelta(minutes=30)), timedelta(minutes=5)
    )
    rule = yaml.safe_load(text)["groups"][0]["rules"][0]
    assert "[30m]" in rule["expr"] and "> 0.2 " in rule["expr"] and rule["for"] == "5m"


def scored_lake(root: Path, flags: list[tuple[str, str | None]], at: datetime) -> str:
    """The exposition after one more scoring run (at ``at``) of ``flags`` (flag, reason) pairs."""
    write_drift(
        root, [drift_row(f"q{i}", "latency", f, reason=r, scored_at=at) for i, (f, r) in enumerate(flags)]
    )
    return exposition(root, now=at)


def fires(name: str, before: str, after: str) -> bool:
    rule = next(r for r in shipped_rules() if r["alert"] == name)
    result, names = evaluate(rule["expr"], before, after)
    assert names <= m.exposed_series_names(), names - m.exposed_series_names()
    return bool(result)


def test_block_storm_rule_fires_on_a_storm_only(tmp_path: Path) -> None:
    quiet_before = scored_lake(tmp_path / "quiet", [("PASS", None)] * 40, T0)
    quiet_after = scored_lake(tmp_path / "quiet", [("PASS", None)] * 18 + [("BLOCK", None)] * 2, T1)
    assert not fires("PlanDriftBlockStorm", quiet_before, quiet_after)  # 10% BLOCK, but 2: fewer than 3
    before = scored_lake(tmp_path / "storm", [("PASS", None)] * 40, T0)
    after = scored_lake(tmp_path / "storm", [("PASS", None)] * 20 + [("BLOCK", None)] * 4, T1)
    assert fires("PlanDriftBlockStorm", before, after)  # 4 of 24 verdicts: 17% > 5%, and 4 >= 3
    many = scored_lake(tmp_path / "many", [("PASS", None)] * 100 + [("BLOCK", None)] * 4, T0)
    empty = exposition(tmp_path / "nothing")
    assert not fires("PlanDriftBlockStorm", empty, many)  # 4 of 104: 3.8%, under 5%


def test_degenerate_share_rule_fires_above_ten_percent(tmp_path: Path) -> None:
    empty = exposition(tmp_path / "nothing")
    thin = ("WARN", "insufficient_samples")
    at_limit = scored_lake(tmp_path / "limit", [("PASS", None)] * 9 + [thin], T0)
    assert not fires("PlanDriftDegenerateShare", empty, at_limit)  # exactly 10%
    above = scored_lake(tmp_path / "above", [("PASS", None)] * 8 + [thin] * 2, T0)
    assert fires("PlanDriftDegenerateShare", empty, above)
    # no_baseline rows need an anchor, not a wider window: they are not in the share
    unanchored = scored_lake(
        tmp_path / "unanchored", [("PASS", None)] * 9 + [("WARN", "no_baseline")] * 5, T0
    )
    assert not fires("PlanDriftDegenerateShare", empty, unanchored)


def test_the_dashboard_queries_only_exposed_metrics() -> None:
    import re

    dashboard = json.loads(DASHBOARD_FILE.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10
    named = {
        word
        for expr in exprs
        for word in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", re.sub(r'\{[^}]*\}|"[^"]*"|\[[^]]*\]', "", expr))
        if word.startswith(("pg_regression_radar_", "plan_drift_"))
    }
    assert named and named <= m.exposed_series_names(), named - m.exposed_series_names()
    covered = {n.removesuffix("_bucket") for n in named}
    assert {"plan_drift_score", "plan_drift_verdict_total", "plan_drift_degenerate_total"} <= covered
