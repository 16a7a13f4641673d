"""One escaping function per output language, for every value that came from a monitored server or from
someone else's file (query texts, identifiers, plan text, error messages, deploy versions, instance names).

The fleet is hostile input: a quoted identifier can hold a backtick, ``[/x]``, ``<script>``, a Markdown link
or an escape sequence that repaints a terminal. Each reader gets the value as text, never as syntax:

- terminal (rich): ``terminal_markup`` for a value inside a markup string, ``terminal_text`` for a cell;
- Markdown (report.md, the Dagster UI's metadata): ``markdown_code`` for a query or plan text (a code span
  whose fence outgrows any backtick run inside), ``markdown_text`` for prose values;
- HTML: jinja2's autoescape (``jobs.publish.weekly_html``); Slack mrkdwn: ``escape_mrkdwn``.

Control characters (C0, C1, DEL) and the Unicode bidirectional overrides ("Trojan Source": text shown in
another order than it is) become visible escapes such as ``\\x1b`` in every language: none of them can
colour a terminal, move its cursor or reorder what a reader sees.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_AND_BREAKS = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible_controls(text: object, *, keep_lines: bool = True) -> str:
    """``text`` with control and bidi-override characters as visible escapes (``\\x1b``, ``\\u202e``);
    line breaks and tabs are kept when ``keep_lines`` (a plan text), else escaped too."""
    pattern = _CONTROLS if keep_lines else _CONTROLS_AND_BREAKS
    return pattern.sub(_visible, str(text))


def one_line(text: object) -> str:
    """``text`` on one line: each line break (``\\r\\n``, ``\\r``, ``\\n``, U+2028/9) is `` ⏎ ``, tabs are
    spaces, other controls visible escapes."""
    flat = re.sub(r"\r\n|[\r\n\u2028\u2029]", " ⏎ ", str(text)).replace("\t", " ")
    return visible_controls(flat, keep_lines=False)


# ---------------------------------------------------------------------------------------------------------
# Terminal (rich)


_MARKUP_LIKE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
"""What rich reads as a tag (``rich.markup``'s own pattern): ``[`` then a letter, ``#``, ``/`` or ``@``."""


def terminal_markup(text: object) -> str:
    """``text`` to put inside a rich markup string (``f"[bold]{terminal_markup(q)}[/bold]"``): its ``[`` can
    open no tag (``tags[idx]`` stays, ``[/x]`` neither crashes nor vanishes), its controls are visible.
    ``rich.markup.escape``'s rule, without importing rich (a script's start-up need not pay for it)."""
    out = _MARKUP_LIKE.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", visible_controls(text))
    return out + "\\" if out.endswith("\\") and not out.endswith("\\\\") else out


def terminal_text(text: object) -> Text:
    """``text`` as a rich ``Text`` (a table cell): never read as markup; controls visible."""
    from rich.text import Text

    return Text(visible_controls(text))


# ---------------------------------------------------------------------------------------------------------
# Markdown (CommonMark / GitHub-flavoured; the Dagster UI renders its metadata with the same rules)

_MARKDOWN_PROSE = re.compile(r"([\\`*_\[\]<>|~#!&])")
"""What a Markdown renderer reads as syntax in running text: emphasis, code, links and images, raw HTML and
entities, table cells, strikethrough, headings. Each is backslash-escaped (any ASCII punctuation may be)."""
_AUTOLINKS = re.compile(r"(?i)(?<=[a-z0-9])(:)(?=//)|(@)|(?<=www)(\.)")
"""What GitHub's extended autolinks start from (``scheme://``, ``www.``, an email's ``@``): escaped, so a
value is never a live link."""


def markdown_text(text: object, *, max_width: int | None = None) -> str:
    """A prose value (an instance name, a deploy version, a summary naming relations) for running Markdown
    text or a table cell: one line, at most ``max_width`` characters (cut with "…"), no syntax, no link."""
    flat = one_line(text)
    if max_width is not None and len(flat) > max_width:
        flat = flat[: max_width - 1].rstrip() + "…"
    escaped = _MARKDOWN_PROSE.sub(r"\\\1", flat)
    return _AUTOLINKS.sub(lambda m: "\\" + m.group(), escaped)


def markdown_code(text: object, *, max_width: int | None = None, in_table: bool = False) -> str:
    """A query or plan text as one Markdown code span: shown character for character (a backtick inside
    cannot close it: the fence is one backtick longer than the longest run inside), one line, at most
    ``max_width`` characters. ``in_table``: a ``|`` is escaped (GitHub's tables split cells on it even
    inside code spans, and take ``\\|`` there as the pipe)."""
    flat = one_line(text)
    if max_width is not None and len(flat) > max_width:
        flat = flat[: max_width - 1].rstrip() + "…"
    if in_table:
        flat = flat.replace("|", "\\|")
    if not flat:
        return ""  # an empty span cannot be written; nothing shows nothing
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    # A span that starts or ends with a backtick or a space is padded with one space each side: CommonMark
    # strips exactly one from each side when both are there (and none from a span of spaces only).
    if flat.strip(" ") and (flat[0] in "` " or flat[-1] in "` "):
        flat = f" {flat} "
    return f"{fence}{flat}{fence}"


# ---------------------------------------------------------------------------------------------------------
# Slack mrkdwn

_BROADCAST = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)
_ZWSP = "\u200b"


def escape_mrkdwn(text: object) -> str:
    """``&``, ``<`` and ``>`` as Slack's entities (so ``<!channel>`` or ``<http://x|y>`` in a query is
    text, not a mention or a link), and ``@channel``/``@here``/``@everyone`` broken by a zero-width space
    (Slack notifies on those words in some clients' plain rendering); controls visible."""
    escaped = visible_controls(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub(lambda m: f"@{_ZWSP}{m.group(1)}", escaped)
