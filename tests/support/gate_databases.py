"""Gate test databases on a real server: the gate schema in a baseline database and in one without the
customer index (the regression the gate tests and the README's CI example look for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def gate_databases(server: Any, base: str, noindex: str) -> None:
    """``base`` with tests/fixtures/gate_schema.sql and pg_stat_statements; ``noindex`` the same without
    ``gate_orders_customer_id_idx``."""
    schema = (FIXTURES / "gate_schema.sql").read_text()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {base}")
        conn.execute(f"CREATE DATABASE {noindex}")
    for database in (base, noindex):
        with psycopg.connect(server.dsn_for(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute(schema)
    with psycopg.connect(server.dsn_for(noindex), autocommit=True) as conn:
        conn.execute("DROP INDEX gate_orders_customer_id_idx")
