"""One row per slowdown for people: a deploy's episode found again by the unannounced analysis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from jobs.detect.contention import one_row_per_slowdown
from jobs.schemas.analysed import INSTANCE_SLOWDOWNS

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def episodes(*rows: tuple[str, str, timedelta]) -> pl.DataFrame:
    """(instance, analysis, began after AT) rows with the table's columns."""
    frame = pl.DataFrame(
        {
            "instance": [r[0] for r in rows],
            "analysis": [r[1] for r in rows],
            "deploy_version": ["v2" if r[1] == "deploy" else None for r in rows],
            "began_at": [AT + r[2] for r in rows],
            "summary": [f"{r[0]} {r[1]}" for r in rows],
        }
    )
    return frame.with_columns(pl.col("began_at").cast(pl.Datetime("us", "UTC"))).pipe(
        lambda f: pl.concat([INSTANCE_SLOWDOWNS.empty(), f], how="diagonal_relaxed")
    )


def test_an_unannounced_repeat_of_a_deploy_slowdown_is_one_row_that_says_so() -> None:
    frame = episodes(
        ("a", "deploy", timedelta(0)),
        ("a", "unannounced", timedelta(milliseconds=45)),
        ("a", "unannounced", timedelta(minutes=10)),  # a later episode of its own
        ("b", "unannounced", timedelta(milliseconds=45)),  # another instance: no deploy episode there
    )
    shown = one_row_per_slowdown(frame, timedelta(minutes=2))
    assert shown.select("instance", "analysis").rows() == [
        ("a", "deploy"),
        ("a", "unannounced"),
        ("b", "unannounced"),
    ]
    assert (
        shown["summary"][0]
        == "a deploy (found again by the unannounced analysis from 2026-12-06 12:00:00 UTC)"
    )
    assert shown["summary"][1:].to_list() == ["a unannounced", "b unannounced"]
    assert shown.columns == frame.columns


def test_the_window_is_the_settings_and_zero_keeps_every_row() -> None:
    frame = episodes(("a", "deploy", timedelta(0)), ("a", "unannounced", timedelta(seconds=30)))
    assert one_row_per_slowdown(frame, timedelta(0)).height == 2
    assert one_row_per_slowdown(frame, timedelta(seconds=29)).height == 2
    assert one_row_per_slowdown(frame, timedelta(seconds=30)).height == 1
    assert one_row_per_slowdown(frame.clear(), timedelta(minutes=2)).height == 0
