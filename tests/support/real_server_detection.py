"""The detector settings of the real-server detection tests (compressed windows)."""

from __future__ import annotations

from datetime import timedelta

from jobs.detect.config import RegressionConfig

CONFIG = RegressionConfig(window_before=timedelta(minutes=1), window_after=timedelta(minutes=1))
