"""The weekly report's settings: stdlib-only (re-exported by jobs.weekly)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeeklyReportConfig:
    max_regressions: int = 20
    """Regressions shown in detail (largest added load first); the rest are counted."""
