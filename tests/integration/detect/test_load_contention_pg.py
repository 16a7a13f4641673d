"""Trust under load on a real PostgreSQL 18 server with a three-statement application (issue 24).

An application runs three statements (an aggregate, an indexed lookup, a sort) while the collector
snapshots every ~0.2 s. At a deploy, a CPU-heavy neighbour (two sessions looping a CPU-bound statement)
starts. The instance has three series: too few for the peer rule, so only its load can tell contention
from a regression. The server is pinned to one CPU where the OS allows (pinned_to_one_cpu: its backends
inherit it), so the neighbour's slowdown does not depend on how idle the host's other CPU is; the
premise (the neighbour ran, the application's aggregate slowed enough for the latency detector alone to
report it) is measured and asserted, not assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg import sql

from jobs.collect.deploys import mark_deploy
from jobs.collect.fleet import FleetConfig
from jobs.detect.config import ContentionConfig, RegressionConfig
from jobs.detect.findings import OPEN
from jobs.detect.verdicts import DETECTED
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.detection import (
    DetectionConfig,
    DetectionFrames,
    DetectionOutcome,
    detect_from_frames,
    read_inputs,
    run_detection,
)
from tests.conftest import FleetFactory
from tests.support.pg_workload import (
    CpuNeighbour,
    Workload,
    one_instance,
    pinned_to_one_cpu,
    setup_orders,
    snapshot_phase,
)

pytestmark = pytest.mark.postgres

PHASE = 24  # snapshots on each side of the deploy (~0.2 s apart)
REGRESSION = RegressionConfig(window_before=timedelta(minutes=1), window_after=timedelta(minutes=1))
CONFIG = DetectionConfig(regression=REGRESSION)
NO_LOAD_RULE = replace(
    CONFIG,
    regression=replace(REGRESSION, contention=ContentionConfig(load_rule=False)),
    rebuild_samples=False,
)

AGGREGATE = "select customer_id, sum(amount) from radar_app where id < 30000 + %s group by customer_id"
LOOKUP = "select count(*), sum(amount) from radar_app where customer_id = %s"
SORT = "select count(*) from (select amount from radar_app where id > 150000 + %s order by amount offset 0) s"
APPLICATION = (AGGREGATE, LOOKUP, SORT)
NEIGHBOUR_SESSIONS = 2


class ShortStatementNeighbour(CpuNeighbour):
    """CPU-bound statements of ~0.1 s alone: pg_stat_statements counts a statement when it completes, and
    at the test's 0.2 s snapshots a 3e6-row statement (seconds on a shared CPU) lands in a few intervals
    only, its load seen late; real neighbours' statements are short beside a production snapshot interval."""

    SQL = "select count(*) from generate_series(1, 300000)"


@pytest.fixture(scope="module")
def small(fleet_factory: FleetFactory) -> Iterator[tuple[EmbeddedFleet, int | None]]:
    fleet = fleet_factory(["small"])
    with pinned_to_one_cpu(fleet.server("small").data_dir) as cpu:
        yield fleet, cpu


@pytest.fixture
def app(small: tuple[EmbeddedFleet, int | None]) -> tuple[str, FleetConfig]:
    fleet, _ = small
    dsn, config = one_instance(fleet, "small")
    setup_orders(dsn, "radar_app", index=True)
    return dsn, config


def run_deploy_with_neighbour(
    dsn: str, config: FleetConfig, lake_root: Path, version: str, at_deploy: str | None = None
) -> ShortStatementNeighbour:
    """The application snapshotted; at the deploy (``at_deploy`` runs and) the neighbour starts."""
    with ExitStack() as stack, psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(2):
            stack.enter_context(Workload(dsn, APPLICATION, pause=0.01))
        neighbour = stack.enter_context(ShortStatementNeighbour(dsn, NEIGHBOUR_SESSIONS))
        snapshot_phase(config, lake_root, PHASE)
        mark_deploy(lake_root, version=version, instances=["small"])
        if at_deploy:
            conn.execute(at_deploy)
        neighbour.start()
        snapshot_phase(config, lake_root, PHASE)
    assert neighbour.statements >= NEIGHBOUR_SESSIONS, "the premise: the neighbour ran"
    return neighbour


def detected_queries(outcome: DetectionOutcome | DetectionFrames) -> list[str]:
    both = pl.concat([outcome.regressions, outcome.unannounced], how="diagonal_relaxed")
    return sorted(set(both.filter(pl.col("status") == DETECTED)["query"].to_list()))


def open_findings(outcome: DetectionOutcome) -> pl.DataFrame:
    return outcome.findings.filter(pl.col("status") == OPEN)


def shown(frame: pl.DataFrame) -> str:
    columns = [
        c
        for c in ("query", "kind", "before_mean_ms", "after_mean_ms", "slowdown_excess", "work_summary")
        if c in frame.columns
    ]
    with pl.Config(tbl_rows=20, fmt_str_lengths=60, tbl_width_chars=220):
        return str(frame.select(columns))


def sort_evidence(outcome: DetectionOutcome, lake_root: Path) -> str:
    """What the detectors said of the sorting query and what samples they had, for a failure's message
    (a CI run once found no finding at all here, and printed too little to say why)."""
    sorting = pl.col("query").str.contains("order by amount", literal=True)
    both = pl.concat([outcome.regressions, outcome.unannounced], how="diagonal_relaxed")

    def narrow(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
        return frame.select([c for c in columns if c in frame.columns])

    step = ("analysis", "status", "reason", "detected_change_at")
    with pl.Config(tbl_rows=40, tbl_cols=-1, fmt_str_lengths=30, tbl_width_chars=250):
        return "\n".join(
            str(frame)
            for frame in (
                narrow(both.filter(sorting), *step, "before_mean_ms", "after_mean_ms", "p_value"),
                narrow(
                    outcome.resource_regressions.filter(sorting)
                    if outcome.resource_regressions.height
                    else outcome.resource_regressions,
                    *step,
                    "metric",
                    "before_per_call",
                    "after_per_call",
                    "p_value",
                ),
                narrow(outcome.findings, "query", "kind", "status", "deploy_version", "recovered_at"),
                narrow(outcome.instance_slowdowns, "deploy_version", "evidence", "findings_suppressed"),
                samples_per_query(lake_root),
            )
        )


def samples_per_query(lake_root: Path) -> pl.DataFrame:
    """Per queryid: samples, calls, mean latency and temp blocks per call, before and after the deploy."""
    deployed = lake.read_table(lake_root, "deploy_events")["deployed_at"].max()
    samples = lake.read_table(lake_root, "query_samples")
    if samples.height == 0:
        return samples
    return (
        samples.group_by("queryid", (pl.col("interval_end") > deployed).alias("after"))
        .agg(
            pl.len().alias("samples"),
            pl.col("calls").sum(),
            (pl.col("total_exec_time").sum() / pl.col("calls").sum()).alias("mean_ms"),
            (pl.col("temp_blks_written").sum() / pl.col("calls").sum()).alias("temp_per_call"),
        )
        .sort("queryid", "after")
    )


def assert_premise(lake_root: Path) -> None:
    """Without the load rule the aggregate's slowdown is a regression finding: there is something to tell
    apart (the neighbour really slowed the application). Pure: the lake's findings are the real run's."""
    without = detect_from_frames(*read_inputs(lake_root), NO_LOAD_RULE)
    assert any("sum(amount) from radar_app where id <" in q for q in detected_queries(without)), (
        "premise: the CPU neighbour did not slow the aggregate enough to be detected",
        shown(pl.concat([without.regressions, without.unannounced], how="diagonal_relaxed")),
    )


def test_a_cpu_heavy_neighbour_at_a_deploy_is_contention_naming_its_statement_not_a_finding(
    app: tuple[str, FleetConfig], lake_root: Path
) -> None:
    dsn, config = app
    run_deploy_with_neighbour(dsn, config, lake_root, "v24-noop")
    outcome = run_detection(lake_root, CONFIG)
    assert_premise(lake_root)
    # No application query is a finding. The neighbour's own statement is left out: it begins at the
    # deploy, and on a loaded host (a CI runner, or this machine's other test suites) its own latency
    # steps within its short life (73 -> 101 ms seen twice beside a benchmark), which is the host's load,
    # not this instance's, and not what this test is about.
    found = open_findings(outcome)
    application = found.filter(~pl.col("query").str.contains("generate_series", literal=True))
    assert application.height == 0, shown(found)
    rows = outcome.instance_slowdowns.filter(pl.col("deploy_version") == "v24-noop")
    assert rows.height == 1, outcome.instance_slowdowns
    row = rows.row(0, named=True)
    assert row["evidence"] in ("load", "peers+load") and row["findings_suppressed"] >= 1, row
    assert "generate_series" in row["load_sources"], row["load_sources"]
    assert row["load_after"] - row["load_before"] >= 0.5, row  # min_load_rise: the neighbour's load, measured
    print("\n" + row["summary"])
    assert "s of execution per second" in row["summary"] and "generate_series" in row["summary"]


def test_the_same_neighbour_and_an_index_drop_is_exactly_one_finding_the_lookup(
    app: tuple[str, FleetConfig], lake_root: Path
) -> None:
    dsn, config = app
    run_deploy_with_neighbour(
        dsn, config, lake_root, "v24-drop-index", at_deploy="drop index radar_app_customer"
    )
    outcome = run_detection(lake_root, CONFIG)
    assert_premise(lake_root)
    # Exactly one application finding. The neighbour's own statement is left out, as in the test above:
    # it begins at the deploy and its latency may step within its short life on a loaded host (88 ->
    # 137 ms in one make test run, the lookup the only other finding; the next four runs alone: none).
    found = open_findings(outcome)
    found = found.filter(~pl.col("query").str.contains("generate_series", literal=True))
    assert found.height == 1, shown(open_findings(outcome))
    finding = found.row(0, named=True)
    assert "where customer_id = $1" in finding["query"], shown(found)
    assert finding["deploy_version"] == "v24-drop-index" and finding["kind"] in ("both", "plan_or_work")


def test_a_work_mem_cut_at_a_deploy_is_a_work_finding_on_the_sorting_query(
    app: tuple[str, FleetConfig], lake_root: Path
) -> None:
    dsn, config = app
    with psycopg.connect(dsn, autocommit=True) as conn:
        database = conn.execute("select current_database()").fetchone()[0]  # type: ignore[index]
        plan = conn.execute("explain (analyze, costs off) " + SORT.replace("%s", "5")).fetchall()
        assert not any("external" in line for (line,) in plan)  # the premise: no spill before the cut
    # 1 MB: the sort of ~50,000 amounts spills; the aggregate's hash table of 5,000 groups still fits
    # (hash_mem_multiplier 2), so only the sorting query's work changes.
    cut = sql.SQL("alter database {} set work_mem = '1MB'").format(sql.Identifier(database))
    reset = sql.SQL("alter database {} reset work_mem").format(sql.Identifier(database))
    try:
        with ExitStack() as stack, psycopg.connect(dsn, autocommit=True) as conn:
            clients = [stack.enter_context(Workload(dsn, APPLICATION, pause=0.01)) for _ in range(2)]
            snapshot_phase(config, lake_root, PHASE)
            mark_deploy(lake_root, version="v24-work-mem", instances=["small"])
            conn.execute(cut)
            for client in clients:
                client.reconnect()
            snapshot_phase(config, lake_root, PHASE)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(reset)
    outcome = run_detection(lake_root, CONFIG)
    found = open_findings(outcome)
    print("\n" + shown(found))
    # The work changed on the sorting query only. Its spill costs CPU on the server's one (pinned) CPU, so
    # the aggregate may slow with it: a CI run saw 13.5 -> 17.7 ms beside the sort's 16 -> 27 ms, a latency
    # finding the sort's extra load (+~0.2 s/s, under min_load_rise) does not explain. That finding is real
    # latency; what must not happen is work evidence on a query whose work did not change.
    others = found.filter(~pl.col("query").str.contains("order by amount", literal=True))
    assert others.filter(pl.col("work_metric").is_not_null()).height == 0, shown(found)
    assert (others["kind"] != "work").all(), shown(found)
    # The sorting query's latency may also step twice (a loaded host once put a second latency step 30 s
    # later), but the step at the deploy is one finding that names its work.
    found = found.filter(pl.col("query").str.contains("order by amount", literal=True))
    at_deploy = found.filter(pl.col("deploy_version") == "v24-work-mem")
    if at_deploy.height != 1:
        print(sort_evidence(outcome, lake_root))  # captured stdout: shown whole on failure, not elided
    assert at_deploy.height == 1, shown(found)
    finding = at_deploy.row(0, named=True)
    assert finding["work_metric"] == "temp_blocks", finding["work_summary"]
    assert "temp blocks per call" in finding["work_summary"]
    # Work alone, or with its latency; "both" when the contention step also saw a load episode at that
    # moment (the spill's own CPU on the pinned server; seen once in make test): its work changed, so it
    # stays a finding.
    assert finding["kind"] in ("work", "plan_or_work", "both"), finding["kind"]
