"""Fleet configuration: which instances to watch, and how to reach them without leaking secrets.

A fleet file is TOML::

    [collector]               # optional; fields of CollectorConfig (unknown keys and bad values rejected)
    statement_timeout_ms = 5000
    instance_deadline_s = 30

    [[instances]]
    name = "orders-primary"   # folder-safe: letters, digits, '_', '-', '.'
    dsn_env = "ORDERS_DSN"    # or: dsn = "postgresql://radar@db1:5432/orders"
    tags = { env = "prod", team = "orders" }
    log_dir = "/mnt/logs/orders"  # optional: the server's jsonlog folder, for auto_explain plans
    cores = 8                 # optional: the server's CPUs, so contention is judged on its real size
    host = "db-host-1"        # optional: instances naming one host share its CPUs (and its contention)

Passwords belong in the environment (``dsn_env``) or ``~/.pgpass``; whatever the source, ``redact_dsn``
(jobs.redaction) is the only form of a DSN that reaches logs, the lake or Dagster metadata."""

from __future__ import annotations

import difflib
import os
import re
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jobs.errors import ConfigError
from jobs.query.texts import QUERY_TEXT_MODES
from jobs.redaction import redact_dsn

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
TOP_LEVEL_TABLES = ("collector", "instances")
INSTANCE_KEYS = ("name", "dsn", "dsn_env", "tags", "log_dir", "cores", "host")
HOST_PATTERN = re.compile(r"^[A-Za-z0-9_.:@\-]{1,253}$")
MAX_CORES = 4096


def closest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid name, or nothing when none is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


# (minimum, maximum) of every numeric collector setting: positive, and no value a production fleet could
# mean (a 2-hour statement timeout is a typo for milliseconds vs seconds, not a setting).
COLLECTOR_RANGES: dict[str, tuple[int, int]] = {
    "statement_timeout_ms": (1, 3_600_000),
    "lock_timeout_ms": (1, 3_600_000),
    "connect_timeout_s": (1, 300),
    "instance_deadline_s": (1, 3_600),
    "deadline_grace_s": (1, 300),
    "max_parallel_instances": (1, 256),
    "keepalives_idle_s": (1, 3_600),
    "keepalives_interval_s": (1, 600),
    "keepalives_count": (1, 100),
    "tcp_user_timeout_ms": (1, 3_600_000),
    "table_stats_max_databases": (1, 10_000),
    "table_stats_max_tables": (1, 10_000_000),
}


@dataclass(frozen=True)
class CollectorConfig:
    """How one snapshot reads a server (the fleet file's ``[collector]`` table)."""

    statement_timeout_ms: int = 5000
    """Startup option: the server cancels any collector statement running longer."""
    lock_timeout_ms: int = 1000
    """Startup option: a catalog lock held by a migration fails the read instead of queueing behind it."""
    connect_timeout_s: int = 10
    """libpq connect_timeout per connection attempt (libpq treats values below 2 as 2)."""
    instance_deadline_s: int = 30
    """Wall-clock bound of one instance's whole snapshot (connect to write); a watchdog closes the socket."""
    deadline_grace_s: int = 5
    """Backstop: an instance still running this long after its deadline is given up (failed row)."""
    max_parallel_instances: int = 8
    """Instances snapshotted at once (threads; each holds one connection)."""
    keepalives_idle_s: int = 10
    """TCP keepalive: idle seconds before the first probe (a silently dead peer is noticed)."""
    keepalives_interval_s: int = 5
    """TCP keepalive: seconds between unanswered probes."""
    keepalives_count: int = 3
    """TCP keepalive: unanswered probes before the connection is considered dead."""
    tcp_user_timeout_ms: int = 20_000
    """Linux TCP_USER_TIMEOUT: unacknowledged data for this long breaks the connection."""
    application_name: str = "pg-regression-radar"
    """application_name of the collector's sessions (how DBAs see it in pg_stat_activity)."""
    query_text: str = "normalized"
    """What of a query text reaches the lake: "normalized" (every literal a $n placeholder, libpg_query)
    or "withheld" (a length-and-hash marker only); see jobs.query.texts.storable_query_text."""
    table_stats: bool = True
    """With each snapshot of a collection cycle, also read pg_stat_user_tables (last_analyze,
    last_autoanalyze, n_mod_since_analyze, ...) of the databases the snapshot saw (table_stats_snapshots)."""
    table_stats_max_databases: int = 20
    """At most this many databases per instance are read for table statistics (the connected one first,
    then by name); the others are named as skipped."""
    table_stats_max_tables: int = 10_000
    """At most this many tables per database (the most recently analysed first)."""
    activity: bool = True
    """With each snapshot, also read pg_stat_activity once (one aggregated row: active backends, on a CPU,
    waiting by kind) into activity_snapshots: the contention step's measure of the instance's load. A
    failed read never fails the snapshot (a warning instead)."""
    samples_on_collect: bool = False
    """After each collection cycle of `radar snapshot`, append the per-interval samples of the instances it
    snapshotted (against each entry's previous snapshot, from the samples frontier), so the samples are
    current when the snapshot lands and no later run scans raw snapshots of past days. A samples failure is
    reported, never a failed collection. Dagster runs the query_samples asset instead."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.type in ("bool", bool) and not isinstance(value, bool):
                raise ConfigError(f"[collector] {item.name} must be true or false, not {value!r}")
            if item.name in COLLECTOR_RANGES:
                low, high = COLLECTOR_RANGES[item.name]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"[collector] {item.name} must be an integer, not {value!r}")
                if not low <= value <= high:
                    raise ConfigError(
                        f"[collector] {item.name} must be between {low} and {high}, not {value}"
                    )
        if self.query_text not in QUERY_TEXT_MODES:
            raise ConfigError(
                f"[collector] query_text must be one of {', '.join(QUERY_TEXT_MODES)}, "
                f"not {self.query_text!r}"
            )
        name = self.application_name
        if not isinstance(name, str) or not name or len(name) > 63 or not name.isprintable():
            raise ConfigError("[collector] application_name must be a printable string of 1-63 characters")
        if self.statement_timeout_ms >= self.instance_deadline_s * 1000:
            raise ConfigError(
                f"[collector] statement_timeout_ms ({self.statement_timeout_ms}) must be below "
                f"instance_deadline_s ({self.instance_deadline_s} s): the server should cancel first"
            )
        if self.connect_timeout_s >= self.instance_deadline_s:
            raise ConfigError(
                f"[collector] connect_timeout_s ({self.connect_timeout_s}) must be below "
                f"instance_deadline_s ({self.instance_deadline_s})"
            )


@dataclass(frozen=True)
class InstanceConfig:
    name: str
    dsn: str | None = None
    dsn_env: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    log_dir: str | None = None
    """The server's jsonlog folder (a mounted or shipped copy for a remote server), for auto_explain plans."""
    cores: int | None = None
    """The server's CPUs, recorded with each snapshot's activity row: the contention step judges how much
    slowdown added load explains on this many cores (jobs.detect.load; None: the most it could)."""
    host: str | None = None
    """The machine the server runs on, recorded with each activity row: instances naming one host share
    its CPUs, so one database's load explains another's slowdown there (None: the instance alone)."""

    def resolve_dsn(self) -> str:
        """The DSN to connect with; raises ConfigError naming the instance when it cannot be had."""
        if self.dsn:
            return self.dsn
        assert self.dsn_env is not None
        value = os.environ.get(self.dsn_env)
        if not value:
            raise ConfigError(f"instance {self.name}: environment variable {self.dsn_env} is not set")
        return value

    def safe_target(self) -> str:
        """Where this instance points, without secrets (for logs and metadata)."""
        try:
            return redact_dsn(self.resolve_dsn())
        except ConfigError as exc:
            return f"<unresolved: {exc}>"


def _instance_from_entry(entry: object, label: str) -> InstanceConfig:
    """One ``[[instances]]`` table, every key type-checked; raises ConfigError prefixed with ``label``."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{label}: must be a table ([[instances]]), not {type(entry).__name__}")
    unknown = sorted(set(entry) - set(INSTANCE_KEYS))
    if unknown:
        hints = ", ".join(f"{key!r}{closest(key, INSTANCE_KEYS)}" for key in unknown)
        raise ConfigError(f"{label}: unknown keys {hints}; valid keys: {', '.join(INSTANCE_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(f"{label}: 'name' must match {NAME_PATTERN.pattern}")
    if name[0] in ".-":
        # A name is a folder of the lake and of the reports, and an argument of commands: "." and ".."
        # name other folders, a leading "-" reads as an option.
        raise ConfigError(f"{label}: 'name' {name!r} must not start with '.' or '-'")
    for key in ("dsn", "dsn_env", "log_dir"):
        if key in entry and not isinstance(entry[key], str):
            raise ConfigError(
                f"{label}: {key} must be a string, not {type(entry[key]).__name__} {entry[key]!r}"
            )
    dsn, dsn_env = entry.get("dsn"), entry.get("dsn_env")
    if bool(dsn) == bool(dsn_env):
        raise ConfigError(f"{label}: give exactly one of 'dsn' or 'dsn_env'")
    raw_tags = entry.get("tags", {})
    if not isinstance(raw_tags, dict) or not all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in raw_tags.values()
    ):
        raise ConfigError(
            f'{label}: tags must be a table of strings or numbers, e.g. tags = {{ env = "prod" }}'
        )
    tags = {str(k): str(v) for k, v in raw_tags.items()}
    cores = entry.get("cores")
    if cores is not None and (
        isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= MAX_CORES
    ):
        raise ConfigError(
            f"{label}: cores must be a whole number of CPUs from 1 to {MAX_CORES}, not {cores!r}"
        )
    host = entry.get("host")
    if host is not None and (not isinstance(host, str) or not HOST_PATTERN.match(host)):
        raise ConfigError(f"{label}: host must match {HOST_PATTERN.pattern}, not {host!r}")
    return InstanceConfig(
        name=name,
        dsn=dsn,
        dsn_env=dsn_env,
        tags=tags,
        log_dir=entry.get("log_dir"),
        cores=cores,
        host=host,
    )


def _collector_from_table(raw: object, source: str) -> CollectorConfig:
    label = f"fleet file {source}: [collector]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{label} must be a table, not {type(raw).__name__}")
    allowed = tuple(f.name for f in fields(CollectorConfig))
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        hints = ", ".join(f"{key!r}{closest(key, allowed)}" for key in unknown)
        raise ConfigError(f"{label}: unknown keys {hints}; valid keys: {', '.join(allowed)}")
    try:
        return CollectorConfig(**raw)
    except ConfigError as exc:
        raise ConfigError(f"fleet file {source}: {exc}") from None


def read_toml(path: Path, kind: str) -> dict[str, Any]:
    """A TOML file's tables; any problem is a ConfigError naming the ``kind`` ("fleet file") and the path."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{kind} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{kind} {path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{kind} {path}: invalid TOML: {exc}") from None


@dataclass(frozen=True)
class FleetConfig:
    instances: tuple[InstanceConfig, ...]
    collector: CollectorConfig = CollectorConfig()
    source: str = "<memory>"

    @property
    def instance_names(self) -> frozenset[str]:
        return frozenset(i.name for i in self.instances)

    @classmethod
    def load(cls, path: Path) -> FleetConfig:
        return cls.from_mapping(read_toml(path, "fleet file"), source=str(path))

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], source: str = "<memory>") -> FleetConfig:
        unknown_tables = sorted(set(raw) - set(TOP_LEVEL_TABLES))
        if unknown_tables:
            hints = ", ".join(f"[{key}]{closest(key, TOP_LEVEL_TABLES)}" for key in unknown_tables)
            raise ConfigError(
                f"fleet file {source}: unknown tables or keys {hints}; valid: [collector], [[instances]]"
            )
        entries = raw.get("instances")
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"fleet file {source}: needs at least one [[instances]] table")
        instances = []
        seen: set[str] = set()
        for position, entry in enumerate(entries, start=1):
            name = entry.get("name") if isinstance(entry, dict) else None
            label = f"fleet file {source}, instance #{position}" + (
                f" ({name})" if isinstance(name, str) else ""
            )
            instance = _instance_from_entry(entry, label)
            if instance.name in seen:
                raise ConfigError(f"{label}: duplicate instance name")
            seen.add(instance.name)
            instances.append(instance)
        collector = _collector_from_table(raw.get("collector", {}), source)
        return cls(instances=tuple(instances), collector=collector, source=source)

    def dsns(self) -> tuple[str, ...]:
        """Every DSN of the fleet that can be resolved now (for the secret scrubbers)."""
        out = []
        for instance in self.instances:
            try:
                out.append(instance.resolve_dsn())
            except ConfigError:
                continue
        return tuple(out)

    @classmethod
    def from_embedded(cls, fleet: Any, collector: CollectorConfig | None = None) -> FleetConfig:
        """The config of a jobs.local.embedded.EmbeddedFleet (tests, demo, benchmarks)."""
        return cls(
            instances=tuple(
                InstanceConfig(
                    name=s.name,
                    dsn=s.monitor_dsn,
                    tags={"env": "embedded"},
                    log_dir=str(s.log_dir),
                    host=f"embedded@{socket.gethostname()}"[:253],  # one machine: its CPUs are shared
                )
                for s in fleet.servers
            ),
            collector=collector or CollectorConfig(),
            source=f"embedded fleet at {fleet.root}",
        )
