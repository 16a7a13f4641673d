"""Markdown tables for people: what the Dagster UI shows as asset metadata (and any other Markdown page).

``markdown_table(frame, formats)`` is pure: a polars frame in, a GitHub-flavoured Markdown table out. Each
cell is formatted for reading, not for round-tripping: p-values as ``1.3e-31`` (``< 1e-10`` below that),
ratios as ``×82``, milliseconds with a unit (``12.3 ms``, ``4.56 s``), timestamps as ISO-8601 to the minute
in UTC (``2026-11-29T10:05Z``). A cell never breaks the table: pipes are escaped, newlines become ``⏎``
and long text is cut with an ellipsis at ``max_width`` characters (a hard-wrapped ASCII table, as polars'
own MARKDOWN formatting prints, splits values across lines: ``1.3472e-3`` over ``1``).
Markdown syntax in a cell is escaped, so a query's ``*`` or ``_`` is shown, not read as emphasis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import polars as pl

from jobs.escaping import markdown_text
from jobs.readable import p_value_text, ratio_text

CellFormat = Literal["text", "int", "float", "p_value", "ratio", "ms", "timestamp", "bytes"]
MAX_CELL_WIDTH = 120
DEFAULT_MAX_ROWS = 50


def format_p_value(value: float) -> str:
    """``0.042``, ``1.3e-05``, ``< 1e-10`` (jobs.readable: every surface alike)."""
    return p_value_text(value)


def format_ratio(value: float) -> str:
    """``×82``, ``×1.4``, ``×0.51`` (after / before; jobs.readable: every surface alike)."""
    return ratio_text(value)


def format_ms(value: float) -> str:
    """Milliseconds with a unit: ``0.042 ms``, ``12.3 ms``, ``4.56 s``, ``2.1 min``."""
    if abs(value) >= 60_000:
        return f"{value / 60_000:.3g} min"
    if abs(value) >= 1_000:
        return f"{value / 1_000:.3g} s"
    return f"{value:.3g} ms"


def format_timestamp(value: datetime | date) -> str:
    """ISO-8601 to the minute, UTC (a naive datetime is taken as UTC, as the lake stores them)."""
    if isinstance(value, datetime):
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return moment.strftime("%Y-%m-%dT%H:%MZ")
    return value.isoformat()


def format_bytes(value: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _number(fmt: Callable[[float], str]) -> Callable[[Any], str]:
    def cell(value: Any) -> str:
        number = float(value)
        return "" if math.isnan(number) else fmt(number) if math.isfinite(number) else str(number)

    return cell


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _number(lambda v: f"{v:.4g}")(value)
    if isinstance(value, datetime | date):
        return format_timestamp(value)
    if isinstance(value, timedelta):
        return format_ms(value.total_seconds() * 1000)
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value)
    return str(value)


FORMATTERS: dict[str, Callable[[Any], str]] = {
    "text": _plain,
    "int": lambda v: f"{int(v):,}",
    "float": _number(lambda v: f"{v:.4g}"),
    "p_value": _number(format_p_value),
    "ratio": _number(format_ratio),
    "ms": _number(format_ms),
    "timestamp": format_timestamp,
    "bytes": _number(format_bytes),
}


def default_format(name: str, dtype: pl.DataType) -> CellFormat:
    """The format a column gets when ``formats`` does not name it: by its name, then its type."""
    if name in ("p_value", "p") or name.endswith("_p_value"):
        return "p_value"
    if name.endswith("_ms") and dtype.is_numeric():
        return "ms"
    if name.endswith("_ratio") or name == "ratio":
        return "ratio"
    if isinstance(dtype, pl.Datetime):
        return "timestamp"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    return "text"


def escape_cell(text: str, max_width: int = MAX_CELL_WIDTH) -> str:
    """One cell's text, shown as it is inside a Markdown table row (``jobs.escaping.markdown_text``): one
    line (a line break is ``⏎``: the Dagster UI does not render raw HTML such as ``<br>``), Markdown syntax
    and autolinks escaped, at most ``max_width`` characters (cut with an ellipsis)."""
    return markdown_text(text, max_width=max_width)


def markdown_table(
    frame: pl.DataFrame,
    formats: Mapping[str, CellFormat] | None = None,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_width: int = MAX_CELL_WIDTH,
) -> str:
    """``frame`` as a Markdown table (at most ``max_rows`` rows, then a line saying how many were left
    out); ``formats`` names a column's format where its name and type do not say it. Empty:
    ``_(no rows)_``."""
    if frame.is_empty():
        return "_(no rows)_"
    formats = formats or {}
    unknown: set[str] = set()
    cells: list[Callable[[Any], str]] = []
    for name, dtype in frame.schema.items():
        kind = formats.get(name) or default_format(name, dtype)
        if kind not in FORMATTERS:
            unknown.add(kind)
            continue
        cells.append(FORMATTERS[kind])
    if unknown:
        raise ValueError(f"unknown cell formats {sorted(unknown)} (one of {', '.join(FORMATTERS)})")
    header = "| " + " | ".join(escape_cell(c, max_width) for c in frame.columns) + " |"
    rule = "|" + "|".join(" ---: " if _is_right(frame.schema[c]) else " --- " for c in frame.columns) + "|"
    lines = [header, rule]
    for row in frame.head(max_rows).iter_rows():
        text = ("" if v is None else fmt(v) for fmt, v in zip(cells, row, strict=True))
        lines.append("| " + " | ".join(escape_cell(t, max_width) for t in text) + " |")
    if frame.height > max_rows:
        lines += ["", f"_{frame.height - max_rows} more rows not shown ({frame.height} in all)._"]
    return "\n".join(lines)


def _is_right(dtype: pl.DataType) -> bool:
    return dtype.is_numeric() and not isinstance(dtype, pl.Boolean)
