"""The configuration reference (a page of the docs site) and a commented example file, generated from the
config classes.

The text of each key is the docstring under its field (or the comment on its line), so the reference
cannot drift from the code: the docs site renders ``reference_markdown()`` at every build
(docsgen/reference.py), ``tests/unit/docs`` checks every key has an entry, and
``tests/unit/config/test_config_file.py`` checks the committed ``data/radar.example.toml`` is current.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import cache

from jobs.config.loader import Leaf, dotted, leaves, plain
from jobs.config.sections import SECRET_KEYS, RadarSettings


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its text, for ``cls`` and its bases: the docstring under the field, else the comment on
    its line, else the comment block above it (or above the group of fields it belongs to)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not hasattr(klass, "__dataclass_fields__"):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        statements = body.body
        for position, node in enumerate(statements):
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            name = node.target.id
            after = statements[position + 1] if position + 1 < len(statements) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                out[name] = " ".join(inspect.cleandoc(after.value.value).split())
                continue
            trailing = re.search(r"#\s*(.+)$", lines[node.end_lineno - 1])
            if trailing:
                out[name] = trailing.group(1).strip()
                continue
            above = _comment_above(lines, node.lineno - 1)
            if above:
                out[name] = above
    return out


def _comment_above(lines: list[str], index: int) -> str:
    """The ``#`` block right above line ``index``, walking up over the fields of its group (no blank line)."""
    row = index - 1
    while row >= 0 and re.match(r"\s*\w+: .+=", lines[row]) and not lines[row].strip().startswith("#"):
        row -= 1
    block = []
    while row >= 0 and lines[row].strip().startswith("#"):
        block.append(lines[row].strip().lstrip("#").strip())
        row -= 1
    return " ".join(reversed(block))


def _section_classes() -> dict[tuple[str, ...], type]:
    out: dict[tuple[str, ...], type] = {(): RadarSettings}
    import typing
    from dataclasses import fields, is_dataclass

    def walk(cls: type, prefix: tuple[str, ...]) -> None:
        hints = typing.get_type_hints(cls)
        for item in fields(cls):
            tp = hints[item.name]
            if isinstance(tp, type) and is_dataclass(tp):
                out[(*prefix, item.name)] = tp
                walk(tp, (*prefix, item.name))

    walk(RadarSettings, ())
    return out


def describe(leaf: Leaf) -> str:
    classes = _section_classes()
    return field_docs(classes[leaf.key[:-1]]).get(leaf.key[-1], "")


def _toml_value(value: object) -> str:
    value = plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def leaves_by_table() -> list[Leaf]:
    """Every key, a table's own keys together before its sub-tables (TOML allows a table once)."""
    grouped: dict[tuple[str, ...], list[Leaf]] = {}
    for leaf in leaves():
        grouped.setdefault(leaf.key[:-1], []).append(leaf)
    return [leaf for table in grouped for leaf in grouped[table]]  # tables in order of first appearance


def reference_markdown() -> str:
    """Every key, table by table: default and meaning."""
    classes = _section_classes()
    parts = []
    current: tuple[str, ...] | None = None
    for leaf in leaves_by_table():
        table = leaf.key[:-1]
        if table != current:
            current = table
            doc = (inspect.getdoc(classes[table]) or "").split("\n\n")[0].replace("\n", " ")
            doc = re.sub(r"^\[[\w.]+\]:\s*", "", doc)
            parts.append(f"\n**`[{dotted(table)}]`** {doc}\n\n| key | default | meaning |\n|---|---|---|")
        default = "(secret: unset)" if dotted(leaf.key) in SECRET_KEYS else f"`{_toml_value(leaf.default)}`"
        meaning = describe(leaf).replace("|", "\\|")
        parts.append(f"| `{leaf.key[-1]}` | {default} | {meaning} |")
    return "\n".join(parts).strip() + "\n"


def example_toml() -> str:
    """A config file with every key at its default, commented out (``radar config init``)."""
    lines = ["# pg-regression-radar configuration: every key at its default. Uncomment what you change.", ""]
    current: tuple[str, ...] | None = None
    for leaf in leaves_by_table():
        table = leaf.key[:-1]
        if table != current:
            current = table
            lines += ["", f"[{dotted(table)}]"]
        text = describe(leaf)
        if text:
            lines.append(f"# {text}")
        lines.append(f"# {leaf.key[-1]} = {_toml_value(leaf.default)}")
    return "\n".join(lines).strip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.config.reference``: print the reference (Markdown); ``--example PATH``: write the
    commented example file instead (``make config-reference``)."""
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stdout.write(reference_markdown())
        return 0
    if len(args) != 2 or args[0] != "--example":
        sys.stderr.write("usage: python -m jobs.config.reference [--example PATH]\n")
        return 2
    Path(args[1]).write_text(example_toml())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
