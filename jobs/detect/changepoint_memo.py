"""Change points found once per shard pass: phase 1 of a sharded detection (jobs.pipeline.sharded) runs the
unannounced change-point searches to learn its candidates; phase 2 runs the same searches on the same
series. The search is the pass's most expensive step and a pure function of its inputs, so phase 1 keeps
what it found keyed by a digest of those inputs (the series' values and lengths, the change-point
settings) and phase 2 takes it from there instead of searching again; different inputs (a sample arrived
in between, a setting changed) give another key, and that call is searched afresh.

Pure but for the dictionary it fills; the lake rows (table ``changepoint_memo``) are made and read by
jobs.pipeline.sharded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from jobs.detect.config import ChangePointConfig


@dataclass(frozen=True)
class FoundCuts:
    """One call's change points: per series the sorted cut indexes, and each cut's change-point p-value
    in the order the search reported them (what ``consecutive_segment_tests`` uses)."""

    cuts: list[list[int]]
    p_values: np.ndarray


def memo_key(
    values: np.ndarray,
    sizes: np.ndarray,
    config: ChangePointConfig,
    max_change_points: int,
    fdr_q: float | None,
) -> str:
    """SHA-256 of everything the search's result depends on."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    digest.update(b"|")
    digest.update(np.ascontiguousarray(sizes, dtype=np.int64).tobytes())
    digest.update(repr((config, max_change_points, fdr_q)).encode())
    return digest.hexdigest()


@dataclass
class ChangePointMemo:
    """Found cuts by ``memo_key``; counts its hits and misses (the pass's metadata says what was reused)."""

    entries: dict[str, FoundCuts] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def get(self, key: str) -> FoundCuts | None:
        found = self.entries.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: str, found: FoundCuts) -> None:
        self.entries[key] = found

    def to_frame(self) -> pl.DataFrame:
        """One row per (key, series): the series' cuts and their p-values."""
        rows: dict[str, list] = {"key": [], "series": [], "cuts": [], "p_values": []}
        for key in sorted(self.entries):
            found = self.entries[key]
            start = 0
            for series, cuts in enumerate(found.cuts):
                rows["key"].append(key)
                rows["series"].append(series)
                rows["cuts"].append(list(cuts))
                rows["p_values"].append(found.p_values[start : start + len(cuts)].tolist())
                start += len(cuts)
        return pl.DataFrame(
            rows,
            schema={
                "key": pl.String,
                "series": pl.Int64,
                "cuts": pl.List(pl.Int64),
                "p_values": pl.List(pl.Float64),
            },
        )

    @classmethod
    def from_frame(cls, frame: pl.DataFrame) -> ChangePointMemo:
        memo = cls()
        for (key,), rows in frame.sort("key", "series").group_by("key", maintain_order=True):
            cuts = [list(c) for c in rows["cuts"].to_list()]
            p_values = [p for ps in rows["p_values"].to_list() for p in ps]
            memo.put(str(key), FoundCuts(cuts, np.asarray(p_values, dtype=np.float64)))
        return memo
