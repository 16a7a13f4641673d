"""Pictures of a regression: its latency series with deploys, the change point, both levels, a recovery,
later steps and collection gaps marked.

Shared by the investigation notebook and reports. The series is rebuilt exactly as the detector sees it
(jobs.detect.deploy_analysis: every queryid of the fingerprint merged per interval), so the picture cannot
disagree
with the verdict. Every text is drawn literally: query texts carry ``$1``, which matplotlib's mathtext
would otherwise turn into italics and swallow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no screen: reports and CI render to files
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.dates import ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from jobs.detect.changepoint import segment_change_points
from jobs.detect.config import ChangePointConfig
from jobs.detect.findings import RECOVERED, with_series
from jobs.escaping import visible_controls
from jobs.query.series import SERIES_KEY, fingerprinted_samples, merge_intervals

AFTER_COLOR = "tab:orange"
DEPLOY_COLOR = "tab:gray"


@dataclass(frozen=True)
class LaterStep:
    """A change of level after the regression's own change: another finding's onset, or a change point of
    the plotted series the report found (``later_steps``)."""

    at: datetime
    label: str


def regression_series(samples: pl.DataFrame, texts: pl.DataFrame, instance: str, series: str) -> pl.DataFrame:
    """(interval_start, interval_end, value = interval mean latency in ms, calls) of one series (a
    finding's ``series``: jobs.query.series.SERIES_KEY after the instance) on one instance."""
    points = with_series(fingerprinted_samples(samples.filter(pl.col("instance") == instance), texts))
    one = points.filter(pl.col("series") == series)
    keys = list(dict.fromkeys([*SERIES_KEY, "series"]))
    return merge_intervals(one, keys).select("interval_start", "interval_end", "value", "calls")


def with_gaps(series: pl.DataFrame) -> tuple[list[datetime], list[float]]:
    """The points to draw, with a NaN (a break in the line) wherever an interval does not start where the
    previous one ended: a restart, a reset or a missed snapshot left time without a sample, and a line
    across it would show a slope that never happened. Without ``interval_start`` nothing is broken."""
    times: list[datetime] = series["interval_end"].to_list()
    values: list[float] = [float(v) for v in series["value"].to_list()]
    if "interval_start" not in series.columns or series.height < 2:
        return times, values
    starts: list[datetime] = series["interval_start"].to_list()
    out_t, out_v = [times[0]], [values[0]]
    for i in range(1, len(times)):
        if starts[i] > times[i - 1]:
            out_t.append(starts[i])
            out_v.append(float("nan"))
        out_t.append(times[i])
        out_v.append(values[i])
    return out_t, out_v


def later_steps(
    series: pl.DataFrame, regression: dict[str, Any], config: ChangePointConfig | None = None
) -> list[LaterStep]:
    """Change points of the plotted series after the regression's change (its own change point and its
    recovery excluded, within ``config.min_segment`` intervals): a second step the detector did not report
    as a finding of its own still gets a marker. Pure and deterministic (the batch detector's rank test)."""
    config = config or ChangePointConfig()
    change = regression.get("detected_change_at")
    if change is None or series.height < 2 * config.min_segment:
        return []
    values = np.log(np.maximum(series["value"].to_numpy(), 1e-9))
    points = segment_change_points([values], config)[0]
    ends: list[datetime] = series["interval_end"].to_list()
    index_of_change = sum(1 for end in ends if end <= change)
    recovered = regression.get("recovered_at") if regression.get("status") == RECOVERED else None
    index_of_recovery = sum(1 for end in ends if end <= recovered) if recovered is not None else None
    bounds = [0, *(p.index for p in points if p.index is not None), len(values)]
    found = []
    for number, point in enumerate(points, start=1):
        if point.index is None or point.index <= index_of_change + config.min_segment:
            continue
        if index_of_recovery is not None and abs(point.index - index_of_recovery) <= config.min_segment:
            continue
        before = float(np.exp(np.median(values[bounds[number - 1] : point.index])))
        after = float(np.exp(np.median(values[point.index : bounds[number + 1]])))
        ratio = after / before if before > 0 else float("inf")
        word = "step up" if ratio >= 1 else "step down"
        found.append(LaterStep(ends[point.index], f"{word} ×{ratio:.2g} (no finding)"))
    return found


def plot_regression(
    series: pl.DataFrame,
    regression: dict[str, Any],
    title: str | None = None,
    *,
    deploys: list[tuple[datetime, str]] | None = None,
    steps: list[LaterStep] | None = None,
) -> Figure:
    """Latency over time (log scale, gaps as gaps), deploys and the detected change marked, the level
    before and after drawn; a recovered regression's after-level ends at the recovery (marked, with the
    level since); ``steps`` (later changes) marked. ``deploys``: every deploy in view as (time, version);
    the finding's own deploy is added when missing."""
    figure, axis = plt.subplots(figsize=(10, 4), layout="constrained")
    times, values = with_gaps(series)
    axis.plot(times, values, marker=".", markersize=3, linewidth=0.8, color="tab:blue", label="interval mean")
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(FuncFormatter(_plain_number))
    axis.yaxis.set_minor_formatter(FuncFormatter(_plain_number))
    axis.xaxis.set_major_formatter(ConciseDateFormatter(axis.xaxis.get_major_locator()))
    axis.set_ylabel("interval mean latency (ms)")
    change = regression.get("detected_change_at")
    shown_deploys = list(deploys or [])
    own = regression.get("deployed_at")
    if own is not None and all(at != own for at, _ in shown_deploys):
        shown_deploys.append((own, str(regression.get("deploy_version"))))
    for number, (at, version) in enumerate(sorted(shown_deploys)):
        axis.axvline(
            at, color=DEPLOY_COLOR, linestyle="--", linewidth=1, label="deploy" if number == 0 else None
        )
        axis.annotate(
            f"deploy {version}", (at, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
            textcoords="offset points", fontsize=7, color="dimgray", rotation=90, va="top",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1},
        )  # fmt: skip
    first, last = (
        (series["interval_end"].min(), series["interval_end"].max()) if series.height else (None, None)
    )
    if change is not None:
        axis.axvline(change, color="tab:red", linewidth=1.2, label="detected change")
        before, after = regression.get("before_mean_ms"), regression.get("after_mean_ms")
        recovered = regression.get("recovered_at") if regression.get("status") == RECOVERED else None
        if before is not None and first is not None:
            axis.hlines(before, first, change, colors="tab:green", linewidth=2, label="level before")
        if after is not None and last is not None:
            end = recovered if recovered is not None else last
            axis.hlines(after, change, end, colors=AFTER_COLOR, linewidth=2, label="level after")
        if recovered is not None:
            axis.axvline(recovered, color="tab:green", linestyle=":", linewidth=1.5, label="recovered")
            now = regression.get("latest_mean_ms") or before
            until = min(
                [s.at for s in steps or [] if s.at > recovered] + ([last] if last is not None else [])
            )
            if now is not None and until > recovered:
                axis.hlines(now, recovered, until, colors="tab:green", linestyle=":", linewidth=2)
    for number, step in enumerate(steps or []):
        label = "later step" if number == 0 else None
        axis.axvline(step.at, color="tab:purple", linestyle="-.", linewidth=1.2, label=label)
        axis.annotate(
            step.label, (step.at, 0.0), xycoords=("data", "axes fraction"), xytext=(2, 4),
            textcoords="offset points", fontsize=7, color="tab:purple", rotation=90, va="bottom",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1},
        )  # fmt: skip
    query = str(regression.get("query") or f"queryid {regression.get('queryid')}")
    shown = visible_controls(" ".join(query.split()), keep_lines=False)[:100]  # no glyph for a control
    axis.set_title(title or visible_controls(f"{regression.get('instance')}: {shown}"), fontsize=9)
    figure.legend(fontsize=7, loc="outside lower center", ncols=8, frameon=False)
    literal_text(figure)
    return figure


def literal_text(figure: Figure) -> Figure:
    """Every text of the figure drawn as written (no mathtext): ``$1 AND kind < $2`` stays that. Tick
    labels are the formatters' (plain numbers, ``_plain_number``), not user text."""
    texts: list[Text] = list(figure.texts)
    for legend in figure.legends:
        texts += [*legend.get_texts(), legend.get_title()]
    for axis in figure.axes:
        texts += [axis.title, axis.xaxis.label, axis.yaxis.label, *axis.texts]
        legend = axis.get_legend()
        if legend is not None:
            texts += [*legend.get_texts(), legend.get_title()]
    for text in texts:
        text.set_parse_math(False)
    return figure


def _plain_number(value: float, _position: float) -> str:
    """A log axis' tick label as a plain number (1, 20, 0.5), never mathtext; only 1, 2 and 5 of each
    decade are labelled so minor ticks do not crowd."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** np.floor(np.log10(value) + 1e-9)
    return f"{value:g}" if round(mantissa, 6) in (1.0, 2.0, 5.0) else ""
