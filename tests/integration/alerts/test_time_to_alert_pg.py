"""Time to alert on a real PostgreSQL 18 server (issue 26): an index dropped under a running workload,
nothing announcing it, the radar's cycle (snapshot, incremental detection, alerts) run every snapshot
interval: the fake Slack receives the alert within 3 snapshot intervals of the drop (the large-step
confirmation: jobs.detect.large_steps), and only for the query that lost its index."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from jobs.alerts.config import AlertsConfig
from jobs.alerts.run import send_alerts
from jobs.collect.collector import snapshot_fleet
from jobs.lake import io as lake
from jobs.pipeline.detection import DetectionConfig, run_detection
from tests.conftest import FleetFactory
from tests.support.pg_workload import Workload, one_instance, setup_orders
from tests.support.slack_emulator import serve_slack

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

INTERVAL = 2.0
"""Seconds between snapshots (a minute in production: the same count of intervals)."""
HISTORY = 62
"""Snapshots before the drop: a full large-step reference (60 samples; an hour at one a minute). With
fewer, three new samples are not enough (26 reference samples: 1 / C(29, 3) = 2.7e-4 > 1e-4; a first
version of this test saw the alert at the fourth interval, as it should)."""
AFTER = 8
"""Cycles after the drop at most (the alert must come by the third)."""
QUERY = "select sum(amount) from radar_tta_orders where customer_id = %s"
OTHER = "select count(*) from radar_tta_other where id < %s"


def test_an_index_drop_alerts_on_slack_within_three_snapshot_intervals(
    fleet_factory: FleetFactory, lake_root: Path, tmp_path: Path
) -> None:
    fleet = fleet_factory(["tta"])
    dsn, config = one_instance(fleet, "tta")
    setup_orders(dsn, "radar_tta_orders", index=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists radar_tta_other")
        conn.execute("create table radar_tta_other as select g as id from generate_series(1, 20000) g")
    detection = DetectionConfig()
    with serve_slack() as slack:
        alerts = AlertsConfig(
            file=str(tmp_path / "alerts.jsonl"),
            dead_letter_file=str(tmp_path / "dead.jsonl"),
            slack_webhook_url=slack.url,
        )

        def cycle(after_snapshot: Callable[[], None] = lambda: None) -> None:
            """What a per-minute cron (or the Dagster detection job) does each interval."""
            started = time.monotonic()
            result = snapshot_fleet(config, lake_root)
            assert not result.failed, [r.error for r in result.failed]
            after_snapshot()
            run_detection(lake_root, detection)
            send_alerts(lake_root, alerts, env={})
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))

        with Workload(dsn, [QUERY, OTHER], pause=0.005), Workload(dsn, [QUERY, OTHER], pause=0.005):
            for _ in range(HISTORY):
                cycle()
            if slack.accepted and (episode := host_episode(lake_root)):
                pytest.skip(episode)
            assert not slack.accepted, slack.accepted  # nothing before the drop
            dropped: list[float] = []

            def drop_index() -> None:  # right after a snapshot: the next interval is wholly new
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("drop index radar_tta_orders_customer")
                dropped.append(time.monotonic())

            cycle(drop_index)
            cycles = 0
            while cycles < AFTER and not slack.accepted:
                cycle()
                cycles += 1
            seconds = time.monotonic() - dropped[0]
    assert slack.accepted, f"no alert {AFTER} snapshot intervals after the drop"
    # The third snapshot after the drop closes the third wholly new interval: its cycle alerts.
    assert cycles <= 3, f"alerted after {cycles} snapshot intervals ({seconds:.1f} s)"
    texts = [str(body) for body in slack.accepted]
    assert len(texts) == 1 and "radar_tta_orders" in texts[0], texts


def host_episode(lake_root: Path, factor: float = 1.2, samples: int = 8) -> str | None:
    """Why an alert before the drop says nothing of the radar: every statement of the instance slowed at
    the alerted finding's onset (median of ``samples`` after over before, each at least ``factor``), a
    host-wide episode (CI's slow tier: this test's two queries x1.5 and x1.9 together). With two
    statements the instance is below the contention rule's four (docs/limitations.md), so the radar
    cannot tell such an episode from a regression here. None when any statement did not slow: a false
    alert of the radar, and the test fails."""
    findings = lake.read_table(lake_root, "finding_states")
    samples_frame = lake.read_table(lake_root, "query_samples")
    if findings.height == 0 or samples_frame.height == 0:
        return None
    onset = findings.sort("onset")["onset"][0]
    ratios = {}
    for (queryid,), rows in samples_frame.sort("interval_start").group_by(["queryid"], maintain_order=True):
        value = rows["total_exec_time"] / rows["calls"]
        before = value.filter(rows["interval_start"] < onset).tail(samples)
        after = value.filter(rows["interval_start"] >= onset).head(samples)
        if before.len() < samples or after.len() < samples:
            continue
        ratios[queryid] = float(after.median()) / float(before.median())  # type: ignore[arg-type]
    if len(ratios) < 2 or min(ratios.values()) < factor:
        return None
    shown = ", ".join(f"x{r:.2f}" for r in sorted(ratios.values()))
    return (
        f"host-wide episode before the drop: every statement slowed at {onset:%H:%M:%S} ({shown}); a "
        "two-statement instance is below the contention rule's four, so this run cannot test the claim"
    )
