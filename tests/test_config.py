from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import ConfigError, FleetConfig
from jobs.redaction import redact_dsn, scrub


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
    fleet = FleetConfig.load(Path(__file__).parent.parent / "data" / "fleet.example.toml")
    assert [i.name for i in fleet.instances] == ["orders-primary", "billing"]
    assert fleet.instances[0].log_dir == "/var/log/postgresql/orders"
