"""A simulated fleet: pg_stat_statements snapshots of N instances x M statements, as the collector reads them.

Every instance is generated on its own, vectorized with numpy (arrays of snapshots x statements, no Python
loop per statement or snapshot), from a Generator seeded with (seed, instance number): a shape always gives
the same fleet, and memory is bounded by one instance. Counters are cumulative over an entry's life, as in
the server, and the situations the samples job must recognise happen at planned moments:

- server restart: a new ``postmaster_start``; every entry starts again from zero (a crash, or
  ``pg_stat_statements.save = off``), ``stats_reset`` is the start time and ``dealloc`` is 0 again;
- ``pg_stat_statements_reset()``: a new ``stats_reset``, every entry starts again, ``dealloc`` is 0;
- eviction (deallocation): ``dealloc`` rises by one and a few of the least-used entries vanish from the
  snapshots, to come back one or two snapshots later with counters from zero and a new ``stats_since``;
- a server clock step: ``captured_at`` jumps against the collector's clock;
- a failed snapshot: a ``failed`` snapshot_runs row and no statement rows (the server keeps counting);
- deploys, some with an injected regression (one statement's latency x``regression_factor`` and its
  shared blocks x20 from the first snapshot after the deploy).

Events of one instance lie at least ``EVENT_SPACING`` snapshots apart, so each is seen on its own, and
the ground truth (``InstanceTruth``) says what the samples job must drop for each of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from jobs.collect.deploys import DeployEvent
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_COUNTERS, STATEMENT_SNAPSHOTS

EVENT_KINDS: tuple[str, ...] = ("restart", "stats_reset", "eviction", "clock_step", "failed_snapshot")
EVENT_SPACING = 4
"""Snapshots between two events of one instance (an eviction keeps its entries away for up to 2)."""
DEPLOY_EDGE_MINUTES = 40
"""No deploy closer than this to the start: the detector's before window is full."""
DEPLOY_AFTER_MINUTES = 30
"""No deploy closer than this to the end: the after window is full."""
DEPLOY_GAP_MINUTES = 15
"""Deploys of one instance lie further apart than the change point tolerance."""
BLOCK_FACTOR = 20.0
"""Shared blocks per call after an injected regression (an index dropped)."""
_WORDS = "abcdefghijklmnopqrstuvwxyz"
_COLUMNS = ("id", "amount", "status", "created_at", "customer_id", "note")
_DATABASES = ((16384, "app"), (16385, "billing"))
_USERS = (16390, 16391, 16392)
_FILLED = {
    "calls",
    "plans",
    "total_exec_time",
    "total_plan_time",
    "rows",
    "shared_blks_hit",
    "shared_blks_read",
    "shared_blks_dirtied",
    "shared_blks_written",
    "wal_records",
    "wal_bytes",
}
_ZERO_COUNTERS = tuple(c for c in STATEMENT_COUNTERS if c not in _FILLED)
_TIME_COLUMNS = ("captured_at", "collector_clock", "postmaster_start", "stats_reset", "stats_since")


@dataclass(frozen=True)
class FleetShape:
    """What to simulate. Rates are expected events per instance-hour (drawn Poisson per instance)."""

    instances: int = 10
    statements: int = 200
    """pg_stat_statements entries per instance (all present from the first snapshot)."""
    minutes: int = 120
    """Length of the run; one snapshot every ``step_seconds``."""
    step_seconds: int = 60
    seed: int = 20261202
    start: datetime = datetime(2026, 11, 1, tzinfo=UTC)
    restarts_per_hour: float = 0.02
    resets_per_hour: float = 0.02
    evictions_per_hour: float = 0.5
    evicted_fraction: float = 0.05
    """Entries removed by one deallocation (pg_stat_statements removes 5% of its entries), at least 1."""
    clock_steps_per_hour: float = 0.01
    clock_step_seconds: float = 30.0
    """Size of a server clock step (either direction)."""
    failed_snapshots_per_hour: float = 0.05
    deploys_per_hour: float = 0.5
    regressions: int = 2
    """Injected regressions in the whole fleet, each at its own deploy, spread over the instances."""
    regression_factor: float = 6.0

    def __post_init__(self) -> None:
        if self.instances < 1 or self.statements < 1 or self.step_seconds < 1:
            raise ValueError(f"a fleet needs instances, statements and step_seconds >= 1: {self}")
        if self.snapshots < 2:
            raise ValueError(f"a fleet needs at least two snapshots: {self}")
        if self.start.tzinfo is None:
            raise ValueError("FleetShape.start must be timezone-aware (UTC)")

    @property
    def snapshots(self) -> int:
        return self.minutes * 60 // self.step_seconds

    @property
    def hours(self) -> float:
        return self.minutes / 60.0

    @property
    def end(self) -> datetime:
        """Just after the last snapshot: a detection run's ``now``."""
        return self.start + timedelta(seconds=self.snapshots * self.step_seconds)

    @property
    def key(self) -> str:
        return f"{self.instances}x{self.statements}x{self.minutes}m-{self.step_seconds}s-{self.seed}"

    def as_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["start"] = self.start.isoformat()
        return out


@dataclass(frozen=True)
class SimulatedEvent:
    """One planned event: ``at`` is when it happened (server clock), ``snapshot_at`` the first snapshot
    after it (the interval it spoils ends there); ``queryids`` are an eviction's entries."""

    instance: str
    kind: str
    at: datetime
    snapshot_at: datetime
    queryids: tuple[int, ...] = ()


@dataclass(frozen=True)
class InjectedRegression:
    instance: str
    queryid: int
    onset: datetime
    """The deploy's time: the first snapshot after it is the first in the new regime."""
    factor: float
    version: str


@dataclass
class InstanceTruth:
    """What was generated for one instance and what the samples job must make of it."""

    instance: str
    events: list[SimulatedEvent] = field(default_factory=list)
    deploys: list[DeployEvent] = field(default_factory=list)
    regressions: list[InjectedRegression] = field(default_factory=list)
    snapshot_rows: int = 0

    def expected_drops(self, statements: int, drop_when_dealloc_grew: bool = False) -> dict[str, int]:
        """Intervals the samples job drops, by reason, from the events alone (every statement is present
        around an event, and runs at least once a minute, so nothing else is dropped)."""
        drops: dict[str, int] = {}

        def add(reason: str, count: int) -> None:
            if count:
                drops[reason] = drops.get(reason, 0) + count

        for event in self.events:
            if event.kind == "restart":
                add("server_restarted", statements)
            elif event.kind == "stats_reset":
                add("stats_reset", statements)
            elif event.kind == "clock_step":
                add("clock_skew", statements)
            elif event.kind == "eviction":
                add("entry_recreated", len(event.queryids))
                if drop_when_dealloc_grew:
                    add("evicted_in_interval", statements - len(event.queryids))
        return drops


@dataclass(frozen=True)
class SimulatedSnapshot:
    """One collector snapshot of one instance: the snapshot_runs row and, when it succeeded, the statement
    rows and the texts of queryids seen for the first time (shaped as ``jobs.collect.collector`` does)."""

    instance: str
    captured_at: datetime
    run: dict[str, Any]
    statements: pl.DataFrame
    texts: pl.DataFrame
    run_row: pl.DataFrame
    """``run`` as one snapshot_runs row, already conformed to the schema."""

    @property
    def failed(self) -> bool:
        return self.run["status"] != "ok"


@dataclass
class InstanceSimulation:
    """One generated instance: its rows (snapshot-major, one frame) and ground truth."""

    name: str
    truth: InstanceTruth
    rows: pl.DataFrame
    texts: pl.DataFrame
    captured: list[datetime]
    collector_clock: list[datetime]
    offsets: np.ndarray
    """Row offset of each snapshot in ``rows`` (length snapshots + 1)."""
    failed: np.ndarray
    runs: list[dict[str, Any]]
    run_rows: pl.DataFrame
    """``runs`` conformed to snapshot_runs once (a one-row conform per file costs more than the write)."""

    def snapshots(self) -> Iterator[SimulatedSnapshot]:
        """Snapshot by snapshot, in time order (slices of ``rows``: no copy)."""
        empty_texts = QUERY_TEXTS.empty()
        for t, captured_at in enumerate(self.captured):
            start, stop = int(self.offsets[t]), int(self.offsets[t + 1])
            statements = self.rows.slice(start, stop - start)
            texts = self.texts if t == 0 else empty_texts
            run_row = self.run_rows.slice(t, 1)
            yield SimulatedSnapshot(self.name, captured_at, self.runs[t], statements, texts, run_row)


def instance_name(i: int) -> str:
    return f"sim-{i:04d}"


def _word(k: int, width: int = 3) -> str:
    letters = []
    for _ in range(width):
        k, r = divmod(k, len(_WORDS))
        letters.append(_WORDS[r])
    return "".join(reversed(letters))


def query_text(k: int) -> str:
    """The k-th statement's normalized text: its own table (letters only, as libpg_query folds some
    trailing digits), so every statement of an instance has its own fingerprint."""
    column = _COLUMNS[k % len(_COLUMNS)]
    return f"select {column}, amount from t_{_word(k)} where customer_id = $1 and status = $2"


def regression_plan(shape: FleetShape) -> dict[int, int]:
    """Instance number -> injected regressions it gets (spread evenly over the fleet)."""
    plan: dict[int, int] = {}
    stride = max(1, shape.instances // max(1, shape.regressions))
    for r in range(shape.regressions):
        i = (r * stride) % shape.instances
        plan[i] = plan.get(i, 0) + 1
    return plan


def _deploy_minutes(rng: np.random.Generator, shape: FleetShape, count: int, name: str) -> np.ndarray:
    """``count`` deploy minutes at least DEPLOY_GAP_MINUTES apart with full before and after windows."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    last = shape.minutes - DEPLOY_AFTER_MINUTES
    spare = last - DEPLOY_EDGE_MINUTES - (count - 1) * DEPLOY_GAP_MINUTES
    if spare < 0:
        raise ValueError(
            f"instance {name}: {count} deploys {DEPLOY_GAP_MINUTES} min apart with {DEPLOY_EDGE_MINUTES} min "
            f"before and {DEPLOY_AFTER_MINUTES} min after do not fit in {shape.minutes} minutes"
        )
    offsets = np.sort(rng.integers(0, spare + 1, count))
    minutes = DEPLOY_EDGE_MINUTES + offsets + np.arange(count) * DEPLOY_GAP_MINUTES
    return (minutes * 60 // shape.step_seconds * shape.step_seconds // 60).astype(np.int64)


def _event_slots(rng: np.random.Generator, shape: FleetShape) -> list[tuple[int, str]]:
    """(snapshot index, kind) of the instance's events, EVENT_SPACING apart, none at the first snapshot nor
    in the last three (an eviction's entries come back before the end)."""
    rates = {
        "restart": shape.restarts_per_hour,
        "stats_reset": shape.resets_per_hour,
        "eviction": shape.evictions_per_hour,
        "clock_step": shape.clock_steps_per_hour,
        "failed_snapshot": shape.failed_snapshots_per_hour,
    }
    counts = {kind: int(rng.poisson(rates[kind] * shape.hours)) for kind in EVENT_KINDS}
    slots = np.arange(EVENT_SPACING, shape.snapshots - 3, EVENT_SPACING)
    wanted = sum(counts.values())
    if wanted > slots.size:  # more events than room: keep the rates' proportions
        scale = slots.size / wanted
        counts = {kind: int(count * scale) for kind, count in counts.items()}
        wanted = sum(counts.values())
    chosen = np.sort(rng.choice(slots, size=wanted, replace=False)) if wanted else np.zeros(0, np.int64)
    kinds = [kind for kind in EVENT_KINDS for _ in range(counts[kind])]
    order = rng.permutation(len(kinds))
    return [(int(slot), kinds[k]) for slot, k in zip(chosen, order, strict=True)]


def lifetime_cumsum(steps: np.ndarray, starts: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """Cumulative sums along axis 0 that start again from zero where ``starts`` is True (a new entry life);
    the first life (``starts`` row 0) begins at ``initial`` (what the entry counted before the run)."""
    cum = np.cumsum(steps, axis=0)
    before = cum - steps
    n = steps.shape[0]
    index = np.where(starts, np.arange(n)[:, None], 0)
    np.maximum.accumulate(index, axis=0, out=index)
    out = cum - np.take_along_axis(before, index, axis=0)
    return out + np.where(index == 0, initial[None, :], 0)


def _ts(values: np.ndarray) -> list[datetime]:
    return [
        datetime.fromtimestamp(int(v) / 1e6, UTC) for v in values.astype("datetime64[us]").astype(np.int64)
    ]


def simulate_instance(shape: FleetShape, i: int, regressions_here: int = 0) -> InstanceSimulation:
    """Generate instance ``i``: all its snapshots (vectorized over snapshots x statements) and its truth."""
    rng = np.random.default_rng([shape.seed, i])
    name = instance_name(i)
    n, q = shape.snapshots, shape.statements
    step = np.timedelta64(shape.step_seconds * 1_000_000, "us")
    start = np.datetime64(shape.start.astimezone(UTC).replace(tzinfo=None), "us")
    truth = InstanceTruth(name)

    # Statements: identity, call rate, latency, work per call.
    queryid = rng.integers(-(2**62), 2**62, q, dtype=np.int64)
    db_pick = rng.integers(0, len(_DATABASES), q)
    dbid = np.array([d for d, _ in _DATABASES], dtype=np.int64)[db_pick]
    userid = np.array(_USERS, dtype=np.int64)[rng.integers(0, len(_USERS), q)]
    rate = np.exp(rng.uniform(np.log(5.0), np.log(3000.0), q)) * shape.step_seconds / 60.0
    latency = np.exp(rng.uniform(np.log(0.05), np.log(40.0), q))
    sigma = rng.uniform(0.05, 0.2, q)
    blocks = np.exp(rng.uniform(np.log(3.0), np.log(300.0), q))
    rows_per_call = rng.integers(1, 50, q)
    writes = rng.random(q) < 0.2

    # Clocks: the collector ticks every step; the server's clock is a little off and may be stepped.
    nominal = start + np.arange(n) * step
    jitter = rng.integers(1_000, 200_000, n).astype("timedelta64[us]")
    collector = nominal + jitter
    offset_us = np.full(n, int(rng.integers(-50_000, 50_000)), dtype=np.int64)

    slots = _event_slots(rng, shape)
    step_signs = rng.choice([-1, 1], size=len(slots))
    for (t, kind), sign in zip(slots, step_signs, strict=True):
        if kind == "clock_step":
            offset_us[t:] += int(sign * shape.clock_step_seconds * 1e6)
    captured = collector + offset_us.astype("timedelta64[us]")

    # Deploys and injected regressions.
    hours_deploys = int(rng.poisson(shape.deploys_per_hour * shape.hours))
    room = shape.minutes - DEPLOY_AFTER_MINUTES - DEPLOY_EDGE_MINUTES
    fits = room // DEPLOY_GAP_MINUTES + 1 if room >= 0 else 0
    deploy_count = max(min(hours_deploys, fits), regressions_here)
    deploy_minutes = _deploy_minutes(rng, shape, deploy_count, name)
    deploys = [
        DeployEvent(f"v{i}.{j}", shape.start + timedelta(minutes=int(m)), instance=name, source="simulator")
        for j, m in enumerate(deploy_minutes)
    ]
    truth.deploys = deploys
    factor = np.ones((n, q))
    block_factor = np.ones((n, q))
    load = latency * rate
    victims = np.zeros(0, dtype=np.int64)
    if regressions_here:
        material = np.flatnonzero((latency > 5.0) & (rate > 50.0))
        pool = (
            material if material.size >= regressions_here else np.argsort(-load)[: max(regressions_here, 1)]
        )
        victims = rng.choice(pool, regressions_here, replace=False)
        at = rng.choice(deploy_count, regressions_here, replace=False)
        for victim, d in zip(victims, np.sort(at), strict=True):
            first_after = int(deploy_minutes[d]) * 60 // shape.step_seconds + 1
            factor[first_after:, victim] = shape.regression_factor
            block_factor[first_after:, victim] = BLOCK_FACTOR
            deploy = deploys[int(d)]
            truth.regressions.append(
                InjectedRegression(
                    name, int(queryid[victim]), deploy.deployed_at, shape.regression_factor, deploy.version
                )
            )

    # Work per interval: every statement runs at least once per interval.
    calls_step = np.maximum(1, rng.poisson(rate, (n, q)))
    exec_step = calls_step * latency * factor * rng.lognormal(0.0, 1.0, (n, q)) ** sigma
    hit_step = np.rint(calls_step * blocks * block_factor).astype(np.int64)
    read_step = rng.poisson(0.05 * calls_step)
    dirtied_step = np.where(writes, rng.poisson(0.5 * calls_step), 0)
    wal_step = np.where(writes, 2 * calls_step, 0)

    # Lives of entries: restarts and resets start every entry again, evictions a few.
    boot = start - np.timedelta64(3, "D") + np.timedelta64(int(rng.integers(0, 3_600_000_000)), "us")
    postmaster = np.full(n, boot)
    stats_reset = np.full(n, boot)
    created = boot + (rng.random(q) * float((start - boot) / np.timedelta64(1, "us"))).astype(
        "timedelta64[us]"
    )
    since = np.broadcast_to(created, (n, q)).copy()
    starts = np.zeros((n, q), dtype=bool)
    starts[0] = True
    present = np.ones((n, q), dtype=bool)
    failed = np.zeros(n, dtype=bool)
    dealloc = np.full(n, int(rng.integers(0, 40)), dtype=np.int64)
    evict_pool = np.setdiff1d(np.argsort(rate)[: max(1, q // 2)], victims)
    evicted_count = max(1, round(shape.evicted_fraction * q))
    for t, kind in slots:
        gap = captured[t] - captured[t - 1]
        happened = captured[t] - (gap * rng.uniform(0.1, 0.9)).astype("timedelta64[us]")
        queryids: tuple[int, ...] = ()
        if kind in ("restart", "stats_reset"):
            if kind == "restart":
                postmaster[t:] = happened
            stats_reset[t:] = happened
            dealloc[t:] = 0
            starts[t] = True
            lag = (captured[t] - happened) * rng.uniform(0.0, 1.0, q)
            since[t:] = happened + lag.astype("timedelta64[us]")
        elif kind == "eviction":
            dealloc[t:] += 1
            gone = np.sort(rng.choice(evict_pool, min(evicted_count, evict_pool.size), replace=False))
            back = t + int(rng.integers(1, 3))
            present[t:back, gone] = False
            starts[back, gone] = True
            since[back:, gone] = captured[back] - np.timedelta64(int(rng.integers(1, 30)), "s")
            queryids = tuple(int(x) for x in queryid[gone])
        elif kind == "failed_snapshot":
            failed[t] = True
            present[t] = False
        if kind == "clock_step":
            happened = captured[t]
        if kind == "failed_snapshot":  # the failed run row carries the collector's clock
            happened = collector[t]
        snapshot_at = collector[t] if kind == "failed_snapshot" else captured[t]
        truth.events.append(
            SimulatedEvent(
                name, kind, _ts(np.array([happened]))[0], _ts(np.array([snapshot_at]))[0], queryids
            )
        )

    # Cumulative counters (what the entry counted before the run for its first life).
    before = rng.uniform(60.0, 3000.0, q) * rate
    calls = lifetime_cumsum(calls_step, starts, np.rint(before).astype(np.int64))
    total_exec = lifetime_cumsum(exec_step, starts, before * latency)
    counters: dict[str, np.ndarray] = {
        "calls": calls,
        "total_exec_time": total_exec,
        "rows": lifetime_cumsum(
            calls_step * rows_per_call, starts, np.rint(before * rows_per_call).astype(np.int64)
        ),
        "shared_blks_hit": lifetime_cumsum(hit_step, starts, np.rint(before * blocks).astype(np.int64)),
        "shared_blks_read": lifetime_cumsum(read_step, starts, np.rint(before * 0.05).astype(np.int64)),
        "shared_blks_dirtied": lifetime_cumsum(
            dirtied_step, starts, np.where(writes, np.rint(before * 0.5), 0).astype(np.int64)
        ),
        "wal_records": lifetime_cumsum(
            wal_step, starts, np.where(writes, np.rint(2 * before), 0).astype(np.int64)
        ),
    }
    counters["wal_bytes"] = counters["wal_records"] * 96
    counters["shared_blks_written"] = counters["shared_blks_dirtied"] // 4

    mask = present.ravel()
    rows_per_snapshot = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(rows_per_snapshot)])
    system_identifier = 7_300_000_000_000_000_000 + i

    def flat(a: np.ndarray) -> np.ndarray:
        return a.ravel()[mask]

    def per_row(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, rows_per_snapshot)

    mean = flat(total_exec) / flat(calls)
    columns: dict[str, Any] = {
        "captured_at": per_row(captured),
        "collector_clock": per_row(collector),
        "system_identifier": np.full(mask.sum(), system_identifier, dtype=np.int64),
        "postmaster_start": per_row(postmaster),
        "stats_reset": per_row(stats_reset),
        "userid": flat(np.broadcast_to(userid, (n, q))),
        "dbid": flat(np.broadcast_to(dbid, (n, q))),
        "toplevel": np.ones(mask.sum(), dtype=bool),
        "queryid": flat(np.broadcast_to(queryid, (n, q))),
        "plans": np.zeros(mask.sum(), dtype=np.int64),
        "total_plan_time": np.zeros(mask.sum()),
        **{c: flat(v) for c, v in counters.items()},
        "min_exec_time": flat(np.broadcast_to(latency * 0.25, (n, q))),
        "max_exec_time": flat(latency * factor * 8.0),
        "mean_exec_time": mean,
        "stddev_exec_time": mean * 0.5,
        "stats_since": flat(since),
        "minmax_stats_since": flat(since),
    }
    rows = (
        pl.DataFrame(columns)
        .with_columns(pl.col(*_TIME_COLUMNS, "minmax_stats_since").dt.replace_time_zone("UTC"))
        .with_columns(pl.lit(0, dtype=pl.Int64).alias(c) for c in _ZERO_COUNTERS)
    )
    rows = STATEMENT_SNAPSHOTS.conform(rows)

    captured_list = _ts(captured)
    collector_list = _ts(collector)
    first = captured_list[0]
    texts = QUERY_TEXTS.conform(
        pl.DataFrame(
            {
                "captured_at": [first] * q,
                "queryid": queryid,
                "dbid": dbid,
                "userid": userid,
                "datname": [_DATABASES[k][1] for k in db_pick],
                "query": [query_text(k) for k in range(q)],
                "is_explain": [False] * q,
                "is_radar": [False] * q,
            }
        )
    )
    postmaster_list, reset_list = _ts(postmaster), _ts(stats_reset)
    runs = []
    for t in range(n):
        if failed[t]:
            runs.append(
                {
                    "captured_at": collector_list[t],
                    "status": "failed",
                    "error": f"instance {name}: connection timeout expired (simulated)",
                    "failed_phase": "connect",
                }
            )
            continue
        runs.append(
            {
                "captured_at": captured_list[t],
                "collector_clock": collector_list[t],
                "status": "ok",
                "error": None,
                "health": "ok",
                "warnings": None,
                "system_identifier": system_identifier,
                "postmaster_start": postmaster_list[t],
                "server_version_num": 180001,
                "extension_version": "1.12",
                "compute_query_id": "auto",
                "track": "top",
                "track_planning": "off",
                "track_io_timing": "off",
                "pgss_max": 5000,
                "dealloc": int(dealloc[t]),
                "stats_reset": reset_list[t],
                "statement_rows": int(rows_per_snapshot[t]),
                "explain_rows_dropped": 0,
                "own_rows_dropped": 0,
                "own_explain_rows_dropped": 0,
                "insufficient_privilege_rows": 0,
                "new_texts": q if t == 0 else 0,
                "server_ms": round(0.5 + 0.004 * int(rows_per_snapshot[t]), 3),
            }
        )
    truth.snapshot_rows = rows.height
    captured_for_files = [collector_list[t] if failed[t] else captured_list[t] for t in range(n)]
    run_rows = SNAPSHOT_RUNS.conform(pl.DataFrame(runs, infer_schema_length=None))
    return InstanceSimulation(
        name, truth, rows, texts, captured_for_files, collector_list, offsets, failed, runs, run_rows
    )


def simulate_fleet(shape: FleetShape) -> Iterator[InstanceSimulation]:
    """The fleet, one instance at a time (memory bounded by the largest instance)."""
    plan = regression_plan(shape)
    for i in range(shape.instances):
        yield simulate_instance(shape, i, plan.get(i, 0))
