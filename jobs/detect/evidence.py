"""The words for how strong a finding's evidence is: one home for every surface (Slack, the weekly report's
Markdown and HTML, notebooks), so one finding is never "strong evidence" in one place and "weak" in
another (issue 21: Slack and the report had their own cut-offs). Stdlib only: the bottom layer.

The cut-offs are the weekly report's settings (``[report] very_strong_evidence_p``, ``strong_evidence_p``);
``radar alerts`` and the Dagster alerts asset read the same ones."""

from __future__ import annotations

from dataclasses import dataclass

VERY_STRONG = "very strong evidence"
STRONG = "strong evidence"
WEAK = "weak evidence"
NOT_COMPUTED = "evidence not computed"


@dataclass(frozen=True)
class EvidenceCutoffs:
    """p at or below ``very_strong_p``: very strong; at or below ``strong_p``: strong; above: weak."""

    very_strong_p: float = 1e-6
    strong_p: float = 1e-3


def evidence_words(p: float | None, cutoffs: EvidenceCutoffs = EvidenceCutoffs()) -> str:
    """``very strong evidence`` | ``strong evidence`` | ``weak evidence`` (| ``evidence not computed``)."""
    if p is None or p != p:  # None or NaN
        return NOT_COMPUTED
    if p <= cutoffs.very_strong_p:
        return VERY_STRONG
    if p <= cutoffs.strong_p:
        return STRONG
    return WEAK
