"""The I/O edge of scenario suites (issue 12): one session per target database that runs a scenario's
statements, times its measured part and reads what the server counted and how much memory it took.

What one ``TargetSession`` measures (the engine, jobs/gate/suite.py, decides how often and compares):

* wallclock: client side, ``perf_counter_ns`` around send, execute and fetching every row of each
  measured statement (between the ``@A`` and ``@B`` markers), summed over ``repeat``; statements outside
  the markers run untimed.
* counters: pg_stat_statements summed over the queryids of the measured explainable statements (from
  ``EXPLAIN (VERBOSE, FORMAT JSON)``'s "Query Identifier", never ANALYZE: EXPLAIN executes nothing):
  calls, shared blocks hit + read, read, temp blocks written, WAL bytes, planning and execution time.
  None when the extension is missing, its tracking is off or compute_query_id is off (the reason is in
  ``ServerFacts.statements_note``). Every execution of such a statement counts, the memory execution's
  normal run too: read the counters around ``execute`` calls.
* memory: (a) pg_backend_memory_contexts (14+): each row-returning measured SELECT runs once as a NO
  SCROLL cursor in a transaction of its own, fetched to its end; the sum of ``total_bytes`` read while the
  portal is still open (the executor's sort and hash memory is alive until the portal closes) minus the
  sum read just before; the maximum over the statements. (b) when the server is on this host: the
  backend's and its parallel workers' /proc/<pid>/smaps_rollup polled every ``POLL_INTERVAL_S`` during
  one normal execution of the benchmark (writes too); the backend's peak of ``Anonymous`` memory
  (private heap: palloc'd blocks malloc'd by the backend) minus its reading before (``rss``), and the
  peak of its parallel workers' together (``worker_rss``: the design's memory of the worker processes,
  with its own threshold). ``Private_*`` is not used: a shared-buffer
  page only this backend has touched counts as private there, so a sequential scan grows it with no
  allocation at all (seen on PostgreSQL 18.6: +3 MB Private_Dirty, +0 Anonymous for a 300,000-row scan).

Execution modes: ``Scenario.prepared`` runs the benchmark statements as server-side prepared statements
(psycopg ``prepare=True``; psycopg ignores it while the connection's ``prepare_threshold`` is None, so the
session sets a threshold no statement reaches for prepared scenarios and None otherwise); otherwise every
statement is parsed and planned with its parameters (``prepare=False``). ``Scenario.settings`` and
``plan_cache_mode`` are set with ``set_config(name, value, false)`` at ``start_scenario`` and reset to the
session defaults at ``end_scenario``.

Failures: on the baseline every failure raises ``GateError`` naming the scenario, its file and the
statement's line; on the candidate ``CandidateFailure`` (the engine marks the scenario failed). A failure
inside a transaction is rolled back (and a broken connection reopened) so the session stays usable.
Every message is scrubbed of the DSN's secrets.

A scenario in the Python form (``Scenario.python``, loaded only from an operator-given path: it runs the
operator's code) is run through its callables ``init(conn)``, ``before(conn, params)`` and
``benchmark(conn, params, mark)``; ``mark("A")`` / ``mark("B")`` bound the timed part. It has no
statements to EXPLAIN, so no counters and no memory-context reading.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field, replace
from functools import cache
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import psycopg
from pglast import ast
from pglast.parser import ParseError
from pglast.parser import parse_sql as parse_sql_raw
from psycopg import RawCursor
from psycopg.pq import TransactionStatus

from jobs.gate.config import GateConfig, GateError
from jobs.gate.scenario import Scenario, ScenarioStatement, ScenarioSuite
from jobs.gate.workload import placeholder_numbers
from jobs.redaction import redact_dsn, scrub
from jobs.sqlfiles import load_sql

Conn = psycopg.Connection[Any]
BASELINE = "baseline"

# The settings ServerFacts reports (those absent on a server's version are left out).
FACT_SETTINGS: tuple[str, ...] = (
    "default_statistics_target",
    "effective_cache_size",
    "effective_io_concurrency",
    "hash_mem_multiplier",
    "huge_pages",
    "io_method",
    "jit",
    "maintenance_work_mem",
    "max_parallel_workers",
    "max_parallel_workers_per_gather",
    "plan_cache_mode",
    "random_page_cost",
    "seq_page_cost",
    "shared_buffers",
    "work_mem",
)
# /proc smaps_rollup polling of the backend and its parallel workers during the memory execution.
POLL_INTERVAL_S = 0.002
# The smaps_rollup field whose peak is the process's memory (kB in the file, bytes in the reading).
SMAPS_FIELD = "Anonymous"
# A prepared scenario's connection prepares only on prepare=True: a threshold no statement reaches.
_NEVER_AUTO_PREPARE = 2**31 - 1


class CandidateFailure(RuntimeError):
    """A statement failed on the candidate (the message is scrubbed of the DSN)."""


@dataclass(frozen=True)
class ServerFacts:
    role: str  # "baseline" / "candidate" / "calibration"
    version: str  # version()
    version_num: int  # server_version_num
    system_identifier: str | None  # pg_control_system() (None when not readable)
    address: str  # inet_server_addr():port, or the socket folder:port over a Unix socket
    settings: tuple[tuple[str, str], ...]  # FACT_SETTINGS, as the session saw them after connecting
    statements_note: str | None  # None when pg_stat_statements gives the per-execution counters
    track_planning: bool
    memory_contexts: bool  # pg_backend_memory_contexts readable (PG14+)
    local_proc: bool  # /proc/<backend pid>/smaps_rollup readable: the server is on this host

    def same_server(self, other: ServerFacts) -> bool:
        """The same PostgreSQL instance: the same address, and the same system identifier when both sides
        could read it (a physical replica shares the identifier but not the address)."""
        if self.address != other.address:
            return False
        if self.system_identifier is None or other.system_identifier is None:
            return True
        return self.system_identifier == other.system_identifier


@dataclass(frozen=True)
class StatementCounters:
    """pg_stat_statements summed over the measured statements' queryids (cumulative; ``minus`` for deltas)."""

    calls: int
    shared_blocks: float  # hit + read
    shared_blocks_read: float
    temp_blocks_written: float
    wal_bytes: float
    plan_ms: float
    plans: int
    exec_ms: float

    def minus(self, earlier: StatementCounters) -> StatementCounters:
        return StatementCounters(
            calls=self.calls - earlier.calls,
            shared_blocks=self.shared_blocks - earlier.shared_blocks,
            shared_blocks_read=self.shared_blocks_read - earlier.shared_blocks_read,
            temp_blocks_written=self.temp_blocks_written - earlier.temp_blocks_written,
            wal_bytes=self.wal_bytes - earlier.wal_bytes,
            plan_ms=self.plan_ms - earlier.plan_ms,
            plans=self.plans - earlier.plans,
            exec_ms=self.exec_ms - earlier.exec_ms,
        )


@dataclass(frozen=True)
class MemoryReading:
    context_bytes: float | None
    """pg_backend_memory_contexts growth with the cursor open (max over statements): the backend's own."""
    rss_bytes: float | None
    """Peak Anonymous memory (smaps_rollup) of the backend during one execution, minus its reading before."""
    note: str | None
    worker_bytes: float | None = None
    """Peak Anonymous memory of the backend's parallel workers together (0 when none ran); the design's
    memory of the worker processes, with its own threshold."""


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The ``Key: <n> kB`` lines of /proc/<pid>/smaps_rollup, in bytes (the header line is skipped)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            unit = parts[2] if len(parts) > 2 else ""
            out[parts[0][:-1]] = int(parts[1]) * (1024 if unit == "kB" else 1)
    return out


def _smaps_bytes(pid: int) -> int | None:
    """SMAPS_FIELD of one process in bytes; None when the process is gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    return parse_smaps_rollup(text).get(SMAPS_FIELD)


@cache
def _needed_params(sql: str) -> int:
    """How many leading parameters a statement takes: its highest ``$n`` (0 when it has none)."""
    numbers = placeholder_numbers(sql)
    return max(numbers) if numbers else 0


@cache
def _cursor_capable(sql: str) -> bool:
    """A plain SELECT / VALUES / TABLE (no data-modifying WITH): what DECLARE CURSOR accepts."""
    try:
        stmts = parse_sql_raw(sql)
    except ParseError:
        return False
    if len(stmts) != 1 or not isinstance(stmts[0].stmt, ast.SelectStmt):
        return False
    with_clause = stmts[0].stmt.withClause
    for cte in getattr(with_clause, "ctes", None) or ():
        if not isinstance(getattr(cte, "ctequery", None), ast.SelectStmt):
            return False
    return True


def _loopback(address: str | None) -> bool:
    if address is None:
        return True  # a Unix socket: the server is on this host
    try:
        return ip_address(address).is_loopback
    except ValueError:
        return False


@dataclass
class _Poller:
    """Polls SMAPS_FIELD of a backend and its parallel workers (found through a monitor session)."""

    backend_pid: int
    monitor: Conn
    peak: int = 0
    """The backend's own peak."""
    worker_peak: int = 0
    """The parallel workers' peak, summed over the workers alive at one poll."""
    error: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        workers: list[int] = []
        rounds = 0
        while not self.stop.is_set():
            if self.error is None and rounds % 5 == 0:  # workers through SQL every ~10 ms, /proc every ~2 ms
                try:
                    rows = self.monitor.execute(load_sql("gate_parallel_workers"), (self.backend_pid,))
                    workers = [int(r[0]) for r in rows.fetchall()]
                except psycopg.Error as exc:  # the backend alone from now on
                    self.error = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    workers = []
            rounds += 1
            self.peak = max(self.peak, _smaps_bytes(self.backend_pid) or 0)
            self.worker_peak = max(self.worker_peak, sum(_smaps_bytes(pid) or 0 for pid in workers))
            self.stop.wait(POLL_INTERVAL_S)


class TargetSession:
    """One target database (the baseline, the candidate or the calibration copy) of a scenario run."""

    def __init__(self, role: str, dsn: str, config: GateConfig) -> None:
        self.role, self.dsn, self.config = role, dsn, config
        self.plans: dict[str, list[Any]] = {}
        self._queryids: dict[str, list[int]] = {}
        self._initialized: set[str] = set()
        self._active: Scenario | None = None
        self._applied: list[str] = []
        self.conn = self._open()
        self._facts = self._read_facts()

    # -- connection -------------------------------------------------------------------------------------
    def _open(self) -> Conn:
        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                cursor_factory=RawCursor,  # $1 placeholders, sent as typed server-side parameters
                connect_timeout=self.config.connect_timeout_s,
                application_name=f"pg-regression-radar gate ({self.role})",
                options=f"-c statement_timeout={int(self.config.statement_timeout_ms)}",
                prepare_threshold=None,  # nothing prepared unless a prepared scenario asks
            )
        except psycopg.Error as exc:
            message = scrub(str(exc).strip(), self.dsn)
            raise GateError(f"{self.role}: cannot connect to {redact_dsn(self.dsn)}: {message}") from None

    def reconnect(self) -> None:
        """A fresh backend; the active scenario's settings are applied again."""
        self.conn.close()
        self.conn = self._open()
        if self._active is not None:
            self._apply_settings(self._active)

    def close(self) -> None:
        self.conn.close()

    def _message(self, exc: BaseException) -> str:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return scrub(first, self.dsn)

    def _failure(
        self, scenario: str, source: str, line: int | None, what: str, exc: BaseException
    ) -> Exception:
        where = f"{source}:{line}" if line is not None else source
        message = f"scenario {scenario!r} ({where}): {what} fails on the {self.role}: {self._message(exc)}"
        return GateError(message) if self.role == BASELINE else CandidateFailure(message)

    def _recover(self) -> None:
        """After a failed statement: roll back an open transaction, reopen a broken connection."""
        if self.conn.closed or self.conn.info.transaction_status == TransactionStatus.UNKNOWN:
            with contextlib.suppress(GateError):  # the next statement reports it
                self.reconnect()
            return
        if self.conn.info.transaction_status != TransactionStatus.IDLE:
            try:
                self.conn.execute(load_sql("gate_rollback"))
            except psycopg.Error:
                with contextlib.suppress(GateError):
                    self.reconnect()

    def _run(self, sql: str, params: tuple[object, ...], prepare: bool) -> None:
        """One statement: its leading ``$1..$m`` parameters bound, every row fetched."""
        needed = _needed_params(sql)
        if needed > len(params):
            raise psycopg.ProgrammingError(
                f"the statement uses ${needed} but {len(params)} parameter(s) are drawn"
            )
        cursor = self.conn.execute(sql, params[:needed] if needed else None, prepare=prepare)
        while True:
            if cursor.description is not None:
                cursor.fetchall()
            if not cursor.nextset():
                break

    def _guarded(self, scenario: Scenario, line: int | None, what: str) -> _Guard:
        return _Guard(self, scenario, line, what)

    # -- facts --------------------------------------------------------------------------------------------
    def _read_facts(self) -> ServerFacts:
        try:
            version, version_num, addr, port, planning, pid = self.conn.execute(
                load_sql("gate_server_facts")
            ).fetchone()
            settings = tuple(
                (str(n), str(v))
                for n, v in self.conn.execute(load_sql("gate_server_settings"), (list(FACT_SETTINGS),))
            )
        except psycopg.Error as exc:
            raise GateError(f"{self.role}: cannot read the server facts: {self._message(exc)}") from None
        try:
            system_identifier = self.conn.execute(load_sql("gate_system_identifier")).fetchone()[0]
        except psycopg.Error:
            system_identifier = None
        address = f"{addr}:{port}" if addr is not None else f"{self.conn.info.host}:{port}"
        return ServerFacts(
            role=self.role,
            version=str(version),
            version_num=int(version_num),
            system_identifier=None if system_identifier is None else str(system_identifier),
            address=address,
            settings=settings,
            statements_note=self._statements_note(),
            track_planning=planning == "on",
            memory_contexts=self._contexts_bytes() is not None,
            local_proc=_loopback(addr) and self._proc_readable(int(pid)),
        )

    def _statements_note(self) -> str | None:
        try:
            extversion, track, compute = self.conn.execute(load_sql("gate_statements_available")).fetchone()
        except psycopg.Error as exc:
            return f"pg_stat_statements unreadable on the {self.role}: {self._message(exc)}"
        if extversion is None:
            return f"pg_stat_statements is not installed on the {self.role}"
        if track in (None, "none"):
            return f"pg_stat_statements.track is {track or 'unset (library not loaded)'} on the {self.role}"
        if compute == "off":
            return f"compute_query_id is off on the {self.role}"
        return None

    def _contexts_bytes(self) -> float | None:
        try:
            value = self.conn.execute(load_sql("gate_memory_contexts")).fetchone()[0]
        except psycopg.Error:
            self._recover()
            return None
        return None if value is None else float(value)

    @staticmethod
    def _proc_readable(pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"postgres" in cmdline and _smaps_bytes(pid) is not None

    def facts(self) -> ServerFacts:
        return self._facts

    # -- scenario lifecycle ------------------------------------------------------------------------------
    def run_shared(self, suite: ScenarioSuite) -> None:
        """The suite's shared section (schema, data), once per database, in order."""
        for index, sql in enumerate(suite.shared, start=1):
            try:
                self._run(sql, (), prepare=False)
            except psycopg.Error as exc:
                self._recover()
                where = f"{suite.source}: shared statement {index}"
                message = f"{where} fails on the {self.role}: {self._message(exc)}"
                raise (GateError(message) if self.role == BASELINE else CandidateFailure(message)) from None

    def _apply_settings(self, scenario: Scenario) -> None:
        pairs = list(scenario.settings)
        if scenario.plan_cache_mode is not None:
            pairs.append(("plan_cache_mode", scenario.plan_cache_mode))
        self.conn.prepare_threshold = _NEVER_AUTO_PREPARE if scenario.prepared else None
        for name, value in pairs:
            with self._guarded(scenario, scenario.line, f"setting {name} = {value!r}"):
                self.conn.execute(load_sql("gate_set_config"), (name, str(value)))
            if name not in self._applied:
                self._applied.append(name)

    def start_scenario(self, scenario: Scenario, rng_params: tuple[object, ...]) -> None:
        """Session settings and plan_cache_mode, init() once per database, then the plans and queryids of the
        measured explainable statements with ``rng_params`` bound (EXPLAIN without ANALYZE)."""
        self._active = scenario
        self._apply_settings(scenario)
        if scenario.name not in self._initialized:
            init = getattr(scenario.python, "init", None)
            if init is not None:
                with self._guarded(scenario, scenario.line, "init()"):
                    init(self.conn)
            for index, sql in enumerate(scenario.init, start=1):
                with self._guarded(scenario, scenario.line, f"init statement {index}"):
                    self._run(sql, rng_params, prepare=False)
            self._initialized.add(scenario.name)
        plans: list[Any] = []
        queryids: list[int] = []
        for statement in scenario.benchmark:
            if not (statement.measured and statement.explainable):
                continue
            with self._guarded(scenario, statement.line, "EXPLAIN of the statement"):
                needed = _needed_params(statement.sql)
                if needed > len(rng_params):
                    raise psycopg.ProgrammingError(
                        f"the statement uses ${needed} but {len(rng_params)} parameter(s) are drawn"
                    )
                text = load_sql("gate_explain").rstrip() + "\n" + statement.sql
                row = self.conn.execute(text, rng_params[:needed] if needed else None).fetchone()
            document = row[0] if row else None
            if isinstance(document, str):
                document = json.loads(document)
            plans.append(document)
            top = document[0] if isinstance(document, list) and document else {}
            if isinstance(top, dict) and top.get("Query Identifier") is not None:
                queryid = int(top["Query Identifier"])
                if queryid not in queryids:
                    queryids.append(queryid)
        self.plans[scenario.name] = plans
        self._queryids[scenario.name] = queryids

    def before(self, scenario: Scenario, params: tuple[object, ...]) -> None:
        """The untimed before() section, with the measurement's parameters."""
        hook = getattr(scenario.python, "before", None)
        if hook is not None:
            with self._guarded(scenario, scenario.line, "before()"):
                hook(self.conn, params)
        for index, sql in enumerate(scenario.before, start=1):
            with self._guarded(scenario, scenario.line, f"before statement {index}"):
                self._run(sql, params, prepare=False)

    def end_scenario(self, scenario: Scenario) -> None:
        """Reset the scenario's session settings to the session defaults."""
        for name in self._applied:
            with self._guarded(scenario, scenario.line, f"resetting {name}"):
                self.conn.execute(load_sql("gate_set_config"), (name, None))
        self._applied = []
        self.conn.prepare_threshold = None
        self._active = None

    # -- measuring ----------------------------------------------------------------------------------------
    def _statement(self, scenario: Scenario, statement: ScenarioStatement, params: tuple[object, ...]) -> int:
        """One benchmark statement; its ns when measured, else 0."""
        prepare = scenario.prepared and statement.explainable
        with self._guarded(scenario, statement.line, "the statement"):
            if not statement.measured:
                self._run(statement.sql, params, prepare)
                return 0
            started = time.perf_counter_ns()
            self._run(statement.sql, params, prepare)
            return time.perf_counter_ns() - started

    def execute(self, scenario: Scenario, params: tuple[object, ...]) -> int:
        """The benchmark once, its measured part ``repeat`` times; ns of the measured part(s)."""
        if scenario.python is not None:
            return self._execute_python(scenario, params)
        statements = scenario.benchmark
        measured = [i for i, s in enumerate(statements) if s.measured]
        if not measured:
            return 0
        first, last = measured[0], measured[-1]
        total = 0
        for statement in statements[:first]:
            self._statement(scenario, statement, params)
        for _ in range(max(1, scenario.repeat)):
            for statement in statements[first : last + 1]:
                total += self._statement(scenario, statement, params)
        for statement in statements[last + 1 :]:
            self._statement(scenario, statement, params)
        return total

    def _execute_python(self, scenario: Scenario, params: tuple[object, ...]) -> int:
        benchmark = getattr(scenario.python, "benchmark", None)
        if benchmark is None:
            raise GateError(
                f"scenario {scenario.name!r} ({scenario.source}): no benchmark(conn, params, mark)"
            )
        total, started = 0, None

        def mark(label: str) -> None:
            nonlocal total, started
            if label == "A":
                started = time.perf_counter_ns()
            elif label == "B" and started is not None:
                total += time.perf_counter_ns() - started
                started = None

        for _ in range(max(1, scenario.repeat)):
            with self._guarded(scenario, scenario.line, "benchmark()"):
                benchmark(self.conn, params, mark)
        if total == 0:
            # The scenario's own bug, whichever side runs it: no verdict, never a 0 ms measurement (it
            # ended in a ZeroDivisionError, exit 1 = WARN).
            raise GateError(
                f"scenario {scenario.name!r} ({scenario.source}): benchmark() never called mark('A') and "
                "then mark('B'): nothing was timed"
            )
        return total

    def counters(self, scenario: Scenario) -> StatementCounters | None:
        """pg_stat_statements summed over the measured statements' queryids; None when unavailable (the reason
        is then in ``facts().statements_note``)."""
        if self._facts.statements_note is not None:
            return None
        queryids = self._queryids.get(scenario.name)
        if not queryids:
            return None
        try:
            row = self.conn.execute(load_sql("gate_scenario_statements"), (queryids,)).fetchone()
        except psycopg.Error as exc:
            self._recover()
            note = f"pg_stat_statements unreadable on the {self.role}: {self._message(exc)}"
            self._facts = replace(self._facts, statements_note=note)
            return None
        calls, shared, read, temp, wal, plan_ms, plans, exec_ms = row
        return StatementCounters(
            int(calls), float(shared), float(read), float(temp), float(wal), float(plan_ms), int(plans),
            float(exec_ms),
        )  # fmt: skip

    def memory_execution(self, scenario: Scenario, params: tuple[object, ...]) -> MemoryReading:
        """One extra untimed execution that reads memory (see the module docstring)."""
        notes: list[str] = []
        rss_bytes = worker_bytes = None
        if not self._facts.local_proc:
            notes.append(f"the {self.role} server is not on this host: no /proc reading")
        else:
            # A fresh backend: glibc keeps memory a backend freed (its mmap and trim thresholds grow with
            # the first big free), so on a backend that already ran the statement the peak is no higher
            # than the reading before (seen on PostgreSQL 18.6: 0 bytes for a 12 MB sort).
            self.reconnect()
            rss_bytes, worker_bytes = self._rss_reading(scenario, params, notes)
        context_bytes = self._context_reading(scenario, params, notes)
        return MemoryReading(context_bytes, rss_bytes, "; ".join(notes) or None, worker_bytes)

    def _context_reading(
        self, scenario: Scenario, params: tuple[object, ...], notes: list[str]
    ) -> float | None:
        if not self._facts.memory_contexts:
            notes.append(f"pg_backend_memory_contexts is not readable on the {self.role}")
            return None
        candidates = [
            s for s in scenario.benchmark if s.measured and s.returns_rows and _cursor_capable(s.sql)
        ]
        if not candidates:
            notes.append("no measured plain SELECT to read memory contexts with")
            return None
        best: float | None = None
        for statement in candidates:
            needed = _needed_params(statement.sql)
            with self._guarded(scenario, statement.line, "the memory reading's cursor"):
                try:
                    self.conn.execute(load_sql("gate_begin"))
                    self.conn.execute(load_sql("gate_cursor_fraction"))
                    before = self.conn.execute(load_sql("gate_memory_contexts")).fetchone()[0]
                    declare = load_sql("gate_memory_declare").rstrip() + "\n" + statement.sql
                    self.conn.execute(declare, params[:needed] if needed else None, prepare=False)
                    self.conn.execute(load_sql("gate_memory_fetch")).fetchall()
                    after = self.conn.execute(load_sql("gate_memory_contexts")).fetchone()[0]
                finally:
                    if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
                        self.conn.execute(load_sql("gate_rollback"))
            growth = max(0.0, float(after) - float(before))
            best = growth if best is None else max(best, growth)
        return best

    def _rss_reading(
        self, scenario: Scenario, params: tuple[object, ...], notes: list[str]
    ) -> tuple[float | None, float | None]:
        """(the backend's peak growth, its parallel workers' peak) during one execution of the benchmark
        (writes too: the whole benchmark runs, as measured)."""
        pid = self.conn.info.backend_pid
        start = _smaps_bytes(pid)
        if start is None:
            notes.append(f"/proc/{pid}/smaps_rollup unreadable")
            return None, None
        try:
            monitor = psycopg.connect(
                self.dsn,
                autocommit=True,
                cursor_factory=RawCursor,
                connect_timeout=self.config.connect_timeout_s,
                application_name=f"pg-regression-radar gate monitor ({self.role})",
            )
        except psycopg.Error as exc:
            notes.append(f"no monitor session for the parallel workers: {self._message(exc)}")
            return None, None
        poller = _Poller(pid, monitor, peak=start)
        thread = threading.Thread(target=poller.run, name=f"gate-smaps-{self.role}", daemon=True)
        try:
            thread.start()
            self.execute(scenario, params)
        finally:
            poller.stop.set()
            thread.join()
            monitor.close()
        final = _smaps_bytes(pid)
        peak = max(poller.peak, final or 0)
        if poller.error is not None:
            notes.append(f"parallel workers not followed: {scrub(poller.error, self.dsn)}")
            return float(max(0, peak - start)), None
        return float(max(0, peak - start)), float(poller.worker_peak)

    def probe(self) -> float:
        """Seconds of the fixed CPU + IO probe (sql/postgres/gate_probe.sql), client side."""
        started = time.perf_counter()
        try:
            self._run(load_sql("gate_probe"), (), prepare=False)
        except psycopg.Error as exc:
            self._recover()
            message = f"the calibration probe fails on the {self.role}: {self._message(exc)}"
            raise (GateError(message) if self.role == BASELINE else CandidateFailure(message)) from None
        return time.perf_counter() - started


class _Guard:
    """Turns a psycopg error (or a Python scenario's exception) into the role's failure, after recovering."""

    def __init__(self, session: TargetSession, scenario: Scenario, line: int | None, what: str) -> None:
        self.session, self.scenario, self.line, self.what = session, scenario, line, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or isinstance(exc, (GateError, CandidateFailure)):
            return False
        if not isinstance(exc, psycopg.Error) and not (
            self.scenario.python is not None and isinstance(exc, Exception)
        ):
            return False  # a bug of the radar, not a failure of the scenario
        self.session._recover()
        s = self.scenario
        raise self.session._failure(s.name, s.source, self.line, self.what, exc) from None


__all__ = [
    "CandidateFailure",
    "MemoryReading",
    "ServerFacts",
    "StatementCounters",
    "TargetSession",
    "parse_smaps_rollup",
]
