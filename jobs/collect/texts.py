"""Query-text rules, in one home: which texts are EXPLAINs someone ran, which are the radar's own.

Every reader of query texts (the collector, the plan capture, the auto_explain ingest) asks these
functions rather than testing prefixes itself, so a rule changes in one place.
"""

from __future__ import annotations

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
