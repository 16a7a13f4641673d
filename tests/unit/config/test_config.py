from __future__ import annotations

from pathlib import Path

import pytest

from jobs.collect.fleet import CollectorConfig, FleetConfig
from jobs.errors import ConfigError
from jobs.redaction import redact_dsn, scrub

GOOD_INSTANCE = '[[instances]]\nname = "a"\ndsn = "host=db"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_fleet_file_with_dsn_env_and_collector_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
[collector]
statement_timeout_ms = 2500

[[instances]]
name = "orders-primary"
dsn_env = "ORDERS_DSN"
tags = { env = "prod" }

[[instances]]
name = "billing"
dsn = "postgresql://radar@db2:5432/billing"
""",
    )
    monkeypatch.setenv("ORDERS_DSN", "postgresql://radar:s3cr3t@db1:5432/orders")
    fleet = FleetConfig.load(path)
    assert [i.name for i in fleet.instances] == ["orders-primary", "billing"]
    assert fleet.collector.statement_timeout_ms == 2500
    assert fleet.instances[0].resolve_dsn().endswith("/orders")
    assert "s3cr3t" not in fleet.instances[0].safe_target()
    assert fleet.instances[0].tags == {"env": "prod"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[instances]]\nname = "a"\n', "exactly one of 'dsn' or 'dsn_env'"),
        ('[[instances]]\nname = "a/b"\ndsn = "x"\n', "'name' must match"),
        ('[[instances]]\nname = "a"\ndsn = "x"\n[[instances]]\nname = "a"\ndsn = "y"\n', "duplicate"),
        ('[[instances]]\nname = "a"\ndsn = "x"\npassword = "p"\n', "unknown keys"),
        ("instances = [", "invalid TOML"),
        ("", "at least one [[instances]]"),
    ],
)
def test_bad_fleet_files_name_the_file_and_instance(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match="fleet file") as info:
        FleetConfig.load(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_env_var_names_the_instance() -> None:
    fleet = FleetConfig.from_mapping({"instances": [{"name": "x", "dsn_env": "RADAR_NOT_SET_ANYWHERE"}]})
    with pytest.raises(ConfigError, match="instance x: environment variable RADAR_NOT_SET_ANYWHERE"):
        fleet.instances[0].resolve_dsn()


@pytest.mark.parametrize(
    "dsn",
    ["postgresql://radar:pw-9x7@db:5432/app", "host=db port=5432 user=radar password=pw-9x7 dbname=app"],
)
def test_passwords_never_survive_redaction(dsn: str) -> None:
    assert "pw-9x7" not in redact_dsn(dsn)
    assert "host=db" in redact_dsn(dsn)
    assert "pw-9x7" not in scrub(f"could not connect with {dsn}: password pw-9x7 rejected", dsn)


def test_the_shipped_example_fleet_file_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = FleetConfig.load(Path(__file__).resolve().parents[3] / "data" / "fleet.example.toml")
    assert [i.name for i in fleet.instances] == ["orders-primary", "billing"]
    assert fleet.instances[0].log_dir == "/var/log/postgresql/orders"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[colector]\nstatement_timeout_ms = 1\n" + GOOD_INSTANCE, "[colector] (did you mean 'collector'?)"),
        ('[[instances]]\nname = "a"\ndns = "x"\n', "unknown keys 'dns' (did you mean 'dsn'?)"),
        ('[[instances]]\nname = "a"\ndsn = 5432\n', "instance #1 (a): dsn must be a string, not int 5432"),
        ('[[instances]]\nname = "a"\ndsn_env = ["X"]\n', "dsn_env must be a string"),
        ('[[instances]]\nname = "a"\ndsn = "x"\ntags = "prod"\n', "tags must be a table"),
        (
            "[collector]\nstatement_timeout_ms = -1\n" + GOOD_INSTANCE,
            "statement_timeout_ms must be between 1 and",
        ),
        (
            "[collector]\nstatement_timeout_ms = 5000.5\n" + GOOD_INSTANCE,
            "statement_timeout_ms must be an integer",
        ),
        ('[collector]\nconnect_timeout_s = "10"\n' + GOOD_INSTANCE, "connect_timeout_s must be an integer"),
        (
            "[collector]\nmax_parallel_instances = 0\n" + GOOD_INSTANCE,
            "max_parallel_instances must be between",
        ),
        (
            "[collector]\nmax_parallel_instances = 100000\n" + GOOD_INSTANCE,
            "max_parallel_instances must be between",
        ),
        (
            "[collector]\ninstance_deadline_s = true\n" + GOOD_INSTANCE,
            "instance_deadline_s must be an integer",
        ),
        (
            "[collector]\ninstance_deadline_s = 4\n" + GOOD_INSTANCE,
            "statement_timeout_ms (5000) must be below",
        ),
        ("[collector]\nstatment_timeout_ms = 10\n" + GOOD_INSTANCE, "(did you mean 'statement_timeout_ms'?)"),
        ("collector = 3\n" + GOOD_INSTANCE, "[collector] must be a table"),
        ("instances = [1]\n", "instance #1: must be a table"),
    ],
)
def test_typos_and_bad_values_are_named_with_the_closest_valid_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        FleetConfig.load(path)
    assert message in str(info.value)
    assert f"fleet file {path}" in str(info.value)


def test_collector_defaults_and_new_fields_from_the_fleet_file(tmp_path: Path) -> None:
    defaults = CollectorConfig()
    assert (defaults.instance_deadline_s, defaults.lock_timeout_ms, defaults.deadline_grace_s) == (
        30,
        1000,
        5,
    )
    assert defaults.connect_timeout_s < defaults.instance_deadline_s
    assert defaults.tcp_user_timeout_ms < defaults.instance_deadline_s * 1000
    text = (
        "[collector]\ninstance_deadline_s = 12\nlock_timeout_ms = 250\nkeepalives_idle_s = 4\n"
        "tcp_user_timeout_ms = 9000\n" + GOOD_INSTANCE
    )
    collector = FleetConfig.load(write(tmp_path, text)).collector
    assert (collector.instance_deadline_s, collector.lock_timeout_ms) == (12, 250)
    assert (collector.keepalives_idle_s, collector.tcp_user_timeout_ms) == (4, 9000)
