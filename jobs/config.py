"""Fleet configuration: which instances to watch, and how to reach them without leaking secrets.

A fleet file is TOML::

    [collector]               # optional; fields of CollectorConfig
    statement_timeout_ms = 5000

    [[instances]]
    name = "orders-primary"   # folder-safe: letters, digits, '_', '-', '.'
    dsn_env = "ORDERS_DSN"    # or: dsn = "postgresql://radar@db1:5432/orders"
    tags = { env = "prod", team = "orders" }
    log_dir = "/mnt/logs/orders"  # optional: the server's jsonlog folder, for auto_explain plans

Passwords belong in the environment (``dsn_env``) or ``~/.pgpass``; whatever the source, ``redact_dsn``
(jobs.redaction) is the only form of a DSN that reaches logs, the lake or Dagster metadata.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jobs.redaction import redact_dsn

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class ConfigError(ValueError):
    """The fleet file is unusable; the message names the file and the instance."""


@dataclass(frozen=True)
class CollectorConfig:
    """How one snapshot reads a server."""

    statement_timeout_ms: int = 5000
    connect_timeout_s: int = 10
    max_parallel_instances: int = 8
    application_name: str = "pg-regression-radar"
    query_text: str = "normalized"
    """What of a query text reaches the lake: "normalized" (every literal a $n placeholder, libpg_query)
    or "withheld" (a length-and-hash marker only); see jobs.collect.texts.storable_query_text."""


@dataclass(frozen=True)
class InstanceConfig:
    name: str
    dsn: str | None = None
    dsn_env: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    log_dir: str | None = None
    """The server's jsonlog folder (a mounted or shipped copy for a remote server), for auto_explain plans."""

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
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"fleet file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"fleet file {path}: invalid TOML: {exc}") from None
        return cls.from_mapping(raw, source=str(path))

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], source: str = "<memory>") -> FleetConfig:
        entries = raw.get("instances")
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"fleet file {source}: needs at least one [[instances]] table")
        instances = []
        seen: set[str] = set()
        for position, entry in enumerate(entries, start=1):
            name = entry.get("name")
            label = f"fleet file {source}, instance #{position}" + (f" ({name})" if name else "")
            if not isinstance(name, str) or not NAME_PATTERN.match(name):
                raise ConfigError(f"{label}: 'name' must match {NAME_PATTERN.pattern}")
            if name in seen:
                raise ConfigError(f"{label}: duplicate instance name")
            seen.add(name)
            dsn, dsn_env = entry.get("dsn"), entry.get("dsn_env")
            if bool(dsn) == bool(dsn_env):
                raise ConfigError(f"{label}: give exactly one of 'dsn' or 'dsn_env'")
            unknown = set(entry) - {"name", "dsn", "dsn_env", "tags", "log_dir"}
            if unknown:
                raise ConfigError(f"{label}: unknown keys {sorted(unknown)}")
            tags = {str(k): str(v) for k, v in dict(entry.get("tags", {})).items()}
            log_dir = entry.get("log_dir")
            instances.append(InstanceConfig(name=name, dsn=dsn, dsn_env=dsn_env, tags=tags, log_dir=log_dir))
        collector_raw = dict(raw.get("collector", {}))
        allowed = {f.name for f in fields(CollectorConfig)}
        if set(collector_raw) - allowed:
            raise ConfigError(
                f"fleet file {source}: unknown [collector] keys {sorted(set(collector_raw) - allowed)}"
            )
        return cls(instances=tuple(instances), collector=CollectorConfig(**collector_raw), source=source)

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
        """The config of a jobs.fleet.EmbeddedFleet (tests, demo, benchmarks)."""
        return cls(
            instances=tuple(
                InstanceConfig(name=s.name, dsn=s.dsn, tags={"env": "embedded"}, log_dir=str(s.log_dir))
                for s in fleet.servers
            ),
            collector=collector or CollectorConfig(),
            source=f"embedded fleet at {fleet.root}",
        )
