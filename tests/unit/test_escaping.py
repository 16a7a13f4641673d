"""Hostile text through every output language (issue 28): each escaping function's result, parsed by that
language's own reader, shows the value as text and nothing else.

Hypothesis feeds strings built from the pieces an attacker would use (backticks, brackets, rich tags,
``<script>``, ``<!channel>``, Markdown links and images, autolinks, control characters, bidi overrides)
mixed with arbitrary text; fixed cases cover each piece alone and a 1 MB value.
"""

from __future__ import annotations

import io
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rich.console import Console
from rich.text import Text

from jobs.escaping import (
    escape_mrkdwn,
    markdown_code,
    markdown_text,
    one_line,
    terminal_markup,
    terminal_text,
    visible_controls,
)
from tests.support.html import parse_html as _parsed

PIECES = [
    "`", "``", "```", "\\", "\\`", "[", "]", "[/x]", "[bold]", "[link=http://e.vil]x[/link]", "tags[idx]",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<!channel>", "<@U123>", "@here",
    "[a](http://e.vil)", "![i](http://e.vil/i.png)", "<http://e.vil>", "http://e.vil/x", "www.e.vil",
    "a@e.vil", "&lt;b&gt;", "&amp;", "*em*", "_em_", "~~s~~", "# h", "| cell |", "\n", "\r\n", "\t",
    "\x1b[2J", "\x1b]8;;http://e.vil\x07", "\x07", "\x00", "\x9b31m", "\u202e", "\u2066", "\u2028", " ",
]  # fmt: skip
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=12).map("".join)
ONE_MB = ("select `x` [/x] <script>|\x1b[2J" * 40_000)[:1_000_000]
MARKDOWN = MarkdownIt("commonmark").enable("table").enable("strikethrough")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expected(value: str) -> str:
    """What a one-line surface shows of ``value``."""
    return one_line(value)


@SETTINGS
@given(HOSTILE)
def test_a_markdown_code_span_shows_the_text_and_nothing_else(value: str) -> None:
    html = _parsed(MARKDOWN.render(f"query: {markdown_code(value)}"))
    assert html.tags == (["p", "code"] if value else ["p"]), html.tags
    assert "".join(html.text).rstrip("\n") == (f"query: {_expected(value)}" if value else "query:")


@SETTINGS
@given(HOSTILE)
def test_markdown_prose_shows_the_text_without_links_markup_or_emphasis(value: str) -> None:
    html = _parsed(MARKDOWN.render(f"deploy {markdown_text(value)} done"))
    assert html.tags == ["p"], html.tags
    assert "".join(html.text).strip() == f"deploy {_expected(value)} done".strip()


@SETTINGS
@given(HOSTILE, HOSTILE)
def test_a_markdown_table_row_keeps_its_cells(query: str, version: str) -> None:
    table = (
        f"| query | deploy |\n|---|---|\n| {markdown_code(query, in_table=True)} | {markdown_text(version)} |"
    )
    html = _parsed(MARKDOWN.render(table))
    assert [t for t in html.tags if t in ("th", "td")] == ["th", "th", "td", "td"]
    assert set(html.tags) <= {"table", "thead", "tbody", "tr", "th", "td", "code"}, html.tags
    assert not html.attribute_names or set(html.attribute_names) <= {"style"}


@SETTINGS
@given(HOSTILE)
def test_rich_markup_shows_the_text_and_no_escape_sequence_reaches_the_terminal(value: str) -> None:
    shown = Text.from_markup(f"[bold]query {terminal_markup(value)}[/bold]")
    assert shown.plain == f"query {visible_controls(value)}"
    out = io.StringIO()
    Console(file=out, force_terminal=False, width=10_000).print(terminal_text(value), soft_wrap=True)
    assert not any(c in out.getvalue() for c in "\x1b\x9b\x07\u202e\u2066")


@SETTINGS
@given(HOSTILE)
def test_slack_mrkdwn_has_no_control_sequence_mention_or_link(value: str) -> None:
    text = escape_mrkdwn(value)
    assert "<" not in text and ">" not in text and "\x1b" not in text
    assert re.search(r"@(here|channel|everyone)\b", text, re.IGNORECASE) is None
    restored = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("\u200b", "")
    assert restored == visible_controls(value)


def test_every_piece_alone_and_a_megabyte() -> None:
    for value in [*PIECES, ONE_MB]:
        assert _parsed(MARKDOWN.render(markdown_code(value))).tags in (["p", "code"], [])
        assert "<" not in escape_mrkdwn(value)
        assert Text.from_markup(f"[red]{terminal_markup(value)}[/red]").plain == visible_controls(value)
    cut = markdown_code(ONE_MB, max_width=100, in_table=True)
    assert len(cut) < 130 and cut.endswith("…``")  # a cut value still closes its span
