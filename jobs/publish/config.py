"""The weekly report's settings: stdlib-only (re-exported by jobs.publish.weekly)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.detect.evidence import EvidenceCutoffs


@dataclass(frozen=True)
class WeeklyReportConfig:
    max_regressions: int = 20
    """Regressions shown in detail (largest added load first); the rest are counted."""
    severe_ratio: float = 10.0
    """A regression whose level after is at least this many times its level before is 'severe' in the
    report's summary (a query 10x slower is an outage for whoever calls it)."""
    major_ratio: float = 2.0
    """At least this many times slower (and below severe_ratio) is 'major'; anything slower is 'minor'."""
    very_strong_evidence_p: float = 1e-6
    """A finding's p at or below this is described as 'very strong evidence' in the report, Slack and every
    other surface (jobs.detect.evidence; p itself is in the tooltip)."""
    strong_evidence_p: float = 1e-3
    """At or below this (above very_strong_evidence_p): 'strong evidence'; above it: 'weak evidence'."""

    def evidence_cutoffs(self) -> EvidenceCutoffs:
        """The cut-offs of every surface's evidence words (``jobs.detect.evidence``), Slack's included."""
        return EvidenceCutoffs(self.very_strong_evidence_p, self.strong_evidence_p)

    def __post_init__(self) -> None:
        if not 1.0 < self.major_ratio <= self.severe_ratio:
            raise ValueError("report: need 1 < major_ratio <= severe_ratio")
        if not 0.0 < self.very_strong_evidence_p <= self.strong_evidence_p < 1.0:
            raise ValueError("report: need 0 < very_strong_evidence_p <= strong_evidence_p < 1")
