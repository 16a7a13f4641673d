"""auto_explain jsonlog ingest on a real PostgreSQL 18 server: records parsed, keyed to pg_stat_statements."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.lake.io import scan_table
from jobs.plans.auto_explain import ingest_auto_explain_logs, load_offsets
from jobs.plans.capture import capture_plans
from tests.conftest import FleetFactory
from tests.support.pg_workload import wait_for_log

pytestmark = pytest.mark.postgres


def test_auto_explain_records_parsed_and_joined_to_pg_stat_statements(
    fleet_factory: FleetFactory, lake_root: Path
) -> None:
    fleet = fleet_factory(["ae"], {"auto_explain.log_min_duration": "0", "pg_stat_statements.track": "'all'"})
    server = fleet.server("ae")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id int PRIMARY KEY, kind int)")
        conn.execute("INSERT INTO events SELECT g, g % 10 FROM generate_series(1, 5000) g; ANALYZE events")
        for kind in range(3):
            conn.execute("SELECT count(*) FROM events WHERE kind = %s", (Int4(kind),))
        conn.execute("SELECT id FROM events WHERE id = %s", (Int4(3),))
        conn.execute("EXPLAIN ANALYZE SELECT max(kind) FROM events")
        pgss = dict(
            conn.execute(
                "SELECT queryid, query FROM pg_stat_statements WHERE query LIKE 'SELECT % FROM events%'"
            ).fetchall()
        )
    candidates = pl.DataFrame(
        {
            "queryid": list(pgss),
            "dbid": [None] * len(pgss),
            "userid": [None] * len(pgss),
            "query": list(pgss.values()),
        }
    )
    captured = capture_plans(server.dsn, "ae", candidates, datetime.now(UTC))
    assert (captured.log["status"] == "captured").sum() >= 2
    with psycopg.connect(server.dsn, autocommit=True) as conn:  # logged after anything the capture logged
        conn.execute("SELECT 'marker after capture' AS marker")
    wait_for_log(server.log_dir, b"marker after capture")
    result = ingest_auto_explain_logs(server.log_dir, "ae", lake_root)
    assert result.plan_records >= 4 and not result.errors
    assert result.explain_records == 1, (
        "the user's EXPLAIN ANALYZE is skipped; the capture's EXPLAINs are not logged"
    )
    assert not any(b"GENERIC_PLAN" in p.read_bytes() for p in server.log_dir.glob("*.json"))
    assert result.bytes_read > 0 and result.files_read >= 1
    snaps = scan_table(lake_root, "plan_snapshots").collect().filter(pl.col("source") == "auto_explain")
    joined = snaps.filter(pl.col("queryid").is_in(list(pgss)))
    by_text = {pgss[q]: row for q, row in zip(joined["queryid"], joined.to_dicts(), strict=True)}
    count_row = next(r for t, r in by_text.items() if "kind = $1" in t)
    assert count_row["actual_rows"] == 1.0 and count_row["duration_ms"] is not None
    assert "events" in count_row["relations"] and not count_row["is_generic"]
    assert count_row["query_parameters"] == "$1 = ?", "parameter names are kept, their values never"
    assert snaps.filter(pl.col("queryid") == count_row["queryid"]).height == 1, "3 runs, one shape, one row"
    point = next(r for t, r in by_text.items() if "id = $1" in t)
    assert point["root_node"] in ("Index Scan", "Index Only Scan") and point["indexes"] == ["events_pkey"]
    # A second run reads nothing old again; offsets are remembered per file.
    offsets = load_offsets(lake_root, "ae")
    assert offsets and all(entry["offset"] > 0 for entry in offsets.values() if entry["offset"])
    again = ingest_auto_explain_logs(server.log_dir, "ae", lake_root)
    assert again.bytes_read < result.bytes_read, "only lines logged since the first run are read"
    snaps = scan_table(lake_root, "plan_snapshots").collect()
    assert snaps.filter(pl.col("queryid") == count_row["queryid"]).height == 1
