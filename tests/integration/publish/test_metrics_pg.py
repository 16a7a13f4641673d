"""The metrics endpoint after a snapshot and a detection on a real PostgreSQL 18 server (issue 29's "Must
show"): `radar serve-metrics` runs as its own process and is scraped over HTTP; every named metric is there
with its type, the figures are the lake's, and the two alert rules are evaluated against two scrapes (no
promtool here: tests/support/promql_subset.py)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from psycopg.types.numeric import Int4

from jobs.cli.main import main
from jobs.local.embedded import EmbeddedFleet
from jobs.plans.generic import generic_explain_text
from jobs.publish.metrics import EXPOSED_TYPES
from jobs.query.texts import is_explain_text, is_radar_text
from tests.conftest import FleetFactory
from tests.support.drift_frames import drift_row, write_drift
from tests.support.promql_subset import evaluate, samples_of

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[3]
RULES = yaml.safe_load((REPO / "data" / "prometheus" / "radar.rules.yml").read_text())["groups"][0]["rules"]


@pytest.fixture(scope="module")
def metrics_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    fleet = fleet_factory(["metrics"], {"pg_stat_statements.track": "'all'"})
    with psycopg.connect(fleet.server("metrics").dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int, sku int)")
        conn.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 5000) g")
        conn.execute("CREATE INDEX items_sku_idx ON items (sku); ANALYZE items")
    return fleet


@pytest.fixture
def served(lake_root: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`radar serve-metrics --port 0` on the lake (lake read on every scrape: cache_s 0), and its URL."""
    command = [sys.executable, "-m", "jobs.cli.main", "--lake", str(lake_root), "--set", "metrics.cache_s=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*command, "serve-metrics", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = _first_line(process, timeout=60)
        assert "serving the lake's metrics on http://127.0.0.1:" in line, line
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"serve-metrics said nothing in {timeout} s")
    return process.stdout.readline()


def scrape(url: str) -> str:
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return response.text


def test_metrics_endpoint_after_a_snapshot_and_a_detection(
    metrics_fleet: EmbeddedFleet,
    lake_root: Path,
    tmp_path: Path,
    served: tuple[subprocess.Popen[str], str],
) -> None:
    process, url = served
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(metrics_fleet.fleet_config_toml())
    common = ["--lake", str(lake_root), "--fleet-file", str(fleet_file)]
    with psycopg.connect(metrics_fleet.server("metrics").dsn, autocommit=True) as conn:
        # The capture's EXPLAIN as a session that may not switch tracking off sends it (marker and EXPLAIN:
        # the design's skipped statement), and two EXPLAINs somebody ran (not the collector's: not counted).
        conn.execute(generic_explain_text("SELECT sku FROM items WHERE id = $1"))
        conn.execute("EXPLAIN SELECT count(*) FROM items")
        conn.execute("EXPLAIN SELECT max(id) FROM items")
    for round_ in range(2):
        with psycopg.connect(metrics_fleet.server("metrics").dsn) as conn:
            for i in range(5 + round_):
                conn.execute("SELECT id FROM items WHERE sku = %s", (Int4(i),))
        assert main([*common, "snapshot", "--capture-plans"]) == 0
    assert main([*common, "detect"]) == 0

    first = scrape(url)
    types = {
        (f"{family.name}_total" if family.type == "counter" else family.name): family.type
        for family in text_string_to_metric_families(first)
    }
    assert types == EXPOSED_TYPES  # every named metric, each with its type
    samples = samples_of(first)

    def one(name: str, **labels: str) -> float:
        found = [v for got, v in samples[name] if all(got.get(k) == x for k, x in labels.items())]
        assert len(found) == 1, (name, labels, samples[name])
        return found[0]

    assert one("pg_regression_radar_snapshot_attempts_total", instance="metrics", status="ok") == 2
    assert one("pg_regression_radar_snapshot_attempts_total", instance="metrics", status="failed") == 0
    assert 0 <= one("pg_regression_radar_snapshot_lag_seconds", instance="metrics") < 300
    assert 0 < one("pg_regression_radar_snapshot_server_read_seconds", instance="metrics") < 60
    # The capture's EXPLAIN entries (with track = all its inner statement too, under the EXPLAIN's text)
    # are skipped by each of the two snapshots; the superuser's own capture sessions switch tracking off
    # and add none. Somebody's EXPLAIN entries are the other gauge.
    with psycopg.connect(metrics_fleet.server("metrics").dsn) as conn:
        texts = [r[0] for r in conn.execute("SELECT query FROM pg_stat_statements").fetchall()]
    own_explains = sum(1 for t in texts if is_explain_text(t) and is_radar_text(t))
    others_explains = sum(1 for t in texts if is_explain_text(t) and not is_radar_text(t))
    assert 1 <= own_explains < others_explains  # told apart: a count of the others' would not match
    skipped = one("pg_regression_radar_collector_explain_statements_skipped_total", instance="metrics")
    assert skipped == 2 * own_explains
    assert one("pg_regression_radar_snapshot_others_explain_rows", instance="metrics") == others_explains
    captured = [v for labels, v in samples["pg_regression_radar_plan_capture_attempts_total"]]
    assert sum(captured) > 0  # --capture-plans tried the top queries
    assert all(v == 1 for _, v in samples["pg_regression_radar_lake_table_readable"])
    assert one("pg_regression_radar_instance_findings_open", instance="metrics") >= 0

    # The rules against the endpoint: nothing drifted yet, then a BLOCK storm scored into the lake.
    for rule in RULES:
        fired, names = evaluate(rule["expr"], first, first)
        assert not fired and names <= set(samples), names - set(samples)
    now = datetime.now(UTC)
    write_drift(
        lake_root,
        [
            drift_row(f"q{i}", "latency", "BLOCK" if i < 5 else "PASS", instance="metrics", scored_at=now)
            for i in range(20)
        ],
    )
    second = scrape(url)
    storm, degenerate = (evaluate(rule["expr"], first, second)[0] for rule in RULES)
    assert [r["alert"] for r in RULES] == ["PlanDriftBlockStorm", "PlanDriftDegenerateShare"]
    assert storm and not degenerate

    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0  # stopped cleanly
    assert process.stderr is not None and "Traceback" not in process.stderr.read()
