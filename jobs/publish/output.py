"""Rows out of the CLI: a rich table for people, JSON or CSV for scripts.

The JSON shape (stable; docs/scripting.md):

- one JSON array per command run, one object per row, keys in column order, every row the same keys;
  printed one row per line, so ``jq`` and line tools both work; ``jsonl`` (JSON Lines) is the same objects
  without the array: one object per line and nothing else, what a file appended to by cron needs (each
  run's lines stay valid after the previous run's);
- timestamps are ISO-8601 UTC strings with microseconds and a ``Z`` (``2026-11-30T10:00:00.000000Z``);
  a timestamp without a zone (a DuckDB ``TIMESTAMP``) is printed as it is, without an offset;
  dates are ``YYYY-MM-DD``; durations are seconds (a number);
- numbers are JSON numbers, except query and plan identifiers (columns ``queryid``, ``planid``): a signed
  int64 that JavaScript cannot hold exactly, so a decimal string (as in regression_alert.schema.json);
  NaN and infinities are ``null``;
- a missing value is ``null``; lists are arrays; structs are objects; columns that hold a JSON document in
  the lake (``plan_json``, ``plan_diff``) stay strings, exactly as stored.

CSV has the same columns and values (a header line first; null is an empty field; lists and structs are
JSON text; booleans ``true``/``false``). The table is for reading: long cells fold, rows may be cut at
``max_rows`` and a line says how many were left out. Every message that is not a row goes to stderr in
the JSON and CSV formats, so stdout parses.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import IO, Any

from jobs.escaping import terminal_text, visible_controls

FORMATS: tuple[str, ...] = ("table", "json", "jsonl", "csv")
MACHINE_FORMATS: frozenset[str] = frozenset({"json", "jsonl", "csv"})
"""Formats whose stdout carries only rows (every message goes to stderr)."""
IDENTIFIER_COLUMNS: frozenset[str] = frozenset({"queryid", "planid"})
"""int64 identifiers written as decimal strings in JSON and CSV alike."""


def json_value(value: Any, column: str = "") -> Any:
    """One cell as its JSON value under the documented rules."""
    if value is None:
        return None
    if column in IDENTIFIER_COLUMNS and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return json_value(float(value))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat(timespec="microseconds")
        return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_value(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "to_list"):  # a polars Series inside a list column
        return [json_value(v) for v in value.to_list()]
    return str(value)


def plain_rows(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts with exactly ``columns``, in that order (absent keys are null)."""
    return [{c: json_value(row.get(c), c) for c in columns} for row in rows]


def frame_rows(frame: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, JSON-ready rows) of a polars DataFrame."""
    columns = list(frame.columns)
    return columns, plain_rows(frame.iter_rows(named=True), columns)


def rows_to_json(rows: Sequence[Mapping[str, Any]]) -> str:
    """A JSON array, one object per line; ends with a newline."""
    if not rows:
        return "[]\n"
    lines = [json.dumps(row, ensure_ascii=False, allow_nan=False) for row in rows]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def rows_to_jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    """JSON Lines: one object per line, each line ending with a newline; no rows: nothing."""
    return "".join(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n" for row in rows)


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    return str(value)


def rows_to_csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def table_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def cut_cell(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters: cut with an ellipsis (0: never cut)."""
    flat = visible_controls(text.replace("\r\n", "\n").replace("\n", "⏎"), keep_lines=False)
    return flat if not width or len(flat) <= width else flat[: max(width - 1, 1)] + "…"


def table_width(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> int:
    """The characters a rich table of these cells needs on one line (borders and padding included)."""
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    return sum(w + 3 for w in widths) + 1


def vertical_records(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """One block per row, a ``column │ value`` line per column (psql's expanded display): what a table too
    wide for the terminal folds to."""
    pad = max(len(c) for c in columns)
    blocks = []
    for n, row in enumerate(cells, start=1):
        lines = [f"─[ row {n} ]" + "─" * max(pad - 6, 4)]
        lines += [f"{c.ljust(pad)} │ {v}" for c, v in zip(columns, row, strict=True)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def cut_note(shown: int, total: int) -> str:
    return f"showing {shown} of {total} rows (--max-rows N shows more, --max-rows 0 all of them)"


def write_rows(
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    fmt: str,
    *,
    stdout: IO[str],
    stderr: IO[str],
    title: str | None = None,
    max_rows: int | None = None,
    console: Any = None,
    cell_width: int | None = None,
) -> int:
    """Write JSON-ready rows in ``fmt``; returns how many rows were written.

    ``max_rows`` None or 0: every row. When rows are left out, one line says so (on the table's console
    for ``table``, on ``stderr`` otherwise, so stdout still parses). ``cell_width`` (table only; None: the
    default folding table): each cell on one line, cut with an ellipsis at that many characters (0: never
    cut), and when the table is still wider than the console the rows print as vertical records.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    shown = list(rows) if not max_rows else list(rows)[:max_rows]
    note = cut_note(len(shown), len(rows)) if len(shown) < len(rows) else None
    if fmt == "json":
        stdout.write(rows_to_json(shown))
    elif fmt == "jsonl":
        stdout.write(rows_to_jsonl(shown))
    elif fmt == "csv":
        stdout.write(rows_to_csv(columns, shown))
    else:
        from rich.console import Console
        from rich.table import Table

        out = console or Console(file=stdout)
        if cell_width is not None and columns:
            cells = [[cut_cell(table_cell(row.get(c)), cell_width) for c in columns] for row in shown]
            if shown and table_width(columns, cells) > out.width:
                if title:
                    out.print(title, markup=False, highlight=False)
                out.print(
                    terminal_text(vertical_records(columns, cells)),
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            else:
                table = Table(title=title, show_lines=False)
                for name in columns:
                    table.add_column(name, no_wrap=True)
                for line in cells:
                    table.add_row(*(terminal_text(c) for c in line))  # fleet text: never markup
                out.print(table, markup=False, highlight=False)
        else:
            table = Table(title=title, show_lines=False)
            for name in columns:
                table.add_column(name, overflow="fold")
            for row in shown:
                table.add_row(*(terminal_text(table_cell(row.get(c))) for c in columns))
            out.print(table)
        if note:
            out.print(note, markup=False, highlight=False)
            note = None
    if note:
        stderr.write(note + "\n")
    return len(shown)


def write_frame(frame: Any, fmt: str, **kwargs: Any) -> int:
    """``write_rows`` for a polars DataFrame."""
    columns, rows = frame_rows(frame)
    return write_rows(columns, rows, fmt, **kwargs)
