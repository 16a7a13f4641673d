"""Query identity: queryids of one query share a fingerprint; fallbacks for unparsable or missing texts."""

from __future__ import annotations

import polars as pl

from jobs.query.identity import attach_fingerprints, fingerprint_text, fingerprint_texts


def texts(rows: list[tuple[str, int, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"instance": pl.String, "queryid": pl.Int64, "query": pl.String}, orient="row"
    )


def test_same_query_under_several_queryids_is_one_fingerprint() -> None:
    out = fingerprint_texts(
        texts(
            [
                ("alpha", 1, "select sum(amount) from orders where customer_id = $1"),
                ("alpha", -2, "SELECT sum(amount)\n  FROM orders WHERE customer_id = $1"),
                ("beta", 3, "select sum(amount) from orders where customer_id = $1"),
                ("alpha", 4, "select sum(amount) from orders where region_id = $1"),
            ]
        )
    )
    prints = dict(zip(zip(out["instance"], out["queryid"], strict=True), out["fingerprint"], strict=True))
    assert prints[("alpha", 1)] == prints[("alpha", -2)] == prints[("beta", 3)]
    assert prints[("alpha", 4)] != prints[("alpha", 1)]
    assert set(out["fingerprint_source"]) == {"pglast"}


def test_unparsable_and_missing_texts_fall_back_without_merging_unrelated_queries() -> None:
    out = fingerprint_texts(
        texts([("a", 1, "selec  broken"), ("a", 2, "SELEC broken"), ("a", 3, None), ("a", 4, "selec other")])
    ).sort("queryid")
    assert out["fingerprint_source"].to_list() == ["text", "text", "queryid", "text"]
    assert out["fingerprint"][0] == out["fingerprint"][1]
    assert out["fingerprint"][2] == "qid:3"
    assert out["fingerprint"][3] != out["fingerprint"][0]
    assert fingerprint_text("selec  broken")[0] == out["fingerprint"][0]


def test_result_does_not_depend_on_row_order_and_duplicates_collapse() -> None:
    rows = [("a", 1, "select 1"), ("a", 1, "select 1"), ("a", 2, "select $1 + 1"), ("b", 1, "select 2")]
    first = fingerprint_texts(texts(rows))
    assert first.height == 3
    assert first.equals(fingerprint_texts(texts(rows[::-1])))


def test_samples_without_a_text_keep_their_queryid_identity() -> None:
    prints = fingerprint_texts(texts([("a", 1, "select 1")]))
    samples = pl.DataFrame({"instance": ["a", "a"], "queryid": [1, 9]})
    out = attach_fingerprints(samples, prints).sort("queryid")
    assert out["fingerprint"][0].startswith("pg:")
    assert out["fingerprint"][1] == "qid:9"


def test_partition_like_table_names_share_a_fingerprint() -> None:
    # libpg_query folds 2+ trailing digits of relation names (partitions, monthly tables) into one identity:
    # orders_2024 and orders_2025 are one query to the detector; t1 and t2 are not.
    assert fingerprint_text("select * from orders_2024 where id = $1") == fingerprint_text(
        "select * from orders_2025 where id = $1"
    )
    assert fingerprint_text("select * from t1") != fingerprint_text("select * from t2")
