"""The regression plot (jobs/publish/plots.py) and the report's words: literal text, gaps as gaps, a recovery
ending the after-level, deploys and later steps marked. Pure: frames in, matplotlib objects out."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
from matplotlib.collections import LineCollection
from matplotlib.dates import date2num
from matplotlib.figure import Figure

from jobs.publish.plots import LaterStep, later_steps, plot_regression, plt, with_gaps
from jobs.publish.weekly_words import (
    confidence_words,
    query_ids_words,
    regression_words,
    slowdown_words,
    status_words,
)

T0 = datetime(2026, 11, 3, 6, 0, tzinfo=UTC)
QUERY = "select * from events where account_id = $1 AND kind < $2"


def _series(levels: list[float], skip: set[int] = frozenset()) -> pl.DataFrame:  # type: ignore[assignment]
    """One point a minute at the given levels (tiny deterministic noise); minutes in ``skip`` have no
    sample (the interval after them starts where the missing one would have ended)."""
    rng = np.random.default_rng(1)
    rows = []
    for i, level in enumerate(levels):
        if i in skip:
            continue
        start = T0 + timedelta(minutes=i)
        rows.append((start, start + timedelta(minutes=1), level * float(rng.lognormal(0, 0.05)), 100))
    return pl.DataFrame(
        rows,
        schema={"interval_start": pl.Datetime("us", "UTC"), "interval_end": pl.Datetime("us", "UTC"),
                "value": pl.Float64, "calls": pl.Int64},
        orient="row",
    )  # fmt: skip


def _finding(**over: Any) -> dict[str, Any]:
    row = {
        "instance": "db1",
        "query": QUERY,
        "queryid": 111,
        "queryids": "111",
        "status": "open",
        "analysis": "deploy",
        "deploy_version": "v4",
        "deployed_at": T0 + timedelta(minutes=30),
        "detected_change_at": T0 + timedelta(minutes=30),
        "before_mean_ms": 1.0,
        "after_mean_ms": 10.0,
    }
    return {**row, **over}


def _collection(figure: Figure, label: str) -> LineCollection:
    found = [c for c in figure.axes[0].collections if c.get_label() == label]
    assert len(found) == 1, [c.get_label() for c in figure.axes[0].collections]
    return found[0]  # type: ignore[return-value]


def test_a_query_with_dollars_is_drawn_literally_and_once() -> None:
    figure = plot_regression(_series([1.0] * 30 + [10.0] * 30), _finding())
    try:
        title = figure.axes[0].title
        assert title.get_text() == f"db1: {QUERY}", "the query once, no '(all: ...)'"
        assert title.get_parse_math() is False, "mathtext would draw $1 AND kind < $2 as italic math"
        legend = figure.legends[0]
        assert all(t.get_parse_math() is False for t in legend.get_texts())
        assert all(t.get_parse_math() is False for t in figure.axes[0].texts)
        figure.canvas.draw()  # renders without a mathtext error
    finally:
        plt.close(figure)


def test_a_restart_gap_is_a_break_in_the_line_not_a_slope() -> None:
    series = _series([1.0] * 20 + [5.0] * 20, skip={18, 19, 20, 21})
    times, values = with_gaps(series)
    assert sum(math.isnan(v) for v in values) == 1
    hole = next(i for i, v in enumerate(values) if math.isnan(v))
    assert times[hole - 1] == T0 + timedelta(minutes=18) and times[hole + 1] == T0 + timedelta(minutes=23)
    figure = plot_regression(series, _finding(detected_change_at=T0 + timedelta(minutes=20)))
    try:
        drawn = figure.axes[0].lines[0].get_ydata()
        assert np.isnan(np.asarray(drawn, dtype=float)).sum() == 1, "the plotted line breaks at the gap"
    finally:
        plt.close(figure)
    assert not any(math.isnan(v) for v in with_gaps(_series([1.0] * 10))[1]), "no gap, no break"


def test_the_after_level_ends_at_the_recovery_and_the_deploy_is_marked() -> None:
    series = _series([1.0] * 30 + [10.0] * 30 + [1.0] * 30)
    recovered_at = T0 + timedelta(minutes=60)
    recovered = _finding(status="recovered", recovered_at=recovered_at, latest_mean_ms=1.0)
    figure = plot_regression(series, recovered, deploys=[(T0 + timedelta(minutes=30), "v4")])
    try:
        after = _collection(figure, "level after").get_segments()[0]
        assert after[0][0] == date2num(T0 + timedelta(minutes=30))
        assert after[1][0] == date2num(recovered_at), "the after-level ends at the recovery"
        labels = [line.get_label() for line in figure.axes[0].lines]
        assert "recovered" in labels and "deploy" in labels
        deploy = next(line for line in figure.axes[0].lines if line.get_label() == "deploy")
        assert deploy.get_xdata()[0] == T0 + timedelta(minutes=30)  # type: ignore[index]
        assert "deploy v4" in [t.get_text() for t in figure.axes[0].texts]
    finally:
        plt.close(figure)
    still_open = plot_regression(series, _finding())
    try:
        end = _collection(still_open, "level after").get_segments()[0][1][0]
        assert end == date2num(series["interval_end"].max()), "an open finding's after-level runs to the end"
    finally:
        plt.close(still_open)


def test_a_later_step_after_the_recovery_is_found_and_marked() -> None:
    series = _series([1.0] * 30 + [10.0] * 30 + [1.0] * 30 + [4.0] * 30)
    recovered = _finding(status="recovered", recovered_at=T0 + timedelta(minutes=60))
    steps = later_steps(series, recovered)
    assert [s.at for s in steps] == [T0 + timedelta(minutes=91)], steps
    assert steps[0].label.startswith("step up ×4")
    figure = plot_regression(series, recovered, steps=steps)
    try:
        assert "later step" in [line.get_label() for line in figure.axes[0].lines]
        assert steps[0].label in [t.get_text() for t in figure.axes[0].texts]
    finally:
        plt.close(figure)
    assert later_steps(_series([1.0] * 30 + [10.0] * 60), _finding()) == [], "one step: nothing later"
    assert isinstance(steps[0], LaterStep)


def test_the_regression_in_plain_words() -> None:
    row = _finding(
        before_mean_ms=0.5, after_mean_ms=41.0, detected_change_at=datetime(2026, 11, 3, 7, 7, tzinfo=UTC)
    )
    assert regression_words(row) == "82× slower, since Tue 03 Nov 07:07 UTC, at deploy v4"
    assert slowdown_words(_finding(after_mean_ms=2.44)) == "2.4× slower"
    assert slowdown_words(_finding(after_mean_ms=1.45)) == "1.45× slower"  # the console's ×1.45
    assert "no deploy" in regression_words(_finding(analysis="unannounced", deploy_version=None))
    assert confidence_words(8.9e-18).startswith("very strong evidence")
    assert confidence_words(0.04).startswith("weak evidence")
    assert query_ids_words(_finding(queryids="111,112")) == "queryid 111 (also 112)"
    assert query_ids_words(_finding()) == "queryid 111"
    recovered = _finding(status="recovered", recovered_at=T0, latest_mean_ms=1.02)
    assert status_words(recovered) == "recovered Tue 03 Nov 06:00 UTC (back to 1.020 ms)"
