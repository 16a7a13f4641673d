"""A work-per-call regression in words ("temp blocks per call ×4.8 (120 → 576) at deploy v42, latency +9%"):
pure, so the findings module names a latency finding's work step without importing the analysis."""

from __future__ import annotations

import math
from datetime import datetime

from jobs.detect.work_config import WORK_METRIC_BY_NAME


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _times(ratio: float) -> str:
    return f"×{ratio:.0f}" if ratio >= 10 else f"×{ratio:.1f}"


def resource_summary(row: dict, *, latency: bool = True) -> str:
    """'temp blocks per call ×4.8 (120 → 576) at deploy v42, latency +9%' (doubled or more: 'latency ×5');
    ``latency`` False: without the latency clause (a latency finding's work step: the finding's own ratio
    is the one its surfaces show, never a second one from the work analysis's segments)."""
    metric = WORK_METRIC_BY_NAME[row["metric"]]
    before, after, ratio = row["before_per_call"], row["after_per_call"], row["ratio"]
    change = (
        f"{_times(ratio)} ({_number(before)} → {_number(after)})"
        if ratio is not None and math.isfinite(ratio)
        else f"{_number(before or 0.0)} → {_number(after)}"
    )
    at: datetime | None = row["detected_change_at"]
    where = (
        f"at deploy {row['deploy_version']}"
        if row["analysis"] == "deploy"
        else f"since {at:%Y-%m-%d %H:%M} UTC (unannounced)"
        if at
        else "(unannounced)"
    )
    if not latency:
        return f"{metric.display} per call {change} {where}"
    latency_change = row["latency_change"]
    latency_text = (
        "latency unknown"
        if latency_change is None
        else f"latency {_times(1.0 + latency_change)}"
        if latency_change >= 1.0
        else f"latency {latency_change * 100:+.0f}%"
    )
    return f"{metric.display} per call {change} {where}, {latency_text}"
