"""One redaction for every DSN-bearing message (jobs.redaction), on a corpus of malformed DSNs.

The error messages are libpq's own (psycopg connecting to a closed loopback port, or refusing to parse),
not invented ones."""

from __future__ import annotations

import logging

import psycopg
import pytest

from jobs.redaction import (
    ScrubbingFilter,
    conninfo_problem,
    dsn_secret_candidates,
    install_log_scrubber,
    redact_dsn,
    scrub,
)
from tests.support.secrets_corpus import CORPUS, BadDsn, assert_no_fragment


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
