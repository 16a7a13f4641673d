"""What the regressions asset's Dagster metadata must hold."""

from __future__ import annotations

import re
from typing import Any

import dagster as dg
from markdown_it import MarkdownIt


def parsed_cells(markdown: str) -> list[list[str]]:
    """The table as markdown-it parses it (GFM tables): the text a reader sees in each header and body cell
    per row; a cell that Markdown would render as anything but plain text (emphasis, a link, HTML) fails."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    assert any(t.type == "table_open" for t in tokens), "no table parsed"
    rows: list[list[str]] = []
    for i, token in enumerate(tokens):
        if token.type == "tr_open":
            rows.append([])
        elif token.type in ("th_open", "td_open"):
            children = tokens[i + 1].children or []
            assert all(child.type == "text" for child in children), [c.type for c in children]
            rows[-1].append("".join(child.content for child in children))
    return rows


def check_regressions_metadata(by_key: dict[str, Any]) -> None:
    """The analysis assets' metadata tables (from a real materialization on a small lake, in
    tests/integration/orchestration/test_orchestration.py's regressions test, which already pays for the run)
    render as tables."""
    text = by_key["performance_regressions"]["regressions"].value
    cells = parsed_cells(text)
    header, body = cells[0], cells[1:]
    assert "p_value" in header and "slowdown_ratio" in header and len(body) >= 1
    assert all(len(row) == len(header) for row in body)
    row = dict(zip(header, body[0], strict=True))
    assert re.fullmatch(r"(< 1e-10|\d\.\de-\d\d|0\.\d+)", row["p_value"]), row["p_value"]
    assert re.fullmatch(r"×\d+(\.\d+)?", row["slowdown_ratio"]), row["slowdown_ratio"]
    assert row["after_mean_ms"].endswith((" ms", " s"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", row["detected_change_at"])
    for key in ("resource_regressions", "instance_slowdowns", "findings"):
        for value in by_key[key].values():
            if isinstance(value, dg.MarkdownMetadataValue) and value.value != "_(no rows)_":
                parsed = parsed_cells(value.value)
                assert all(len(r) == len(parsed[0]) for r in parsed), key
