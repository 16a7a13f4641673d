"""Small lakes for tests: real Parquet files written through jobs.lake, with a known answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from jobs import lake
from jobs.collect.deploys import mark_deploy


def write_step_change_lake(lake_root: Path) -> datetime:
    """query_samples + texts + a deploy: a query 10x slower from the deploy on, one unchanged."""
    start = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    deploy_at = start + timedelta(minutes=30)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        end = start + timedelta(minutes=i + 1)
        for queryid, slow in ((111, end > deploy_at), (222, False)):
            mean = (10.0 if slow else 1.0) * float(rng.lognormal(0, 0.1))
            rows.append(
                {
                    "interval_start": end - timedelta(minutes=1),
                    "interval_end": end,
                    "interval_seconds": 60.0,
                    "userid": 10,
                    "dbid": 5,
                    "toplevel": True,
                    "queryid": queryid,
                    "calls": 100,
                    "total_exec_time": mean * 100,
                    "mean_exec_time": mean,
                }
            )
    samples = pl.DataFrame(rows)
    lake.write_table(lake_root, "query_samples", samples, {"instance": "db1", "date": "2026-11-02"}, "s")
    texts = pl.DataFrame(
        {
            "captured_at": [start, start],
            "queryid": [111, 222],
            "dbid": [5, 5],
            "userid": [10, 10],
            "query": ["select * from orders where customer_id = $1", "select 1"],
            "is_explain": [False, False],
        }
    )
    lake.write_table(lake_root, "query_texts", texts, {"instance": "db1", "date": "2026-11-02"}, "t")
    mark_deploy(lake_root, version="v9", instances=["db1"], at=deploy_at.isoformat())
    return deploy_at
