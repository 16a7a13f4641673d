"""Issue 8's "must show" cases on a real PostgreSQL 18 server: contention is not a query regression, a
query's own regression inside contention still is, and a change of work with flat latency is found.

Each test runs a mixed workload (seven distinct queries, six clients) plus a query of interest in its own
client, snapshots the server every ~0.2 s, marks a deploy, changes the server at the deploy
(a CPU-heavy neighbour starts, an index is dropped, work_mem is cut) and snapshots again; then the samples
job and the whole pure pipeline (``jobs.pipeline.detection.detect_from_frames``) run on what landed in the
lake.
Windows are compressed to one minute each side.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg import sql

from jobs.collect.deploys import mark_deploy
from jobs.collect.fleet import FleetConfig
from jobs.detect.config import RegressionConfig
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.detection import DetectionConfig
from tests.support.detection_frames import Frames, shown
from tests.support.pg_workload import (
    CpuNeighbour,
    Workload,
    detect_lake,
    one_instance,
    pinned_to_one_cpu,
    setup_orders,
    snapshot_phase,
)

pytestmark = pytest.mark.postgres

NEIGHBOUR_SESSIONS = 8
PHASE = 30  # snapshots on each side of the deploy (~0.2 s apart)
CONFIG = DetectionConfig(
    regression=RegressionConfig(window_before=timedelta(minutes=1), window_after=timedelta(minutes=1))
)

# The mix: seven distinct queries. CPU contention stretches a query by the CPU time it needs: measured on
# PostgreSQL 18.6 / Linux 6.18 (2 cores), six neighbour sessions left sub-0.1 ms queries x1.0-1.5 and
# 3-20 ms ones x1.25-1.9 (the scheduler runs a briefly woken backend at once), so most of the mix needs
# milliseconds of CPU for the slowdown to be instance-wide. Each heavier query has its own client.
MIX_HEAVY: tuple[str, ...] = (
    "select sum(g) from generate_series(1, 50000 + %s) g",
    "select count(*), sum(amount) from radar_mix where id between %s and %s + 30000",
    "select sum(length(md5(g::text))) from generate_series(1, 5000 + %s) g",
    "select max(amount) from radar_mix where customer_id between %s and %s + 500",
    "select count(distinct customer_id) from radar_mix where id < 20000 + %s",
)
MIX_LIGHT: tuple[str, ...] = (  # one client; every %s gets the same int4 parameter, `%%` is SQL's modulo
    "select id, amount from radar_mix where id = %s + 1",
    "update radar_counter set n = n + 1 where id = %s %% 10",
)
MIX_FRAGMENTS = ("radar_mix", "radar_counter", "sum(g) from generate_series", "md5(g::text)")
INDEXED = "select count(*), sum(amount) from radar_idx where customer_id = %s"
SORT = "select count(*) from (select payload from radar_sort where id > %s order by payload offset 0) s"


@pytest.fixture
def alpha(pg_fleet: EmbeddedFleet) -> tuple[str, FleetConfig]:
    return one_instance(pg_fleet, "alpha")


@pytest.fixture
def pinned_alpha(pg_fleet: EmbeddedFleet) -> Iterator[tuple[str, FleetConfig, bool]]:
    """alpha with its backends on one CPU for the test (tests.support.pg_workload.pinned_to_one_cpu):
    (dsn, config, whether the OS allowed the pin)."""
    with pinned_to_one_cpu(pg_fleet.server("alpha").data_dir) as cpu:
        yield (*one_instance(pg_fleet, "alpha"), cpu is not None)


def setup_mix(dsn: str) -> None:
    setup_orders(dsn, "radar_mix", index=True)
    setup_orders(dsn, "radar_idx", index=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists radar_counter")
        conn.execute("create table radar_counter (id int primary key, n bigint not null)")
        conn.execute("insert into radar_counter select g, 0 from generate_series(0, 9) g")
        conn.execute("drop table if exists radar_sort")
        conn.execute("create table radar_sort (id int, payload text)")
        conn.execute("insert into radar_sort select g, md5(g::text) from generate_series(1, 20000) g")
        conn.execute("analyze radar_sort")


def mixed_workload(stack: ExitStack, dsn: str, *extra: str) -> list[Workload]:
    """The mix's clients plus one client per query of ``extra``, all started; stopped with ``stack``."""
    queries: list[str | tuple[str, ...]] = [*MIX_HEAVY, MIX_LIGHT, *extra]
    return [stack.enter_context(Workload(dsn, q)) for q in queries]


def of_query(frame: pl.DataFrame, fragment: str) -> pl.DataFrame:
    return frame.filter(pl.col("query").str.contains(fragment, literal=True))


def mix_rows(frames: Frames, version: str) -> pl.DataFrame:
    """Deploy-analysis rows of the mix's seven queries at the deploy ``version``."""
    rows = frames.regressions.filter(pl.col("deploy_version") == version)
    return rows.filter(
        pl.any_horizontal(pl.col("query").str.contains(f, literal=True) for f in MIX_FRAGMENTS)
    )


LIGHT_FRAGMENTS = ("radar_counter", "amount from radar_mix where id =")


def clearly_contended(mix: pl.DataFrame) -> bool:
    """Whether the neighbour slowed clearly more than half of the heavy mix (the series the peer rule
    compares: a median of at least 1 ms) by the detector's own threshold (stage 0, naive before/after
    means): more than two thirds. CI saw runs where 3 of 5 slowed, on the peer rule's own half-share line,
    even with the server pinned to one CPU (the seven clients share one Python process).

    Not a premise to skip on: whatever the neighbour did, no query of the mix may be reported (the peer
    rule or the load the neighbour brought explains it); only the episode's own figures are asserted when
    the slowdown was clearly instance-wide."""
    assert mix.height == len(MIX_HEAVY) + len(MIX_LIGHT), shown(mix)
    light = pl.any_horizontal(pl.col("query").str.contains(f, literal=True) for f in LIGHT_FRAGMENTS)
    heavy = mix.filter(~light)
    assert heavy.height == len(MIX_HEAVY), shown(heavy)
    slowed = heavy.filter(pl.col("latency_change") >= CONFIG.regression.latency_change_threshold)
    return slowed.height * 3 > heavy.height * 2


def slowdowns_at(frames: Frames, version: str) -> pl.DataFrame:
    assert frames.instance_slowdowns is not None, (
        f"detect_from_frames returned {frames.shape}: no instance_slowdowns (issue 8 not merged)"
    )
    return frames.instance_slowdowns.filter(pl.col("instance") == "alpha")


@pytest.mark.slow  # 30-60 s on a real server; pinned to one CPU (pinned_alpha)
def test_noop_deploy_with_a_cpu_heavy_neighbour_is_no_query_regression(
    pinned_alpha: tuple[str, FleetConfig, bool], lake_root: Path
) -> None:
    dsn, config, _ = pinned_alpha
    setup_mix(dsn)
    with ExitStack() as stack:
        mixed_workload(stack, dsn, INDEXED)
        neighbour = stack.enter_context(CpuNeighbour(dsn, NEIGHBOUR_SESSIONS))
        snapshot_phase(config, lake_root, PHASE)
        mark_deploy(lake_root, version="v5-noop", instances=["alpha"])
        neighbour.start()
        snapshot_phase(config, lake_root, PHASE)
    assert neighbour.statements > 0
    frames = detect_lake(lake_root, CONFIG)
    assert frames.reported.height == 0, shown(frames.reported)
    explained = pl.concat([frames.regressions, frames.unannounced], how="diagonal_relaxed").filter(
        pl.col("reason") == "instance_slowdown"
    )
    if explained.height == 0:
        # The latency detector found no significant, material step to explain (under heavy contention a
        # heavy query's mean can rise ×1.6 with no significant change point in a one-minute window). Had
        # the mix clearly slowed, the slowdown is still not swallowed: the deploy has its episode row.
        if clearly_contended(mix_rows(frames, "v5-noop")):
            at_deploy = slowdowns_at(frames, "v5-noop").filter(pl.col("analysis") == "deploy")
            assert at_deploy.height >= 1, shown(frames.regressions)
        return
    # The slowdown is not swallowed: it is one instance-level finding, and the queries it explains say so.
    slowdowns = slowdowns_at(frames, "v5-noop")
    assert slowdowns.height >= 1, frames.instance_slowdowns
    # The episode that explained the queries (the deploy's and the unannounced analysis may each have one;
    # CI once read the other one, which explained nothing and so knew nothing of the work: None).
    explaining = slowdowns.filter(pl.col("findings_suppressed") > 0)
    assert explaining.height >= 1, slowdowns
    for row in explaining.iter_rows(named=True):
        # A no-op changed no work: unchanged when the queries it explained carried work evidence, unknown
        # (None, said) when none did; never changed.
        own = explained.filter(pl.col("analysis") == row["analysis"])
        known = "work_changed" in own.columns and own["work_changed"].is_not_null().any()
        assert row["work_unchanged"] is (True if known else None), (row, shown(own))
    if clearly_contended(mix_rows(frames, "v5-noop")):
        # Either analysis' explaining episode is the instance-level finding; the deploy's window medians
        # read ×1.23 once where the unannounced one read ×1.79 (two busy loops on the server's CPU).
        clearest = explaining.sort("median_ratio", descending=True).row(0, named=True)
        assert clearest["queries"] >= 3 and clearest["median_ratio"] > 1.2, explaining
    assert (explained["kind"] == "contention").all() and (explained["status"] == "no_regression").all()


@pytest.mark.slow  # 30-60 s on a real server; pinned to one CPU (pinned_alpha)
def test_index_drop_under_contention_is_the_only_query_regression(
    pinned_alpha: tuple[str, FleetConfig, bool], lake_root: Path
) -> None:
    dsn, config, _ = pinned_alpha
    setup_mix(dsn)
    with ExitStack() as stack, psycopg.connect(dsn, autocommit=True) as conn:
        mixed_workload(stack, dsn, INDEXED)
        neighbour = stack.enter_context(CpuNeighbour(dsn, NEIGHBOUR_SESSIONS))
        snapshot_phase(config, lake_root, PHASE)
        mark_deploy(lake_root, version="v6-drop-index", instances=["alpha"])
        conn.execute("drop index radar_idx_customer")
        neighbour.start()
        snapshot_phase(config, lake_root, PHASE)
    frames = detect_lake(lake_root, CONFIG)
    reported = frames.reported
    assert reported.height >= 1, shown(frames.regressions)
    others = reported.filter(~pl.col("query").str.contains("from radar_idx where", literal=True))
    assert others.height == 0, shown(others)
    ours = of_query(frames.regressions, "from radar_idx where").row(0, named=True)
    assert ours["status"] == "detected" and ours["deploy_version"] == "v6-drop-index", shown(reported)
    assert ours["after_mean_ms"] > 5 * ours["before_mean_ms"]
    assert "work_evidence" in frames.regressions.columns, f"no work evidence ({frames.shape})"
    assert ours["work_changed"] is True, ours
    assert "shared blocks" in str(ours["work_evidence"]), ours["work_evidence"]
    assert ours["kind"] in ("both", "plan_or_work"), ours


@pytest.mark.slow  # 9-35 s each on a real server: make test stays under 10 minutes beside a CPU hog
def test_work_mem_cut_at_a_deploy_is_a_resource_regression_naming_temp_blocks(
    alpha: tuple[str, FleetConfig], lake_root: Path
) -> None:
    dsn, config = alpha
    setup_mix(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        database = conn.execute("select current_database()").fetchone()[0]  # type: ignore[index]
        spilled = conn.execute("explain (analyze, costs off) " + SORT.replace("%s", "5")).fetchall()
        assert not any("external" in line for (line,) in spilled)  # the premise: no spill before the cut
    alter = sql.SQL("alter database {} set work_mem = '64kB'").format(sql.Identifier(database))
    reset = sql.SQL("alter database {} reset work_mem").format(sql.Identifier(database))
    try:
        with ExitStack() as stack, psycopg.connect(dsn, autocommit=True) as conn:
            clients = mixed_workload(stack, dsn, SORT)
            snapshot_phase(config, lake_root, PHASE)
            mark_deploy(lake_root, version="v7-work-mem", instances=["alpha"])
            conn.execute(alter)
            for client in clients:
                client.reconnect()
            snapshot_phase(config, lake_root, PHASE)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(reset)
    frames = detect_lake(lake_root, CONFIG)
    assert frames.resource_regressions is not None, f"no resource_regressions ({frames.shape})"
    found = frames.resource_regressions.filter(pl.col("status") == "detected")
    ours = of_query(found, "from radar_sort where")
    assert ours.height >= 1, frames.resource_regressions.select("query", "metric", "status", "reason").rows()
    temp = ours.filter(pl.col("summary").str.contains("temp blocks", literal=True))
    assert temp.height >= 1, ours.select("metric", "summary").rows()
    row = temp.row(0, named=True)
    assert row["analysis"] == "deploy" and row["deploy_version"] == "v7-work-mem", row
    assert row["after_per_call"] > 10 * (row["before_per_call"] or 0) and row["after_per_call"] >= 50, row
    # The cut changed nothing but temp blocks: a query that needs work_mem may spill too (the function scan
    # of generate_series materializes, count(distinct) sorts); blocks, rows and WAL per call stay.
    not_temp = found.filter(~pl.col("summary").str.contains("temp blocks", literal=True))
    assert not_temp.height == 0, not_temp.select("query", "metric", "summary").rows()
    never_spill = ("where id = $1", "radar_counter", "where id between", "customer_id between")
    spilled_light = found.filter(
        pl.any_horizontal(pl.col("query").str.contains(f, literal=True) for f in never_spill)
    )
    assert spilled_light.height == 0, spilled_light.select("query", "summary").rows()
    latency = of_query(frames.regressions, "from radar_sort where").row(0, named=True)
    if latency["status"] == "detected":
        assert "temp blocks" in str(latency["work_evidence"]), latency
