"""Plan capture runs no one's code with privileges: hostile functions, locks, a pg_monitor-only login.

An ordinary application role owns functions that misbehave when someone else runs them (the way an
attacker's would: harmless for the owner, hostile for a privileged caller). The planner evaluates the
IMMUTABLE ones while planning and the STABLE ones for estimates; the capture must let nothing they try
take effect, record what happened for each, and connect as the plain monitoring login only.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.collect.fleet import FleetConfig, InstanceConfig
from jobs.lake import io as lake
from jobs.local.embedded import MONITOR_USER, EmbeddedServer
from jobs.pipeline.collection import CycleConfig, run_cycle
from jobs.plans.capture import capture_plans, select_plan_candidates
from jobs.plans.config import PlanCaptureConfig
from jobs.plans.safety import (
    explain_in_target,
    explain_target,
    forget_login_access,
    open_capture_session,
)
from jobs.plans.setup_sql import SetupRoles, setup_script, setup_steps
from jobs.schemas.collected import PLAN_CAPTURE_LOG
from tests.conftest import FleetFactory
from tests.support.pg_workload import run_psql_script

pytestmark = pytest.mark.postgres

APP = "app"
CONFIG = PlanCaptureConfig(statement_timeout_ms=1000)
TOUCHED = Path(f"/tmp/prr-hostile-{uuid.uuid4().hex[:10]}")

# Each hostile worker is VOLATILE (so it may write) and acts only when someone other than its owner runs
# it; the IMMUTABLE / STABLE wrappers are what the planner evaluates.
HOSTILE_FUNCTIONS = f"""
CREATE TABLE items (id int PRIMARY KEY, v int);
INSERT INTO items SELECT g, g % 100 FROM generate_series(1, 5000) g;
CREATE INDEX items_v_idx ON items (v);
ANALYZE items;
CREATE TABLE locked (id int PRIMARY KEY, v int);
CREATE TABLE evidence (who text, what text);
CREATE FUNCTION w_insert() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN INSERT INTO app.evidence VALUES (current_user, 'insert'); END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_insert_immutable() RETURNS int IMMUTABLE LANGUAGE sql AS $$ SELECT app.w_insert() $$;
CREATE FUNCTION f_insert_stable() RETURNS int STABLE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_insert(); END $$;
CREATE FUNCTION f_insert_volatile() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_insert(); END $$;
CREATE FUNCTION f_insert_arg(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_insert() + x; END $$;
CREATE FUNCTION w_config() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN
        PERFORM set_config('default_transaction_read_only', 'off', false);
        PERFORM set_config('statement_timeout', '0', false);
        PERFORM set_config('lock_timeout', '0', false);
    END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_config_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_config(); END $$;
CREATE FUNCTION w_copy() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN COPY (SELECT 1) TO PROGRAM 'touch {TOUCHED}'; END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_copy_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_copy(); END $$;
CREATE FUNCTION f_sleep_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN PERFORM pg_sleep(30); END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_stubborn_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN
        LOOP
            BEGIN
                PERFORM pg_sleep(30);
            EXCEPTION WHEN query_canceled THEN
                NULL;  -- swallow statement_timeout and keep going
            END;
        END LOOP;
    END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_advisory_lock_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN PERFORM pg_advisory_lock(4242); END IF;
    RETURN 1;
END $$;
CREATE FUNCTION w_alter_role() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> '{APP}' THEN
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = off', session_user);
    END IF;
    RETURN 1;
END $$;
CREATE FUNCTION f_alter_role_immutable() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN RETURN app.w_alter_role(); END $$;
"""

# The app runs these (unqualified: its search_path "$user", public finds schema app) so that they reach
# pg_stat_statements; each maps to what the capture must end with for it.
HOSTILE_QUERIES: dict[str, tuple[str, str | None]] = {
    "SELECT f_insert_immutable()": ("failed", "read-only transaction"),
    "SELECT id FROM items WHERE id = f_insert_stable()": ("failed", "read-only transaction"),
    "SELECT f_insert_volatile()": ("captured", None),  # VOLATILE: the planner does not run it
    "SELECT f_insert_arg(7)": ("captured", None),  # normalized to f_insert_arg($1): nothing to fold
    "SELECT f_config_immutable()": ("captured", None),  # it ran; the rollback undid its set_config
    "SELECT f_copy_immutable()": ("failed", "permission denied to COPY to or from an external program"),
    "SELECT f_sleep_immutable()": ("failed", "statement timeout"),
    "SELECT f_config_immutable(), f_sleep_immutable()": ("failed", "statement timeout"),
    "SELECT f_alter_role_immutable()": ("failed", "cannot execute ALTER ROLE in a read-only transaction"),
    "SELECT id FROM items WHERE v = 42": ("captured", None),
}

ROLE_STATE_SQL = (
    "SELECT rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication,"
    " rolbypassrls, rolconfig, ARRAY(SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b"
    " ON b.oid = m.roleid WHERE m.member = r.oid ORDER BY 1) FROM pg_roles r"
    " WHERE rolname IN ('radar_monitor', 'radar_explain') ORDER BY rolname"
)
DB_ROLE_SETTINGS_SQL = "SELECT setdatabase, setrole, setconfig FROM pg_db_role_setting ORDER BY 1, 2"


@pytest.fixture(scope="module")
def server(fleet_factory: FleetFactory) -> EmbeddedServer:
    srv = fleet_factory(["safety"]).server("safety")
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {APP} LOGIN")
        conn.execute(f"CREATE SCHEMA {APP} AUTHORIZATION {APP}")
    with psycopg.connect(srv.dsn_for(user=APP), autocommit=True) as conn:
        conn.execute(HOSTILE_FUNCTIONS)
    return srv


@pytest.fixture
def no_touched_file() -> Iterator[None]:
    TOUCHED.unlink(missing_ok=True)
    yield
    TOUCHED.unlink(missing_ok=True)


def app_candidates(srv: EmbeddedServer) -> pl.DataFrame:
    """Reset pg_stat_statements, run the hostile queries as the app, and pick them as capture candidates."""
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    with psycopg.connect(srv.dsn_for(user=APP), autocommit=True) as conn:
        for text in HOSTILE_QUERIES:
            conn.execute(text)
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queryid, dbid::bigint, userid::bigint, total_exec_time, query FROM pg_stat_statements"
            f" WHERE userid = '{APP}'::regrole"
        ).fetchall()
    frame = pl.DataFrame(rows, schema=["queryid", "dbid", "userid", "total_exec_time", "query"], orient="row")
    return select_plan_candidates(frame.drop("query"), frame.select("queryid", "query"))


def normalized(text: str) -> str:
    return text.replace("(7)", "($1)").replace("= 42", "= $1")


def server_state(srv: EmbeddedServer) -> tuple[Any, ...]:
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        return (
            conn.execute(ROLE_STATE_SQL).fetchall(),
            conn.execute(DB_ROLE_SETTINGS_SQL).fetchall(),
            conn.execute("SELECT count(*) FROM app.evidence").fetchone(),
        )


def new_database(server: EmbeddedServer, name: str, *setup_sql: str) -> int:
    """Create a database (as the superuser), run ``setup_sql`` inside it, return its oid (the dbid)."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        row = conn.execute("SELECT oid::bigint FROM pg_database WHERE datname = %s", [name]).fetchone()
    assert row is not None
    with psycopg.connect(server.dsn_for(name), autocommit=True) as conn:
        for statement in setup_sql:
            conn.execute(statement)  # type: ignore[arg-type]
    return int(row[0])


def test_hostile_functions_run_as_the_read_only_role_and_nothing_they_try_sticks(
    server: EmbeddedServer, no_touched_file: None
) -> None:
    candidates = app_candidates(server)
    by_text = dict(zip(candidates["query"], candidates["queryid"], strict=True))
    assert set(by_text) == {normalized(t) for t in HOSTILE_QUERIES}, "every hostile query reached pgss"
    before = server_state(server)
    assert before[2] == (0,)
    for _cycle in range(2):
        result = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), CONFIG)
        generic = result.log.filter(pl.col("source") == "generic_explain")
        assert generic.height == len(HOSTILE_QUERIES), "one plan_capture_log row per query per source"
        rows = {q: r for q, r in zip(generic["queryid"], generic.to_dicts(), strict=True)}
        for text, (status, reason) in HOSTILE_QUERIES.items():
            row = rows[by_text[normalized(text)]]
            assert row["status"] == status, (text, row["reason"])
            if reason is not None:
                assert reason in row["reason"], (text, row["reason"])
        assert result.problems == ()
        sleeper = rows[by_text["SELECT f_sleep_immutable()"]]
        assert 900 <= sleeper["elapsed_ms"] < 5000, "ended by statement_timeout, not after 30 s"
    assert not TOUCHED.exists(), "COPY ... TO PROGRAM ran on the server"
    assert server_state(server) == before, "no row inserted, the roles and their settings unchanged"


def test_session_defaults_survive_a_function_that_changes_them(server: EmbeddedServer) -> None:
    """set_config(..., false) during planning is undone by the rollback; the next EXPLAIN is still safe."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        dbid = conn.execute("SELECT oid FROM pg_database WHERE datname = 'postgres'").fetchone()
    assert dbid is not None
    with open_capture_session(server.monitor_dsn, CONFIG, instance="safety") as conn:
        target = explain_target(conn, CONFIG)
        assert target.refused is None and target.role == "radar_explain" and target.mode == "helper"
        settings = "SELECT current_setting('default_transaction_read_only'), current_setting('statement_timeout'), current_setting('lock_timeout')"  # noqa: E501
        expected = conn.execute(settings).fetchone()
        assert expected == ("on", "1s", "100ms")
        explain_in_target(conn, target, CONFIG, "SELECT f_config_immutable()", '"app", public')
        assert conn.execute(settings).fetchone() == expected
        with pytest.raises(psycopg.errors.QueryCanceled):
            explain_in_target(conn, target, CONFIG, "SELECT f_config_immutable(), f_sleep_immutable()", "app")
        assert conn.execute(settings).fetchone() == expected
        assert conn.execute("SELECT pg_current_xact_id_if_assigned() IS NULL").fetchone() == (True,)
        # A session-level advisory lock survives a rollback: the capture releases it after each EXPLAIN.
        explain_in_target(conn, target, CONFIG, "SELECT f_advisory_lock_immutable()", "app")
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        assert conn.execute(held).fetchone() == (0,)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, "rolled back, not left open"


def test_the_hostile_fixture_is_real_a_privileged_explain_runs_it(
    server: EmbeddedServer, no_touched_file: None
) -> None:
    """With the loud override, a superuser session EXPLAINs as itself: the COPY TO PROGRAM runs (READ ONLY
    does not stop it), which is exactly what the default refuses to do."""
    candidates = app_candidates(server).filter(pl.col("query") == "SELECT f_copy_immutable()")
    unsafe = PlanCaptureConfig(
        statement_timeout_ms=1000, explain_mode="session", unsafe_allow_privileged_explain=True
    )
    result = capture_plans(server.dsn, "safety", candidates, datetime.now(UTC), unsafe)
    assert result.log.filter(pl.col("source") == "generic_explain")["status"].to_list() == ["captured"]
    assert TOUCHED.exists(), "the planner ran the function's COPY ... TO PROGRAM as the superuser"


def test_superuser_session_is_refused_without_helper_or_in_session_mode(server: EmbeddedServer) -> None:
    dbid = new_database(server, "nohelper", "CREATE TABLE t (id int PRIMARY KEY)")
    candidates = pl.DataFrame(
        {"queryid": [1, 2], "dbid": [dbid] * 2, "userid": [10, 10], "query": ["SELECT * FROM t"] * 2}
    )
    result = capture_plans(server.dsn, "safety", candidates, datetime.now(UTC), CONFIG)
    generic = result.log.filter(pl.col("source") == "generic_explain")
    assert generic["status"].to_list() == ["refused", "refused"]
    reason = generic["reason"][0]
    assert "database nohelper: no EXPLAIN helper radar.explain_generic(text,text)" in reason
    assert "the session role postgres is a superuser" in reason and "radar setup-sql" in reason
    assert result.problems == (reason,) and result.plans.is_empty()
    session = capture_plans(
        server.dsn, "safety", candidates.head(1), datetime.now(UTC), PlanCaptureConfig(explain_mode="session")
    )
    refused = session.log.filter(pl.col("source") == "generic_explain").row(0, named=True)
    assert refused["status"] == "refused" and "session role postgres is a superuser" in refused["reason"]


def install_helper(srv: EmbeddedServer, database: str, roles: SetupRoles) -> None:
    with psycopg.connect(srv.dsn_for(database), autocommit=True) as conn:
        for step in setup_steps(conn.info.server_version, [database], roles):
            conn.execute(step.sql)


@pytest.mark.parametrize(
    ("grant", "problem"),
    [
        (
            "ALTER FUNCTION radar.explain_generic(text, text) OWNER TO postgres",
            "owned by postgres, which is a superuser",
        ),
        ("GRANT INSERT ON t TO {role}", "may write t"),
        ("GRANT UPDATE (id) ON t TO {role}", "may write t"),
        ("GRANT pg_write_all_data TO {role}", "is a member of pg_write_all_data"),
        ("GRANT pg_execute_server_program TO {role}", "is a member of pg_execute_server_program"),
        ("GRANT pg_write_server_files TO {role}", "is a member of pg_write_server_files"),
        ("GRANT pg_read_server_files TO {role}", "is a member of pg_read_server_files"),
        ("ALTER ROLE {role} CREATEROLE", "has CREATEROLE"),
    ],
)
def test_helper_owned_by_a_privileged_role_is_refused(
    server: EmbeddedServer, grant: str, problem: str
) -> None:
    """Each privilege that would let a planned function write or reach the server's OS refuses the helper."""
    tag = uuid.uuid4().hex[:8]
    database, role = f"priv_{tag}", f"radar_explain_{tag}"
    dbid = new_database(server, database, "CREATE TABLE t (id int PRIMARY KEY)")
    install_helper(server, database, SetupRoles(explain_role=role))
    candidates = pl.DataFrame({"queryid": [1], "dbid": [dbid], "userid": [10], "query": ["SELECT * FROM t"]})
    ok = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), CONFIG)
    assert ok.log.filter(pl.col("source") == "generic_explain")["status"].to_list() == ["captured"]
    with psycopg.connect(server.dsn_for(database), autocommit=True) as conn:
        conn.execute(grant.format(role=role))
    result = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), CONFIG)
    row = result.log.filter(pl.col("source") == "generic_explain").row(0, named=True)
    assert row["status"] == "refused" and problem in row["reason"], row["reason"]
    assert "radar setup-sql" in row["reason"] and result.problems == (row["reason"],)


def test_refusal_reaches_the_cycle_result_and_every_candidate_has_a_refused_row(
    fleet_factory: FleetFactory, lake_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A superuser login whose server has no helper: every candidate refused, logged once, plan_errors set."""
    srv = fleet_factory(["nohelp"]).server("nohelp")
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute("DROP FUNCTION radar.explain_generic(text, text)")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        for v in range(3):
            conn.execute("SELECT * FROM t WHERE v = %s", (Int4(v),))
            conn.execute("SELECT count(*) FROM t WHERE id > %s", (Int4(v),))
    fleet = FleetConfig(instances=(InstanceConfig(name="nohelp", dsn=srv.dsn),))
    cycle = CycleConfig(capture_plans=True, plans=CONFIG)
    with caplog.at_level("WARNING", logger="jobs.plans.capture"):
        results = [run_cycle(fleet, lake_root, cycle) for _ in range(2)]
    for result in results:
        error = result.plan_errors["nohelp"]
        assert "no EXPLAIN helper" in error and "superuser" in error and "radar setup-sql" in error
    assert sum("no EXPLAIN helper" in r.getMessage() for r in caplog.records) == 1, "logged once per instance"
    logged = (
        lake.scan_table(lake_root, PLAN_CAPTURE_LOG).filter(pl.col("source") == "generic_explain").collect()
    )
    assert set(logged["status"]) == {"refused"}, "nothing was EXPLAINed"
    by_helper = logged.filter(pl.col("reason").str.contains("no EXPLAIN helper", literal=True))
    assert by_helper.height >= 4 and by_helper["reason"].str.contains("radar setup-sql", literal=True).all()
    assert by_helper.height == logged.filter(~pl.col("reason").str.contains("not a plain SELECT")).height


def test_a_locked_table_costs_one_short_wait_per_query_and_leaves_no_waiting_lock(
    server: EmbeddedServer,
) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        dbid, userid = conn.execute(
            "SELECT (SELECT oid::bigint FROM pg_database WHERE datname = 'postgres'),"
            f" '{APP}'::regrole::oid::bigint"
        ).fetchone() or (None, None)
    texts = [f"SELECT v FROM locked WHERE id = $1 AND v > {i}" for i in range(20)]
    candidates = pl.DataFrame(
        {"queryid": list(range(100, 120)), "dbid": [dbid] * 20, "userid": [userid] * 20, "query": texts}
    )
    holder = psycopg.connect(server.dsn)
    try:
        holder.execute("LOCK TABLE app.locked IN ACCESS EXCLUSIVE MODE")  # psycopg opened a transaction
        started = time.monotonic()
        result = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), CONFIG)
        elapsed = time.monotonic() - started
        generic = result.log.filter(pl.col("source") == "generic_explain")
        assert elapsed < 5.0, f"20 EXPLAINs behind an ACCESS EXCLUSIVE lock took {elapsed:.1f} s"
        assert generic["status"].to_list() == ["failed"] * 20
        assert generic["reason"].str.contains("lock timeout", literal=True).all()
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            waiting = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        assert waiting == (0,)
    finally:
        holder.rollback()
        holder.close()


def log_lines(srv: EmbeddedServer) -> dict[Path, int]:
    return {path: path.stat().st_size for path in srv.log_dir.glob("*.json")}


def new_log_records(srv: EmbeddedServer, offsets: dict[Path, int]) -> list[dict[str, Any]]:
    records = []
    for path in sorted(srv.log_dir.glob("*.json")):
        with path.open("rb") as handle:
            handle.seek(offsets.get(path, 0))
            for line in handle.read().decode(errors="replace").splitlines():
                if line.strip():
                    records.append(json.loads(line))
    return records


PG_MONITOR_ONLY = "radar_pg_monitor_only"


@pytest.mark.parametrize("login", [MONITOR_USER, PG_MONITOR_ONLY])
def test_monitor_only_login_generic_plans_and_store_plans_without_server_errors(
    server: EmbeddedServer, login: str
) -> None:
    """radar_monitor as set up (pg_monitor, SET on the tracking parameters, EXECUTE on the helper), and a
    login with pg_monitor and EXECUTE only (it may set no superuser-only parameter): both sources work,
    the first-ever session learns what it may set without a refused connection, no ERROR/FATAL is logged,
    and every statement the capture sent that pg_stat_statements kept carries the marker."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        if login == PG_MONITOR_ONLY:
            conn.execute(f"DROP ROLE IF EXISTS {login}")
            conn.execute(f"CREATE ROLE {login} LOGIN IN ROLE pg_monitor")
            conn.execute(f"GRANT USAGE ON SCHEMA radar TO {login}")
            conn.execute(f"GRANT EXECUTE ON FUNCTION radar.explain_generic(text, text) TO {login}")
        conn.execute("SELECT pg_stat_statements_reset()")
        monitor = conn.execute(
            "SELECT rolsuper, pg_has_role(rolname, 'pg_monitor', 'MEMBER'),"
            " has_parameter_privilege(rolname, 'pg_stat_statements.track', 'SET') FROM pg_roles"
            " WHERE rolname = %s",
            (login,),
        ).fetchone()
        assert monitor == (False, True, login == MONITOR_USER)
    with psycopg.connect(server.dsn_for(user=APP), autocommit=True) as conn:
        conn.execute("SELECT id FROM items WHERE v = %s", (Int4(3),))
        conn.execute("SELECT count(*) FROM items WHERE id < %s", (Int4(3),))
        # Normalized to "interval $1": a syntax error when EXPLAINed, caught inside the helper.
        conn.execute("SELECT now() - interval '1 day' FROM items WHERE id = %s", (Int4(3),))
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queryid, dbid::bigint, userid::bigint, total_exec_time, query FROM pg_stat_statements"
            f" WHERE userid = '{APP}'::regrole"
        ).fetchall()
    frame = pl.DataFrame(rows, schema=["queryid", "dbid", "userid", "total_exec_time", "query"], orient="row")
    candidates = select_plan_candidates(frame.drop("query"), frame.select("queryid", "query"))
    assert candidates.height == 3
    stored_q, stored_db = candidates.filter(pl.col("query").str.contains("v = $1", literal=True)).row(0)[:2]
    hidden_q = candidates.filter(pl.col("query").str.contains("count(*)", literal=True))["queryid"][0]
    plan_json = '{"Plan": {"Node Type": "Index Scan", "Relation Name": "items", "Index Name": "items_v_idx"}}'
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS radar_fixture")
        conn.execute(
            "CREATE OR REPLACE VIEW radar_fixture.pg_store_plans AS SELECT * FROM (VALUES "
            f"(10::oid, {stored_db}::oid, {stored_q}::bigint, 1::bigint, '{plan_json}'::text,"
            " 1::bigint, 1.0::float8, now(), now()),"
            # What pg_store_plans shows a login without pg_read_all_stats instead of the plan.
            f"(10::oid, {stored_db}::oid, {hidden_q}::bigint, 2::bigint, '<insufficient privilege>'::text,"
            " 1::bigint, 1.0::float8, now(), now())"
            ") AS t(userid, dbid, queryid, planid, plan, calls, total_time, first_call, last_call)"
        )
        conn.execute(f"GRANT USAGE ON SCHEMA radar_fixture TO {login}")
        conn.execute(f"GRANT SELECT ON radar_fixture.pg_store_plans TO {login}")
    config = PlanCaptureConfig(
        statement_timeout_ms=1000,
        store_plans_relation="radar_fixture.pg_store_plans",
        store_plans_assume_trusted=True,
    )
    forget_login_access()  # the first session of the instance learns what the login may set
    offsets = log_lines(server)
    assert offsets, f"no jsonlog file under {server.log_dir}"
    for _cycle in range(3):
        result = capture_plans(
            server.dsn_for(user=login), "monitor-only", candidates, datetime.now(UTC), config
        )
        answered = dict(zip(result.plans["queryid"], result.plans["source"], strict=True))
        assert answered[stored_q] == "pg_store_plans"
        assert set(answered.values()) == {"pg_store_plans", "generic_explain"} and len(answered) == 2
        failed = dict(result.log.filter(pl.col("status") == "failed").select("source", "reason").rows())
        assert (
            set(failed) == {"pg_store_plans", "generic_explain"}
            and "syntax error" in failed["generic_explain"]
        )
        assert "grant it pg_read_all_stats" in failed["pg_store_plans"]
        assert answered[hidden_q] == "generic_explain", "a hidden stored plan falls back to a generic plan"
        assert result.problems == ()
    time.sleep(0.3)  # the logging collector writes asynchronously
    records = new_log_records(server, offsets)
    errors = [r for r in records if r.get("error_severity") in ("ERROR", "FATAL", "PANIC")]
    assert errors == [], errors
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        kept = conn.execute(
            "SELECT query FROM pg_stat_statements WHERE userid = %s::regrole", (login,)
        ).fetchall()
    assert all("pg-regression-radar" in q for (q,) in kept), kept
    if login == MONITOR_USER:  # tracking off for its sessions: only the one-time privilege question is kept
        assert len(kept) <= 1, kept
    else:
        assert len(kept) > 1, "this login cannot switch tracking off: its (marked) statements are kept"


def test_the_store_plans_session_is_plain_and_read_only(server: EmbeddedServer) -> None:
    """What the pg_store_plans reader gets: the monitor login, read-only, JSON plan format, no superuser."""
    forget_login_access()
    with open_capture_session(server.monitor_dsn, CONFIG, instance="plain") as conn:
        shown = conn.execute(
            "SELECT current_user, current_setting('is_superuser'), current_setting('transaction_read_only'),"
            " current_setting('pg_store_plans.plan_format', true),"
            " current_setting('pg_stat_statements.track')"
        ).fetchone()
    # PG18 via GRANT SET ON PARAMETER (radar setup-sql): tracking is off for the capture's own sessions.
    assert shown == (MONITOR_USER, "off", "on", "json", "none")


def test_setup_sql_script_runs_with_psql_and_installs_a_working_helper(server: EmbeddedServer) -> None:
    """`radar setup-sql --database shop` as printed, run with psql: the helper works in that database."""
    dbid = new_database(server, "shop", "CREATE TABLE orders (id int PRIMARY KEY)")
    script = setup_script(setup_steps(180000, ["shop"]), 180000)
    done = run_psql_script(server.dsn, script)
    assert done.returncode == 0, done.stderr
    candidates = pl.DataFrame(
        {"queryid": [1], "dbid": [dbid], "userid": [10], "query": ["SELECT * FROM orders WHERE id = $1"]}
    )
    result = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), CONFIG)
    assert result.log.filter(pl.col("source") == "generic_explain")["status"].to_list() == ["captured"]
    assert result.plans["indexes"][0].to_list() == ["orders_pkey"]


def test_a_session_that_cannot_be_opened_is_filed_under_the_sources_it_was_for(
    server: EmbeddedServer,
) -> None:
    """No main session: both sources fail for every candidate, with the reason; a database the login may
    not connect to: its generic plans fail, once named in problems."""
    candidates = pl.DataFrame({"queryid": [1], "dbid": [None], "userid": [None], "query": ["SELECT 1"]})
    gone = capture_plans(server.dsn_for(user="no_such_login"), "gone", candidates, datetime.now(UTC), CONFIG)
    assert gone.log.select("source", "status").rows() == [
        ("pg_store_plans", "failed"),
        ("generic_explain", "failed"),
    ]
    assert gone.log["reason"].str.contains("cannot open the plan capture session", literal=True).all()
    assert len(gone.problems) == 1 and "no_such_login" in gone.problems[0]
    dbid = new_database(server, "closed")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("REVOKE CONNECT ON DATABASE closed FROM PUBLIC")
    two = pl.DataFrame({"queryid": [1, 2], "dbid": [dbid] * 2, "userid": [10, 10], "query": ["SELECT 1"] * 2})
    closed = capture_plans(server.monitor_dsn, "safety", two, datetime.now(UTC), CONFIG)
    generic = closed.log.filter(pl.col("source") == "generic_explain")
    assert generic["status"].to_list() == ["failed", "failed"]
    assert generic["reason"].str.starts_with("database closed: cannot connect").all()
    assert closed.problems == (generic["reason"][0],)


def test_a_function_that_swallows_the_timeout_is_terminated_and_the_next_query_goes_on(
    server: EmbeddedServer,
) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        dbid, userid = conn.execute(
            "SELECT (SELECT oid::bigint FROM pg_database WHERE datname = 'postgres'),"
            f" '{APP}'::regrole::oid::bigint"
        ).fetchone() or (None, None)
    texts = ["SELECT f_stubborn_immutable()", "SELECT id FROM items WHERE v = $1"]
    candidates = pl.DataFrame({"queryid": [1, 2], "dbid": [dbid] * 2, "userid": [userid] * 2, "query": texts})
    config = PlanCaptureConfig(statement_timeout_ms=500, watchdog_grace_ms=1000)
    started = time.monotonic()
    result = capture_plans(server.monitor_dsn, "safety", candidates, datetime.now(UTC), config)
    elapsed = time.monotonic() - started
    generic = result.log.filter(pl.col("source") == "generic_explain").sort("queryid")
    assert generic["status"].to_list() == ["failed", "captured"]
    assert "its session was terminated" in generic["reason"][0]
    assert elapsed < 5.0, f"took {elapsed:.1f} s"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%f_stubborn_immutable%%'"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    assert left == (0,), "no backend is left running the function"
