"""`radar setup-sql`: the roles, grants and EXPLAIN helper SQL for PostgreSQL 13-18 (pure rendering)."""

from __future__ import annotations

import re

import pytest

from jobs.cli.main import main
from jobs.plans.setup_sql import SetupFacts, SetupRoles, SetupSqlError, setup_script, setup_steps


def names(version: int, databases: tuple[str, ...] = ("postgres",)) -> list[tuple[str, str | None]]:
    return [(s.name, s.database) for s in setup_steps(version, databases)]


def test_steps_per_version() -> None:
    assert names(130000, ("a", "b")) == [
        ("monitor role", None),
        ("explain role", None),
        ("explain read access", "a"),  # no pg_read_all_data before 14: per database, per schema
        ("explain read access", "b"),
    ]
    assert names(140000) == [("monitor role", None), ("explain role", None), ("explain read access", None)]
    assert names(150000) == [
        ("monitor role", None),
        ("explain role", None),
        ("monitor parameters", None),
        ("explain read access", None),
    ]
    for version in (160000, 170000, 180000):
        assert names(version, ("a", "b"))[-2:] == [("explain helper", "a"), ("explain helper", "b")]


def test_texts_grant_reading_only_and_lock_the_helper_down() -> None:
    # Every statement carries the radar's marker (the fleet bootstrap sends them); read them without it.
    texts = {s.name: s.sql.replace("/* pg-regression-radar */ ", "") for s in setup_steps(180000)}
    everything = "\n".join(texts.values())
    code = "\n".join(line for line in everything.splitlines() if not line.lstrip().startswith("--"))
    for forbidden in ("pg_write_all_data", "pg_execute_server_program", "SUPERUSER ", "INSERT", "UPDATE"):
        assert forbidden not in code.replace("NOSUPERUSER", ""), forbidden
    assert 'GRANT pg_monitor TO "radar_monitor"' in code
    assert 'GRANT pg_read_all_data TO "radar_explain"' in code
    assert "GRANT SET ON PARAMETER pg_stat_statements.track TO" in code
    helper = texts["explain helper"]
    assert "SECURITY DEFINER" in helper and "SET search_path = pg_catalog, pg_temp" in helper
    assert 'OWNER TO "radar_explain"' in helper
    assert 'REVOKE ALL ON FUNCTION "radar"."explain_generic"(text, text) FROM PUBLIC' in helper
    assert 'GRANT EXECUTE ON FUNCTION "radar"."explain_generic"(text, text) TO "radar_monitor"' in helper
    # Every function call and operator of the helper's own code is schema-qualified.
    body = helper.split("AS $radar_explain$")[1].split("$radar_explain$")[0]
    calls = re.findall(r"(?<![\w.])([a-z_]+)\(", body)
    assert set(calls) <= {"OPERATOR"}, calls


def test_bad_names_and_versions_are_refused() -> None:
    with pytest.raises(SetupSqlError, match="plain SQL name"):
        setup_steps(180000, roles=SetupRoles(monitor_role='x"; DROP ROLE postgres; --'))
    with pytest.raises(SetupSqlError, match=r"schema\.function"):
        setup_steps(180000, roles=SetupRoles(helper="explain_generic"))
    with pytest.raises(SetupSqlError, match="two different roles"):
        setup_steps(180000, roles=SetupRoles(monitor_role="r", explain_role="r"))
    with pytest.raises(SetupSqlError, match="PostgreSQL 13"):
        setup_steps(120000)


def test_cli_prints_a_psql_script_per_database(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["setup-sql", "--server-version-num", "170004", "--database", "app", "--database", "crm"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.index('\\connect "app"') < out.index('\\connect "crm"')
    assert out.count("CREATE OR REPLACE FUNCTION") == 2 and "SET ON PARAMETER pg_stat_statements.track" in out
    assert setup_script(setup_steps(170004, ["app", "crm"]), 170004) == out
    old = main(["setup-sql", "--server-version-num", "150000"])
    assert (
        old == 0
        and "No EXPLAIN helper: EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16" in capsys.readouterr().out
    )
    assert main(["setup-sql", "--monitor-role", "bad name"]) == 2


def test_what_dsn_read_becomes_the_scripts_header() -> None:
    """--dsn's facts as header comments: a missing extension, a missing or unreadable preload setting."""
    missing = SetupFacts(180006, None, "app", "auto_explain").notes("host=db user=admin")
    assert missing[0] == (
        "Read from host=db user=admin: server_version_num 180006, pg_stat_statements not installed in "
        "database app (the last step creates it)."
    )
    assert "not in shared_preload_libraries" in missing[1] and len(missing) == 2
    assert SetupFacts(170004, "1.11", "app", ' "pg_stat_statements" , auto_explain').preloaded is True
    assert len(SetupFacts(170004, "1.11", "app", "pg_stat_statements").notes("x")) == 1
    unknown = SetupFacts(170004, "1.11", "app", None)
    assert unknown.preloaded is None and "could not be read" in unknown.notes("x")[1]
