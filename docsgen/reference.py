"""The reference pages of the docs site, rendered from the code: config keys (the config classes), CLI
commands and flags (the argparse parser), lake tables (jobs/schemas), DuckDB views (sql/duckdb), JSON
contracts (jobs/contracts) and the Dagster definitions. ``PAGES`` maps each page's path under docs/ to
the function that renders it; ``tests/unit/docs`` checks every key, flag and table has an entry."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GENERATED = "<!-- generated from the code at every docs build (docsgen/reference.py); do not edit -->"


def cell(text: object) -> str:
    """Text for a Markdown table cell: one line, ``|`` escaped, ``<`` escaped outside code spans."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


# ---------------------------------------------------------------------------------------------------------
# Configuration keys


def config_page() -> str:
    from jobs.config.reference import reference_markdown

    return (
        f"# Configuration reference\n\n{GENERATED}\n\n"
        "Every key of `data/radar.toml`, table by table, with its default and meaning, read from the config "
        "classes (`jobs/config/sections.py` and each domain's config class: the docstring under each field). "
        "`data/radar.example.toml` (`make config-reference`) lists the same keys commented out. How the "
        "file, `RADAR_<TABLE>__<KEY>` variables, flags and `--set` combine: "
        "[Configuration](../configuration.md).\n\n" + reference_markdown()
    )


def config_keys() -> list[str]:
    """Every key as ``table.key`` (dotted)."""
    from jobs.config.loader import dotted, leaves

    return [dotted(leaf.key) for leaf in leaves()]


# ---------------------------------------------------------------------------------------------------------
# CLI


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help in (None, argparse.SUPPRESS):
        return ""
    return parser._get_formatter()._expand_help(action)


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS, False) or isinstance(
        action, argparse._StoreTrueAction | argparse._AppendAction
    ):
        return ""
    return f"`{action.default}`"


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
        return f"`{names}`"
    if action.choices:
        choices = " \\| ".join(f"`{c}`" for c in action.choices)
        return f"`{action.dest}` ({choices})"
    return f"`{action.metavar or action.dest}`"


def _rows(parser: argparse.ArgumentParser, skip: set[str]) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if skip & set(action.option_strings):
            continue
        choices = action.choices if action.option_strings and action.choices else None
        extra = f" One of {', '.join(f'`{c}`' for c in choices)}." if choices else ""
        rows.append(f"| {_argument(action)} | {_default(action)} | {cell(_help(parser, action) + extra)} |")
    return rows


def _global_flags(parser: argparse.ArgumentParser) -> set[str]:
    for group in parser._action_groups:
        if group.title and group.title.startswith("global options"):
            return {s for a in group._group_actions for s in a.option_strings}
    return set()


def cli_page() -> str:
    from jobs.cli.parser import build_parser

    parser = build_parser()
    globals_ = _global_flags(parser)
    header = "| argument | default | meaning |\n|---|---|---|"
    out = [
        f"# CLI reference\n\n{GENERATED}\n\n"
        "Every command and flag of `radar`, read from its parser (`jobs/cli/parser.py`, `build_parser()`); "
        "`radar COMMAND --help` prints the same. Exit codes are per command (below); scripting with them: "
        "[Use from scripts](../scripting.md).\n\n"
        "## Global options\n\nGiven before or after the command name.\n\n" + header,
        *_rows(parser, skip=set()),
        "",
        "## Commands\n",
        "| command | what it does |\n|---|---|",
        *(f"| [`radar {n}`](#radar-{n}) | {cell(h)} |" for n, h, _ in _subcommands(parser)),
        "",
    ]
    out += _command_sections(parser, "radar", globals_)
    return "\n".join(out) + "\n"


def _command_sections(parser: argparse.ArgumentParser, prefix: str, globals_: set[str]) -> list[str]:
    out = []
    for name, _help_text, sub in _subcommands(parser):
        full = f"{prefix} {name}"
        out += [f"### `{full}` {{#{full.replace(' ', '-')}}}", "", cell(sub.description or ""), ""]
        rows = _rows(sub, skip=globals_)
        if rows:
            out += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
        out += ["Also the [global options](#global-options).", ""]
        if sub.epilog:
            out += ["```text", sub.epilog.rstrip(), "```", ""]
        out += _command_sections(sub, full, globals_)
    return out


def cli_flags() -> list[tuple[str, str]]:
    """Every (command, option string) of the parser; command "" for the top level."""
    from jobs.cli.parser import build_parser

    out: list[tuple[str, str]] = []

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                out.extend((command, s) for s in action.option_strings)
        for name, _, sub in _subcommands(parser):
            walk(sub, f"{command} {name}".strip())

    walk(build_parser(), "")
    return out


def cli_commands() -> list[str]:
    from jobs.cli.parser import build_parser

    return [name for name, _, _ in _subcommands(build_parser())]


# ---------------------------------------------------------------------------------------------------------
# Lake tables


def tables_page() -> str:
    from jobs.schemas.registry import TABLES
    from jobs.schemas.table import SCHEMA_VERSION

    out = [
        f"# Lake tables\n\n{GENERATED}\n\n"
        f"Every Parquet table of the lake (schema version {SCHEMA_VERSION}), read from `jobs/schemas/` "
        "(`registry.TABLES`): its columns with their types and meaning, its hive partition folders and the "
        "columns that identify a row. Each table is also a DuckDB view of the same name "
        "([DuckDB views](views.md)); where the files live: [The lake](../lake.md).\n",
        "| table | what a row is |\n|---|---|",
        *(f"| [`{n}`](#{n}) | {cell(t.description)} |" for n, t in TABLES.items()),
        "",
    ]
    for name, table in TABLES.items():
        out += [f"## `{name}` {{#{name}}}", "", cell(table.description), ""]
        if table.partition_by:
            out.append(f"Partitioned by {', '.join(f'`{p}`' for p in table.partition_by)}.")
        if table.primary_key:
            out.append(f"A row is identified by {', '.join(f'`{k}`' for k in table.primary_key)}.")
        out += ["", "| column | type | meaning |", "|---|---|---|"]
        for column in table.columns:
            out.append(f"| `{column.name}` | `{column.kind.duckdb()}` | {cell(column.description)} |")
        out.append("")
    return "\n".join(out) + "\n"


def table_names() -> list[str]:
    from jobs.schemas.registry import TABLES

    return list(TABLES)


# ---------------------------------------------------------------------------------------------------------
# DuckDB views

VIEW = re.compile(r"CREATE\s+OR\s+REPLACE\s+VIEW\s+(\w+)\s+AS", re.IGNORECASE)


def derived_views() -> list[tuple[str, str, str, str]]:
    """(file, view, its comment, its SQL) of every view in sql/duckdb/views_*.sql, in file order."""
    out = []
    for path in sorted((ROOT / "sql" / "duckdb").glob("views_*.sql")):
        for statement in path.read_text().split(";\n"):
            match = VIEW.search(statement)
            if not match:
                continue
            head = statement[: match.start()]
            comment = " ".join(
                line.strip().removeprefix("--").strip()
                for line in head.splitlines()
                if line.strip().startswith("--")
            )
            out.append((path.name, match.group(1), comment, statement[match.start() :].strip() + ";"))
    return out


def views_page() -> str:
    from jobs.schemas.registry import TABLES

    views = derived_views()
    out = [
        f"# DuckDB views\n\n{GENERATED}\n\n"
        "`radar sql`, the notebooks and the weekly report read the lake through DuckDB views "
        "(`jobs/lake/views.py`; `radar views` prints their statements). Every [lake table](tables.md) is a "
        "base view of the same name (`sql/duckdb/base_table_view.sql`: hive partitions pruned by folder, "
        "files of different versions merged by column name, an empty view of the right types while the "
        "table has no file). The derived views below are defined in `sql/duckdb/views_*.sql`.\n",
        "## Base views\n",
        ", ".join(f"[`{n}`](tables.md#{n})" for n in TABLES),
        "",
        "## Derived views\n",
        "| view | file | what it shows |\n|---|---|---|",
        *(f"| [`{v}`](#{v}) | `{f}` | {cell(c)} |" for f, v, c, _ in views),
        "",
    ]
    for file, view, comment, sql in views:
        out += [f"### `{view}` {{#{view}}}", "", f"`sql/duckdb/{file}`. {cell(comment)}", ""]
        out += [
            '??? note "SQL"',
            "",
            "    ```sql",
            *("    " + line for line in sql.splitlines()),
            "    ```",
            "",
        ]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------
# JSON contracts


def _type_of(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "$ref" in schema:
        return f"`{schema['$ref']}`"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " or ".join(_type_of(s) for s in schema[key])
    kind = schema.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join(kinds)
    if "array" in kinds and isinstance(schema.get("items"), dict):
        text += f" of {_type_of(schema['items'])}"
    return text


def _property_rows(schema: dict[str, Any], prefix: str = "") -> list[str]:
    rows = []
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        flag = "yes" if name in required else ""
        rows.append(f"| `{path}` | {_type_of(sub)} | {flag} | {cell(sub.get('description', ''))} |")
        nested = [sub, *sub.get("oneOf", ()), *sub.get("anyOf", ())]
        for candidate in nested:
            if isinstance(candidate, dict) and "properties" in candidate:
                rows += _property_rows(candidate, f"{path}.")
            items = candidate.get("items") if isinstance(candidate, dict) else None
            if isinstance(items, dict) and "properties" in items:
                rows += _property_rows(items, f"{path}[].")
    return rows


def contract_files() -> list[Path]:
    return sorted((ROOT / "jobs" / "contracts").glob("*.json"))


def contracts_page() -> str:
    out = [
        f"# JSON contracts\n\n{GENERATED}\n\n"
        "The JSON Schemas (draft 2020-12) of what the radar sends out or takes in, from `jobs/contracts/`; "
        "tests validate the real payloads against them.\n",
        "| contract | title |\n|---|---|",
    ]
    contracts = [(p, json.loads(p.read_text())) for p in contract_files()]
    out += [
        f"| [`{p.name}`](#{p.stem.replace('.', '-')}) | {cell(s.get('title', ''))} |" for p, s in contracts
    ]
    out.append("")
    for path, schema in contracts:
        out += [
            f"## `{path.name}` {{#{path.stem.replace('.', '-')}}}",
            "",
            f"**{cell(schema.get('title', ''))}**",
        ]
        out += ["", cell(schema.get("description", "")), ""]
        rows = _property_rows(schema)
        if rows:
            out += ["| field | type | required | meaning |", "|---|---|---|---|", *rows, ""]
        for name, definition in schema.get("$defs", {}).items():
            out += [f"`$defs/{name}`: {cell(definition.get('description', ''))}", ""]
            rows = _property_rows(definition)
            if rows:
                out += ["| field | type | required | meaning |", "|---|---|---|---|", *rows, ""]
        out += ['??? note "The schema"', "", "    ```json"]
        out += ["    " + line for line in json.dumps(schema, indent=2).splitlines()]
        out += ["    ```", ""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Dagster


def dagster_page() -> str:
    from orchestration.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string())
    out = [
        f"# Dagster definitions\n\n{GENERATED}\n\n"
        "The assets, checks, jobs, schedules and sensors of `orchestration.definitions` (`defs`, what "
        "`make dev` loads); how they run: [Dagster](../dagster.md).\n",
        "## Assets\n",
        "| asset | group | partitions | upstream | checks |\n|---|---|---|---|---|",
    ]
    for key in keys:
        node = graph.get(key)
        name = key.to_user_string()
        partitions = node.partitions_def
        dims = getattr(partitions, "partitions_defs", None)
        if dims:
            part = ", ".join(f"{d.name} ({type(d.partitions_def).__name__})" for d in dims)
        else:
            part = type(partitions).__name__ if partitions is not None else ""
        deps = ", ".join(f"[`{p.to_user_string()}`](#{p.to_user_string()})" for p in sorted(node.parent_keys))
        checks = ", ".join(f"`{c.name}`" for c in sorted(node.check_keys, key=lambda c: c.name))
        out.append(f"| [`{name}`](#{name}) | {node.group_name} | {part} | {deps} | {checks} |")
    out.append("")
    for key in keys:
        node = graph.get(key)
        name = key.to_user_string()
        kinds = ", ".join(sorted(node.kinds))
        out += [f"### `{name}` {{#{name}}}", "", f"Group `{node.group_name}`; kinds: {kinds or 'none'}.", ""]
        out += [cell(node.description or ""), ""]
    out += ["## Jobs\n", "| job | what it runs |\n|---|---|"]
    out += [f"| `{job.name}` | {cell(job.description or '')} |" for job in sorted(defs.jobs or (), key=_name)]
    out += ["", "## Schedules\n", "| schedule | cron | job | what it does |\n|---|---|---|---|"]
    for schedule in sorted(defs.schedules or (), key=_name):
        out.append(
            f"| `{schedule.name}` | `{schedule.cron_schedule}` | `{schedule.job_name}` | "
            f"{cell(schedule.description or '')} |"
        )
    out += ["", "## Sensors\n", "| sensor | what it does |\n|---|---|"]
    out += [f"| `{s.name}` | {cell(s.description or '')} |" for s in sorted(defs.sensors or (), key=_name)]
    return "\n".join(out) + "\n"


def _name(definition: Any) -> str:
    return definition.name


# ---------------------------------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "reference/config.md": config_page,
    "reference/cli.md": cli_page,
    "reference/tables.md": tables_page,
    "reference/views.md": views_page,
    "reference/contracts.md": contracts_page,
    "reference/dagster.md": dagster_page,
}


def main() -> int:
    """``python -m docsgen.reference OUT_DIR``: write the pages (to look at them without mkdocs)."""
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "build/reference")
    for path, render in PAGES.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
