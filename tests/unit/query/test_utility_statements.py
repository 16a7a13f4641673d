"""Utility statements (BEGIN, COMMIT, SET, SHOW, …) are never analysed as series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from jobs.query.config import UTILITY_STATEMENTS, IdentityConfig
from jobs.query.series import fingerprinted_samples
from jobs.query.texts import first_keyword, is_utility_statement

T0 = datetime(2026, 12, 1, tzinfo=UTC)
TEXTS = {
    1: "SELECT id FROM orders WHERE id = $1",
    2: "BEGIN",
    3: "/* app */ commit",
    4: "SET application_name = $1",
    5: "-- a comment line\nSHOW work_mem",
    6: "ROLLBACK TO SAVEPOINT s1",
    7: "UPDATE settings SET value = $1",  # SET inside a statement: not a utility statement
    8: "<withheld query text: 12 chars, sha256:0123456789ab>",
}


@pytest.mark.parametrize(
    ("text", "keyword"),
    [
        ("begin isolation level serializable", "BEGIN"),
        ("  /* a */ /* b */ -- c\n  discard all", "DISCARD"),
        ("<withheld query text: 1 chars, sha256:0123456789ab>", None),
        ("", None),
        (None, None),
    ],
)
def test_first_keyword_skips_blanks_and_comments(text: str | None, keyword: str | None) -> None:
    assert first_keyword(text) == keyword


def test_utility_statements_are_never_a_series() -> None:
    samples = pl.DataFrame(
        {
            "instance": ["alpha"] * (2 * len(TEXTS)) + ["alpha"],
            "queryid": [q for q in TEXTS for _ in range(2)] + [99],  # 99: no known text, kept
            "interval_start": [T0 + timedelta(minutes=m) for _ in TEXTS for m in (0, 1)] + [T0],
            "interval_end": [T0 + timedelta(minutes=m + 1) for _ in TEXTS for m in (0, 1)]
            + [T0 + timedelta(minutes=1)],
            "calls": [3] * (2 * len(TEXTS) + 1),
            "total_exec_time": [1.5] * (2 * len(TEXTS) + 1),
        }
    )
    texts = pl.DataFrame(
        {"instance": ["alpha"] * len(TEXTS), "queryid": list(TEXTS), "query": list(TEXTS.values())}
    )

    analysed = fingerprinted_samples(samples, texts)

    assert sorted(analysed["queryid"].unique()) == [1, 7, 8, 99]
    assert {is_utility_statement(t, UTILITY_STATEMENTS) for t in TEXTS.values()} == {True, False}
    # The setting: an empty list analyses every statement; a shorter one drops only its keywords.
    every = fingerprinted_samples(samples, texts, IdentityConfig(utility_statements=()))
    assert every["queryid"].n_unique() == len(TEXTS) + 1
    only_begin = fingerprinted_samples(samples, texts, IdentityConfig(utility_statements=("begin",)))
    assert 2 not in only_begin["queryid"] and 3 in only_begin["queryid"]


def test_a_utility_keyword_must_be_a_word() -> None:
    with pytest.raises(ValueError, match="utility_statements"):
        IdentityConfig(utility_statements=("BEGIN;",))
