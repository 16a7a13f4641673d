"""Series identity: which samples make one series, and what it is called.

A series is (instance, database, query). The rules, in one place:

* **Query.** libpg_query's fingerprint (through pglast) hashes the parse tree without constants, so the
  queryids PostgreSQL gives one query (a table dropped and recreated before PG18, ``search_path``,
  int2/int4/int8 parameters, a major upgrade) share a fingerprint. Fallbacks keep every queryid
  analysable: a text libpg_query cannot parse is identified by a hash of its whitespace-collapsed
  lower-cased text, and a queryid without any known text by itself (``qid:<queryid>``).
* **Database and user.** Queryids are grouped per (instance, dbid, fingerprint): the same query in two
  databases is two series. Users of one database stay merged unless ``IdentityConfig.split_users``.
* **Succession, not side by side.** libpg_query also folds names that differ only in trailing digits
  (``orders_2024`` / ``orders_2025``), so one fingerprint can hold different live queries. Two queryids of
  one group *run side by side* when their sample spans overlap by more than
  ``IdentityConfig.rotation_overlap_intervals`` of the instance's intervals (span = first to last
  interval end at which the queryid received calls; the overlap counts the instance's distinct interval
  ends inside both spans). Queryids are merged into one chain only when they never run side by side with
  any member: one stops receiving calls as the other starts (a deploy changing parameter types, a table
  rotated at new year). Queryids with the *same* normalized text are one statement whatever their
  timing (psycopg binds a Python int as int2, int4 or int8 by its value, so one statement of one client
  runs under several queryids side by side) and always join the chain holding that text. Queryids are
  taken in order of their first sample (ties: lower queryid); one that fits several chains joins the
  chain whose latest text is most similar to its own (difflib ratio), then the one that received a
  sample most recently, then the one that started first. Spans are measured over the samples given:
  identity is computed on the input frame, so give it the history the analysis reads.
* **Names.** The chain of a group that started first is ``f"{dbid}:{fingerprint}"``; every other chain
  is ``f"{dbid}:{fingerprint}:{first queryid of the chain}"``; with users split the prefix is
  ``f"{dbid}/{userid}"``. A series is reported under its member queryid that most recently received a
  sample and that queryid's own text (``query_texts`` holds one text per (instance, queryid)).
  ``database`` is the datname the collector stored with the texts of that dbid (null when unknown).
* Deterministic: the same rows in any order give the same series.
"""

from __future__ import annotations

import difflib
import hashlib
import re

import numpy as np
import polars as pl
from pglast.parser import ParseError, fingerprint

from jobs.query.config import IdentityConfig

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
        maintain_order="left",
    )
    return joined.with_columns(pl.col("fingerprint").fill_null(queryid_fingerprint(pl.col("queryid"))))


# ---------------------------------------------------------------------------------------------------------
# Series: (instance, database[, user], chain of successive queryids of one fingerprint)


def group_keys(config: IdentityConfig) -> list[str]:
    """The columns inside which queryids of one fingerprint may be chained into one series."""
    return ["instance", "dbid", *(["userid"] if config.split_users else []), "fingerprint"]


def database_names(texts: pl.DataFrame) -> pl.DataFrame:
    """(instance, dbid, database): the datname stored with the texts of each dbid, the latest captured one
    when a database was renamed (ties: the smallest name). Empty when the texts carry no datname."""
    schema = {"instance": pl.String, "dbid": pl.Int64, "database": pl.String}
    if not {"instance", "dbid", "datname"} <= set(texts.columns):
        return pl.DataFrame(schema=schema)
    order = ["instance", "dbid", *(["captured_at"] if "captured_at" in texts.columns else []), "datname"]
    descending = [False, False, *([True] if "captured_at" in texts.columns else []), False]
    return (
        texts.filter(pl.col("dbid").is_not_null() & pl.col("datname").is_not_null())
        .sort(order, descending=descending, nulls_last=True)
        .unique(["instance", "dbid"], keep="first", maintain_order=True)
        .select(
            "instance", pl.col("dbid").cast(pl.Int64), pl.col("datname").cast(pl.String).alias("database")
        )
    )


def _text_similarity(a: str | None, b: str | None) -> float:
    if a is None or b is None:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _overlap_intervals(ends: np.ndarray, a: tuple[int, int], b: tuple[int, int]) -> int:
    """How many of the instance's interval ends (sorted, epoch us) lie inside both spans."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:
        return 0
    return int(np.searchsorted(ends, hi, side="right") - np.searchsorted(ends, lo, side="left"))


def chain_queryids(
    spans: list[tuple[int, int, int, str | None]], ends: np.ndarray, config: IdentityConfig
) -> list[list[int]]:
    """Chains of successive queryids of one group, in order of their start (the first keeps the plain
    series name). ``spans``: (queryid, first end, last end, text) per queryid, ends in epoch us;
    ``ends``: the instance's interval ends, sorted."""
    chains: list[dict] = []
    # A queryid with no interval end (no sample) is an empty span: it runs beside nothing, starts first.
    spans = [(q, -1 if a is None else a, -1 if b is None else b, t) for q, a, b, t in spans]
    for queryid, first, last, text in sorted(spans, key=lambda s: (s[1], s[0])):
        same_text = [c for c in chains if text is not None and text in c["texts"]]
        if same_text:  # one statement whose queryids differ by parameter types or OIDs only
            chain = same_text[0]
            chain["members"].append(queryid)
            chain["spans"].append((first, last))
            if last > chain["last"]:
                chain["last"], chain["text"] = last, text
            continue
        fits = [
            c
            for c in chains
            if all(
                _overlap_intervals(ends, (first, last), m) <= config.rotation_overlap_intervals
                for m in c["spans"]
            )
        ]
        if not fits:
            chains.append(
                {
                    "members": [queryid],
                    "spans": [(first, last)],
                    "texts": {text},
                    "start": first,
                    "last": last,
                    "text": text,
                }
            )
            continue
        best = min(
            fits, key=lambda c: (-_text_similarity(text, c["text"]), -c["last"], c["start"], c["members"][0])
        )
        best["members"].append(queryid)
        best["spans"].append((first, last))
        best["texts"].add(text)
        if last > best["last"]:
            best["last"], best["text"] = last, text
    return [c["members"] for c in sorted(chains, key=lambda c: (c["start"], c["members"][0]))]


def _prefix(row: dict, config: IdentityConfig) -> str:
    dbid = "null" if row["dbid"] is None else str(row["dbid"])
    if config.split_users:
        return f"{dbid}/{'null' if row['userid'] is None else row['userid']}"
    return dbid


SERIES_OWNER = r"^(null|\d+)(?:/(null|\d+))?:"


def series_owner(series: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(dbid, userid) a series name starts with (``_prefix``); userid is null unless users were split.
    Lets a reader find a series' samples by its members without re-identifying a partial history."""
    dbid = series.str.extract(SERIES_OWNER, 1).replace("null", None).cast(pl.Int64).alias("dbid")
    userid = series.str.extract(SERIES_OWNER, 2).replace("null", None).cast(pl.Int64).alias("userid")
    return dbid, userid


def series_of_queryids(
    points: pl.DataFrame, config: IdentityConfig, interval_ends: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One row per (group keys, queryid) with its ``series`` name; ``points`` carry ``fingerprint``,
    ``query``, ``dbid`` (and ``userid`` when users are split). ``interval_ends``: (instance, interval_end)
    of every sample, when ``points`` are fewer (each queryid's first and last only); None: ``points``'."""
    keys = group_keys(config)
    spans = (
        points.group_by([*keys, "queryid"])
        .agg(
            pl.col("interval_end").min().dt.epoch("us").alias("first"),
            pl.col("interval_end").max().dt.epoch("us").alias("last"),
            pl.col("query").drop_nulls().first(),
        )
        .with_columns(pl.len().over(keys).alias("members"))
    )
    plain = pl.format("{}:{}", pl.col("_prefix"), pl.col("fingerprint"))
    prefix = pl.col("dbid").cast(pl.String).fill_null("null")
    if config.split_users:
        prefix = pl.format("{}/{}", prefix, pl.col("userid").cast(pl.String).fill_null("null"))
    single = (
        spans.filter(pl.col("members") == 1)
        .with_columns(prefix.alias("_prefix"))
        .select(*keys, "queryid", plain.alias("series"))
    )
    shared = spans.filter(pl.col("members") > 1).sort([*keys, "queryid"], nulls_last=True)
    rows: list[dict] = []
    if shared.height:
        instance_ends = {
            instance: np.sort(group["end"].to_numpy())
            for (instance,), group in (points if interval_ends is None else interval_ends)
            .select("instance", pl.col("interval_end").dt.epoch("us").alias("end"))
            .unique()
            .group_by("instance")
        }
        for _, group in shared.group_by(keys, maintain_order=True):
            first_row = group.row(0, named=True)
            spans_of = [
                (r["queryid"], r["first"], r["last"], r["query"]) for r in group.iter_rows(named=True)
            ]
            chains = chain_queryids(spans_of, instance_ends[first_row["instance"]], config)
            name = f"{_prefix(first_row, config)}:{first_row['fingerprint']}"
            for position, chain in enumerate(chains):
                series = name if position == 0 else f"{name}:{chain[0]}"
                base = {k: first_row[k] for k in keys}
                rows.extend({**base, "queryid": q, "series": series} for q in chain)
    chained = pl.DataFrame(rows, schema=single.schema) if rows else single.clear()
    return pl.concat([single, chained]).sort([*keys, "queryid"], nulls_last=True)


def identify_samples(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    config: IdentityConfig = IdentityConfig(),
    number_as: str | None = None,
) -> pl.DataFrame:
    """Samples with ``fingerprint``, ``query`` (the queryid's own text, Categorical: read per series by
    ``jobs.query.series.series_identity``), ``series`` and ``database``.

    ``texts``: raw query_texts rows plus ``instance`` (``datname`` gives ``database``), or
    ``fingerprint_texts`` output (``database`` null). Samples without ``dbid`` (or ``userid`` when users
    are split) get a null one. ``number_as``: also a column of that name numbering the series densely
    in the order of (instance, series) (jobs.query.series.SERIES_ID).
    """
    prints = texts if "fingerprint" in texts.columns else fingerprint_texts(texts)
    frame = samples.drop("fingerprint", "query", "series", "database", strict=False)
    for column in ("dbid", "userid"):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(column))
    # Identified per entry (instance, dbid, userid, queryid: a few per series), then attached to the
    # samples by one join in their row order: identifying every sample grouped and joined millions of
    # rows on strings, 9 s and 4 GiB at 10,000 series x 1 day (issue 25). Each entry's first and last
    # interval end stand for its samples: series_of_queryids reads only their span (and every sample's
    # interval end, passed apart, where queryids of one fingerprint are chained).
    entry = ["instance", "dbid", "userid", "queryid"]
    # Streamed: the eager group_by over 5 M samples held 1 GiB of transient state (+4 MiB streamed, and
    # 5x faster); min and max do not depend on the order rows are met in.
    spans = attach_fingerprints(
        frame.lazy()
        .group_by(entry)
        .agg(pl.col("interval_end").min().alias("_first"), pl.col("interval_end").max().alias("_last"))
        .collect(engine="streaming"),
        prints,
    )
    described = [*entry, "fingerprint", "query"]
    ends = pl.concat(
        [spans.select(*described, pl.col(edge).alias("interval_end")) for edge in ("_first", "_last")]
    )
    names = series_of_queryids(ends, config, frame.select("instance", "interval_end"))
    join_on = [k for k in group_keys(config) if k != "fingerprint"] + ["queryid"]
    identity = (
        spans.select(described)
        .join(names.select(*join_on, "series"), on=join_on, how="left", nulls_equal=True)
        .join(database_names(texts), on=["instance", "dbid"], how="left")
        .with_columns(
            pl.col("database").cast(pl.String),
            # A text per sample as a number: the texts are read per series (series_identity), never per
            # sample, and as strings they were the identified samples' largest column.
            pl.col("query").cast(pl.Categorical),
        )
    )
    if identity.height != spans.height:  # each right side is unique on its key: a left join adds no rows
        raise ValueError("identify_samples: a fingerprint, series or database lookup matched twice")
    added = ["fingerprint", "query", "series", "database"]
    if number_as is not None:  # numbered per entry: the same dense ranks as over every sample, far fewer
        identity = identity.with_columns(
            pl.struct("instance", "series").rank("dense").cast(pl.UInt32).alias(number_as)
        )
        added.append(number_as)
    # Each sample's entry as a row number of ``identity``, then every added column gathered by it: a join
    # carrying the added columns held 1 GiB of transients over 5 M samples.
    at = (
        frame.lazy()
        .select(entry)
        .join(
            identity.lazy().select(*entry).with_row_index("_at"),
            on=entry,
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        .select("_at")
        .collect(engine="streaming")
        .to_series()
    )
    return frame.hstack([identity[c].gather(at) for c in added])
