"""The setup SQL of the plan capture (``radar setup-sql``): roles, grants and the EXPLAIN helper, per version.

Pure: it renders the texts in ``sql/postgres/setup_*.sql`` for one server version, role names and the
databases to install the helper in. The result is a list of steps, each run once per server (``cluster``)
or once per database; :func:`setup_script` joins them into one psql script (``\\connect`` between
databases), and :meth:`jobs.local.embedded.EmbeddedServer.bootstrap` runs the same steps on a local fleet. One
edge, :func:`read_setup_facts`, reads the version (and whether pg_stat_statements is installed) from the
server itself for ``radar setup-sql --dsn``.

What differs between PostgreSQL 13 and 18:
* PG13 has no ``pg_read_all_data``: SELECT is granted schema by schema (per database).
* PG15+ can ``GRANT SET ON PARAMETER``: the monitoring login may then switch tracking and auto_explain
  logging off for its own sessions.
* PG16+ has ``EXPLAIN (GENERIC_PLAN)``: only there is the helper installed (before, generic plans are
  unsupported and the capture relies on pg_store_plans / auto_explain).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobs.sqlfiles import load_sql

MIN_SERVER_VERSION_NUM = 130000
READ_ALL_DATA_MIN_VERSION_NUM = 140000
SET_ON_PARAMETER_MIN_VERSION_NUM = 150000
GENERIC_PLAN_MIN_VERSION_NUM = 160000
PIN_ROLE_MIN_VERSION_NUM = 160000
DEFAULT_SERVER_VERSION_NUM = 180000

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


class SetupSqlError(ValueError):
    """A role, schema or database name or a version the setup SQL cannot be rendered for."""


class SetupServerError(RuntimeError):
    """``--dsn`` names a server that cannot be reached or read (the message carries no password)."""


@dataclass(frozen=True)
class SetupFacts:
    """What ``radar setup-sql --dsn`` read from the server: the script is rendered for these."""

    server_version_num: int
    pgss_version: str | None
    """pg_stat_statements' extversion in ``database``; None: not installed there."""
    database: str
    """The DSN's database: the collector reads pg_stat_statements from the database its DSN names."""
    preload_libraries: str | None
    """shared_preload_libraries; None: the login may not read it (no pg_read_all_settings)."""

    @property
    def preloaded(self) -> bool | None:
        """pg_stat_statements is in shared_preload_libraries (None: unknown)."""
        if self.preload_libraries is None:
            return None
        names = [n.strip().strip('"').lower() for n in self.preload_libraries.split(",")]
        return "pg_stat_statements" in names

    def notes(self, shown_dsn: str) -> list[str]:
        """The script's header lines saying what was read, and what the script cannot fix itself."""
        lines = [
            f"Read from {shown_dsn}: server_version_num {self.server_version_num}, pg_stat_statements "
            + (
                f"{self.pgss_version} installed in database {self.database}."
                if self.pgss_version
                else f"not installed in database {self.database} (the last step creates it)."
            )
        ]
        if self.preloaded is False:
            lines.append(
                "pg_stat_statements is not in shared_preload_libraries: add it (and auto_explain) to "
                "the server's settings and restart, or the collector cannot read the view."
            )
        elif self.preloaded is None:
            lines.append(
                "shared_preload_libraries could not be read by this login: check it holds pg_stat_statements."
            )
        return lines


def read_setup_facts(dsn: str, connect_timeout_s: int = 10) -> SetupFacts:
    """Connect once (autocommit) and read the server's version and its pg_stat_statements; a server that
    cannot be reached or read is a one-line :class:`SetupServerError` without the DSN's password."""
    import psycopg
    from psycopg.rows import dict_row

    from jobs.redaction import redact_dsn, scrub

    try:
        with psycopg.connect(
            dsn, autocommit=True, connect_timeout=connect_timeout_s, row_factory=dict_row
        ) as conn:
            row: dict[str, Any] | None = conn.execute(load_sql("setup_server_facts")).fetchone()
    except psycopg.Error as exc:
        reason = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        raise SetupServerError(scrub(f"cannot read the server at {redact_dsn(dsn)}: {reason}", dsn)) from None
    assert row is not None
    return SetupFacts(
        server_version_num=int(row["server_version_num"]),
        pgss_version=row["pgss_version"],
        database=str(row["current_database"]),
        preload_libraries=row["preload_libraries"],
    )


def extension_step(database: str) -> SetupStep:
    """``CREATE EXTENSION pg_stat_statements`` in the DSN's database (added when --dsn found it missing)."""
    return SetupStep("pg_stat_statements extension", database, load_sql("setup_pg_stat_statements"))


@dataclass(frozen=True)
class SetupRoles:
    """Names used by the setup SQL; the defaults are the ones the documentation and the fleet use."""

    monitor_role: str = "radar_monitor"
    explain_role: str = "radar_explain"
    helper: str = "radar.explain_generic"
    pin_role: str = "radar_pinner"
    """The NOLOGIN role plan pins are written as (``--pins``): hint_plan.hints only."""

    @property
    def helper_schema(self) -> str:
        return self.helper.split(".", 1)[0]

    @property
    def helper_function(self) -> str:
        return self.helper.split(".", 1)[1]

    def check(self) -> None:
        named = (
            ("monitor role", self.monitor_role),
            ("explain role", self.explain_role),
            ("pin role", self.pin_role),
        )
        for label, name in named:
            if not _NAME.match(name):
                raise SetupSqlError(f"{label} {name!r} must be a plain SQL name (letters, digits, '_')")
        parts = self.helper.split(".")
        if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
            raise SetupSqlError(f"helper {self.helper!r} must be 'schema.function' with plain SQL names")
        if self.monitor_role == self.explain_role:
            raise SetupSqlError("the monitor role and the explain role must be two different roles")
        if self.pin_role in (self.monitor_role, self.explain_role):
            raise SetupSqlError("the pin role must be a role of its own (not the monitor or explain role)")


@dataclass(frozen=True)
class SetupStep:
    """One setup text: where it runs (``None`` = once per server, in any database) and its SQL."""

    name: str
    database: str | None
    sql: str


def quote_ident(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A single-quoted SQL string literal (standard_conforming_strings on)."""
    return "'" + text.replace("'", "''") + "'"


def _render(name: str, roles: SetupRoles) -> str:
    values = {
        "monitor_role": quote_ident(roles.monitor_role),
        "monitor_literal": quote_literal(roles.monitor_role),
        "monitor_name": roles.monitor_role,
        "explain_role": quote_ident(roles.explain_role),
        "explain_literal": quote_literal(roles.explain_role),
        "helper_schema": quote_ident(roles.helper_schema),
        "helper_schema_literal": quote_literal(roles.helper_schema),
        "helper_function": quote_ident(roles.helper_function),
        "pin_role": quote_ident(roles.pin_role),
        "pin_literal": quote_literal(roles.pin_role),
    }
    # Only the known {placeholders} are replaced: the SQL's own braces (JSON in comments) stay as they are.
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), load_sql(name))


def setup_steps(
    server_version_num: int = DEFAULT_SERVER_VERSION_NUM,
    databases: Sequence[str] = ("postgres",),
    roles: SetupRoles | None = None,
    *,
    pins: bool = False,
) -> list[SetupStep]:
    """Every setup step for one server of that version, in the order to run them; ``pins``: also the pin
    role (PostgreSQL 16+: the monitoring login may SET ROLE to it without inheriting its privileges) and its
    grants on pg_hint_plan's hint table in each database."""
    roles = roles or SetupRoles()
    roles.check()
    if server_version_num < MIN_SERVER_VERSION_NUM:
        raise SetupSqlError(
            f"server_version_num {server_version_num}: the setup SQL covers PostgreSQL 13 and later"
        )
    if not databases:
        raise SetupSqlError("name at least one database to install the EXPLAIN helper in")
    for db in databases:
        if not db or "\n" in db:
            raise SetupSqlError(f"database name {db!r} is not usable")
    steps = [
        SetupStep("monitor role", None, _render("setup_monitor_role", roles)),
        SetupStep("explain role", None, _render("setup_explain_role", roles)),
    ]
    if server_version_num >= SET_ON_PARAMETER_MIN_VERSION_NUM:
        steps.append(SetupStep("monitor parameters", None, _render("setup_monitor_parameters_15", roles)))
    if server_version_num >= READ_ALL_DATA_MIN_VERSION_NUM:
        steps.append(SetupStep("explain read access", None, _render("setup_explain_read_14", roles)))
    for db in dict.fromkeys(databases):
        if server_version_num < READ_ALL_DATA_MIN_VERSION_NUM:
            steps.append(SetupStep("explain read access", db, _render("setup_explain_read_13", roles)))
        if server_version_num >= GENERIC_PLAN_MIN_VERSION_NUM:
            steps.append(SetupStep("explain helper", db, _render("setup_explain_helper_16", roles)))
    if pins:
        if server_version_num < PIN_ROLE_MIN_VERSION_NUM:
            raise SetupSqlError(
                f"server_version_num {server_version_num}: the pin role needs PostgreSQL 16 (GRANT ... WITH "
                "INHERIT FALSE: the monitoring login must not hold its write privilege)"
            )
        steps.append(SetupStep("pin role", None, _render("setup_pin_role_16", roles)))
        for db in dict.fromkeys(databases):
            steps.append(SetupStep("pin grants", db, _render("setup_pin_grants", roles)))
    return steps


def setup_script(
    steps: Sequence[SetupStep],
    server_version_num: int = DEFAULT_SERVER_VERSION_NUM,
    notes: Sequence[str] = (),
) -> str:
    """One psql script: server-wide steps first, then ``\\connect`` to each database for its steps;
    ``notes`` (what --dsn read) become header comments."""
    out = [
        f"-- pg-regression-radar setup SQL for server_version_num {server_version_num}.",
        "-- Run as a superuser (or your service's admin role): psql -v ON_ERROR_STOP=1 -f <this file>",
        *(f"-- {note}" for note in notes),
    ]
    if server_version_num < GENERIC_PLAN_MIN_VERSION_NUM:
        out.append(
            "-- No EXPLAIN helper: EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16; plans come from "
            "pg_store_plans / auto_explain."
        )
    current: str | None = None
    for step in steps:
        if step.database is not None and step.database != current:
            current = step.database
            out += ["", f"\\connect {quote_ident(step.database)}"]
        out += [
            "",
            f"-- step: {step.name}" + (f" (database {step.database})" if step.database else ""),
            step.sql.rstrip(),
        ]
    return "\n".join(out) + "\n"
