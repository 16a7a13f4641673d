from __future__ import annotations

import psycopg
import pytest

from jobs.local.embedded import EmbeddedFleet

pytestmark = pytest.mark.postgres


def test_fleet_servers_run_with_the_settings_the_collector_needs(pg_fleet: EmbeddedFleet) -> None:
    for server in pg_fleet.servers:
        with psycopg.connect(server.dsn) as conn:
            settings = dict(
                conn.execute(
                    "select name, setting from pg_settings where name = any(%s)",
                    [["compute_query_id", "track_io_timing", "shared_preload_libraries", "log_destination"]],
                ).fetchall()
            )
            version = conn.execute(
                "select extversion from pg_extension where extname = 'pg_stat_statements'"
            ).fetchone()
        assert settings["compute_query_id"] == "on"
        assert settings["track_io_timing"] == "on"
        assert "pg_stat_statements" in settings["shared_preload_libraries"]
        assert "auto_explain" in settings["shared_preload_libraries"]
        assert settings["log_destination"] == "jsonlog"
        assert version == ("1.12",)


def test_fleet_state_survives_reload_and_reports_status(pg_fleet: EmbeddedFleet) -> None:
    again = EmbeddedFleet.load(pg_fleet.root)
    assert again is not None
    assert [s["name"] for s in again.status()] == ["alpha", "beta"]
    assert all(s["running"] for s in again.status())
