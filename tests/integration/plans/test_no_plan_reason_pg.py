""" "No plan captured" says why (issue 21): the reason the capture recorded in plan_capture_log, from a real
capture on a real server with the monitoring login, or that no capture was tried."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.cli.main import main
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from jobs.plans.diff import NO_PLAN_NEVER_TRIED, plan_diffs_for_regressions
from jobs.schemas.collected import PLAN_CAPTURE_LOG, PLAN_SNAPSHOTS
from tests.support.lakes import detected_regression

pytestmark = pytest.mark.postgres

UPDATE = "update noplan_counter set n = n + 1 where id = %s"


def test_a_finding_without_plans_says_why_none_was_captured(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    dsn = pg_fleet.server("alpha").dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists noplan_counter")
        conn.execute("create table noplan_counter (id int primary key, n bigint not null)")
        conn.execute("insert into noplan_counter select g, 0 from generate_series(0, 9) g")
        conn.execute("select pg_stat_statements_reset()")
        for k in range(50):
            conn.execute(UPDATE, [Int4(k % 10)])
        queryid = conn.execute(
            "select queryid from pg_stat_statements where query like 'update noplan_counter%'"
        ).fetchone()[0]  # type: ignore[index]
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(pg_fleet.fleet_config_toml())
    assert (
        main(["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot", "--capture-plans"]) == 0
    )

    log = lake.scan_table(lake_root, PLAN_CAPTURE_LOG)
    tried = log.filter(pl.col("queryid") == queryid).collect()
    assert tried.height >= 1 and (tried["status"] != "captured").all(), tried
    plans = lake.read_table(lake_root, PLAN_SNAPSHOTS).filter(pl.col("queryid") == queryid)
    assert plans.height == 0, "the monitoring login may not EXPLAIN an UPDATE"

    finding = detected_regression(datetime.now(UTC), queryid=queryid, instance="alpha")
    (row,) = plan_diffs_for_regressions(
        finding, lake.read_table(lake_root, PLAN_SNAPSHOTS), capture_log=log
    ).rows(named=True)
    summary = row["plan_diff_summary"]
    assert row["diff_status"] == "no_plans"
    assert summary.startswith("No plan captured: ") and summary != NO_PLAN_NEVER_TRIED
    reason = " ".join(str(tried.sort("captured_at")["reason"][-1]).split())
    assert reason in summary and "last tried" in summary, summary

    # Another query the capture never tried: said so, not left unexplained.
    (never,) = plan_diffs_for_regressions(
        detected_regression(datetime.now(UTC), queryid=123456789, instance="alpha"),
        PLAN_SNAPSHOTS.empty(),
        capture_log=log,
    ).rows(named=True)
    assert never["plan_diff_summary"] == NO_PLAN_NEVER_TRIED
