"""The detector's verdict names and the key of a finding: the lowest module every detection step imports."""

from __future__ import annotations

from jobs.query.series import SERIES_KEY

DETECTED = "detected"
NO_REGRESSION = "no_regression"
INSUFFICIENT_DATA = "insufficient_data"

FINDING_KEY = [*SERIES_KEY, "detected_change_at"]
