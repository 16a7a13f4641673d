"""Client workloads, CPU-heavy neighbours, the snapshot loop and the server-clock / jsonlog waits for the
real-server tests and benchmarks.

Used by tests/integration/detect/test_regressions_pg.py, tests/integration/detect/test_detection_pg.py,
tests/integration/detect/test_work_pg.py and
tests/integration/detect/test_contention_pg.py: a workload thread runs queries with typed (int4) parameters
in a loop; the
collector snapshots the server every ~0.2 s; what landed in the lake is read back as frames.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import psycopg
from psycopg.types.numeric import Int4

from jobs.collect.collector import snapshot_fleet
from jobs.collect.deploys import load_deploy_events
from jobs.collect.fleet import FleetConfig
from jobs.detect.samples import samples_from_snapshots
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet, postgres_bin_dir
from jobs.pipeline.detection import DetectionConfig, detect_from_frames, read_activity
from jobs.schemas.collected import PLAN_SNAPSHOTS, QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from tests.support.detection_frames import Frames, as_frames

SNAPSHOT_EVERY = 0.2


def run_psql_script(dsn: str, script: str) -> subprocess.CompletedProcess[str]:
    """A SQL script run as a user runs what `radar setup-sql` prints: the wheel's psql, stopping at the first
    error."""
    return subprocess.run(
        [str(postgres_bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def server_clock(conn: psycopg.Connection) -> datetime:
    """The server's clock between two windows of logged statements, with a gap on each side (jsonlog
    timestamps are in milliseconds)."""
    time.sleep(0.02)
    stamp = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
    time.sleep(0.02)
    return stamp.astimezone(UTC)


def wait_for_log(log_dir: Path, needle: bytes, timeout: float = 15.0) -> None:
    """Until a jsonlog file of ``log_dir`` holds ``needle`` (the logging collector writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in p.read_bytes() for p in log_dir.glob("*.json")):
            return
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never reached the jsonlog in {log_dir}")


SNAPSHOTS_PER_PHASE = 20  # fewer leave the serially corrected rank test short of power


class Workload:
    """One client running its queries in turn, in a loop until stopped; every ``%s`` of a query gets the
    same int4 parameter (calls % 100). ``reconnect()`` makes it open a new session (to pick up
    ALTER DATABASE/ROLE ... SET); with ``calls_per_connection`` it opens a new session every that many
    calls by itself, as a pooled application does; ``pause`` seconds between calls pace it."""

    def __init__(
        self,
        dsn: str,
        sql: str | Sequence[str],
        *,
        calls_per_connection: int | None = None,
        pause: float = 0.0,
    ) -> None:
        self.dsn = dsn
        self.queries = [sql] if isinstance(sql, str) else list(sql)
        self.calls_per_connection = calls_per_connection
        self.pause = pause
        self.calls = 0
        self.sessions = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._reconnect = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _session_done(self, calls_in_session: int) -> bool:
        if self._stop.is_set() or self._reconnect.is_set():
            return True
        return self.calls_per_connection is not None and calls_in_session >= self.calls_per_connection

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._reconnect.clear()
                with psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None) as conn:
                    self.sessions += 1
                    calls_in_session = 0
                    while not self._session_done(calls_in_session):
                        sql = self.queries[self.calls % len(self.queries)]
                        conn.execute(sql, [Int4(self.calls % 100)] * sql.count("%s"))
                        self.calls += 1
                        calls_in_session += 1
                        if self.pause:
                            time.sleep(self.pause)
        except BaseException as exc:  # reported by stop(), in the test's thread
            self.error = exc

    def reconnect(self) -> None:
        """Close the session after the current statement and open a new one; returns once it has."""
        sessions = self.sessions
        self._reconnect.set()
        deadline = time.monotonic() + 30
        while self.sessions == sessions and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.sessions > sessions, f"workload did not reconnect: {self.error!r}"

    def start(self) -> Workload:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert self.error is None, f"workload {self.queries} failed: {self.error!r}"
        assert self.calls > 0, self.queries

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CpuNeighbour:
    """``sessions`` sessions each running a CPU-bound statement in a loop (a noisy neighbour on the same
    server) from ``start()`` until the context ends.

    The sessions connect when the context is entered and wait; ``start()`` releases them together, so the
    neighbour begins at one moment (the deploy's, in the tests) instead of ramping up over the second its
    eight backends take to fork and connect on a loaded host."""

    SQL = "select count(*) from generate_series(1, 3000000)"

    def __init__(self, dsn: str, sessions: int = 4) -> None:
        self.dsn = dsn
        self.statements = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._go = threading.Event()
        self._connected = threading.Barrier(sessions + 1, timeout=60)
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(sessions)]

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self._connected.wait()
                self._go.wait()
                while not self._stop.is_set():
                    conn.execute(self.SQL)
                    self.statements += 1
        except BaseException as exc:
            self.errors.append(exc)
            self._connected.abort()

    def start(self) -> None:
        self._go.set()

    def __enter__(self) -> CpuNeighbour:
        for thread in self._threads:
            thread.start()
        try:
            self._connected.wait()
        except threading.BrokenBarrierError:
            self.__exit__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._go.set()
        for thread in self._threads:
            thread.join(timeout=30)
        assert not self.errors, f"CPU neighbour failed: {self.errors[0]!r}"


@contextmanager
def pinned_to_one_cpu(data_dir: Path) -> Iterator[int | None]:
    """The server's postmaster, and so every backend it forks inside the block, on one CPU (the highest the
    test may use); its previous CPUs back afterwards. Yields the CPU, or None where the OS does not allow
    it. Contention tests pin so that a CPU neighbour slows the server however idle the host's other CPUs
    are: on a 2-core host, six neighbours on two CPUs slowed 3 to 5 of 5 heavy queries from run to run."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    try:
        before = os.sched_getaffinity(pid)
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(pid, {cpu})
    except OSError:
        yield None
        return
    try:
        yield cpu
    finally:
        with suppress(OSError):
            os.sched_setaffinity(pid, before)


def snapshot_phase(config: FleetConfig, lake_root: Path, count: int = SNAPSHOTS_PER_PHASE) -> None:
    for _ in range(count):
        started = time.monotonic()
        result = snapshot_fleet(config, lake_root)
        assert not result.failed, [r.error for r in result.failed]
        time.sleep(max(0.0, SNAPSHOT_EVERY - (time.monotonic() - started)))


def lake_frames(lake_root: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    snapshots = lake.scan_table(lake_root, STATEMENT_SNAPSHOTS).collect()
    runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).collect()
    texts = lake.scan_table(lake_root, QUERY_TEXTS).collect()
    return snapshots, runs, texts


def detect_lake(lake_root: Path, config: DetectionConfig) -> Frames:
    """Samples from the lake's snapshots, then both analyses over them, as radar detect runs them (no
    plans: the real-server detection tests judge latency alone)."""
    snapshots, runs, texts = lake_frames(lake_root)
    samples = samples_from_snapshots(snapshots, runs).samples
    deploys = load_deploy_events(lake_root)
    activity = read_activity(lake_root, samples)
    return as_frames(
        detect_from_frames(samples, texts, deploys, PLAN_SNAPSHOTS.empty(), config, activity=activity)
    )


def setup_orders(dsn: str, table: str, *, index: bool, customer_type: str = "int") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"drop table if exists {table}")
        conn.execute(
            f"create table {table} (id bigserial primary key, customer_id {customer_type} not null,"
            " amount numeric)"
        )
        conn.execute(
            f"insert into {table} (customer_id, amount) select g % 5000, g from generate_series(1, 200000) g"
        )
        if index:
            conn.execute(f"create index {table}_customer on {table} (customer_id)")
        conn.execute(f"analyze {table}")


def reset_statements(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_stat_statements_reset()")


def one_instance(fleet: EmbeddedFleet, name: str) -> tuple[str, FleetConfig]:
    """The server's superuser DSN and a fleet config holding only it, pg_stat_statements reset."""
    server = fleet.server(name)
    reset_statements(server.dsn)
    config = FleetConfig.from_embedded(fleet)
    return server.dsn, FleetConfig(instances=tuple(i for i in config.instances if i.name == name))
