"""Tiny synthetic latency series with a deploy, for the detector's pure tests."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl

from jobs.collect.deploys import DeployEvent, events_frame
from tests.support.lakes import SERIES_DEPLOY_AT

DEPLOY_AT = SERIES_DEPLOY_AT


def deploy(instance: str | None = "alpha", at: datetime = DEPLOY_AT) -> pl.DataFrame:
    return events_frame([DeployEvent(version="v42", deployed_at=at, instance=instance)]).drop("date")


def noise(n: int, level: float, seed: int) -> np.ndarray:
    return level * np.random.default_rng(seed).lognormal(0.0, 0.1, n)
