"""A collector safe to point at production: least privilege, no own rows, bounded time, server time.

Real PostgreSQL 18 servers; a hanging server is simulated by a loopback TCP proxy written here that
forwards bytes and, on command, stops forwarding a connection after its k-th ReadyForQuery message.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.collect.collector import STATEMENT_SQL_BY_VERSION, snapshot_fleet
from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.collect.session import Watchdog, load_privileges, state_path
from jobs.detect.samples_job import run_samples_job
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet, EmbeddedServer
from jobs.query.texts import is_marked_where_kept, is_radar_text
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from jobs.sqlfiles import SQL_ROOT
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

ROLE = "radar_pgmon"  # not the fleet's own radar_monitor: this one starts with pg_monitor only
COLLECTOR_SQL = (
    "server_identity",
    "collector_privileges",
    "collector_privileges_pg13",
    "collector_track_configured",
    "statements_info",
    "query_texts",
    *STATEMENT_SQL_BY_VERSION.values(),
)


@pytest.fixture(scope="module")
def gamma(fleet_factory: FleetFactory) -> EmbeddedServer:
    fleet: EmbeddedFleet = fleet_factory(["gamma"], {"pg_stat_statements.track": "'all'"})
    server = fleet.server("gamma")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE pg_monitor")
        conn.execute("CREATE TABLE app_orders (id int primary key, customer_id int)")
        conn.execute("INSERT INTO app_orders SELECT g, g % 50 FROM generate_series(1, 500) g")
    return server


def one_instance(dsn: str, name: str = "gamma", **collector: int) -> FleetConfig:
    return FleetConfig(
        instances=(InstanceConfig(name=name, dsn=dsn),), collector=CollectorConfig(**collector)
    )


def app_workload(server: EmbeddedServer, calls: int = 5) -> None:
    with psycopg.connect(server.dsn) as conn:
        for i in range(calls):
            conn.execute("SELECT count(*) FROM app_orders WHERE customer_id = %s", [Int4(i)])


def log_lines(server: EmbeddedServer) -> dict[Path, int]:
    return {path: len(path.read_text().splitlines()) for path in sorted(server.log_dir.glob("*.json"))}


def new_log_records(server: EmbeddedServer, before: dict[Path, int]) -> list[dict[str, object]]:
    records = []
    for path in sorted(server.log_dir.glob("*.json")):
        for line in path.read_text().splitlines()[before.get(path, 0) :]:
            records.append(json.loads(line))
    return records


def test_every_collector_sql_carries_the_marker_where_pg_stat_statements_keeps_it() -> None:
    for name in COLLECTOR_SQL:
        text = (SQL_ROOT / "postgres" / f"{name}.sql").read_text()
        assert is_marked_where_kept(text), name
        assert is_radar_text(text)
    assert not is_marked_where_kept("/* pg-regression-radar */ SELECT 1")  # PG18 drops a leading comment


# ---------------------------------------------------------------------------------------------------------
# 1. Least privilege, learned once; the collector's own statements never analysed


@pytest.mark.parametrize("granted", [False, True], ids=["pg_monitor_only", "granted_set_on_track"])
def test_monitor_login_leaves_no_server_error_and_no_own_series(
    gamma: EmbeddedServer, lake_root: Path, granted: bool
) -> None:
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        verb = "GRANT" if granted else "REVOKE"
        conn.execute(f"{verb} SET ON PARAMETER pg_stat_statements.track {'TO' if granted else 'FROM'} {ROLE}")
        conn.execute("SELECT pg_stat_statements_reset()")
    before = log_lines(gamma)
    config = one_instance(gamma.dsn_for(user=ROLE))
    for _ in range(20):
        app_workload(gamma)
        result = snapshot_fleet(config, lake_root)
        assert not result.failed, result.failed[0].error
    time.sleep(0.3)  # the logging collector writes asynchronously
    problems = [
        r for r in new_log_records(gamma, before) if r.get("error_severity") in ("ERROR", "FATAL", "PANIC")
    ]
    assert problems == []

    learned = load_privileges(lake_root, "gamma")
    assert learned is not None and learned.may_set_track is granted and not learned.is_superuser
    assert (
        json.loads(state_path(lake_root, "gamma").read_text())["system_identifier"]
        == learned.system_identifier
    )

    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        own = conn.execute(
            "SELECT queryid, calls, query FROM pg_stat_statements WHERE userid = %s::regrole", [ROLE]
        ).fetchall()
    # Every statement the collector's session sent is marked: no SET, no BEGIN/COMMIT, nothing bare.
    assert own and all(is_radar_text(query) for _, _, query in own), own
    if granted:  # learned on the first (plain) snapshot, untracked from the second on
        assert max(calls for _, calls, _ in own) == 1
    else:
        assert max(calls for _, calls, _ in own) >= 19
    own_ids = {queryid for queryid, _, _ in own}

    snapshots = lake.scan_table(lake_root, STATEMENT_SNAPSHOTS).collect()
    assert not set(snapshots["queryid"].to_list()) & own_ids
    runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).collect()
    assert runs["own_rows_dropped"].sum() > 0
    assert set(runs["health"].to_list()) == {"ok"}
    texts = lake.scan_table(lake_root, QUERY_TEXTS).collect()
    assert set(texts.filter(pl.col("is_radar"))["queryid"].to_list()) == own_ids

    run_samples_job(lake_root)
    samples = lake.scan_table(lake_root, QUERY_SAMPLES).collect()
    assert samples.height > 0
    analysed = samples.join(texts.select("queryid", "query"), on="queryid", how="left")
    assert not set(analysed["queryid"].to_list()) & own_ids
    assert not analysed["query"].map_elements(is_radar_text, return_dtype=pl.Boolean).any()
    assert analysed["query"].str.contains("app_orders").any()


def test_a_superuser_collector_is_untracked_from_its_first_snapshot(
    gamma: EmbeddedServer, lake_root: Path
) -> None:
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    for _ in range(3):
        assert not snapshot_fleet(one_instance(gamma.dsn), lake_root).failed
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        texts = [r[0] for r in conn.execute("SELECT query FROM pg_stat_statements").fetchall()]
    assert not [t for t in texts if is_radar_text(t)], texts
    learned = load_privileges(lake_root, "gamma")
    assert learned is not None and learned.is_superuser and learned.may_set_track
    assert learned.track_configured == "all"  # the server's own value, not the session's "none"


@pytest.mark.parametrize(
    ("setting", "value", "warning"),
    [
        ("compute_query_id", "off", "compute_query_id = off"),
        ("pg_stat_statements.track", "none", "pg_stat_statements.track = none"),
    ],
)
@pytest.mark.parametrize("user", ["postgres", ROLE])
def test_a_server_that_records_nothing_new_is_degraded(
    gamma: EmbeddedServer,
    lake_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    value: str,
    warning: str,
    user: str,
) -> None:
    from jobs.cli.main import main

    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        # A granted non-superuser's session overrides track and cannot read pg_file_settings: it sees the
        # value learned at first contact (README: a limit). Here the role reads the server's setting.
        conn.execute(f"REVOKE SET ON PARAMETER pg_stat_statements.track FROM {ROLE}")
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(f'[[instances]]\nname = "gamma"\ndsn = "{gamma.dsn_for(user=user)}"\n')
    args = ["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot"]
    assert main(args) == 0  # learn the role's privileges while the server is healthy
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        time.sleep(0.5)
        capsys.readouterr()
        assert main(args) == 0  # read, but degraded
        out = capsys.readouterr().out
    finally:
        with psycopg.connect(gamma.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM RESET {setting}")
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)
    assert f"degraded gamma: {warning}" in out
    runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).collect().sort("captured_at")
    assert runs["health"].to_list() == ["ok", "degraded"]
    assert runs["status"].to_list() == ["ok", "ok"]
    assert warning in runs["warnings"][-1]


# ---------------------------------------------------------------------------------------------------------
# 2. Bounded time


class FreezingProxy:
    """Forwards a loopback TCP port to a server; ``freeze_after_ready = k`` stops forwarding each new
    connection after the server's k-th ReadyForQuery ('Z') message: it stays open and answers nothing."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.freeze_after_ready: int | None = None
        self.frozen_connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?sslmode=disable&gssencmode=disable"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            frozen = threading.Event()
            threading.Thread(
                target=self._client_to_server, args=(client, upstream, frozen), daemon=True
            ).start()
            threading.Thread(
                target=self._server_to_client,
                args=(upstream, client, frozen, self.freeze_after_ready),
                daemon=True,
            ).start()

    @staticmethod
    def _client_to_server(client: socket.socket, upstream: socket.socket, frozen: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if not frozen.is_set():
                    upstream.sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()

    def _server_to_client(
        self, upstream: socket.socket, client: socket.socket, frozen: threading.Event, freeze_at: int | None
    ) -> None:
        buffer, ready_seen = b"", 0
        try:
            while data := upstream.recv(65536):
                if frozen.is_set():
                    continue
                buffer += data
                while len(buffer) >= 5:  # framed messages: type byte, int32 length (counting itself)
                    length = struct.unpack("!I", buffer[1:5])[0]
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                    client.sendall(message)
                    if message[:1] == b"Z":
                        ready_seen += 1
                        if freeze_at is not None and ready_seen >= freeze_at:
                            frozen.set()
                            self.frozen_connections += 1
                            break
        except OSError:
            pass

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def proxy(gamma: EmbeddedServer) -> Iterator[FreezingProxy]:
    made = FreezingProxy(gamma.port)
    yield made
    made.close()


class SilentListener:
    """Accepts TCP connections and never sends a byte."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self._held.append(self._listener.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        for sock in [self._listener, *self._held]:
            sock.close()


DEADLINE_S = 3
SLACK_S = 1.5


def test_shutting_the_socket_from_another_thread_unblocks_the_reader(proxy: FreezingProxy) -> None:
    proxy.freeze_after_ready = 1
    conn = psycopg.connect(proxy.dsn(), autocommit=True)
    try:
        with Watchdog(1.0) as dog:
            dog.attach(conn)
            dog.enter("statements")
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
            elapsed = time.monotonic() - started
        assert dog.fired_in == "statements"
        assert elapsed < 1.0 + 0.5
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("freeze_after_ready", "phase"),
    # 3: the activity read, 4: the statements running now (activity_queries)
    [(1, "identity"), (2, "statements"), (3, "statements"), (4, "statements"), (8, "texts")],
)
def test_a_server_that_stops_answering_fails_within_the_deadline_naming_the_phase(
    gamma: EmbeddedServer, proxy: FreezingProxy, lake_root: Path, freeze_after_ready: int, phase: str
) -> None:
    settings = {"instance_deadline_s": DEADLINE_S, "connect_timeout_s": 2, "statement_timeout_ms": 2000}
    hanging = InstanceConfig(name="gamma-proxied", dsn=proxy.dsn())
    healthy = InstanceConfig(name="gamma", dsn=gamma.dsn)
    fleet = FleetConfig(instances=(hanging, healthy), collector=CollectorConfig(**settings))
    assert not snapshot_fleet(fleet, lake_root).failed  # learns the privileges: one connection from now on
    app_workload(gamma)
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:  # a queryid the lake has not seen: its text
        table = f"unseen_{time.time_ns()}"  # will be fetched (PG18 jumbles relation names, not aliases)
        conn.execute(f"CREATE TABLE {table} (x int)")
        conn.execute(f"SELECT count(*) FROM {table}")
    proxy.freeze_after_ready = freeze_after_ready
    started = time.monotonic()
    result = snapshot_fleet(fleet, lake_root)
    elapsed = time.monotonic() - started
    assert proxy.frozen_connections >= 1
    assert elapsed < DEADLINE_S + SLACK_S
    assert [r.instance for r in result.failed] == ["gamma-proxied"]
    failed = result.failed[0]
    assert failed.failed_phase == phase
    assert f"stuck in phase {phase}" in (failed.error or "")
    runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).filter(pl.col("status") == "failed").collect()
    assert runs["instance"].to_list() == ["gamma-proxied"]
    assert runs["failed_phase"].to_list() == [phase]


def test_a_listener_that_never_answers_fails_in_the_connect_phase(
    gamma: EmbeddedServer, lake_root: Path
) -> None:
    silent = SilentListener()
    try:
        fleet = FleetConfig(
            instances=(
                InstanceConfig(name="silent", dsn=f"postgresql://radar@127.0.0.1:{silent.port}/postgres"),
                InstanceConfig(name="gamma", dsn=gamma.dsn),
            ),
            collector=CollectorConfig(
                instance_deadline_s=DEADLINE_S, connect_timeout_s=2, statement_timeout_ms=2000
            ),
        )
        started = time.monotonic()
        result = snapshot_fleet(fleet, lake_root)
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert elapsed < DEADLINE_S + SLACK_S
    assert [(r.instance, r.failed_phase) for r in result.failed] == [("silent", "connect")]
    assert [r.instance for r in result.ok] == ["gamma"]


# ---------------------------------------------------------------------------------------------------------
# 3. Server time


def test_a_real_snapshot_pair_records_both_clocks_and_samples_use_the_server_clock(
    gamma: EmbeddedServer, lake_root: Path
) -> None:
    config = one_instance(gamma.dsn)
    app_workload(gamma)
    assert not snapshot_fleet(config, lake_root).failed
    time.sleep(0.2)
    app_workload(gamma, calls=7)
    assert not snapshot_fleet(config, lake_root).failed
    runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).collect().sort("captured_at")
    assert runs.height == 2 and runs["collector_clock"].null_count() == 0
    offsets = (runs["captured_at"] - runs["collector_clock"]).dt.total_microseconds().abs()
    assert (offsets < 1_000_000).all()  # one machine: the two clocks agree within a second
    snapshots = lake.scan_table(lake_root, STATEMENT_SNAPSHOTS).collect()
    assert snapshots["collector_clock"].null_count() == 0
    # The boot clock beside it (Linux): nothing stepped the clock, so wall clock - boot clock held still.
    assert snapshots["collector_boot"].n_unique() == 1 and snapshots["collector_uptime_s"].null_count() == 0
    booted = snapshots["collector_clock"].dt.epoch("us") * 1e-6 - snapshots["collector_uptime_s"]
    assert booted.max() - booted.min() < 0.05  # type: ignore[operator]
    run_samples_job(lake_root)
    samples = lake.scan_table(lake_root, QUERY_SAMPLES).collect()
    server_seconds = (runs["captured_at"][1] - runs["captured_at"][0]).total_seconds()
    assert samples.height > 0
    assert samples["interval_seconds"].to_list() == pytest.approx([server_seconds] * samples.height)
    assert samples["interval_end"].unique().to_list() == [runs["captured_at"][1]]


def test_safety_settings_arrive_as_startup_options_with_keepalives(gamma: EmbeddedServer) -> None:
    from jobs.collect.session import open_session

    config = CollectorConfig(statement_timeout_ms=1234, lock_timeout_ms=321, keepalives_idle_s=7)
    with Watchdog(config.instance_deadline_s) as dog:
        conn, untracked = open_session(gamma.dsn_for(user=ROLE), config, None, dog)
    try:
        assert not untracked
        shown = {
            name: conn.execute(f"SHOW {name}").fetchone()[name]  # type: ignore[index]
            for name in (
                "statement_timeout",
                "lock_timeout",
                "default_transaction_read_only",
                "application_name",
            )
        }
        assert shown == {
            "statement_timeout": "1234ms",
            "lock_timeout": "321ms",
            "default_transaction_read_only": "on",
            "application_name": "pg-regression-radar",
        }
        assert conn.autocommit
        params = conn.info.get_parameters()
        assert (params["keepalives"], params["keepalives_idle"]) == ("1", "7")
        assert params["tcp_user_timeout"] == str(config.tcp_user_timeout_ms)
    finally:
        conn.close()


def test_a_revoked_grant_costs_one_refused_connection_then_is_learned(
    gamma: EmbeddedServer, lake_root: Path
) -> None:
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        conn.execute(f"GRANT SET ON PARAMETER pg_stat_statements.track TO {ROLE}")
    config = one_instance(gamma.dsn_for(user=ROLE))
    for _ in range(2):
        assert not snapshot_fleet(config, lake_root).failed
    assert load_privileges(lake_root, "gamma").may_set_track  # type: ignore[union-attr]
    with psycopg.connect(gamma.dsn, autocommit=True) as conn:
        conn.execute(f"REVOKE SET ON PARAMETER pg_stat_statements.track FROM {ROLE}")
    before = log_lines(gamma)
    for _ in range(5):
        assert not snapshot_fleet(config, lake_root).failed  # never a failed snapshot
    time.sleep(0.3)
    refused = [r for r in new_log_records(gamma, before) if r.get("error_severity") in ("ERROR", "FATAL")]
    assert len(refused) == 1 and "permission denied to set parameter" in str(refused[0]["message"])
    assert not load_privileges(lake_root, "gamma").may_set_track  # type: ignore[union-attr]


def test_an_instance_stuck_where_no_socket_reaches_is_given_up_and_the_run_finishes(
    gamma: EmbeddedServer, lake_root: Path
) -> None:
    import os

    stuck = state_path(lake_root, "stuck")
    stuck.parent.mkdir(parents=True)
    os.mkfifo(stuck)  # reading the remembered privileges blocks: like a hung network file system
    fleet = FleetConfig(
        instances=(InstanceConfig(name="stuck", dsn=gamma.dsn), InstanceConfig(name="gamma", dsn=gamma.dsn)),
        collector=CollectorConfig(
            instance_deadline_s=2, deadline_grace_s=1, connect_timeout_s=1, statement_timeout_ms=1000
        ),
    )
    try:
        started = time.monotonic()
        result = snapshot_fleet(fleet, lake_root)
        elapsed = time.monotonic() - started
        runs = lake.scan_table(lake_root, SNAPSHOT_RUNS).filter(pl.col("instance") == "stuck").collect()
    finally:
        with open(os.open(stuck, os.O_WRONLY | os.O_NONBLOCK), "w") as writer:  # release the stuck reader
            writer.write("{}")
    assert elapsed < 2 + 1 + SLACK_S
    assert [(r.instance, r.failed_phase) for r in result.failed] == [("stuck", "connect")]
    assert "gave up after 3 s" in (result.failed[0].error or "")
    assert [r.instance for r in result.ok] == ["gamma"]
    assert runs["status"].to_list() == ["failed"]
