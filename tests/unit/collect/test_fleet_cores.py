"""The fleet file's ``cores`` of an instance: the contention step's instance size (jobs.detect.load)."""

from __future__ import annotations

import pytest

from jobs.collect.fleet import CollectorConfig, FleetConfig
from jobs.errors import ConfigError


def fleet(cores: object) -> FleetConfig:
    return FleetConfig.from_mapping(
        {"instances": [{"name": "a", "dsn": "postgresql://x@h/db", "cores": cores}]}
    )


def test_cores_is_a_whole_number_of_cpus_named_in_its_error() -> None:
    assert fleet(8).instances[0].cores == 8
    assert (
        FleetConfig.from_mapping({"instances": [{"name": "a", "dsn": "postgresql://x@h/db"}]})
        .instances[0]
        .cores
        is None
    )
    for bad in (0, "8", 2.5, True, 5000):
        with pytest.raises(ConfigError, match=r"instance #1 \(a\): cores must be a whole number of CPUs"):
            fleet(bad)


def test_the_activity_read_is_on_by_default_and_can_be_turned_off() -> None:
    assert CollectorConfig().activity is True
    raw = {"collector": {"activity": False}, "instances": [{"name": "a", "dsn": "postgresql://x@h/db"}]}
    assert FleetConfig.from_mapping(raw).collector.activity is False
    with pytest.raises(ConfigError, match="activity"):
        FleetConfig.from_mapping({**raw, "collector": {"activity": "no"}})


def test_host_names_the_machine_instances_share() -> None:
    raw = {"instances": [{"name": "a", "dsn": "postgresql://x@h/db", "host": "db-host-1"}]}
    assert FleetConfig.from_mapping(raw).instances[0].host == "db-host-1"
    for bad in ("", "a b", 7, "x" * 254):
        with pytest.raises(ConfigError, match=r"instance #1 \(a\): host must match"):
            FleetConfig.from_mapping({"instances": [{**raw["instances"][0], "host": bad}]})
