"""The docs site's reference pages are generated from the code (docsgen/reference.py, run by the mkdocs hook
at every `make docs`): every config key, CLI flag, lake table and column, DuckDB view and JSON contract has
an entry, the site's nav holds every page, and the README stays a short front page (issue 29, item 1).

Each check parses the page's text and names what is missing, so a key, flag or table the generator skips
(or renders where it cannot be found) fails here; the mutation tests show the checks do notice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from docsgen import reference

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------------------------------------
# What each page lists, read back from its text


def config_entries(page: str) -> set[str]:
    """``table.key`` for every row of the configuration page, under the table header it sits in."""
    out, table = set(), None
    for line in page.splitlines():
        header = re.match(r"\*\*`\[([\w.]+)\]`\*\*", line)
        if header:
            table = header.group(1)
        row = re.match(r"\| `(\w+)` \|", line)
        if row and table is not None:
            out.add(f"{table}.{row.group(1)}")
    return out


def cli_entries(page: str) -> set[tuple[str, str]]:
    """(command, option string) of every argument row: command "" for the global options."""
    out, command = set(), None
    for line in page.splitlines():
        if line == "## Global options":
            command = ""
        elif line.startswith("## "):
            command = None
        heading = re.match(r"### `radar ([\w -]+)`", line)
        if heading:
            command = heading.group(1)
        if command is not None and line.startswith("| `-"):
            first = line.split("|")[1]
            for option in re.findall(r"(--?[\w-]+)", first.split("`")[1]):
                out.add((command, option))
    return out


def table_entries(page: str) -> dict[str, set[str]]:
    """Table name -> the columns listed under its heading."""
    out: dict[str, set[str]] = {}
    table = None
    for line in page.splitlines():
        heading = re.match(r"## `(\w+)`", line)
        if heading:
            table = heading.group(1)
            out[table] = set()
        row = re.match(r"\| `(\w+)` \| `", line)
        if row and table is not None:
            out[table].add(row.group(1))
    return out


def missing_config_keys(page: str) -> list[str]:
    return sorted(set(reference.config_keys()) - config_entries(page))


def missing_cli_flags(page: str) -> list[tuple[str, str]]:
    from jobs.cli.parser import build_parser

    global_options = reference._global_flags(build_parser())
    listed = cli_entries(page)
    missing = []
    for command, option in reference.cli_flags():
        where = "" if option in global_options else command
        if (where, option) not in listed:
            missing.append((command, option))
    return sorted(set(missing))


def missing_table_columns(page: str) -> list[str]:
    from jobs.schemas.registry import TABLES

    listed = table_entries(page)
    missing = []
    for name, table in TABLES.items():
        if name not in listed:
            missing.append(name)
            continue
        missing += [f"{name}.{c}" for c in table.column_names if c not in listed[name]]
    return missing


# ---------------------------------------------------------------------------------------------------------
# The pages as generated


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {path: render() for path, render in reference.PAGES.items() if path != "reference/dagster.md"}


def test_every_config_key_has_an_entry(pages: dict[str, str]) -> None:
    assert len(reference.config_keys()) > 100
    assert missing_config_keys(pages["reference/config.md"]) == []


def test_every_cli_command_and_flag_has_an_entry(pages: dict[str, str]) -> None:
    page = pages["reference/cli.md"]
    assert {c for c, _ in reference.cli_flags() if c} == set(reference.cli_commands())
    for command in reference.cli_commands():
        assert f"### `radar {command}`" in page, command
    assert missing_cli_flags(page) == []


def test_every_lake_table_and_column_has_an_entry(pages: dict[str, str]) -> None:
    assert missing_table_columns(pages["reference/tables.md"]) == []


def test_every_duckdb_view_and_json_contract_has_an_entry(pages: dict[str, str]) -> None:
    defined = set()
    for path in (ROOT / "sql" / "duckdb").glob("views_*.sql"):
        defined |= set(re.findall(r"CREATE OR REPLACE VIEW (\w+)", path.read_text(), re.IGNORECASE))
    assert len(defined) > 10
    for view in defined:
        assert f"### `{view}`" in pages["reference/views.md"], view
    for path in sorted((ROOT / "jobs" / "contracts").glob("*.json")):
        assert f"## `{path.name}`" in pages["reference/contracts.md"], path.name


def test_a_key_flag_or_table_without_an_entry_is_named(pages: dict[str, str]) -> None:
    """The checks above notice a missing row: each page with one entry taken out."""
    config = pages["reference/config.md"]
    assert missing_config_keys(config.replace("| `statement_timeout_ms` |", "| x |", 1)) == [
        "collector.statement_timeout_ms"
    ]
    cli = pages["reference/cli.md"]
    assert ("detect", "--fail-on-detect") in missing_cli_flags(cli.replace("`--fail-on-detect", "`x", 1))
    tables = pages["reference/tables.md"]
    assert missing_table_columns(tables.replace("## `deploy_events`", "## deploy_events", 1)) == [
        "deploy_events"
    ]


def test_the_dagster_page_lists_every_asset_job_schedule_and_sensor() -> None:
    from orchestration.definitions import defs

    page = reference.dagster_page()
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        assert f"### `{key.to_user_string()}`" in page, key
    for definition in [*(defs.jobs or ()), *(defs.schedules or ()), *(defs.sensors or ())]:
        assert f"| `{definition.name}` |" in page, definition.name


# ---------------------------------------------------------------------------------------------------------
# The site and the README


def nav_pages(nav: list[object]) -> list[str]:
    out: list[str] = []
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            out += nav_pages(value) if isinstance(value, list) else [str(value)]
    return out


def test_the_nav_holds_every_page_and_the_generated_ones() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["hooks"] == ["docsgen/hooks.py"]
    nav = nav_pages(config["nav"])
    written = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    generated = {*reference.PAGES, "changelog.md"}
    assert sorted(nav) == sorted(written | generated)


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    first_block = text[text.index("```") :].split("\n")[1:3]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    for link in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", text):
        assert (ROOT / link).exists(), link
