"""Plan capture sessions that run no one's code with privileges.

Planning a captured query text evaluates functions its owner wrote (IMMUTABLE ones with constant
arguments are folded, STABLE ones are run for estimates), with the privileges of the role running
EXPLAIN. So, like pganalyze and New Relic do:

* The capture connects with the plain monitoring login (``radar_monitor``: ``pg_monitor``, no superuser)
  and only with startup options that login may set. What it may set beyond user-settable parameters
  (``pg_stat_statements.track``, ``auto_explain.log_min_duration``: superuser unless ``GRANT SET ON
  PARAMETER`` [PG15+]) is learned once per instance, from the server's ``is_superuser`` report and
  ``has_parameter_privilege``, never by a refused connection (which the server would log as FATAL).
* Each EXPLAIN runs in its own transaction begun READ ONLY, with ``statement_timeout`` and
  ``lock_timeout`` re-asserted (a planned function may have changed session defaults with
  ``set_config(..., false)``), and is always rolled back (which also undoes such a ``set_config``).
* The EXPLAIN runs as a role without write or server-program privileges: by default inside the SECURITY
  DEFINER helper ``radar.explain_generic`` owned by the NOLOGIN ``radar_explain`` (a function cannot SET
  ROLE / RESET ROLE out of a security-definer frame). Before the first EXPLAIN of a database that role
  is checked, and a privileged one is refused (``unsafe_allow_privileged_explain`` overrides, loudly).
  ``explain_mode = "session"`` EXPLAINs as the session role itself, under the same check. A ``SET ROLE``
  mode is deliberately absent: a planned function could ``RESET ROLE`` back to the login.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from jobs.plans.config import EXPLAIN_MODE_HELPER, EXPLAIN_MODE_SESSION
from jobs.plans.generic import ExplainFailed, explain_generic, explain_via_helper
from jobs.redaction import redact_dsn
from jobs.sqlfiles import load_sql

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from jobs.plans.config import PlanCaptureConfig


# Superuser-only settings the capture wants for its own sessions, with the value it wants: tracking off
# (its statements add no pg_stat_statements rows), auto_explain off (its EXPLAINs are not logged).
SUPERUSER_ONLY_SETTINGS: dict[str, str] = {
    "pg_stat_statements.track": "none",
    "auto_explain.log_min_duration": "-1",
}
SET_ON_PARAMETER_MIN_VERSION_NUM = 150000
SETUP_HINT = "run `radar setup-sql` and apply its SQL"


def user_settings(config: PlanCaptureConfig) -> dict[str, str]:
    """Startup settings any role may set: read-only, timeouts, pg_store_plans' JSON format."""
    return {
        "default_transaction_read_only": "on",
        "statement_timeout": str(int(config.statement_timeout_ms)),
        "lock_timeout": str(int(config.lock_timeout_ms)),
        "idle_in_transaction_session_timeout": str(int(config.idle_in_transaction_timeout_ms)),
        # PGC_USERSET in pg_store_plans (and a harmless placeholder where it is not loaded).
        "pg_store_plans.plan_format": "json",
    }


def startup_options(settings: Mapping[str, str]) -> str:
    """libpq ``options``: ``-c name=value`` each (values are numbers and words: nothing to escape)."""
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


@dataclass(frozen=True)
class LoginAccess:
    """What the capture login may set for its own sessions, learned once per instance."""

    user: str
    is_superuser: bool
    may_set: frozenset[str]

    def settings(self) -> dict[str, str]:
        return {k: v for k, v in SUPERUSER_ONLY_SETTINGS.items() if k in self.may_set}


_ACCESS: dict[tuple[str, str], LoginAccess] = {}


def _access_key(dsn: str, instance: str | None) -> tuple[str, str]:
    return (instance or "", redact_dsn(dsn))


def forget_login_access() -> None:
    """Forget what every login may set (tests; a process learns it again at its next capture)."""
    _ACCESS.clear()


def _connect(
    dsn: str, config: PlanCaptureConfig, settings: Mapping[str, str], dbname: str | None
) -> psycopg.Connection[Any]:
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": config.connect_timeout_s,
        "options": startup_options(settings),
        "application_name": config.application_name,
        "client_encoding": "UTF8",  # texts go through libpq as UTF-8 bytes
    }
    if dbname is not None:
        kwargs["dbname"] = dbname
    return psycopg.connect(dsn, **kwargs)


def learn_login_access(conn: psycopg.Connection[Any]) -> LoginAccess:
    """Superuser from the server's ParameterStatus (no query); else GRANT SET ON PARAMETER [PG15+]."""
    user = conn.info.user
    if conn.info.parameter_status("is_superuser") == "on":
        return LoginAccess(user, True, frozenset(SUPERUSER_ONLY_SETTINGS))
    if conn.info.server_version < SET_ON_PARAMETER_MIN_VERSION_NUM:
        return LoginAccess(user, False, frozenset())
    rows = conn.execute(
        load_sql("plans_parameter_privileges"), {"names": list(SUPERUSER_ONLY_SETTINGS)}
    ).fetchall()
    return LoginAccess(user, False, frozenset(name for name, allowed in rows if allowed))


@contextmanager
def open_capture_session(
    dsn: str, config: PlanCaptureConfig, dbname: str | None = None, *, instance: str | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """A read-only session with timeouts, and tracking / auto_explain off where the login may say so.

    Never connects with an option the login may not set: the first session of an instance connects with
    user-settable options only, learns what else it may set and sets it; later ones pass it at startup.
    """
    key = _access_key(dsn, instance)
    access = _ACCESS.get(key)
    conn: psycopg.Connection[Any] | None = None
    if access is not None:
        try:
            conn = _connect(dsn, config, {**user_settings(config), **access.settings()}, dbname)
        except psycopg.OperationalError as exc:
            if "permission denied to set parameter" not in str(exc):
                raise
            _ACCESS.pop(key, None)  # revoked since it was learned: learn again, plainly
            access = None
    if conn is None:
        conn = _connect(dsn, config, user_settings(config), dbname)
        try:
            access = learn_login_access(conn)
            if access.settings():
                names, values = zip(*access.settings().items(), strict=True)
                conn.execute(
                    load_sql("plans_session_settings"), {"names": list(names), "values": list(values)}
                )
        except BaseException:
            conn.close()
            raise
        _ACCESS[key] = access
    with conn:
        yield conn


# ---------------------------------------------------------------------------------------------------------
# Who EXPLAINs run as, and whether that is allowed


@dataclass(frozen=True)
class RoleFacts:
    """What a role could do if a function planned in its name did it (see plans_role_privileges.sql)."""

    role: str
    superuser: bool
    createrole: bool
    dangerous_roles: tuple[str, ...]
    writable_relation: str | None


def privilege_problems(facts: RoleFacts) -> list[str]:
    """Why EXPLAINing untrusted texts as this role is unsafe; empty when it is not."""
    if facts.superuser:  # a superuser is "member" of every role: saying more would only blur it
        return ["is a superuser"]
    problems = []
    if facts.createrole:
        problems.append("has CREATEROLE")
    problems += [f"is a member of {name}" for name in facts.dangerous_roles]
    if facts.writable_relation:
        problems.append(f"may write {facts.writable_relation} (and maybe more)")
    return problems


@dataclass(frozen=True)
class HelperInfo:
    helper: str
    owner: str
    security_definer: bool
    executable: bool


@dataclass(frozen=True)
class ExplainTarget:
    """How generic plans are taken in one database: through what, as whom, or why not at all."""

    database: str
    mode: str
    role: str | None
    refused: str | None


def helper_signature(helper: str) -> str:
    return f"{helper}(text,text)"


def fetch_role_facts(conn: psycopg.Connection[Any], role: str) -> RoleFacts | None:
    row = conn.execute(load_sql("plans_role_privileges"), {"role": role}).fetchone()
    if row is None:
        return None
    name, superuser, createrole, dangerous, writable = row
    return RoleFacts(name, bool(superuser), bool(createrole), tuple(dangerous or ()), writable)


def fetch_helper_info(conn: psycopg.Connection[Any], helper: str) -> HelperInfo | None:
    schema, _, function = helper.partition(".")
    row = conn.execute(load_sql("plans_helper_info"), {"schema": schema, "function": function}).fetchone()
    if row is None:
        return None
    return HelperInfo(str(row[0]), str(row[1]), bool(row[2]), bool(row[3]))


def decide_explain_target(
    database: str,
    config: PlanCaptureConfig,
    session: RoleFacts,
    helper: HelperInfo | None,
    owner: RoleFacts | None,
) -> ExplainTarget:
    """Pure: helper (checked owner) by default, the session role only in session mode or when overridden."""
    where = f"database {database}"
    override = config.unsafe_allow_privileged_explain
    session_problems = privilege_problems(session)
    if config.explain_mode == EXPLAIN_MODE_HELPER:
        name = helper_signature(config.explain_helper)
        if helper is None:
            if override:
                return ExplainTarget(database, EXPLAIN_MODE_SESSION, session.role, None)
            also = (
                f"; the session role {session.role} {', '.join(session_problems)}"
                " and is never used to EXPLAIN"
                if session_problems
                else ""
            )
            return ExplainTarget(
                database,
                EXPLAIN_MODE_HELPER,
                None,
                f"{where}: no EXPLAIN helper {name}: generic plans are taken only through it (a SECURITY "
                f"DEFINER function owned by a read-only role){also}; {SETUP_HINT} for this database",
            )
        if not helper.security_definer:
            return ExplainTarget(
                database,
                EXPLAIN_MODE_HELPER,
                None,
                f"{where}: {helper.helper} is not SECURITY DEFINER, so it would EXPLAIN as the caller; "
                f"{SETUP_HINT} to recreate it",
            )
        if not helper.executable:
            return ExplainTarget(
                database,
                EXPLAIN_MODE_HELPER,
                None,
                f"{where}: role {session.role} may not EXECUTE {helper.helper}; connect as the monitoring "
                f"role, or {SETUP_HINT} with --monitor-role {session.role}",
            )
        owner_problems = privilege_problems(owner) if owner is not None else ["does not exist"]
        if owner_problems and not override:
            return ExplainTarget(
                database,
                EXPLAIN_MODE_HELPER,
                helper.owner,
                f"{where}: {helper.helper} is owned by {helper.owner}, which {', '.join(owner_problems)}: "
                f"functions in captured texts would run with those privileges; {SETUP_HINT} to recreate "
                "it owned by the read-only explain role",
            )
        return ExplainTarget(database, EXPLAIN_MODE_HELPER, helper.owner, None)
    if session_problems and not override:
        return ExplainTarget(
            database,
            EXPLAIN_MODE_SESSION,
            session.role,
            f"{where}: the session role {session.role} {', '.join(session_problems)}: functions in captured "
            f"texts would run with those privileges; use explain_mode = 'helper' ({SETUP_HINT})",
        )
    return ExplainTarget(database, EXPLAIN_MODE_SESSION, session.role, None)


def explain_target(conn: psycopg.Connection[Any], config: PlanCaptureConfig) -> ExplainTarget:
    """Check, once per database session, the role generic EXPLAINs would run as."""
    database = conn.info.dbname
    session = fetch_role_facts(conn, conn.info.user)
    if session is None:  # the login always exists; a pooler may report another name
        session = RoleFacts(conn.info.user, False, False, (), None)
    helper = owner = None
    if config.explain_mode == EXPLAIN_MODE_HELPER:
        helper = fetch_helper_info(conn, config.explain_helper)
        if helper is not None:
            owner = fetch_role_facts(conn, helper.owner)
    return decide_explain_target(database, config, session, helper, owner)


# ---------------------------------------------------------------------------------------------------------
# One EXPLAIN: a READ ONLY transaction of its own, always rolled back


def begin_sql(config: PlanCaptureConfig) -> sql.Composed:
    return sql.SQL(load_sql("plans_explain_begin")).format(
        statement_timeout=sql.Literal(int(config.statement_timeout_ms)),
        lock_timeout=sql.Literal(int(config.lock_timeout_ms)),
        idle_timeout=sql.Literal(int(config.idle_in_transaction_timeout_ms)),
    )


@contextmanager
def read_only_transaction(conn: psycopg.Connection[Any], config: PlanCaptureConfig) -> Iterator[None]:
    """BEGIN READ ONLY with the safety settings re-asserted; ROLLBACK whatever happens inside."""
    conn.execute(begin_sql(config))
    try:
        yield
    finally:
        try:
            conn.execute(load_sql("plans_explain_rollback"))
        except psycopg.Error:
            conn.close()  # a session that cannot roll back is not used again


@contextmanager
def backend_watchdog(
    dsn: str, conn: psycopg.Connection[Any], config: PlanCaptureConfig
) -> Iterator[list[bool]]:
    """Terminate ``conn``'s backend if one EXPLAIN outlives statement_timeout + watchdog_grace_ms.

    A cancellation (what statement_timeout sends) can be caught by a plpgsql function; termination cannot.
    The watchdog connects as the same login (allowed to signal its own backends). Yields a flag list that
    holds True once it fired.
    """
    fired: list[bool] = []
    pid, dbname = conn.info.backend_pid, conn.info.dbname

    def fire() -> None:
        fired.append(True)
        try:
            with _connect(dsn, config, user_settings(config), dbname) as killer:
                killer.execute(load_sql("plans_terminate_backend"), {"pid": pid})
        except psycopg.Error as exc:
            log.warning("plan capture watchdog could not terminate backend %s: %s", pid, exc)

    after_s = (config.statement_timeout_ms + config.watchdog_grace_ms) / 1000.0
    timer = threading.Timer(after_s, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def explain_in_target(
    conn: psycopg.Connection[Any],
    target: ExplainTarget,
    config: PlanCaptureConfig,
    statement: str,
    search_path: str | None,
    *,
    dsn: str | None = None,
) -> list[Any]:
    """The generic plan of one checked statement, taken the way ``target`` allows (never if refused).

    With ``dsn``, a watchdog terminates the backend of an EXPLAIN that survives its statement_timeout.
    """
    if target.refused is not None:
        raise PermissionError(target.refused)
    with contextlib.ExitStack() as stack:
        fired = stack.enter_context(backend_watchdog(dsn, conn, config)) if dsn is not None else []
        try:
            with read_only_transaction(conn, config):
                if target.mode == EXPLAIN_MODE_HELPER:
                    return explain_via_helper(conn, config.explain_helper, statement, search_path)
                if search_path:
                    conn.execute(load_sql("plans_session_search_path"), {"search_path": search_path})
                return explain_generic(conn, statement)
        except psycopg.Error:
            if fired:
                raise ExplainFailed(
                    f"the EXPLAIN outlived statement_timeout ({config.statement_timeout_ms} ms; a planned "
                    "function caught the cancellation): its session was terminated"
                ) from None
            raise


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def search_path_for(template: str, rolname: str | None) -> str:
    """The statement owner's default search_path: ``$user`` is the role that ran the statement."""
    if rolname is None:
        return template
    return template.replace('"$user"', quote_ident(rolname)).replace("$user", quote_ident(rolname))
