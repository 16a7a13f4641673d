"""One redaction for every message that may carry a DSN: the console, logs, the lake, Dagster, alerts.

``redact_dsn`` is the only form of a DSN that is ever shown (``host=… port=… dbname=… user=…``).
``scrub`` removes a DSN's secrets from any message, and copes with DSNs libpq itself cannot parse: the
secret candidates then come from conservative patterns (URI userinfo, ``password=`` in a URI query or in
key=value form, quoted or not, up to the next ``key=``), every fragment of 4 or more characters of a
candidate is removed wherever it appears, and a libpq conninfo parse error (which quotes pieces of the
DSN, e.g. ``missing "=" after "secret" in connection info string``) is replaced by a fixed description
of the kind of problem. Even with no DSN given, ``scrub`` removes ``password=…`` and ``user:pass@``
patterns, so a log filter (``install_log_scrubber``) can use it on every record.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote

from psycopg.conninfo import conninfo_to_dict

SECRET_KEYS = ("password", "sslpassword")
SHOWN_KEYS = ("host", "hostaddr", "port", "dbname", "user")
MASK = "***"
MIN_FRAGMENT = 4
UNPARSEABLE_DSN = "<unparseable dsn>"

# libpq / psycopg conninfo parse errors, by the kind of problem. Their text quotes the DSN: never shown.
_CONNINFO_ERRORS: tuple[tuple[str, str], ...] = (
    (r'missing "=" after "', "a key without '=' (an unquoted space inside a value?)"),
    (r"unterminated quoted string in connection info string", "a quote that is never closed"),
    (r"invalid percent-encoded token", "a bad %-escape (write % as %25)"),
    (r"forbidden value %00 in percent-encoded value", "a %00 escape"),
    (r'unexpected spaces found in "', "an unencoded space in the URI (write it as %20)"),
    (r'invalid connection option "', "an unknown key"),
    (r'invalid URI query parameter: "', "an unknown URI query parameter"),
    (r"end of string reached when looking for matching", "a [ in the URI that is never closed"),
    (r"IPv6 host address may not be empty in URI", "an empty IPv6 host in the URI"),
    (r"unexpected character .{1,12} at position \d+ in URI", "an unexpected character in the URI"),
    (r'invalid integer value "[^"]*" for connection option', "a non-numeric value for a numeric key (port?)"),
    (r'invalid port number: "', "an invalid port"),
    (r'invalid [a-z_]+ value: "', "an invalid value for a key"),
    (r"could not match \d+ port numbers to \d+ hosts", "host and port lists of different lengths"),
    (r"in connection info string", "malformed"),
    (r"invalid dsn:", "malformed"),
)
_LEAD_IN = r"(?:[A-Za-z_.]*(?:Error|Exception|Warning):\s*)?(?:couldn't parse connection string:\s*)?"
_CONNINFO_PATTERN = re.compile(
    _LEAD_IN + "(?:" + "|".join(f"(?P<k{i}>{p})" for i, (p, _) in enumerate(_CONNINFO_ERRORS)) + r").*",
    re.IGNORECASE,
)

# Secret patterns that need no DSN: key=value passwords, URI query passwords, URI userinfo.
_KV_PASSWORD = re.compile(
    r"\b(?P<key>(?:ssl)?password)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.|'')*(?:'|$)|\S*)", re.IGNORECASE
)
_URI_QUERY_PASSWORD = re.compile(r"(?P<key>[?&](?:ssl)?password=)(?P<value>[^&\s\"']*)", re.IGNORECASE)
_URI_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)(?P<user>[^:/@\s\"']*):(?P<pw>[^@\s\"']*)@")
_URI_PREFIX = re.compile(r"^\s*[a-z][a-z0-9+.\-]*://", re.IGNORECASE)
_NEXT_KEY = re.compile(r"\s+[A-Za-z_]+\s*=")


def redact_dsn(dsn: str) -> str:
    """``host=… port=… dbname=… user=…`` with every secret removed, whatever form the DSN had."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return UNPARSEABLE_DSN
    shown = " ".join(f"{k}={parts[k]}" for k in SHOWN_KEYS if parts.get(k))
    # A password libpq split wrongly (an unescaped '@' in it) would show up in the host: masked.
    return _mask_fragments(shown, dsn_secret_candidates(dsn))


def _unescaped_variants(value: str) -> set[str]:
    """The value as written, %-decoded (when it decodes) and with key=value quoting undone."""
    out = {value}
    stripped = value.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == "'":
        stripped = stripped[1:-1]
    elif stripped.startswith("'"):
        stripped = stripped[1:]
    out.add(stripped)
    out.add(re.sub(r"\\(.)", r"\1", stripped).replace("''", "'"))
    if "%" in value:
        out.add(unquote(value, errors="ignore"))
    return {v for v in out if v}


def dsn_secret_candidates(dsn: str) -> set[str]:
    """Every string that may be (part of) the DSN's password, parseable or not.

    The parsed secrets (when libpq can parse the DSN) plus, always, what conservative patterns find:
    URI userinfo after the first ':' up to the last '@' (and up to the first '@'), ``password=`` in a URI
    query, and a key=value ``password`` up to the next ``key=`` (so an unquoted space stays inside).
    """
    found: set[str] = set()
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        parts = {}
    for key in SECRET_KEYS:
        if parts.get(key):
            found.add(str(parts[key]))
    if _URI_PREFIX.match(dsn):
        rest = _URI_PREFIX.sub("", dsn, count=1)
        for cut in {rest.rfind("@"), rest.find("@")}:
            if cut > 0:
                userinfo = rest[:cut]
                if ":" in userinfo:
                    found.add(userinfo.split(":", 1)[1])
        for match in _URI_QUERY_PASSWORD.finditer(dsn):
            found.add(match.group("value"))
    for match in re.finditer(r"\b(?:ssl)?password\s*=\s*", dsn, re.IGNORECASE):
        tail = dsn[match.end() :]
        if tail.startswith("'"):
            end = re.match(r"'(?:[^'\\]|\\.)*(?:'|$)", tail, re.DOTALL)
            found.add(end.group(0) if end else tail)
        following = _NEXT_KEY.search(tail)
        found.add(tail[: following.start()] if following else tail)
        found.add(re.split(r"[\s&]", tail, maxsplit=1)[0])
    candidates: set[str] = set()
    for value in found:
        candidates |= _unescaped_variants(value)
    return {c for c in candidates if c.strip()}


def _mask_fragments(text: str, secrets: Iterable[str]) -> str:
    """Replace every run of ``MIN_FRAGMENT``+ characters that is a substring of a secret (longest first);
    a secret shorter than that is replaced where it stands as a whole word."""
    long_secrets = sorted({s for s in secrets if len(s) >= MIN_FRAGMENT}, key=len, reverse=True)
    for short in {s for s in secrets if 0 < len(s) < MIN_FRAGMENT}:
        text = re.sub(rf"(?<![\w]){re.escape(short)}(?![\w])", MASK, text)
    if not long_secrets:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        best = 0
        window = text[index : index + MIN_FRAGMENT]
        for secret in long_secrets if len(window) == MIN_FRAGMENT else ():
            if len(secret) <= best:
                break
            start = secret.find(window)
            while start >= 0:
                length = MIN_FRAGMENT
                while (
                    index + length < len(text)
                    and start + length < len(secret)
                    and text[index + length] == secret[start + length]
                ):
                    length += 1
                best = max(best, length)
                start = secret.find(window, start + 1)
        if best >= MIN_FRAGMENT:
            out.append(MASK)
            index += best
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def conninfo_problem(message: str) -> str | None:
    """The kind of problem when ``message`` is a libpq/psycopg conninfo parse error, else None."""
    match = _CONNINFO_PATTERN.search(message)
    if match is None:
        return None
    for index, (_, kind) in enumerate(_CONNINFO_ERRORS):
        if match.group(f"k{index}") is not None:
            return kind
    return "malformed"


def _scrub_line(line: str, secrets: set[str]) -> str:
    """One line: a conninfo parse error (to the end of the line) becomes the fixed description, which is
    ours and not masked; everything else loses its secret fragments and password patterns."""
    match = _CONNINFO_PATTERN.search(line)
    if match is None:
        return _scrub_patterns(_mask_fragments(line, secrets))
    ending = "\n" if line.endswith("\n") else ""
    kind = conninfo_problem(line) or "malformed"
    prefix = _scrub_patterns(_mask_fragments(line[: match.start()], secrets))
    return f"{prefix}the DSN cannot be parsed: {kind} (its text is not shown){ending}"


def _scrub_patterns(message: str) -> str:
    message = _URI_USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", message)
    message = _URI_QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}{MASK}", message)
    return _KV_PASSWORD.sub(lambda m: f"{m.group('key')}{m.group('eq')}{MASK}", message)


def scrub(message: str, *dsns: str | None) -> str:
    """``message`` without any secret of the given DSNs (or a 4+-character fragment of one), without
    any raw DSN (shown redacted instead), without libpq's quoted DSN fragments (a conninfo parse error
    becomes a fixed description of the problem) and without ``password=`` / ``user:pass@`` patterns."""
    out = str(message)
    known = [d for d in dsns if d]
    for dsn in sorted(known, key=len, reverse=True):
        out = out.replace(dsn, redact_dsn(dsn))
    secrets: set[str] = set()
    for dsn in known:
        secrets |= dsn_secret_candidates(dsn)
    return "".join(_scrub_line(line, secrets) for line in out.splitlines(keepends=True))


# ---------------------------------------------------------------------------------------------------------
# Logging: every record scrubbed at creation, whichever logger or handler (caplog, Dagster) gets it.

_LOCK = threading.Lock()
_LOG_DSNS: set[str] = set()
_INSTALLED: list[Callable[..., logging.LogRecord]] = []


def scrub_log_record(record: logging.LogRecord, dsns: Iterable[str] = ()) -> logging.LogRecord:
    """Replace the record's message (and exception text) by its scrubbed form."""
    known = tuple(dsns)
    try:
        text = record.getMessage()
    except Exception:  # a bad format string: leave it to logging's own error handling
        return record
    cleaned = scrub(text, *known)
    if cleaned != text:
        record.msg, record.args = cleaned, ()
    if record.exc_info and not record.exc_text:
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info), *known)
    return record


class ScrubbingFilter(logging.Filter):
    """A logging filter (for a handler) that scrubs every record with the given DSNs' secrets."""

    def __init__(self, dsns: Iterable[str] = ()) -> None:
        super().__init__()
        self.dsns = tuple(d for d in dsns if d)

    def filter(self, record: logging.LogRecord) -> bool:
        scrub_log_record(record, (*self.dsns, *_LOG_DSNS))
        return True


def install_log_scrubber(*dsns: str | None) -> None:
    """Scrub every log record of this process at creation (a record factory, installed once); the DSNs
    given are remembered and their secrets removed from every later record."""
    with _LOCK:
        _LOG_DSNS.update(d for d in dsns if d)
        if _INSTALLED:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return scrub_log_record(previous(*args, **kwargs), tuple(_LOG_DSNS))

        logging.setLogRecordFactory(factory)
        _INSTALLED.append(previous)


def registered_dsns() -> tuple[str, ...]:
    """The DSNs whose secrets the log scrubber removes (for other sinks of the same process)."""
    with _LOCK:
        return tuple(_LOG_DSNS)
