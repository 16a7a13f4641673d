"""What ``jobs.pipeline.detection.detect_from_frames`` returned, whether the pre-issue-8 3-tuple or
``DetectionFrames``.

The contention benchmark and the real-server detection tests read results through ``as_frames`` so that
they run on both (on the old shape the issue 8 tables are None, and the tests that need them say so).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Frames:
    regressions: pl.DataFrame
    unannounced: pl.DataFrame
    plan_diffs: pl.DataFrame
    resource_regressions: pl.DataFrame | None
    """None when the code has no resource regressions (before issue 8)."""
    instance_slowdowns: pl.DataFrame | None
    """None when the code has no instance slowdowns (before issue 8)."""
    shape: str
    """``tuple`` or the name of the result's class."""

    @property
    def reported(self) -> pl.DataFrame:
        """Every latency finding reported as a query regression, by either analysis."""
        both = pl.concat([self.regressions, self.unannounced], how="diagonal_relaxed")
        return both.filter(pl.col("status") == "detected")


def as_frames(result: object) -> Frames:
    if isinstance(result, tuple):
        regressions, unannounced, diffs = result
        return Frames(regressions, unannounced, diffs, None, None, "tuple")
    return Frames(
        result.regressions,  # type: ignore[attr-defined]
        result.unannounced,  # type: ignore[attr-defined]
        result.plan_diffs,  # type: ignore[attr-defined]
        getattr(result, "resource_regressions", None),
        getattr(result, "instance_slowdowns", None),
        type(result).__name__,
    )


SHOWN = (
    *("analysis", "query", "status", "reason", "latency_change", "kind", "instance_slowdown_ratio"),
    *("slowdown_excess", "work_changed", "work_evidence"),
)


def shown(frame: pl.DataFrame) -> str:
    """The rows' verdict columns, one line each: a string, which pytest prints whole (it cuts the repr of
    a list at 240 characters, and CI's failures of these tests once lost the column that explained them)."""
    wanted = [c for c in SHOWN if c in frame.columns]
    return "\n".join(
        " | ".join(f"{c}={row[c]}" for c in wanted) for row in frame.select(wanted).iter_rows(named=True)
    )
