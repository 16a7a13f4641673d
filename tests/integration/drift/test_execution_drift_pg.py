"""The per-execution drift stage on a real PostgreSQL 18 server with the auto_explain sampler on: anchor a
baseline, skew the data and ANALYZE so the plans re-cost, score (cost and cardinality BLOCK), the
stale-baseline check names the analysed table, a re-anchor clears it."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.collect.fleet import FleetConfig
from jobs.drift.baselines import anchor_sample_baselines
from jobs.drift.checks import stale_baseline_check
from jobs.drift.config import DriftConfig, SampleDriftConfig
from jobs.drift.execution import read_recent_drift, read_table_stats, run_execution_drift
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet, sampler_settings
from jobs.pipeline.collection import CycleConfig, run_cycle
from jobs.plans.config import AutoExplainSamplerConfig
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

QUERY = "SELECT sum(amount) FROM orders WHERE customer = 1"
RUNS = 240  # per phase: over the scorer's 200-sample floor with every execution sampled


def run_query(fleet: EmbeddedFleet, times: int) -> None:
    # prepare_threshold=None: a plain query is planned afresh each time (no generic plan hides a re-cost)
    with psycopg.connect(fleet.server("drift").dsn, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(times):
            conn.execute(QUERY)  # type: ignore[arg-type]


def collect_until(config: FleetConfig, lake_root: Path, since: datetime, expected: int) -> None:
    """Collection cycles (snapshot, table stats, auto_explain ingest) until ``expected`` samples of the
    orders query logged after ``since`` are in the lake (the jsonlog reaches the file asynchronously)."""
    cycle = CycleConfig(ingest_auto_explain=True)
    deadline = time.monotonic() + 20
    while True:
        run_cycle(config, lake_root, cycle)
        found = lake.read_table(
            lake_root,
            "execution_samples",
            lambda s: s.filter((pl.col("logged_at") > since) & pl.col("relations").list.contains("orders")),
        )
        if found.height >= expected or time.monotonic() > deadline:
            assert found.height >= expected, f"{found.height} of {expected} samples after {since}"
            return
        time.sleep(0.3)


def cost_and_cardinality(drift: pl.DataFrame) -> pl.DataFrame:
    """The plan-side metrics: deterministic for one plan and one set of statistics, so a busy host cannot
    move them (latency it can: it is left out of the check asserted here)."""
    return drift.filter(pl.col("metric") != "latency")


def test_analyze_recosts_plans_the_stale_check_fires_and_a_reanchor_clears_it(
    fleet_factory: FleetFactory, lake_root: Path
) -> None:
    fleet = fleet_factory(["drift"], sampler_settings(AutoExplainSamplerConfig(sample_rate=1.0)))
    with psycopg.connect(fleet.server("drift").dsn, autocommit=True) as conn:
        for statement in (
            "CREATE TABLE orders (id int, customer int, amount int) WITH (autovacuum_enabled = off)",
            "INSERT INTO orders SELECT g, g % 100, g % 7 FROM generate_series(1, 20000) g",
            "CREATE INDEX ON orders (customer)",
            "ANALYZE orders",  # statistics of 100 equally common customers: customer 1 is 1%
            "UPDATE orders SET customer = 1 WHERE id % 2 = 0",  # now half the rows: the statistics lag
            "VACUUM orders",  # pages and tuples counted again; the column statistics are ANALYZE's only
        ):
            conn.execute(statement)  # type: ignore[arg-type]
    config = FleetConfig.from_embedded(fleet)
    drift_config = DriftConfig()

    # 1. baseline: the plan of the stale statistics (an index scan for "1%"), anchored as v1
    start = datetime.now(UTC)
    run_query(fleet, RUNS)
    collect_until(config, lake_root, start, RUNS)
    anchored_at = datetime.now(UTC)
    v1 = anchor_sample_baselines(lake_root, version="v1", start=start, end=anchored_at)
    assert set(v1["metric"]) == {"latency", "cost", "cardinality"}

    # 2. ANALYZE sees the skew: the same query is planned (and costed) for half the table
    with psycopg.connect(fleet.server("drift").dsn, autocommit=True) as conn:
        conn.execute("ANALYZE orders")
    analysed = datetime.now(UTC)
    time.sleep(0.6)  # the cumulative statistics (last_analyze) reach other backends after a flush
    run_query(fleet, RUNS)
    collect_until(config, lake_root, analysed, RUNS)
    now = datetime.now(UTC)
    # two pairs BLOCK (cost and cardinality of one query): under stale_min_block_pairs (3), which a fleet
    # of many queries has; one is enough to judge this one query's baseline here
    window = replace(
        drift_config,
        samples=replace(SampleDriftConfig(), current_window=now - analysed, stale_min_block_pairs=1),
    )
    drift = run_execution_drift(lake_root, window, now)
    orders = drift.filter(pl.col("n_baseline") >= 200)
    flags = dict(zip(orders["metric"], orders["flag"], strict=True))
    assert flags["cost"] == "BLOCK" and flags["cardinality"] == "BLOCK", orders
    stats = read_table_stats(lake_root, now, window.samples.analyze_lookback)
    stale = stale_baseline_check(
        cost_and_cardinality(read_recent_drift(lake_root, now, window.samples.stale_window)),
        stats,
        now,
        window,
    )
    assert not stale.passed and "baseline likely stale" in stale.description
    assert stale.metadata["analysed_tables"] == ["drift:postgres.public.orders"], stale.description
    assert "radar drift anchor-samples --version reanchor-" in stale.description

    # 3. re-anchor over the window after the ANALYZE (v2); the next window scores PASS and the check clears
    anchor_sample_baselines(lake_root, version="v2", start=analysed, end=now)
    rescore_from = datetime.now(UTC)
    run_query(fleet, RUNS)
    collect_until(config, lake_root, rescore_from, RUNS)
    later = datetime.now(UTC)
    window = replace(drift_config, samples=replace(SampleDriftConfig(), current_window=later - rescore_from))
    rescored = run_execution_drift(lake_root, window, later)
    plan_side = cost_and_cardinality(rescored.filter(pl.col("n_baseline") >= 200))
    assert set(plan_side["baseline_version"]) == {"v2"} and set(plan_side["flag"]) == {"PASS"}, plan_side
    cleared = stale_baseline_check(
        cost_and_cardinality(read_recent_drift(lake_root, later, window.samples.stale_window)),
        read_table_stats(lake_root, later, window.samples.analyze_lookback),
        later,
        window,
    )
    assert cleared.passed, cleared.description
