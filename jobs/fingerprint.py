"""Query identity: one fingerprint per query, whatever queryid PostgreSQL gave it.

A queryid changes when a table is dropped and recreated, with ``search_path``, with parameter types
(int2/int4/int8) and across major versions, while the normalized text stays the same. libpg_query's
fingerprint (through pglast) hashes the parse tree without constants, so those queryids share one
fingerprint. Fallbacks keep every queryid analysable: a text libpg_query cannot parse is identified by a
hash of its whitespace-collapsed lower-cased text, and a queryid without any known text by itself.
"""

from __future__ import annotations

import hashlib
import re

import polars as pl
from pglast.parser import ParseError, fingerprint

FINGERPRINT_SOURCES = ("pglast", "text", "queryid")
_SPACES = re.compile(r"\s+")


def fingerprint_text(query: str) -> tuple[str, str]:
    """(fingerprint, source) of one normalized query text; never raises for a bad text."""
    try:
        return f"pg:{fingerprint(query)}", "pglast"
    except ParseError:
        collapsed = _SPACES.sub(" ", query).strip().lower()
        return f"tx:{hashlib.sha1(collapsed.encode()).hexdigest()[:16]}", "text"


def queryid_fingerprint(queryid: pl.Expr) -> pl.Expr:
    """The last-resort identity of a queryid whose text was never captured."""
    return pl.format("qid:{}", queryid)


def fingerprint_texts(texts: pl.DataFrame) -> pl.DataFrame:
    """One row per (instance, queryid) with ``query``, ``fingerprint`` and ``fingerprint_source``.

    ``texts`` has the query_texts columns plus ``instance``; when a queryid has several texts (several
    databases or users) the earliest captured one wins, so the result does not depend on row order. Each
    distinct text is parsed once.
    """
    missing = sorted({"instance", "queryid", "query"} - set(texts.columns))
    if missing:
        raise ValueError(f"query_texts: missing columns {missing}")
    order = [c for c in ("instance", "queryid", "captured_at", "query") if c in texts.columns]
    one = (
        texts.filter(pl.col("queryid").is_not_null())
        .sort(order, nulls_last=True)
        .unique(["instance", "queryid"], keep="first", maintain_order=True)
        .select("instance", "queryid", "query")
    )
    distinct = one.select(pl.col("query").drop_nulls().unique().sort())
    prints = [fingerprint_text(q) for q in distinct["query"]]
    lookup = distinct.with_columns(
        pl.Series("fingerprint", [p[0] for p in prints], dtype=pl.String),
        pl.Series("fingerprint_source", [p[1] for p in prints], dtype=pl.String),
    )
    out = one.join(lookup, on="query", how="left", nulls_equal=False)
    return out.with_columns(
        pl.col("fingerprint").fill_null(queryid_fingerprint(pl.col("queryid"))),
        pl.col("fingerprint_source").fill_null(pl.lit("queryid")),
    ).sort("instance", "queryid")


def attach_fingerprints(samples: pl.DataFrame, fingerprints: pl.DataFrame) -> pl.DataFrame:
    """Samples with ``fingerprint`` and ``query`` columns; a queryid with no known text keeps its own id."""
    joined = samples.join(
        fingerprints.select("instance", "queryid", "fingerprint", "query"),
        on=["instance", "queryid"],
        how="left",
    )
    return joined.with_columns(pl.col("fingerprint").fill_null(queryid_fingerprint(pl.col("queryid"))))
