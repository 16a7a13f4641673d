"""`radar setup-sql --dsn`: the script read off a real server, applied with psql, and the example fleet
file's login then snapshots; the example files use the role the script creates (issue 21, item 5)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from jobs.cli.main import main
from jobs.local.embedded import EmbeddedServer
from jobs.plans.setup_sql import setup_script, setup_steps
from jobs.sqlfiles import REPO_ROOT
from tests.conftest import FleetFactory
from tests.support.pg_workload import run_psql_script

EXAMPLE_FLEET = REPO_ROOT / "data" / "fleet.example.toml"
PASSWORD = "Sekr3tPassw0rd"

# Undo what the embedded server's bootstrap did (the extension, the roles, the helper): the server is then
# as a fresh self-managed one with pg_stat_statements only preloaded.
TEAR_DOWN = (
    "DROP SCHEMA radar CASCADE",
    "DROP OWNED BY radar_monitor, radar_explain",
    "DROP ROLE radar_monitor",
    "DROP ROLE radar_explain",
    "DROP EXTENSION pg_stat_statements",
)


def script_login_role() -> str:
    """The LOGIN role the default setup script creates (read from its SQL, not from a constant)."""
    script = setup_script(setup_steps())
    created = re.findall(r'CREATE ROLE "([^"]+)" LOGIN', script)
    assert len(created) == 1, created
    return created[0]


def example_roles(text: str) -> set[str]:
    """Every login named in a postgresql:// URI of ``text`` (DSNs and the commented export examples)."""
    return set(re.findall(r"postgresql://([A-Za-z0-9_]+)[@:]", text))


def example_fleet_role() -> str:
    fleet = tomllib.loads(EXAMPLE_FLEET.read_text())
    users = {conninfo_to_dict(i["dsn"])["user"] for i in fleet["instances"] if "dsn" in i}
    users |= example_roles(EXAMPLE_FLEET.read_text())
    assert len(users) == 1, f"data/fleet.example.toml names several logins: {sorted(users)}"
    return users.pop()


def test_the_example_fleet_file_readme_and_docs_use_the_login_the_script_creates() -> None:
    role = script_login_role()
    assert example_fleet_role() == role
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    for page in pages:
        roles = example_roles(page.read_text())
        assert roles <= {role}, (
            f"{page.relative_to(REPO_ROOT)} DSNs name other logins: {sorted(roles - {role})}"
        )


def run_radar(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_setup_sql_from_a_dsn_applied_with_psql_lets_the_example_login_snapshot(
    fleet_factory: FleetFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server: EmbeddedServer = fleet_factory(["setup"]).servers[0]
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        for statement in TEAR_DOWN:
            conn.execute(statement)
        version = conn.info.server_version
    role = example_fleet_role()
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(
        f'[[instances]]\nname = "setup"\ndsn = "postgresql://{role}@127.0.0.1:{server.port}/postgres"\n'
    )
    lake = str(tmp_path / "lake")
    # Before the script: the example's login does not exist, so every instance fails (exit 3).
    assert run_radar("--lake", lake, "--fleet-file", str(fleet_file), "snapshot", capsys=capsys)[0] == 3

    # The server trusts loopback, so a password in the DSN is accepted and ignored: it must not be printed.
    admin_dsn = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{server.port}/postgres"
    code, script, err = run_radar("setup-sql", "--dsn", admin_dsn, capsys=capsys)
    assert code == 0, err
    assert PASSWORD not in script + err and PASSWORD[:6] not in script
    assert f"Read from host=127.0.0.1 port={server.port} dbname=postgres user=postgres:" in script
    assert f"server_version_num {version}" in script
    assert "pg_stat_statements not installed in database postgres" in script
    assert "CREATE EXTENSION /* pg-regression-radar */ IF NOT EXISTS pg_stat_statements" in script
    applied = run_psql_script(server.dsn, script)
    assert applied.returncode == 0, applied.stderr

    code, out, err = run_radar("--lake", lake, "--fleet-file", str(fleet_file), "snapshot", capsys=capsys)
    assert code == 0, out + err
    with psycopg.connect(server.dsn_for(user=role), autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row == (False,)  # the login the script made, not a superuser

    # Read again: the extension is there now, so no CREATE EXTENSION step, its version is named.
    code, again, _ = run_radar("setup-sql", "--dsn", server.dsn, capsys=capsys)
    assert code == 0 and "CREATE EXTENSION" not in again
    assert re.search(r"pg_stat_statements 1\.\d+ installed in database postgres", again)


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://radar_monitor:{PASSWORD}@127.0.0.1:1/postgres",  # nothing listens on port 1
        f"postgresql://radar_monitor:{PASSWORD}%zz@127.0.0.1/postgres",  # libpq quotes a bad %-escape
        f"host=127.0.0.1 port=1 user=radar_monitor password={PASSWORD} dbname=postgres connect_timeout=2",
    ],
)
def test_an_unreachable_dsn_is_one_line_on_stderr_exit_3_without_the_password(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_radar("setup-sql", "--dsn", dsn, capsys=capsys)
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: setup-sql could not read the server")
    assert PASSWORD not in err and PASSWORD[:6] not in err


def test_dsn_and_version_flag_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["setup-sql", "--dsn", "postgresql://x@127.0.0.1:1/p", "--server-version-num", "170000"])
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
