"""Time to alert on a real PostgreSQL 18 server (issue 26): an index dropped under a running workload,
nothing announcing it, the radar's cycle (snapshot, incremental detection, alerts) run every snapshot
interval: the fake Slack receives the alert within 3 snapshot intervals of the drop (the large-step
confirmation: jobs.detect.large_steps), and only for the query that lost its index.

Beside it run four millisecond statements (sequential scans of another table), as on any real instance:
enough for the contention rule's four compared series (jobs.detect.contention), so a host-wide slowdown
during the hour before the drop is the radar's to tell from a regression. With one neighbour (CI's slow
tier) a shared host slowed that one alone ×1.67, below the rule's four, and it was alerted."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from jobs.alerts.config import AlertsConfig
from jobs.alerts.run import send_alerts
from jobs.collect.collector import snapshot_fleet
from jobs.lake import io as lake
from jobs.pipeline.detection import DetectionConfig, run_detection
from tests.conftest import FleetFactory
from tests.support.host_load import CpuReading, cpu_reading, foreign_cores
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
NEIGHBOURS = (
    "select count(*) from radar_tta_other where id < %s",
    "select max(id) from radar_tta_other where mod(id, 7) = %s",
    "select sum(id) from radar_tta_other where id <> %s",
    "select count(distinct mod(id, 97)) from radar_tta_other where id > %s",
)
"""Millisecond statements that nothing changes (each scans the 40,000 rows of its table)."""


def test_an_index_drop_alerts_on_slack_within_three_snapshot_intervals(
    fleet_factory: FleetFactory, lake_root: Path, tmp_path: Path
) -> None:
    fleet = fleet_factory(["tta"])
    dsn, config = one_instance(fleet, "tta")
    setup_orders(dsn, "radar_tta_orders", index=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists radar_tta_other")
        conn.execute("create table radar_tta_other as select g as id from generate_series(1, 40000) g")
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
            readings.append(cpu_reading())
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))

        readings = [cpu_reading()]
        statements = [QUERY, *NEIGHBOURS]
        with Workload(dsn, statements, pause=0.005), Workload(dsn, statements, pause=0.005):
            for _ in range(HISTORY):
                cycle()
            if slack.accepted and (episode := host_episode(lake_root, readings)):
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


def host_episode(
    lake_root: Path, readings: list[CpuReading], samples: int = 8, foreign_rise: float = 0.25
) -> str | None:
    """Why an alert before the drop says nothing of the radar's time to alert: from the first alerted
    finding's onset the host was busier with work that is not this test's (other processes, time the
    hypervisor stole: ``foreign_rise`` CPUs more in the ``samples`` intervals from the onset than before
    it). A noisy neighbour stretches a long CPU-bound statement most (a local two-process CPU hog: 8 ms
    ×1.6-2, 2 ms ×1.2-1.5, 1 ms not at all), so the statement's peers cannot show it, and the radar, with
    no host-speed probe (docs/limitations.md), reports it. That the radar tells contention among peers is
    test_load_contention_pg's claim, not this test's. None otherwise: a false alert, and the test fails."""
    findings = lake.read_table(lake_root, "finding_states")
    if findings.height == 0:
        return None
    onset = findings["onset"].min()
    before_readings = [r for r in readings if r.at <= onset]
    after_readings = [r for r in readings if onset <= r.at <= onset + samples * timedelta(seconds=INTERVAL)]
    if len(before_readings) >= 2 and len(after_readings) >= 2:
        before_cores = foreign_cores(before_readings[0], before_readings[-1])
        after_cores = foreign_cores(after_readings[0], after_readings[-1])
        if after_cores - before_cores >= foreign_rise:
            return (
                f"a noisy neighbour before the drop: from {onset:%H:%M:%S} the host gave {after_cores:.2f} "
                f"CPUs to work that is not this test's ({before_cores:.2f} before), so this run cannot time "
                "the drop's alert"
            )
    return None
