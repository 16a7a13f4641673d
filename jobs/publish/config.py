"""The weekly report's settings: stdlib-only (re-exported by jobs.publish.weekly)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

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


DEFAULT_SCORE_BUCKETS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
"""Upper bounds of the plan_drift_score histogram: JS divergence (base 2) lies in [0, 1]."""


@dataclass(frozen=True)
class MetricsConfig:
    """[metrics]: the Prometheus exposition of `radar metrics` and `radar serve-metrics`.
    The two alert rules take their thresholds from [drift.samples] (stale_block_share, stale_min_block_pairs,
    stale_window, degenerate_share): the same as the drift asset checks."""

    host: str = "127.0.0.1"
    """Address `radar serve-metrics` listens on (loopback by default: put a scraper or a proxy beside it)."""
    port: int = 9188
    """Port `radar serve-metrics` listens on."""
    cache_s: float = 15.0
    """`radar serve-metrics` reads the lake at most once per this many seconds; scrapes in between get the
    last exposition (several Prometheus servers scraping every 15 s cost one lake read)."""
    textfile: str = ""
    """`radar metrics --textfile` without a path writes here (node_exporter's textfile collector folder,
    a file ending in .prom); empty: the flag needs a path."""
    score_buckets: tuple[float, ...] = DEFAULT_SCORE_BUCKETS
    """Upper bounds of the plan_drift_score histogram's buckets (increasing, in (0, 1]; +Inf is added)."""
    alert_for: timedelta = timedelta(0)
    """How long an alert rule's condition must hold before it fires (the rules' ``for``; 0s: at once, as
    the asset checks judge one window)."""

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, not {self.port}")
        buckets = self.score_buckets
        if not buckets or any(not 0.0 < b <= 1.0 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"score_buckets must increase within (0, 1], not {list(buckets)}")
