"""Pictures of a regression: its latency series with the deploy and the change point marked.

Shared by the investigation notebook and reports. The series is rebuilt exactly as the detector sees it
(jobs.regressions: every queryid of the fingerprint merged per interval), so the picture cannot disagree
with the verdict.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # no screen: reports and CI render to files
import matplotlib.pyplot as plt
import polars as pl
from matplotlib.figure import Figure

from jobs.detect.findings import with_series
from jobs.regressions import SERIES_KEY, fingerprinted_samples, merge_intervals


def regression_series(samples: pl.DataFrame, texts: pl.DataFrame, instance: str, series: str) -> pl.DataFrame:
    """(interval_end, value = interval mean latency in ms, calls) of one series (a finding's ``series``:
    jobs.regressions.SERIES_KEY after the instance) on one instance."""
    points = with_series(fingerprinted_samples(samples.filter(pl.col("instance") == instance), texts))
    one = points.filter(pl.col("series") == series)
    keys = list(dict.fromkeys([*SERIES_KEY, "series"]))
    return merge_intervals(one, keys).select("interval_end", "value", "calls")


def plot_regression(series: pl.DataFrame, regression: dict[str, Any], title: str | None = None) -> Figure:
    """Latency over time (log scale), deploy and detected change marked, before/after means drawn."""
    figure, axis = plt.subplots(figsize=(10, 4), layout="constrained")
    axis.plot(series["interval_end"].to_list(), series["value"].to_list(), marker=".", linewidth=0.8)
    axis.set_yscale("log")
    axis.set_ylabel("interval mean latency (ms)")
    change = regression.get("detected_change_at")
    deployed = regression.get("deployed_at")
    if deployed is not None:
        axis.axvline(
            deployed, color="tab:gray", linestyle="--", label=f"deploy {regression.get('deploy_version')}"
        )
    if change is not None:
        axis.axvline(change, color="tab:red", label="detected change")
        first, last = series["interval_end"].min(), series["interval_end"].max()
        if regression.get("before_mean_ms") is not None:
            axis.hlines(regression["before_mean_ms"], first, change, colors="tab:green", label="mean before")
        if regression.get("after_mean_ms") is not None:
            axis.hlines(regression["after_mean_ms"], change, last, colors="tab:orange", label="mean after")
    query = str(regression.get("query") or regression.get("queryid"))
    axis.set_title(title or f"{regression.get('instance')}: {query[:90]}", fontsize=9)
    axis.legend(fontsize=8, loc="upper left")
    return figure
