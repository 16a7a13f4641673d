"""Shared fixtures: real embedded PostgreSQL servers (never mocks) and a throw-away lake root."""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from jobs.lake.objectpath import ObjectPath
from jobs.local.embedded import EmbeddedFleet

# Property tests draw their examples from a fixed seed (each test's own): the same examples on every run
# and in CI, so a red property test is reproducible and a green one does not turn red by chance.
hypothesis_settings.register_profile("radar", derandomize=True)
hypothesis_settings.load_profile("radar")

SERVER_FIXTURES = frozenset({"fleet_factory", "pg_fleet"})
"""Fixtures that start embedded PostgreSQL servers: a test whose fixture closure holds one is a server
test."""
TIERS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a server fixture (directly or through another fixture) ``postgres`` and
    every test under tests/integration ``integration``; a test under tests/unit that uses a server fixture
    is an error, so the unit tier stays server-free."""
    misplaced = []
    for item in items:
        uses_server = bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
        if uses_server:
            item.add_marker(pytest.mark.postgres)
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(TIERS / "integration"):
            item.add_marker(pytest.mark.integration)
        elif uses_server and path.is_relative_to(TIERS / "unit"):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(f"tests/unit must not start servers; move to tests/integration: {misplaced}")


# Clusters live outside pytest's tmp_path: its 0700 parents are not traversable by the service user.
CLUSTER_BASE = Path(tempfile.gettempdir()) / "prr-tests"

FleetFactory = Callable[..., EmbeddedFleet]


@pytest.fixture(autouse=True)
def _log_scrubber_dsns_of_this_test_only() -> Iterator[None]:
    """The log scrubber's DSNs are process-wide (a radar process serves one fleet), so a test's DSNs would
    mask later tests' messages: the secrets corpus holds ``password='Ub4lQzXy dbname=db``, whose
    4-character fragments include "name". Each test ends with the DSNs it found."""
    loaded = sys.modules.get("jobs.redaction")
    before = set(loaded._LOG_DSNS) if loaded else set()
    yield
    loaded = sys.modules.get("jobs.redaction")
    if loaded is not None:
        with loaded._LOCK:
            loaded._LOG_DSNS.clear()
            loaded._LOG_DSNS.update(before)


@pytest.fixture(scope="session")
def fleet_factory() -> Iterator[FleetFactory]:
    """Create fleets on demand; every fleet made in the session is destroyed at its end."""
    made: list[EmbeddedFleet] = []
    # One folder per test session: concurrent sessions (CI, several developers) never touch each other's.
    session_base = CLUSTER_BASE / uuid.uuid4().hex[:10]
    session_base.mkdir(parents=True, exist_ok=True)
    CLUSTER_BASE.chmod(0o755)
    session_base.chmod(0o755)

    def make(names: list[str], extra_settings: Mapping[str, str] | None = None) -> EmbeddedFleet:
        root = session_base / uuid.uuid4().hex[:10]
        fleet = EmbeddedFleet.create(root, names, extra_settings=extra_settings)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.destroy()
    shutil.rmtree(session_base, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    """Two servers shared by one test module (tests reset pg_stat_statements as they need)."""
    return fleet_factory(["alpha", "beta"], {"pg_stat_statements.track": "'all'"})


@pytest.fixture(scope="session")
def s3_environment() -> Iterator[dict[str, str]]:
    """A local S3-compatible server (moto) for the session, the environment pointed at it."""
    from tests.support.object_store import s3_server

    with s3_server() as env:
        yield env


@pytest.fixture
def s3_lake(s3_environment: dict[str, str]) -> ObjectPath:
    """A lake root in a fresh bucket of the local S3 server: ``s3://radar-<id>/lake``."""
    from tests.support.object_store import new_bucket

    return new_bucket()


@pytest.fixture
def lake_root(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    return root
