"""One redaction for every DSN-bearing message (jobs.redaction), on a corpus of malformed DSNs.

The error messages are libpq's own (psycopg connecting to a closed loopback port, or refusing to parse),
not invented ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
import pytest

from jobs.redaction import (
    MIN_FRAGMENT,
    ScrubbingFilter,
    conninfo_problem,
    dsn_secret_candidates,
    install_log_scrubber,
    redact_dsn,
    scrub,
)


@dataclass(frozen=True)
class BadDsn:
    label: str
    dsn: str
    password: str


# Port 1 on loopback: nothing listens, so every connection attempt fails fast with libpq's message.
CORPUS: tuple[BadDsn, ...] = (
    BadDsn("uri-bad-percent-escape", "postgresql://app:Zq8%zzWxkv@127.0.0.1:1/db", "Zq8%zzWxkv"),
    BadDsn(
        "kv-unquoted-space", "host=127.0.0.1 port=1 user=app password=Jm7q Kx9vTr dbname=db", "Jm7q Kx9vTr"
    ),
    BadDsn("kv-trailing-backslash", "host=127.0.0.1 port=1 user=app password=Tr4ilQz\\", "Tr4ilQz\\"),
    BadDsn("kv-unbalanced-quote", "host=127.0.0.1 port=1 user=app password='Ub4lQzXy dbname=db", "Ub4lQzXy"),
    BadDsn("uri-query-password", "postgresql://app@127.0.0.1:1/db?password=QpW9xRt7", "QpW9xRt7"),
    BadDsn("uri-userinfo-space", "postgresql://app:Sp4c Ey7Kq@127.0.0.1:1/db", "Sp4c Ey7Kq"),
    BadDsn("kv-quoted-with-space", "host=127.0.0.1 port=1 user=app password = 'Qv3b Hx8Zm'", "Qv3b Hx8Zm"),
    BadDsn("uri-multiple-hosts", "postgresql://app:Mh7Kq2Zx@127.0.0.1:1,127.0.0.1:2/db", "Mh7Kq2Zx"),
    BadDsn("uri-non-ascii", "postgresql://app:Nä7Kßq2Zé@127.0.0.1:1/db", "Nä7Kßq2Zé"),
    BadDsn("kv-empty-password", "host=127.0.0.1 port=1 user=app password=", ""),
    BadDsn("uri-unescaped-at", "postgresql://app:Qx@Zk7@Wv9m@127.0.0.1:1/db", "Qx@Zk7@Wv9m"),
    BadDsn("uri-bad-sslmode", "postgresql://app:Sl7Mq3Zx@127.0.0.1:1/db?sslmode=bogus", "Sl7Mq3Zx"),
    BadDsn("kv-bad-port", "host=127.0.0.1 port=notaport user=app password=Pt7Kq3Zx", "Pt7Kq3Zx"),
    BadDsn("uri-unbalanced-bracket", "postgresql://app:Br7Kq3Zx@[::1/db", "Br7Kq3Zx"),
    BadDsn("uri-percent-00", "postgresql://app:Nl7K%00q3Zx@127.0.0.1:1/db", "Nl7K%00q3Zx"),
    BadDsn("kv-unknown-key", "host=127.0.0.1 port=1 user=app password=Uk7Kq3Zx bogus=1", "Uk7Kq3Zx"),
    BadDsn("kv-escaped-quote", "host=127.0.0.1 port=1 user=app password='Es\\'c7\\\\Kq3Z'", "Es'c7\\Kq3Z"),
    BadDsn("uri-ssl-password", "postgresql://app@127.0.0.1:1/db?sslpassword=Ss7Kq3Zx", "Ss7Kq3Zx"),
)


def fragments(password: str) -> set[str]:
    """The password and every run of MIN_FRAGMENT characters of it (as written and %-decoded)."""
    out = {password} if password else set()
    for word in {password, password.replace("%zz", "")}:
        out |= {word[i : i + MIN_FRAGMENT] for i in range(len(word) - MIN_FRAGMENT + 1)}
    return out


def assert_no_fragment(text: str, bad: BadDsn) -> None:
    leaked = sorted(f for f in fragments(bad.password) if f in text)
    assert not leaked, f"{bad.label}: {leaked} of the password in {text!r}"


def libpq_message(dsn: str) -> str:
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError(f"{dsn!r} connected")


def test_the_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 12


@pytest.mark.parametrize("bad", CORPUS, ids=lambda b: b.label)
def test_no_password_fragment_in_redact_dsn_or_the_scrubbed_libpq_message(bad: BadDsn) -> None:
    assert_no_fragment(redact_dsn(bad.dsn), bad)
    message = libpq_message(bad.dsn)
    scrubbed = scrub(f"instance {bad.label}: {message} (dsn was {bad.dsn})", bad.dsn)
    assert_no_fragment(scrubbed, bad)
    assert scrubbed.startswith(f"instance {bad.label}: "), "the instance stays named"


def test_a_conninfo_parse_error_becomes_a_fixed_description() -> None:
    bad = CORPUS[1]  # password=Jm7q Kx9vTr: libpq says missing "=" after "Kx9vTr"
    message = libpq_message(bad.dsn)
    assert 'missing "="' in message and "Kx9vTr" in message, "libpq quotes the fragment"
    scrubbed = scrub(f"instance x: {message}", bad.dsn).rstrip()
    assert scrubbed == (
        "instance x: the DSN cannot be parsed: a key without '=' (an unquoted space inside a value?) "
        "(its text is not shown)"
    )
    # Even without knowing the DSN, the quoted fragments go.
    assert "Kx9vTr" not in scrub(message)
    assert conninfo_problem('invalid percent-encoded token: "Zq8%zz"') == "a bad %-escape (write % as %25)"


def test_other_errors_are_not_mistaken_for_conninfo_errors() -> None:
    sql_error = "SyntaxError: unterminated quoted string at or near \"'abc\" LINE 1: select 'abc"
    assert scrub(sql_error) == sql_error
    assert conninfo_problem("invalid config value for field top_n") is None


def test_without_a_dsn_password_patterns_still_go() -> None:
    text = "tried postgresql://radar:Pat7Kq3@db/x and host=db password='Pat 8Kq' and ?password=Pat9Kq&a=1"
    scrubbed = scrub(text)
    for secret in ("Pat7Kq3", "Pat 8Kq", "Pat9Kq"):
        assert secret not in scrubbed
    assert "postgresql://radar:***@db/x" in scrubbed


def test_well_formed_dsns_keep_their_useful_parts() -> None:
    assert (
        redact_dsn("postgresql://radar:pw-9x7@db1:5432/orders")
        == "host=db1 port=5432 dbname=orders user=radar"
    )
    assert dsn_secret_candidates("host=db user=radar") == set()
    assert scrub("connection to server at db1 failed", "postgresql://radar:pw-9x7@db1/x") == (
        "connection to server at db1 failed"
    )


@pytest.mark.parametrize("bad", CORPUS, ids=lambda b: b.label)
def test_log_records_are_scrubbed_at_creation(bad: BadDsn, caplog: pytest.LogCaptureFixture) -> None:
    install_log_scrubber(bad.dsn)
    log = logging.getLogger("tests.redaction")
    with caplog.at_level(logging.INFO):
        log.warning("connect failed: %s", libpq_message(bad.dsn))
        log.info("dsn in use: %s", bad.dsn)
        try:
            raise RuntimeError(f"boom with {bad.dsn}")
        except RuntimeError:
            log.exception("failed")
    assert len(caplog.records) == 3
    for record in caplog.records:
        assert_no_fragment(record.getMessage(), bad)
    assert_no_fragment(caplog.text, bad)


def test_a_scrubbing_filter_on_a_handler() -> None:
    bad = CORPUS[4]
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "dsn %s", (bad.dsn,), None)
    assert ScrubbingFilter([bad.dsn]).filter(record)
    assert_no_fragment(record.getMessage(), bad)
