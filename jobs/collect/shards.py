"""Which shard of the fleet an instance belongs to: a stable hash of its name, so the assignment never
depends on the process, the Python release or the order of the fleet file.

Dagster runs the collection, the samples and the analysis inputs once per shard ([schedules] shard_count;
orchestration.partitions): one run reads only its shard's instances, so a deployment's run launcher can
spread the shards over machines and a shard that fails stops no other. Python's ``hash()`` is salted per
process (PYTHONHASHSEED), which would move instances between shards from one run to the next: SHA-256 it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace

from jobs.collect.fleet import FleetConfig
from jobs.errors import ConfigError

SHARD_PREFIX = "shard-"
MAX_SHARDS = 1024
"""More shards than this is a typo (a Dagster run per shard per tick), not a setting."""


def shard_of(instance_name: str, shard_count: int) -> int:
    """The shard (0..shard_count-1) of an instance: the first 8 bytes of SHA-256 of its UTF-8 name, big
    endian, modulo ``shard_count``. Pure and stable: the same name gives the same shard everywhere."""
    if isinstance(shard_count, bool) or not isinstance(shard_count, int) or shard_count < 1:
        raise ConfigError(f"shard_count must be a positive integer, not {shard_count!r}")
    digest = hashlib.sha256(instance_name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shard_count


def shard_key(shard: int) -> str:
    """The Dagster partition key of a shard (``shard-0``)."""
    return f"{SHARD_PREFIX}{shard}"


def shard_keys(shard_count: int) -> list[str]:
    """Every shard's partition key, in shard order."""
    return [shard_key(shard) for shard in range(shard_count)]


def shard_index(key: str) -> int:
    """The shard of a partition key (``shard-3`` -> 3); a ValueError names a key that is not one."""
    number = key.removeprefix(SHARD_PREFIX)
    if not key.startswith(SHARD_PREFIX) or not number.isdigit():
        raise ValueError(f"not a shard partition key: {key!r} (expected {SHARD_PREFIX}<n>)")
    return int(number)


def names_in_shards(names: Iterable[str], shards: Iterable[int], shard_count: int) -> list[str]:
    """The names (in their order) whose shard is one of ``shards``."""
    wanted = set(shards)
    return [name for name in names if shard_of(name, shard_count) in wanted]


def fleet_shard(fleet: FleetConfig, shard: int, shard_count: int) -> FleetConfig:
    """The fleet cut to one shard's instances (none is fine: an empty shard has nothing to do)."""
    kept = tuple(i for i in fleet.instances if shard_of(i.name, shard_count) == shard)
    return replace(fleet, instances=kept, source=f"{fleet.source} (shard {shard} of {shard_count})")


def fleet_of_shards(fleet: FleetConfig, shards: Iterable[int] | None, shard_count: int) -> FleetConfig:
    """The fleet cut to the instances of ``shards`` (None: the whole fleet, unsharded), in name order."""
    if shards is None:
        return fleet
    wanted = set(shards)
    kept = tuple(
        sorted((i for i in fleet.instances if shard_of(i.name, shard_count) in wanted), key=lambda i: i.name)
    )
    label = ", ".join(str(s) for s in sorted(wanted))
    return replace(fleet, instances=kept, source=f"{fleet.source} (shards {label} of {shard_count})")
