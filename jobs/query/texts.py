"""Query-text rules, in one home: which texts are EXPLAINs someone ran, which are the radar's own.

Every reader of query texts (the collector, the plan capture, the auto_explain ingest) asks these
functions rather than testing prefixes itself, so a rule changes in one place.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from typing import Any

from pglast.parser import ParseError, normalize, scan

# Every SQL text the radar sends to a monitored server carries this marker in a comment, so its own
# statements are recognisable in pg_stat_statements and in auto_explain logs (and never analysed).
RADAR_MARKER = "pg-regression-radar"
# The comment as written in sql/postgres/*.sql, right after the first keyword (``SELECT /* … */ …``):
# PostgreSQL 18 stores a statement's text from its first token, so a comment *before* it is not kept
# in pg_stat_statements (checked on 18.6) and the statement would no longer be recognisable.
RADAR_COMMENT = f"/* {RADAR_MARKER} */"


def _first_code_line(text: str) -> str:
    """The first line that is not blank or a ``--`` comment (leading ``/* */`` comments stay)."""
    for line in text.lstrip().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return stripped
    return ""


def is_explain_text(text: object) -> bool:
    """An EXPLAIN somebody ran: its row or plan is not the workload's execution."""
    if not isinstance(text, str):
        return False
    return _first_code_line(text).lower().startswith("explain")


def is_radar_text(text: object) -> bool:
    """A statement the radar itself sent (it carries ``RADAR_MARKER`` in a comment)."""
    return isinstance(text, str) and RADAR_MARKER in text


_KEYWORD = re.compile(r"[A-Za-z]+")


def first_keyword(text: object) -> str | None:
    """The statement's first keyword, upper-cased (``BEGIN`` of ``/* app */ begin isolation level …``);
    None for a text that does not start with one (a withheld-text marker, an empty text)."""
    if not isinstance(text, str):
        return None
    found = _KEYWORD.match(_strip_leading_comments(text))
    return found.group(0).upper() if found else None


def is_utility_statement(text: object, keywords: Collection[str]) -> bool:
    """A statement whose first keyword is one of ``keywords`` (jobs.query.config.UTILITY_STATEMENTS: BEGIN,
    COMMIT, SET, SHOW, …): never analysed as a series."""
    keyword = first_keyword(text)
    return keyword is not None and keyword in {k.upper() for k in keywords}


# ---------------------------------------------------------------------------------------------------------
# What of a query text may be stored: no literal value, ever (issue 7).
#
# pg_stat_statements keeps utility statements verbatim (``ALTER ROLE app PASSWORD '…'``) and auto_explain
# logs plans whose expressions carry the literal values a query ran with. Every text that reaches the lake
# goes through ``storable_query_text`` (statements) or ``redact_plan`` (plan JSON) first.

QUERY_TEXT_MODES: tuple[str, ...] = ("normalized", "withheld")
"""``normalized``: literals become ``$n`` placeholders (libpg_query); ``withheld``: no text is stored."""
REDACTED_COMMENT = "/* comment */"
WITHHELD_EXPRESSION = "<withheld>"
_STRING_TOKENS = frozenset({"SCONST", "USCONST", "BCONST", "XCONST"})
_COMMENT_TOKENS = frozenset({"C_COMMENT", "SQL_COMMENT"})
_PARAM = re.compile(r"\$(\d+)")
_EXPRESSION_PREFIX = "SELECT "
_NUMBER = re.compile(
    r"0[xXoObB][0-9A-Fa-f_]+|\d[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?\d+)?|\.\d[\d_]*(?:[eE][+-]?\d+)?"
)
_MARKER = re.compile(
    r"^<(?:withheld|unparseable) query text: \d+ chars, sha256:[0-9a-f]{12}>"
    r"(?: /\* pg-regression-radar \*/)?$"
)
_PLAN_REFERENCE = re.compile(r"(?:SubPlan|InitPlan|CTE) $")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?\$")


def strictest_query_text(*modes: str) -> str:
    """The mode that keeps the least of several settings (the collector's and a plan source's): "withheld"
    when any says so, so no section can loosen what another withholds."""
    return "withheld" if "withheld" in modes else "normalized"


# Plan JSON keys whose string values are identifiers or enumerations (never a literal of the query):
# they are kept as they are, so the shape hash (jobs.plans.shape.SHAPE_KEYS) never moves with redaction.
PLAN_IDENTIFIER_KEYS: frozenset[str] = frozenset(
    {
        "Node Type",
        "Operation",
        "Strategy",
        "Partial Mode",
        "Parent Relationship",
        "Join Type",
        "Relation Name",
        "Schema",
        "Alias",
        "Index Name",
        "CTE Name",
        "Subplan Name",
        "Parallel Aware",
        "Async Capable",
        "Scan Direction",
        "Sort Method",
        "Sort Space Type",
        "Function Name",
        "Custom Plan Provider",
        "Command",
        "Trigger Name",
        "Constraint Name",
        "Relation",
        "Settings",  # EXPLAIN (SETTINGS): server configuration, not the query's values
    }
)
# Plan-document keys that are the query's text or its bound values: never stored in a plan.
PLAN_TEXT_KEYS: frozenset[str] = frozenset({"Query Text", "Query Parameters"})


class QueryTextModeError(ValueError):
    """``query_text`` is neither ``normalized`` nor ``withheld``."""


def check_query_text_mode(mode: str) -> str:
    if mode not in QUERY_TEXT_MODES:
        raise QueryTextModeError(f"query_text must be one of {', '.join(QUERY_TEXT_MODES)}, got {mode!r}")
    return mode


def _next_param(text: str) -> int:
    return max((int(n) for n in _PARAM.findall(text)), default=0) + 1


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char in "_$"


def _end_of_quoted(text: str, start: int, quote: str) -> int:
    """Index after the closing ``quote`` (doubled quotes and backslash escapes count as inside), or -1."""
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\" and quote == "'":
            index += 2
            continue
        if char == quote:
            if index + 1 < len(text) and text[index + 1] == quote:
                index += 2
                continue
            return index + 1
        index += 1
    return -1


def _end_of_block_comment(text: str, start: int) -> int:
    depth, index = 0, start
    while index < len(text) - 1:
        pair = text[index : index + 2]
        if pair == "/*":
            depth, index = depth + 1, index + 2
        elif pair == "*/":
            depth, index = depth - 1, index + 2
            if depth == 0:
                return index
        else:
            index += 1
    return -1


def _comment_replacement(comment: str) -> str:
    return RADAR_COMMENT if RADAR_MARKER in comment else REDACTED_COMMENT


def _drop_string_prefix(out: list[str]) -> None:
    """Remove the E/B/X/N or U& prefix just emitted before a quote (``out`` holds one piece per char)."""
    count = 2 if out[-2:] in (["U", "&"], ["u", "&"]) else 1 if out[-1:] and out[-1] in "EeBbXxNn" else 0
    if count and (len(out) == count or not _is_word_char(out[-count - 1][-1:] or " ")):
        del out[-count:]


def redact_literals_fallback(text: str) -> str:
    """Conservative, grammar-free redaction for a text libpg_query cannot parse.

    Every quoted string (``'…'``, ``E'…'``, ``$tag$…$tag$``), every number not part of a name and every
    comment is replaced; anything unterminated is cut off entirely. Double-quoted names stay.
    """
    out: list[str] = []
    param = _next_param(text)
    index = 0
    while index < len(text):
        char = text[index]
        previous = text[index - 1] if index else ""
        if char == '"':
            end = _end_of_quoted(text, index, '"')
            if end < 0:
                out.append('"…"')
                break
            out.append(text[index:end])
            index = end
            continue
        if char == "'":
            end = _end_of_quoted(text, index, "'")
            _drop_string_prefix(out)
            out.append(f"${param}")
            param += 1
            if end < 0:
                break
            index = end
            continue
        if char == "$":
            tag = _DOLLAR_TAG.match(text, index)
            if tag is not None and not _is_word_char(previous):
                closing = text.find(tag.group(0), tag.end())
                out.append(f"${param}")
                param += 1
                if closing < 0:
                    break
                index = closing + len(tag.group(0))
                continue
        if text.startswith("--", index):
            end = text.find("\n", index)
            out.append(_comment_replacement(text[index : end if end >= 0 else len(text)]))
            if end < 0:
                break
            index = end
            continue
        if text.startswith("/*", index):
            end = _end_of_block_comment(text, index)
            out.append(_comment_replacement(text[index : end if end >= 0 else len(text)]))
            if end < 0:
                break
            index = end
            continue
        if (
            (char.isdigit() or (char == "." and text[index + 1 : index + 2].isdigit()))
            and not _is_word_char(previous)
            and not _PLAN_REFERENCE.search("".join(out[-9:]))
        ):
            number = _NUMBER.match(text, index)
            assert number is not None
            end = number.end()
            while end < len(text) and _is_word_char(text[end]):
                end += 1  # '10MB', '1x': the whole word goes
            out.append(f"${param}")
            param += 1
            index = end
            continue
        # A separate piece per character keeps the one-character look-behind for string prefixes simple.
        out.append(char)
        index += 1
    return "".join(out)


def _scrub_tokens(normalized: str) -> str:
    """After libpg_query's normalize: the string constants it leaves (COPY file names, CREATE SERVER and
    ALTER SYSTEM options, COMMENT ON, PREPARE bodies, JSON_TABLE paths) become placeholders too, and
    comments other than the radar's marker lose their content. Numbers it leaves (type modifiers such
    as ``varchar(10)``) are structure and stay."""
    tokens = scan(normalized)
    param = _next_param(normalized)
    out: list[str] = []
    position = 0
    for token in tokens:
        piece = normalized[token.start : token.end + 1]
        if token.name in _STRING_TOKENS:
            replacement = f"${param}"
            param += 1
        elif token.name in _COMMENT_TOKENS:
            replacement = piece if piece == RADAR_COMMENT else _comment_replacement(piece)
        else:
            continue
        out.append(normalized[position : token.start])
        out.append(replacement)
        position = token.end + 1
    out.append(normalized[position:])
    return "".join(out)


def normalize_query_text(text: str) -> str | None:
    """The text with every literal a ``$n`` placeholder, or None when libpg_query cannot parse it.

    A text pg_stat_statements already normalized may not parse as is (``interval $1``); it is parsed with
    each ``$n`` standing in as a string constant, and normalized in that form.
    """
    try:
        return _scrub_tokens(normalize(text))
    except ParseError:
        pass
    try:
        tokens = scan(text)
    except ParseError:
        return None
    params = [t for t in tokens if t.name == "PARAM"]
    if not params:
        return None
    pieces: list[str] = []
    position = 0
    for token in params:
        pieces.append(text[position : token.start])
        pieces.append("'0'")
        position = token.end + 1
    pieces.append(text[position:])
    try:
        return _scrub_tokens(normalize("".join(pieces)))
    except ParseError:
        return None


def text_marker(kind: str, text: str) -> str:
    """``<kind query text: N chars, sha256:…>``: the hash is of the text with its literals removed, so
    not even a guess of a literal can be checked against it."""
    digest = hashlib.sha256(redact_literals_fallback(text).encode("utf-8", "replace")).hexdigest()[:12]
    marker = f"<{kind} query text: {len(text)} chars, sha256:{digest}>"
    return f"{marker} {RADAR_COMMENT}" if is_radar_text(text) else marker


def storable_query_text(text: str | None, mode: str = "normalized") -> str | None:
    """What of a query text may reach the lake: normalized (no literal of any statement), or a marker.

    ``withheld`` stores only the marker; a text libpg_query cannot parse is stored as the
    ``unparseable`` marker, never raw. The radar's own marker comment survives either way.
    """
    check_query_text_mode(mode)
    if text is None:
        return None
    if _MARKER.match(text):
        return text  # already a marker (a lake written with "withheld", or a second pass)
    if mode == "withheld":
        return text_marker("withheld", text)
    normalized = normalize_query_text(text)
    return normalized if normalized is not None else text_marker("unparseable", text)


def redact_plan_expression(expression: str, mode: str = "normalized") -> str:
    """A plan expression (Filter, Index Cond, Output item, …) without its literal values."""
    check_query_text_mode(mode)
    if mode == "withheld":
        return WITHHELD_EXPRESSION
    normalized = normalize_query_text(_EXPRESSION_PREFIX + expression)
    if normalized is not None and normalized.startswith(_EXPRESSION_PREFIX):
        return normalized[len(_EXPRESSION_PREFIX) :]
    return redact_literals_fallback(expression)


def _redact_plan_value(value: Any, key: str | None, mode: str) -> Any:
    if isinstance(value, dict):
        return {
            k: v if k in PLAN_IDENTIFIER_KEYS else _redact_plan_value(v, k, mode)
            for k, v in value.items()
            if k not in PLAN_TEXT_KEYS
        }
    if isinstance(value, list):
        return [_redact_plan_value(item, key, mode) for item in value]
    if isinstance(value, str):
        return redact_plan_expression(value, mode)
    return value


def redact_plan(plan: Any, mode: str = "normalized") -> Any:
    """Plan JSON (a node tree, a document or an EXPLAIN list) with every literal value gone.

    Identifier and enumeration keys (``PLAN_IDENTIFIER_KEYS``, a superset of the shape keys) stay as
    they are; every other string goes through ``redact_plan_expression``; ``Query Text`` and
    ``Query Parameters`` are dropped. Numbers (costs, rows, times) are the server's, not the query's.
    """
    check_query_text_mode(mode)
    return _redact_plan_value(plan, None, mode)


def redact_query_parameters(parameters: str | None, mode: str = "normalized") -> str | None:
    """auto_explain's ``Query Parameters`` (``$1 = 'a@b.com', $2 = '42'``): names only (``$1 = ?, $2 = ?``)
    when normalized, nothing when withheld; the values are never stored."""
    check_query_text_mode(mode)
    if parameters is None or mode == "withheld":
        return None
    unquoted = redact_literals_fallback(parameters)
    names = sorted({int(n) for n in re.findall(r"(?:^|,)\s*\$(\d+)\s*=", unquoted)})
    return ", ".join(f"${n} = ?" for n in names) if names else f"<{len(parameters)} chars of parameters>"


def _strip_leading_comments(text: str) -> str:
    """The text from its first token on: leading blanks, ``--`` lines and ``/* */`` comments removed."""
    rest = text
    while True:
        rest = rest.lstrip()
        if rest.startswith("--"):
            newline = rest.find("\n")
            rest = "" if newline < 0 else rest[newline + 1 :]
        elif rest.startswith("/*"):
            end = rest.find("*/")
            rest = "" if end < 0 else rest[end + 2 :]
        else:
            return rest


def is_marked_where_kept(sql: str) -> bool:
    """The SQL text carries ``RADAR_COMMENT`` after its first token, where pg_stat_statements keeps it."""
    return RADAR_COMMENT in _strip_leading_comments(sql)
