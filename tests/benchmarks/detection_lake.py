"""A generated lake for the detection benchmark: N instances x Q queries of one-minute snapshots over D
days, a few hundred instance-scoped deploys, a few true regressions at some of them.

Written as the collector writes it (``jobs.lake.io.write_table`` with the ``jobs.schemas.analysed`` tables):
statement_snapshots (cumulative counters), snapshot_runs, query_texts and deploy_events, partitioned by
instance and date, so the samples job and ``run_detection`` do all the real work. History files are one
compacted file per (instance, date) (what compaction leaves); the 15 "new" minutes after the history are
one file per snapshot per instance, as the collector writes them, kept in a separate *tail* folder with the
same layout, so a benchmark can copy them into a lake copy to simulate the next collector ticks.

Every series has its own latency level and lognormal noise, its own call rate and work per call. A true
regression (latency x``REGRESSION_FACTOR``, shared blocks x20: an index dropped) starts at a few deploys,
on one query of the deploy's instance. Numbers come from one numpy Generator per instance seeded from
(seed, instance), so a shape always gives the same lake.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from jobs.collect.deploys import DeployEvent, write_deploy_events
from jobs.lake.io import stem_for, write_table
from jobs.local.simulate.simulated_fleet import query_text  # one home of the generated statement texts
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

START = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)
TAIL_MINUTES = 15
"""New minutes after the history: what the collector adds between two Dagster ticks."""
REGRESSION_FACTOR = 6.0
"""Latency after / before of a true regression (with 20x the shared blocks per call)."""
EDGE_MINUTES = 40
"""No deploy closer than this to the start of the data: its before window is full."""
LATE_DEPLOY_MINUTES = 10
"""The last deploys land this long before the history ends: their after window fills in the tail."""
MIN_DEPLOY_GAP_MINUTES = 15
"""Deploys of one instance lie further apart than the change point tolerance (12 min by default), so which
deploy a step belongs to is never ambiguous."""


@dataclass(frozen=True)
class LakeShape:
    instances: int = 20
    queries: int = 500
    """Queries (series) per instance: instances x queries series in all."""
    days: float = 1.0
    """History length; one snapshot a minute."""
    deploys_per_instance_day: float = 15.0
    """300 deploys a day at the default 20 instances."""
    regressions: int = 6
    """True regressions, each at its own deploy (spread over instances)."""
    seed: int = 20261201

    @property
    def minutes(self) -> int:
        return round(self.days * 24 * 60)

    @property
    def end(self) -> datetime:
        """Just after the last history snapshot: the ``now`` of the full run."""
        return START + self.minutes * STEP

    @property
    def key(self) -> str:
        days = f"{self.days:g}".replace(".", "p")
        return (
            f"{self.instances}x{self.queries}x{days}d-{self.deploys_per_instance_day:g}dpd-"
            f"{self.regressions}r-{self.seed}"
        )


@dataclass(frozen=True)
class InjectedRegression:
    instance: str
    queryid: int
    deployed_at: datetime
    version: str


@dataclass(frozen=True)
class GeneratedLake:
    root: Path
    """The lake holding the history (snapshots up to ``shape.end``)."""
    tail: Path
    """The next TAIL_MINUTES snapshots, in the same layout: copy into a lake to append them."""
    shape: LakeShape
    regressions: tuple[InjectedRegression, ...]
    deploys: int
    snapshot_rows: int
    seconds: float
    """Generation time; 0 when the cached lake was used."""


def instance_name(i: int) -> str:
    return f"inst-{i:03d}"


def _deploy_minutes(rng: np.random.Generator, shape: LakeShape, count: int) -> np.ndarray:
    """Deploy minutes inside the history, at least MIN_DEPLOY_GAP_MINUTES apart: the last one close to the
    end (its after window fills during the tail), the others at random with a full before window."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    late = shape.minutes - LATE_DEPLOY_MINUTES
    last_random = late - 30  # full after window before the late deploy's
    spare = last_random - EDGE_MINUTES - (count - 1) * MIN_DEPLOY_GAP_MINUTES
    if spare < 0:
        raise ValueError(f"{count} deploys at least {MIN_DEPLOY_GAP_MINUTES} min apart do not fit {shape}")
    offsets = np.sort(rng.integers(0, spare + 1, count - 1))
    chosen = EDGE_MINUTES + offsets + np.arange(count - 1) * MIN_DEPLOY_GAP_MINUTES
    return np.append(chosen, late).astype(np.int64)


def _regression_plan(shape: LakeShape) -> dict[int, int]:
    """instance number -> how many true regressions it gets (spread evenly over the instances)."""
    plan: dict[int, int] = {}
    if shape.instances <= 0:
        return plan
    stride = max(1, shape.instances // max(1, shape.regressions))
    for r in range(shape.regressions):
        i = (r * stride + 1) % shape.instances
        plan[i] = plan.get(i, 0) + 1
    return plan


def generate_instance(
    shape: LakeShape, i: int, regressions_here: int
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[DeployEvent], list[InjectedRegression]]:
    """Snapshots (history + tail), runs, texts, deploys and injected regressions of instance ``i``."""
    rng = np.random.default_rng([shape.seed, i])
    name = instance_name(i)
    q = shape.queries
    n = shape.minutes + TAIL_MINUTES
    deploy_count = max(1, round(shape.deploys_per_instance_day * shape.days))
    deploy_minutes = _deploy_minutes(rng, shape, deploy_count)
    events = [
        DeployEvent(version=f"v{i}.{j}", deployed_at=START + int(m) * STEP, instance=name, source="bench")
        for j, m in enumerate(deploy_minutes)
    ]

    queryid = rng.integers(-(2**62), 2**62, q, dtype=np.int64)
    latency = np.exp(rng.uniform(np.log(0.2), np.log(30.0), q))
    calls_per_min = np.exp(rng.uniform(np.log(20.0), np.log(3000.0), q))
    sigma = rng.uniform(0.05, 0.2, q)
    blocks = np.exp(rng.uniform(np.log(3.0), np.log(300.0), q))

    factor = np.ones((n, q))
    block_factor = np.ones((n, q))
    injected = []
    if regressions_here:
        # The latest deploys (but the late one, which the incremental run re-examines) get a regression on a
        # busy, slow-enough query, so it is material by the detector's rules.
        candidates = np.flatnonzero((latency > 5.0) & (calls_per_min > 100.0))
        victims = rng.choice(candidates if candidates.size else np.arange(q), regressions_here, replace=False)
        at = deploy_minutes[-1 - regressions_here : -1] if deploy_minutes.size > regressions_here else []
        for victim, minute in zip(victims, at, strict=False):
            # The first sample ending after the deploy is in the new regime (the deploy at a snapshot).
            factor[int(minute) + 1 :, victim] = REGRESSION_FACTOR
            block_factor[int(minute) + 1 :, victim] = 20.0
            when = START + int(minute) * STEP
            version = next(e.version for e in events if e.deployed_at == when)
            injected.append(InjectedRegression(name, int(queryid[victim]), when, version))

    calls_step = np.maximum(1, rng.poisson(calls_per_min, (n, q)))
    calls_step[0] = 0  # the first snapshot is the baseline (cumulative counters since "before")
    mean_ms = latency * factor * rng.lognormal(0.0, 1.0, (n, q)) ** sigma
    calls = np.cumsum(calls_step, axis=0) + 1000
    exec_ms = np.cumsum(calls_step * mean_ms, axis=0) + 1000 * latency
    hits = np.cumsum(np.rint(calls_step * blocks * block_factor).astype(np.int64), axis=0)
    reads = np.cumsum(rng.poisson(0.05 * calls_step), axis=0)
    snapshots, runs, texts = collector_frames(
        START, queryid, calls, exec_ms, hits, reads, system_identifier=7_000_000 + i
    )
    return snapshots, runs, texts, events, injected


def collector_frames(
    start: datetime,
    queryid: np.ndarray,
    calls: np.ndarray,
    exec_ms: np.ndarray,
    hits: np.ndarray,
    reads: np.ndarray,
    *,
    system_identifier: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """statement_snapshots, snapshot_runs and query_texts of one instance as the collector writes them, from
    cumulative (snapshots x statements) counters of one-minute snapshots from ``start``: one home for the
    generated lakes' row shapes (this module's and the time-to-alert benchmark's)."""
    n, q = calls.shape
    captured = np.datetime64(start.replace(tzinfo=None), "us") + np.arange(n) * np.timedelta64(60, "s")
    before = np.datetime64((start - timedelta(days=1)).replace(tzinfo=None), "us")
    rows = n * q
    snapshots = pl.DataFrame(
        {
            "captured_at": np.repeat(captured, q),
            "collector_clock": np.repeat(captured, q),
            "system_identifier": np.full(rows, system_identifier, dtype=np.int64),
            "postmaster_start": np.full(rows, before),
            "stats_reset": np.full(rows, before),
            "userid": np.full(rows, 10, dtype=np.int64),
            "dbid": np.full(rows, 5, dtype=np.int64),
            "toplevel": np.ones(rows, dtype=bool),
            "queryid": np.tile(queryid, n),
            "calls": calls.ravel(),
            "plans": np.zeros(rows, dtype=np.int64),
            "total_exec_time": exec_ms.ravel(),
            "total_plan_time": np.zeros(rows),
            "rows": calls.ravel() * 3,
            "shared_blks_hit": hits.ravel(),
            "shared_blks_read": reads.ravel(),
            "stats_since": np.full(rows, before),
        }
    ).with_columns(
        pl.col(
            "captured_at", "collector_clock", "postmaster_start", "stats_reset", "stats_since"
        ).dt.replace_time_zone("UTC")
    )
    runs = pl.DataFrame(
        {
            "captured_at": captured,
            "collector_clock": captured,
            "status": ["ok"] * n,
            "health": ["ok"] * n,
            "system_identifier": np.full(n, system_identifier, dtype=np.int64),
            "postmaster_start": np.full(n, before),
            "server_version_num": np.full(n, 180000, dtype=np.int64),
            "dealloc": np.zeros(n, dtype=np.int64),
            "stats_reset": np.full(n, before),
            "statement_rows": np.full(n, q, dtype=np.int64),
        }
    ).with_columns(
        pl.col("captured_at", "collector_clock", "postmaster_start", "stats_reset").dt.replace_time_zone(
            "UTC"
        )
    )
    texts = pl.DataFrame(
        {
            "captured_at": [start] * q,
            "queryid": queryid,
            "dbid": np.full(q, 5, dtype=np.int64),
            "userid": np.full(q, 10, dtype=np.int64),
            "query": [query_text(k) for k in range(q)],
            "is_explain": [False] * q,
            "is_radar": [False] * q,
        }
    )
    return snapshots, runs, texts


def _write_by_date(root: Path, table: object, frame: pl.DataFrame, name: str) -> int:
    """One file per (instance, date), named as ``jobs.lake.compaction`` names what it leaves:
    ``compacted-<first>-<last>``, so readers that select files by their latest stamp (the samples append)
    skip it as they skip a real compacted day. (Until issue 25's second session the files were named
    ``compacted``, with no stamp: every incremental append read the whole history day.)"""
    files = 0
    dated = frame.with_columns(pl.col("captured_at").dt.strftime("%Y-%m-%d").alias("date"))
    for (day,), part in sorted(dated.partition_by("date", as_dict=True).items()):
        first, last = part["captured_at"].min(), part["captured_at"].max()
        stem = f"compacted-{stem_for(first)}-{stem_for(last)}"  # type: ignore[arg-type]
        write_table(root, table, part.drop("date"), {"instance": name, "date": str(day)}, stem)  # type: ignore[arg-type]
        files += 1
    return files


def _write_tail(tail: Path, table: object, frame: pl.DataFrame, name: str) -> None:
    """One file per snapshot, named as the collector names them (a stem per captured_at)."""
    for (captured,), part in sorted(frame.partition_by("captured_at", as_dict=True).items()):
        day = captured.strftime("%Y-%m-%d")  # type: ignore[union-attr]
        write_table(tail, table, part, {"instance": name, "date": day}, f"{stem_for(captured)}-bench")  # type: ignore[arg-type]


LAYOUT = 2
"""The file layout of a generated lake; a cached lake of another layout is generated again (same data)."""


def build_lake(base: Path, shape: LakeShape) -> GeneratedLake:
    """Generate the lake under ``base/<shape.key>`` once; later calls reuse it (``complete.json``)."""
    folder = base / f"lake-detection-{shape.key}"
    root, tail, marker = folder / "lake", folder / "tail", folder / "complete.json"
    meta = json.loads(marker.read_text()) if marker.exists() else {}
    if meta.get("layout") == LAYOUT:
        return GeneratedLake(
            root,
            tail,
            shape,
            tuple(
                InjectedRegression(
                    r["instance"], r["queryid"], datetime.fromisoformat(r["deployed_at"]), r["version"]
                )
                for r in meta["regressions"]
            ),
            meta["deploys"],
            meta["snapshot_rows"],
            0.0,
        )
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    plan = _regression_plan(shape)
    events: list[DeployEvent] = []
    injected: list[InjectedRegression] = []
    snapshot_rows = 0
    end = shape.end
    for i in range(shape.instances):
        snapshots, runs, texts, deploys, regressions = generate_instance(shape, i, plan.get(i, 0))
        events += deploys
        injected += regressions
        name = instance_name(i)
        history = pl.col("captured_at") < end
        old_snapshots = snapshots.filter(history)
        snapshot_rows += old_snapshots.height
        _write_by_date(root, STATEMENT_SNAPSHOTS, old_snapshots, name)
        _write_by_date(root, SNAPSHOT_RUNS, runs.filter(history), name)
        _write_by_date(root, QUERY_TEXTS, texts, name)
        _write_tail(tail, STATEMENT_SNAPSHOTS, snapshots.filter(~history), name)
        _write_tail(tail, SNAPSHOT_RUNS, runs.filter(~history), name)
    write_deploy_events(root, events, stem="bench")
    seconds = time.perf_counter() - started
    marker.write_text(
        json.dumps(
            {
                "shape": asdict(shape),
                "layout": LAYOUT,
                "deploys": len(events),
                "snapshot_rows": snapshot_rows,
                "regressions": [{**asdict(r), "deployed_at": r.deployed_at.isoformat()} for r in injected],
                "seconds": seconds,
            },
            indent=2,
        )
    )
    return GeneratedLake(root, tail, shape, tuple(injected), len(events), snapshot_rows, seconds)


def append_tail(lake_root: Path, tail: Path) -> int:
    """Copy the tail's files into a lake (the next collector ticks); returns the number of files."""
    copied = 0
    for path in sorted(tail.rglob("*.parquet")):
        target = lake_root / path.relative_to(tail)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied += 1
    return copied
