"""The pg_store_plans tier: plan capture against a real pg_store_plans 1.9 on Debian's PostgreSQL 15.

pg_store_plans does not compile against the wheel's PostgreSQL 18, so these tests run a PG15 server from
``/usr/lib/postgresql/15/bin`` through ``jobs.local.embedded`` (``bin_dir``). ``make test-store-plans``
installs
the packages and builds the extension first (tests/tiers/store_plans/install.sh); without them every
server test here skips with the installer's reason. Capture runs as a ``pg_monitor``-only login.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.lake.io import scan_table
from jobs.local.embedded import (
    BASE_SETTINGS,
    FAST_SETTINGS,
    EmbeddedFleet,
    EmbeddedServer,
    FleetError,
    ensure_service_user,
    server_major_version,
    settings_for_major,
)
from jobs.plans.capture import capture_plans, select_plan_candidates, write_plan_snapshots
from jobs.plans.config import PlanCaptureConfig
from jobs.plans.diff import plan_diffs_for_regressions
from jobs.plans.safety import open_capture_session
from jobs.plans.shape import PlanFormatError, plan_root
from jobs.plans.store_plans import store_plans_gate
from tests.conftest import CLUSTER_BASE
from tests.support.lakes import detected_regression
from tests.tiers.store_plans import INSTALLER, PG_BIN_DIR, PG_MAJOR, unavailable_reason

TIER = [pytest.mark.store_plans, pytest.mark.postgres]
MONITOR = "radar_pgmon"  # pg_monitor only: the fleet's own radar_monitor also holds SET grants
PLAIN = "radar_plain"
INSTANCE = "sp15"
PRELOAD = "'pg_store_plans,pg_stat_statements,auto_explain'"
# What the fixture had to GRANT SET ON PARAMETER to the monitor login before capture could connect.
MONITOR_GRANTS: list[str] = []


def _grant_what_capture_needs(srv: EmbeddedServer) -> list[str]:
    """GRANT SET ON PARAMETER (PG15+) for each parameter the capture session is refused by the server.

    Opens the real capture session as the monitor login; each FATAL "permission denied to set parameter
    X" would get one grant and a retry, so a capture that still sent a superuser-only startup option
    shows up as a non-empty list (test_monitor_capture_session_needs_no_grant asserts it is empty).
    """
    granted: list[str] = []
    for _ in range(10):
        try:
            with open_capture_session(srv.dsn_for(user=MONITOR), PlanCaptureConfig()):
                return granted
        except psycopg.OperationalError as exc:
            marker = 'permission denied to set parameter "'
            text = str(exc)
            if marker not in text:
                raise
            parameter = text.split(marker, 1)[1].split('"', 1)[0]
            with psycopg.connect(srv.dsn, autocommit=True) as conn:
                conn.execute(f"GRANT SET ON PARAMETER {parameter} TO {MONITOR}")
            granted.append(parameter)
    raise AssertionError(f"capture session still refused after granting {granted}")


@pytest.fixture(scope="module")
def pg15() -> Iterator[EmbeddedServer]:
    """One PG15 server with pg_store_plans, the workload table, a pg_monitor login and a plain login."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    CLUSTER_BASE.mkdir(parents=True, exist_ok=True)
    CLUSTER_BASE.chmod(0o755)
    root = CLUSTER_BASE / f"store-plans-{uuid.uuid4().hex[:10]}"
    fleet: EmbeddedFleet | None = None
    try:
        fleet = EmbeddedFleet.create(
            root, [INSTANCE], extra_settings={"shared_preload_libraries": PRELOAD}, bin_dir=PG_BIN_DIR
        )
        srv = fleet.server(INSTANCE)
        with psycopg.connect(srv.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_store_plans")
            for table in ("items", "parts"):
                conn.execute(f"CREATE TABLE {table} (id int, sku int)")
                conn.execute(f"INSERT INTO {table} SELECT g, g FROM generate_series(1, 20000) g")
                conn.execute(f"CREATE INDEX {table}_sku_idx ON {table} (sku); ANALYZE {table}")
            conn.execute(f"CREATE ROLE {MONITOR} LOGIN IN ROLE pg_monitor")
            conn.execute(f"CREATE ROLE {PLAIN} LOGIN")
            conn.execute(f"GRANT SELECT ON items TO {PLAIN}")
        MONITOR_GRANTS[:] = _grant_what_capture_needs(srv)
        yield srv
    finally:
        fleet = fleet or EmbeddedFleet.load(root)  # a create that failed half-way may have started it
        if fleet is not None:
            fleet.destroy()
        shutil.rmtree(root, ignore_errors=True)


def run_workload(srv: EmbeddedServer, table: str, times: int = 5, user: str | None = None) -> None:
    """The application's query, with a typed parameter so it stays one queryid."""
    dsn = srv.dsn if user is None else srv.dsn_for(user=user)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sku in range(times):
            conn.execute(f"SELECT id FROM {table} WHERE sku = %s", (Int4(sku),))


def monitor_candidates(srv: EmbeddedServer, needle: str) -> pl.DataFrame:
    """The capture candidates as the monitor login sees pg_stat_statements."""
    with psycopg.connect(srv.dsn_for(user=MONITOR), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queryid, dbid::bigint, userid::bigint, total_exec_time, query FROM pg_stat_statements"
        ).fetchall()
    frame = pl.DataFrame(rows, schema=["queryid", "dbid", "userid", "total_exec_time", "query"], orient="row")
    picked = select_plan_candidates(frame.drop("query"), frame.select("queryid", "query"))
    return picked.filter(pl.col("query").str.contains(needle, literal=True))


def store_plans_rows(srv: EmbeddedServer, user: str, plan_format: str = "json") -> list[dict[str, Any]]:
    with (
        psycopg.connect(
            srv.dsn_for(user=user), autocommit=True, options=f"-c pg_store_plans.plan_format={plan_format}"
        ) as conn,
        conn.cursor(row_factory=psycopg.rows.dict_row) as cur,
    ):
        cur.execute("SELECT userid::regrole::text AS owner, queryid, planid, plan FROM pg_store_plans")
        return cur.fetchall()


# --- fleet support for another PostgreSQL (pure: no server) --------------------------------------------


def test_settings_for_major_drops_what_the_version_lacks() -> None:
    defaults = {**BASE_SETTINGS, **FAST_SETTINGS}
    on_15 = settings_for_major(defaults, 15)
    assert "io_method" not in on_15, "PG15 refuses to start with io_method (added in 18)"
    assert on_15["log_destination"] == "'jsonlog'" and on_15["compute_query_id"] == "on"
    assert settings_for_major(defaults, 18) == defaults, "the wheel's PG18 keeps every setting"


def test_fleet_refuses_a_bin_dir_without_postgres(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="cannot run"):
        server_major_version(tmp_path)


def test_installer_skips_cleanly_when_it_cannot_install_and_tests_give_its_reason() -> None:
    """Not root (the service user runs it): one SKIP line, exit 0, the reason in the status file."""
    base = Path(tempfile.mkdtemp(prefix="prr-store-plans-skip-"))
    try:
        base.chmod(0o755)
        (base / "store_plans").mkdir(mode=0o755)
        script = base / "store_plans" / "install.sh"  # beside the tiers' shared library, as in the repo
        shutil.copy(INSTALLER, script)
        shutil.copy(INSTALLER.parent.parent / "tier_lib.sh", base / "tier_lib.sh")
        script.chmod(0o755)
        state = base / "state"
        state.mkdir()
        account = ensure_service_user()
        kwargs: dict[str, Any] = {}
        if account is not None:
            os.chown(state, account.pw_uid, account.pw_gid)
            kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PG_MAJOR": "99",
            "STORE_PLANS_STATE": str(state),
        }
        done = subprocess.run(
            ["bash", str(script)], env=env, cwd="/", capture_output=True, text=True, timeout=60, **kwargs
        )
        packages = "postgresql-99 postgresql-server-dev-99"
        expected = f"not root: cannot apt-get install {packages} (install them, then rerun)"
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines() == [f"SKIP: {expected}"]
        reason = unavailable_reason(Path("/usr/lib/postgresql/99/bin"), state / "status")
        assert reason == f"pg_store_plans tier: {expected}"
        assert "make test-store-plans" in str(unavailable_reason(Path("/nonexistent"), base / "no-status"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- the tier: a real pg_store_plans on PG15 -------------------------------------------------------------


@pytest.mark.store_plans
@pytest.mark.postgres
def test_fleet_runs_the_other_postgres_with_settings_for_its_version(pg15: EmbeddedServer) -> None:
    assert server_major_version(PG_BIN_DIR) == PG_MAJOR
    assert pg15.bin_dir == PG_BIN_DIR and "io_method" not in pg15.settings
    with psycopg.connect(pg15.dsn, autocommit=True) as conn:
        version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
        assert version_num // 10000 == PG_MAJOR
        assert conn.execute("SHOW log_destination").fetchone() == ("jsonlog",)
        assert conn.execute("SHOW compute_query_id").fetchone() == ("on",)
    reloaded = EmbeddedFleet.load(pg15.data_dir.parents[1])
    assert reloaded is not None and reloaded.server(INSTANCE).bin_dir == PG_BIN_DIR, "bin_dir in fleet.json"


@pytest.mark.store_plans
@pytest.mark.postgres
def test_monitor_capture_session_needs_no_grant(pg15: EmbeddedServer) -> None:
    """The pg_monitor-only login opens the capture session with no SET grant at all: capture sets only
    parameters any role may set (it learns what else it may, instead of failing with a FATAL)."""
    assert MONITOR_GRANTS == []
    with open_capture_session(pg15.dsn_for(user=MONITOR), PlanCaptureConfig()) as conn:
        assert conn.execute("SHOW pg_store_plans.plan_format").fetchone() == ("json",)
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
        assert conn.execute("SHOW is_superuser").fetchone() == ("off",)


@pytest.mark.store_plans
@pytest.mark.postgres
def test_monitor_login_captures_real_plans_joined_by_pgss_queryid(pg15: EmbeddedServer) -> None:
    run_workload(pg15, "items")
    candidates = monitor_candidates(pg15, "FROM items WHERE sku = $1")
    assert candidates.height == 1, "typed parameters keep the query one pg_stat_statements entry"
    pgss_queryid = candidates["queryid"][0]
    monitor_dsn = pg15.dsn_for(user=MONITOR)
    with psycopg.connect(monitor_dsn, autocommit=True) as conn:
        version_num, compute_query_id, extversion = conn.execute(
            "SELECT current_setting('server_version_num')::int, current_setting('compute_query_id'), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'pg_store_plans')"
        ).fetchone()  # type: ignore[misc]
        assert conn.execute("SHOW is_superuser").fetchone() == ("off",)
    gate = store_plans_gate(version_num, extversion, compute_query_id)
    assert gate.trusted and gate.reason is None and extversion == "1.9"

    result = capture_plans(monitor_dsn, INSTANCE, candidates, datetime.now(UTC))
    assert result.log.filter(pl.col("source") == "pg_store_plans")["status"].to_list() == ["captured"]
    plan = result.plans.row(0, named=True)
    assert result.plans.height == 1 and plan["source"] == "pg_store_plans" and not plan["is_generic"]
    assert plan["queryid"] == pgss_queryid
    assert plan["root_node"] == "Index Scan" and plan["indexes"] == ["items_sku_idx"]
    stored = [r for r in store_plans_rows(pg15, MONITOR) if r["queryid"] == pgss_queryid]
    assert [r["planid"] for r in stored] == [plan["planid"]], "the planid of pg_store_plans' own row"


@pytest.mark.store_plans
@pytest.mark.postgres
def test_store_plans_hides_other_users_plans_without_pg_read_all_stats(pg15: EmbeddedServer) -> None:
    """Not superuser-only: pg_read_all_stats (in pg_monitor) or being the statement's user shows plans."""
    run_workload(pg15, "items")  # as the superuser
    run_workload(pg15, "items", times=1, user=PLAIN)
    plain = store_plans_rows(pg15, PLAIN)
    others = [r for r in plain if r["owner"] != PLAIN]
    assert others and all(
        r["plan"] == "<insufficient privilege>" and r["queryid"] is None and r["planid"] is None
        for r in others
    )
    own = [r for r in plain if r["owner"] == PLAIN and "items" in r["plan"]]
    assert own and plan_root(own[0]["plan"])["Relation Name"] == "items"
    monitor = [r for r in store_plans_rows(pg15, MONITOR) if r["owner"] == "postgres"]
    assert monitor and all(r["queryid"] is not None for r in monitor)
    assert any(plan_root(r["plan"]).get("Relation Name") == "items" for r in monitor if "items" in r["plan"])


@pytest.mark.store_plans
@pytest.mark.postgres
def test_plan_format_is_user_settable_and_only_json_parses(pg15: EmbeddedServer) -> None:
    """pg_store_plans.plan_format is PGC_USERSET; the view converts at read time; json → plan_root."""
    with psycopg.connect(
        pg15.dsn_for(user=PLAIN), autocommit=True, options="-c pg_store_plans.plan_format=json"
    ) as conn:
        assert conn.execute("SHOW pg_store_plans.plan_format").fetchone() == ("json",), "no grant needed"
    run_workload(pg15, "items")
    by_format = {
        fmt: next(r["plan"] for r in store_plans_rows(pg15, MONITOR, fmt) if "items_sku_idx" in r["plan"])
        for fmt in ("json", "text", "raw")
    }
    assert plan_root(by_format["json"])["Node Type"] == "Index Scan"
    assert by_format["text"].startswith("Index Scan using items_sku_idx on items")
    assert by_format["raw"].startswith('{"p":{"t":"i"'), "raw is the shortened internal JSON"
    for fmt in ("text", "raw"):
        with pytest.raises(PlanFormatError):
            plan_root(by_format[fmt])


@pytest.mark.store_plans
@pytest.mark.postgres
def test_index_drop_between_cycles_diffs_two_store_plans_plans(pg15: EmbeddedServer, lake_root: Path) -> None:
    run_workload(pg15, "parts")
    candidates = monitor_candidates(pg15, "FROM parts WHERE sku = $1")
    assert candidates.height == 1
    monitor_dsn = pg15.dsn_for(user=MONITOR)
    t0 = datetime.now(UTC)
    first = capture_plans(monitor_dsn, INSTANCE, candidates, t0)
    assert write_plan_snapshots(lake_root, INSTANCE, t0, first).written_rows == 1
    with psycopg.connect(pg15.dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX parts_sku_idx")
    run_workload(pg15, "parts")
    after_drop = monitor_candidates(pg15, "FROM parts WHERE sku = $1")
    assert after_drop["queryid"].to_list() == candidates["queryid"].to_list(), "same queryid on PG15"
    t1 = t0 + timedelta(minutes=1)
    second = capture_plans(monitor_dsn, INSTANCE, after_drop, t1)
    assert write_plan_snapshots(lake_root, INSTANCE, t1, second).written_rows == 1
    snapshots = scan_table(lake_root, "plan_snapshots").collect()
    assert set(snapshots["source"]) == {"pg_store_plans"}
    assert set(snapshots["root_node"]) == {"Index Scan", "Seq Scan"}
    assert snapshots["planid"].n_unique() == 2, "pg_store_plans recorded a second plan (new planid)"
    regressions = detected_regression(
        t0 + timedelta(seconds=30),
        queryid=candidates["queryid"][0],
        instance=INSTANCE,
        query=candidates["query"][0],
    )
    diff = plan_diffs_for_regressions(regressions, snapshots).row(0, named=True)
    assert diff["diff_status"] == "changed"
    assert diff["before_source"] == diff["after_source"] == "pg_store_plans"
    summary = diff["plan_diff_summary"]
    assert "Index Scan using parts_sku_idx on parts" in summary and "Seq Scan on parts" in summary
    assert "-parts_sku_idx" in summary
    assert "generic plan" not in summary and "different sources" not in summary


@pytest.mark.store_plans
@pytest.mark.postgres
def test_compute_query_id_off_is_refused_with_that_reason(pg15: EmbeddedServer) -> None:
    """Restart with compute_query_id = off: the gate refuses pg_store_plans, and it records nothing new."""
    run_workload(pg15, "items")
    candidates = monitor_candidates(pg15, "FROM items WHERE sku = $1")
    assert candidates.height == 1
    pg15.settings = {**pg15.settings, "compute_query_id": "off"}
    pg15.write_settings()
    pg15.restart()
    try:
        with psycopg.connect(pg15.dsn, autocommit=True) as conn:
            assert conn.execute("SHOW compute_query_id").fetchone() == ("off",)
            conn.execute("SELECT pg_store_plans_reset()")
        run_workload(pg15, "items")
        assert not [r for r in store_plans_rows(pg15, MONITOR) if "items" in r["plan"]], (
            "compute_query_id = off silently disables pg_store_plans"
        )
        result = capture_plans(pg15.dsn_for(user=MONITOR), INSTANCE, candidates, datetime.now(UTC))
        store = result.log.filter(pl.col("source") == "pg_store_plans").row(0, named=True)
        assert store["status"] == "untrusted"
        assert "compute_query_id = off" in store["reason"] and "disabled" in store["reason"]
        assert result.plans.is_empty(), "no pg_store_plans plan, and GENERIC_PLAN needs PG16"
        generic = result.log.filter(pl.col("source") == "generic_explain")["status"].to_list()
        assert generic == ["unsupported"]
    finally:
        pg15.settings = {**pg15.settings, "compute_query_id": "on"}
        pg15.write_settings()
        pg15.restart()
