"""Numbers and times as people read them, one home for every surface (the console, the weekly report,
Slack, notebooks): a finding's slowdown is one ratio with the same digits everywhere, a time always has
its date and its zone, and a p-value too small to print is ``< 1e-10``, never ``0``. Stdlib only: the
bottom layer, so the alerts import it as the console does."""

from __future__ import annotations

import math
from datetime import UTC, datetime

P_VALUE_FLOOR = 1e-10
"""p-values below this are shown as ``< 1e-10``: beyond it the digits say nothing a reader can use (and a
p that underflowed to 0 is not zero)."""


def p_value_text(p: float | None) -> str:
    """``0.042``, ``1.3e-05``, ``< 1e-10``; ``-`` when not computed."""
    if p is None or math.isnan(p):
        return "-"
    if p < P_VALUE_FLOOR:
        return "< 1e-10"
    if p < 1e-3:
        return f"{p:.1e}"
    return f"{p:.3g}"


def p_text(p: float | None) -> str:
    """``p = 0.042``, ``p < 1e-10``; ``p not computed``."""
    shown = p_value_text(p)
    if shown == "-":
        return "p not computed"
    return f"p {shown}" if shown.startswith("<") else f"p = {shown}"


def slowdown_ratio(before_ms: float | None, after_ms: float | None) -> float | None:
    """A finding's one ratio: its level after the step over its level before (``after_mean_ms /
    before_mean_ms``, the means of the segments either side of its change point); None when a level is
    unknown or the level before is not positive."""
    if before_ms is None or after_ms is None or not before_ms > 0 or math.isnan(after_ms):
        return None
    return after_ms / before_ms


def ratio_number(ratio: float) -> str:
    """The digits of a ratio: ``749``, ``1,204``, ``2.4``, ``1.25``, ``0.51``."""
    if not math.isfinite(ratio):
        return str(ratio)
    if ratio >= 10:
        return f"{ratio:,.0f}"
    if ratio < 1:
        return f"{ratio:.2g}"
    return f"{ratio:.1f}" if ratio >= 2 else f"{ratio:.3g}"  # 1.25, 1.4 (no trailing zero)


def ratio_text(ratio: float | None) -> str:
    """``×749``, ``×2.4``, ``×0.51``; ``-`` when unknown."""
    return "-" if ratio is None else f"×{ratio_number(ratio)}"


def moment_text(at: datetime | None, *, seconds: bool = True) -> str:
    """``2026-12-06 08:04:58 UTC`` (a naive datetime is taken as UTC, as the lake stores them); ``-``."""
    if at is None:
        return "-"
    moment = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")
