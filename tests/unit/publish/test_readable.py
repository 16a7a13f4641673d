"""One finding, one ratio: the console, the alerts and the weekly report print the same digits; a p that
rounds to 0 is ``< 1e-10``; every time has its date and zone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobs.alerts.slack import before_after
from jobs.publish.console import _change_text
from jobs.publish.weekly_words import slowdown_words
from jobs.readable import moment_text, p_value_text, ratio_text, slowdown_ratio


@pytest.mark.parametrize(
    ("before_ms", "after_ms", "digits"),
    [
        (0.0365846, 27.4183, "749"),
        (0.5, 41.0, "82"),
        (1.0, 2.44, "2.4"),
        (1.0, 1.45, "1.45"),
        (2.0, 2.5, "1.25"),
    ],
)
def test_every_surface_prints_the_same_ratio(before_ms: float, after_ms: float, digits: str) -> None:
    row = {"before_mean_ms": before_ms, "after_mean_ms": after_ms}
    assert ratio_text(slowdown_ratio(before_ms, after_ms)) == f"×{digits}"
    assert _change_text(row).endswith(f"(×{digits})")  # the console
    assert re.search(rf"\({re.escape(digits)}× slower\)$", before_after(before_ms, after_ms))  # Slack
    assert slowdown_words(row) == f"{digits}× slower"  # the weekly report


@pytest.mark.parametrize(
    ("p", "shown"), [(0.0, "< 1e-10"), (1.7e-27, "< 1e-10"), (1.3e-5, "1.3e-05"), (0.04, "0.04")]
)
def test_a_p_value_never_prints_as_zero(p: float, shown: str) -> None:
    assert p_value_text(p) == shown


def test_times_carry_their_date_and_zone() -> None:
    assert moment_text(datetime(2026, 12, 6, 8, 4, 58)) == "2026-12-06 08:04:58 UTC"  # naive: the lake's UTC
    cet = timezone(timedelta(hours=1))
    assert moment_text(datetime(2026, 12, 6, 9, 4, 58, tzinfo=cet)) == "2026-12-06 08:04:58 UTC"
    assert moment_text(datetime(2026, 12, 6, 8, 4, 58, tzinfo=UTC), seconds=False) == "2026-12-06 08:04 UTC"
