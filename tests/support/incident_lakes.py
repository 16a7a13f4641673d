"""A lake with a latency incident, for the drift and weekly report tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from jobs.lake import io as lake
from tests.support.lakes import series_samples

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=15)
QUERY = "select * from orders where customer_id = $1"


def series_frame(
    values: np.ndarray, *, instance: str = "alpha", queryid: int = 11, calls: int | np.ndarray = 100
) -> pl.DataFrame:
    """One sample per 15 min, the last ending at NOW; ``values`` are interval mean latencies (ms)."""
    n = values.shape[0]
    calls_arr = np.broadcast_to(np.asarray(calls, dtype=np.int64), (n,))
    return series_samples(
        values, calls=calls_arr, instance=instance, queryid=queryid, first=-n, step=STEP, origin=NOW
    )


def texts(*pairs: tuple[str, int, str]) -> pl.DataFrame:
    rows = list(pairs) or [("alpha", 11, QUERY)]
    return pl.DataFrame(
        rows, schema={"instance": pl.String, "queryid": pl.Int64, "query": pl.String}, orient="row"
    )


def lognormal(n: int, median_ms: float, seed: int, sigma: float = 0.1) -> np.ndarray:
    return median_ms * np.random.default_rng(seed).lognormal(0.0, sigma, n)


def _incident_series() -> np.ndarray:
    """Good (200 ms) until 10 days ago, then the slow-tailed shape ever since: the default baseline sees
    the bad shape already, an anchor on the good period does not."""
    good = lognormal(14 * 96, 200.0, 10)
    bad_n = 10 * 96
    bad = lognormal(bad_n, 200.0, 11) * np.where(np.arange(bad_n) % 10 == 0, 4.6, 0.6)
    return np.concatenate([good, bad])


def write_incident_lake(root: Path) -> None:
    """The incident series of instance alpha as lake files (query_samples + query_texts)."""
    samples = series_frame(_incident_series()).drop("instance")
    lake.write_table(root, "query_samples", samples, {"instance": "alpha", "date": "x"}, "s")
    text = (
        texts()
        .drop("instance")
        .with_columns(pl.lit(NOW).alias("captured_at"), pl.lit(5).alias("dbid"), pl.lit(10).alias("userid"))
    )
    lake.write_table(root, "query_texts", text, {"instance": "alpha", "date": "x"}, "t")
