"""Labelled fleet data for the contention benchmark: instances that slow down as a whole, true regressions
inside and outside such episodes, and quiet instances, as query_samples / query_texts / deploy_events frames.

Every instance has 8-30 query series of one-minute intervals. Each series has its own latency level and
lognormal per-interval noise, its own calls/s, and work per call (shared blocks hit/read, temp blocks,
rows, WAL) with its own small noise. Scenarios (cycled over instances, each half at a deploy, half
unannounced):

- ``contention``: from the change on, most series of the instance (70-100%) slow by one common factor
  ×1.3-×3 with a per-series spread, their calls/s fall (closed-loop clients), work per call is unchanged.
  A quarter of the episodes end again before the data does.
- ``contention_regression``: the same episode plus one true regression (below) starting at the same moment.
- ``quiet_regression``: no episode, one true regression.
- ``quiet``: nothing changes (half of them get a no-op deploy).

True regressions: ``index_drop`` (shared blocks per call ×50, latency ×20), ``latency`` (latency alone
×3-×6 beyond the common shift, work unchanged: a lock wait) and ``temp_spill`` (a sort starts spilling:
temp blocks per call from 0 to 50-500, latency ×2.5-×5). Inside an episode they also get the common
factor. Numbers come from one numpy Generator (PCG64) with a fixed seed; ``frames_hash`` is checked by
the benchmark.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from jobs.schemas.collected import DEPLOY_EVENTS, QUERY_SAMPLES, SAMPLE_DELTAS
from jobs.schemas.table import UTC_TS as UTC_KIND

UTC_TS = UTC_KIND.polars()

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)
INTERVALS = 90
"""Samples per series: the default deploy windows (30 min each side) fit with room on both sides."""
CHANGE_RANGE = (38, 52)
"""The change (deploy, episode, regression) starts at one of these interval indices."""

CONTENTION = "contention"
CONTENTION_REGRESSION = "contention_regression"
QUIET_REGRESSION = "quiet_regression"
QUIET = "quiet"
SCENARIO_CYCLE: tuple[tuple[str, bool], ...] = (
    (CONTENTION, True),
    (CONTENTION, False),
    (CONTENTION, True),
    (CONTENTION, False),
    (CONTENTION_REGRESSION, True),
    (CONTENTION_REGRESSION, False),
    (QUIET_REGRESSION, True),
    (QUIET_REGRESSION, False),
    (QUIET, True),
    (QUIET, False),
)
"""(scenario, at a deploy) per instance number modulo 10: 60% of instances have a contention episode."""

INDEX_DROP = "index_drop"
LATENCY = "latency"
TEMP_SPILL = "temp_spill"
REGRESSION_KINDS = (INDEX_DROP, LATENCY, TEMP_SPILL)

TABLES = (
    "orders",
    "customers",
    "invoices",
    "payments",
    "shipments",
    "products",
    "carts",
    "sessions",
    "events",
    "accounts",
)
SHAPES = (
    "select id, amount, status from {t} where customer_id = $1",
    "select count(*) from {t} where created_at > $1",
    "update {t} set status = $1 where id = $2",
    "select * from {t} where id = $1",
    "insert into {t} (customer_id, amount) values ($1, $2)",
    "select customer_id, sum(amount) from {t} group by customer_id order by 2 desc limit $1",
)
QUERY_TEXTS_POOL: tuple[str, ...] = tuple(shape.format(t=t) for t in TABLES for shape in SHAPES)
"""60 distinct texts (distinct fingerprints); an instance uses the first 8-30 of a shuffled copy."""


@dataclass(frozen=True)
class SeriesTruth:
    queryid: int
    query: str
    regression: str | None
    """index_drop | latency | temp_spill for the one true regression of the instance, else None."""
    contended: bool
    """Slowed by the instance's episode (the true regression of an episode is contended too)."""
    latency_factor: float
    """Its latency after / before the change, as generated (before noise)."""


@dataclass(frozen=True)
class InstanceTruth:
    instance: str
    scenario: str
    at_deploy: bool
    deploy_at: datetime | None
    change_at: datetime | None
    """Start of the first interval of the new regime (the deploy time when at a deploy)."""
    episode_factor: float | None
    """The common latency factor of the episode; None without an episode."""
    episode_ends_at: datetime | None
    """When the episode ends again (None: it lasts to the end of the data, or no episode)."""
    series: tuple[SeriesTruth, ...]
    cores: int | None = None
    """Small instances: the fleet file's cores (None: not given; the instance really has ``true_cores``)."""
    true_cores: int | None = None
    neighbours: tuple[int, ...] = ()
    """Small instances: queryids of the neighbour's statements that appear at the change (not labelled)."""
    neighbour_load: float | None = None
    """Seconds of execution per second the neighbour brings."""

    @property
    def small(self) -> bool:
        return self.true_cores is not None

    @property
    def episode(self) -> bool:
        return self.episode_factor is not None

    @property
    def true_queryids(self) -> frozenset[int]:
        return frozenset(s.queryid for s in self.series if s.regression is not None)


@dataclass(frozen=True)
class ContentionData:
    samples: pl.DataFrame
    """query_samples rows plus ``instance`` (every SAMPLE_DELTAS column)."""
    texts: pl.DataFrame
    deploys: pl.DataFrame
    truths: tuple[InstanceTruth, ...]
    activity: pl.DataFrame | None = None
    """activity_snapshots rows of the small instances that have them (active backends on a CPU, cores)."""


def _series_arrays(
    rng: np.random.Generator,
    *,
    change: int | None,
    ends: int | None,
    first_fraction: float,
    latency_factor: float,
    calls_factor: float,
    blocks_factor: float,
    temp_after: float | None,
    latency_ms: float | None = None,
    calls_per_s: float | None = None,
) -> dict[str, np.ndarray]:
    """One series' per-interval deltas; ``factor``s apply from ``change`` (the first interval partly)."""
    n = INTERVALS
    latency = float(np.exp(rng.uniform(np.log(0.2), np.log(30.0))))
    drawn_calls = float(np.exp(rng.uniform(np.log(2.0), np.log(200.0))))
    sigma = rng.uniform(0.05, 0.25)
    work_sigma = rng.uniform(0.02, 0.08)
    blocks = float(np.exp(rng.uniform(np.log(3.0), np.log(500.0))))
    read_share = rng.uniform(0.0, 0.05)
    rows_per_call = float(np.exp(rng.uniform(0.0, np.log(100.0))))
    writer = rng.random() < 0.3
    wal_per_call = rng.uniform(100.0, 2000.0) if writer else 0.0
    temp_before = rng.uniform(5.0, 40.0) if rng.random() < 0.1 else 0.0
    latency = latency if latency_ms is None else latency_ms  # drawn either way: the same stream
    calls_per_s = drawn_calls if calls_per_s is None else calls_per_s

    # Share of each interval in the new regime: 0 before, first_fraction in the first one, 1 after.
    regime = np.zeros(n)
    if change is not None:
        stop = ends if ends is not None else n
        regime[change:stop] = 1.0
        regime[change] = first_fraction
    mix = 1.0 + regime * (latency_factor - 1.0)
    mean_ms = latency * mix * rng.lognormal(0.0, sigma, n)
    calls = np.maximum(1, rng.poisson(calls_per_s * 60.0 * (1.0 + regime * (calls_factor - 1.0)))).astype(
        np.int64
    )

    def per_call(level: float, factor: float) -> np.ndarray:
        return level * (1.0 + regime * (factor - 1.0)) * rng.lognormal(0.0, work_sigma, n)

    def total(level: np.ndarray) -> np.ndarray:
        return np.rint(level * calls).astype(np.int64)

    # A sort that starts spilling goes from temp_before to temp_after; every other series keeps its level.
    spill = temp_before if temp_after is None else temp_after
    temp = temp_before + regime * (spill - temp_before)
    temp_written = total(temp * rng.lognormal(0.0, work_sigma, n)) if temp.any() else np.zeros(n, np.int64)
    shared = per_call(blocks, blocks_factor)
    out = {
        "calls": calls,
        "total_exec_time": mean_ms * calls,
        "rows": total(per_call(rows_per_call, 1.0)),
        "shared_blks_hit": total(shared * (1.0 - read_share)),
        "shared_blks_read": total(shared * read_share),
        "temp_blks_written": temp_written,
        "temp_blks_read": temp_written,
        "wal_bytes": total(per_call(wal_per_call, 1.0)) if writer else np.zeros(n, np.int64),
    }
    out["shared_blks_dirtied"] = np.rint(out["wal_bytes"] / 800.0).astype(np.int64)
    out["wal_records"] = np.rint(out["wal_bytes"] / 120.0).astype(np.int64)
    out["shared_blk_read_time"] = out["shared_blks_read"] * 0.02
    out["temp_blk_read_time"] = out["temp_blks_read"] * 0.01
    out["temp_blk_write_time"] = out["temp_blks_written"] * 0.01
    return out


def _factors(
    rng: np.random.Generator, common: float, kind: str | None, culprit: bool
) -> tuple[float, float, float, float | None]:
    """(latency, calls, shared blocks factors, temp blocks per call after: None unchanged) of one series:
    the episode's common factor (calls fall: closed-loop clients), and a true regression's own on top."""
    latency_factor = common
    calls_factor = common ** -rng.uniform(0.3, 0.8)
    blocks_factor = 1.0
    temp_after: float | None = None
    if culprit:
        if kind == INDEX_DROP:
            latency_factor, blocks_factor = common * 20.0, 50.0
        elif kind == LATENCY:
            latency_factor = common * float(rng.uniform(3.0, 6.0))
        else:
            latency_factor, temp_after = common * float(rng.uniform(2.5, 5.0)), float(rng.uniform(50, 500))
        calls_factor = latency_factor ** -rng.uniform(0.3, 0.8)
    return latency_factor, calls_factor, blocks_factor, temp_after


def _deploy_row(name: str, number: int, deploy_at: datetime) -> dict[str, object]:
    return {
        "deploy_id": f"d-{name}",
        "version": f"v{number}",
        "scope": "instance",
        "instance": name,
        "deployed_at": deploy_at,
        "source": "bench",
    }


def generate(instances: int = 300, seed: int = 20261201, small_instances: int = 0) -> ContentionData:
    """``instances`` instances cycling over SCENARIO_CYCLE, then ``small_instances`` of one to three series
    (small_instances_data); deterministic for a seed (the large instances are the same with or without
    small ones)."""
    rng = np.random.default_rng(seed)
    ends = [START + (i + 1) * STEP for i in range(INTERVALS)]
    columns: dict[str, list[np.ndarray]] = {}
    truths: list[InstanceTruth] = []
    text_rows: list[tuple[str, int, str]] = []
    deploy_rows: list[dict[str, object]] = []
    for number in range(instances):
        name = f"db{number:04d}"
        scenario, at_deploy = SCENARIO_CYCLE[number % len(SCENARIO_CYCLE)]
        count = int(rng.integers(8, 31))
        pool = list(QUERY_TEXTS_POOL)
        rng.shuffle(pool)
        changed = scenario != QUIET
        change = int(rng.integers(CHANGE_RANGE[0], CHANGE_RANGE[1] + 1)) if changed else None
        if scenario == QUIET and at_deploy:
            change_for_deploy: int | None = int(rng.integers(CHANGE_RANGE[0], CHANGE_RANGE[1] + 1))
        else:
            change_for_deploy = change if at_deploy else None
        deploy_at = START + change_for_deploy * STEP if change_for_deploy is not None else None
        # A deploy starts at an interval boundary; an unannounced change somewhere inside the interval.
        first_fraction = 1.0 if at_deploy else float(rng.uniform(0.2, 1.0))
        episode = scenario in (CONTENTION, CONTENTION_REGRESSION)
        factor = float(rng.uniform(1.3, 3.0)) if episode else None
        episode_end = None
        if episode and change is not None and rng.random() < 0.25:
            episode_end = change + int(rng.integers(15, 31))
        affected_share = 1.0 if rng.random() < 0.3 else float(rng.uniform(0.7, 1.0))
        kind = (
            str(rng.choice(REGRESSION_KINDS))
            if scenario in (CONTENTION_REGRESSION, QUIET_REGRESSION)
            else None
        )
        culprit = int(rng.integers(0, count)) if kind else -1
        series: list[SeriesTruth] = []
        for k in range(count):
            queryid = number * 100 + k + 1
            contended = episode and (k == culprit or rng.random() < affected_share)
            spread = float(rng.lognormal(0.0, 0.12)) if contended else 1.0
            common = factor * spread if contended and factor else 1.0
            latency_factor, calls_factor, blocks_factor, temp_after = _factors(
                rng, common, kind, k == culprit
            )
            arrays = _series_arrays(
                rng,
                change=change if (contended or k == culprit) else None,
                ends=episode_end if (contended and k != culprit) else None,
                first_fraction=first_fraction,
                latency_factor=latency_factor,
                calls_factor=calls_factor,
                blocks_factor=blocks_factor,
                temp_after=temp_after,
            )
            for column, values in arrays.items():
                columns.setdefault(column, []).append(values)
            columns.setdefault("queryid", []).append(np.full(INTERVALS, queryid, dtype=np.int64))
            columns.setdefault("instance_number", []).append(np.full(INTERVALS, number, dtype=np.int64))
            series.append(
                SeriesTruth(queryid, pool[k], kind if k == culprit else None, contended, latency_factor)
            )
            text_rows.append((name, queryid, pool[k]))
        if deploy_at is not None:
            deploy_rows.append(_deploy_row(name, number, deploy_at))
        truths.append(
            InstanceTruth(
                instance=name,
                scenario=scenario,
                at_deploy=at_deploy,
                deploy_at=deploy_at,
                change_at=START + change * STEP if change is not None else None,
                episode_factor=factor,
                episode_ends_at=START + episode_end * STEP if episode_end is not None else None,
                series=tuple(series),
            )
        )
    activity: list[dict[str, object]] = []
    if small_instances:
        small_rng = np.random.default_rng(seed + 1)
        for number in range(instances, instances + small_instances):
            truths.append(_small_instance(small_rng, number, columns, text_rows, deploy_rows, activity))
    activity_frame = (
        pl.DataFrame(
            activity,
            schema={
                "instance": pl.String,
                "captured_at": UTC_TS,
                "active_on_cpu": pl.Int64,
                "parallel_workers": pl.Int64,
                "cores": pl.Int32,
            },
        )
        if activity
        else None
    )
    return ContentionData(
        _samples_frame(columns, ends),
        _texts_frame(text_rows),
        _deploys_frame(deploy_rows),
        tuple(truths),
        activity_frame,
    )


SMALL_CYCLE = SCENARIO_CYCLE
"""Small instances cycle over the same scenarios; their episodes come from a neighbour's statements."""
NEIGHBOUR_TEXTS = (
    "select count(*) from generate_series(1, $1)",
    "select md5(string_agg(x::text, $1)) from generate_series(1, $2) x",
)


def _small_instance(
    rng: np.random.Generator,
    number: int,
    columns: dict[str, list[np.ndarray]],
    text_rows: list[tuple[str, int, str]],
    deploy_rows: list[dict[str, object]],
    activity: list[dict[str, object]],
) -> InstanceTruth:
    """One to three application series; an episode is a neighbour (one or two new statements bringing
    1-4 s of execution per second) that slows the CPU-bound part of every application query by processor
    sharing over the instance's real cores (1-4). Half of the instances record activity_snapshots; half
    of those give their cores in the fleet file."""
    name = f"db{number:04d}"
    scenario, at_deploy = SMALL_CYCLE[number % len(SMALL_CYCLE)]
    count = int(rng.integers(1, 4))
    pool = list(QUERY_TEXTS_POOL)
    rng.shuffle(pool)
    true_cores = int(rng.choice([1, 2, 4]))
    has_activity = rng.random() < 0.5
    cores = true_cores if has_activity and rng.random() < 0.5 else None
    changed = scenario != QUIET
    change = int(rng.integers(CHANGE_RANGE[0], CHANGE_RANGE[1] + 1)) if changed else None
    if scenario == QUIET and at_deploy:
        change_for_deploy: int | None = int(rng.integers(CHANGE_RANGE[0], CHANGE_RANGE[1] + 1))
    else:
        change_for_deploy = change if at_deploy else None
    deploy_at = START + change_for_deploy * STEP if change_for_deploy is not None else None
    first_fraction = 1.0 if at_deploy else float(rng.uniform(0.2, 1.0))
    episode = scenario in (CONTENTION, CONTENTION_REGRESSION)
    episode_end = None
    if episode and change is not None and rng.random() < 0.25:
        episode_end = change + int(rng.integers(15, 31))
    # The application's load before (s/s) shared over its series, and the neighbour's.
    app_load = float(rng.uniform(0.2, 1.5))
    shares = rng.dirichlet(np.ones(count))
    neighbour_load = float(rng.uniform(1.0, 4.0)) if episode else None
    factor = None
    if episode and neighbour_load is not None:
        factor = max(1.0, (app_load + neighbour_load) / true_cores) / max(1.0, app_load / true_cores)
    kind = (
        str(rng.choice(REGRESSION_KINDS)) if scenario in (CONTENTION_REGRESSION, QUIET_REGRESSION) else None
    )
    culprit = int(rng.integers(0, count)) if kind else -1
    series: list[SeriesTruth] = []
    totals = np.zeros(INTERVALS)
    for k in range(count):
        queryid = number * 100 + k + 1
        latency = float(np.exp(rng.uniform(np.log(5.0), np.log(100.0))))
        calls_per_s = app_load * shares[k] * 1000.0 / latency
        cpu_share = float(rng.uniform(0.6, 1.0))  # the part of its latency that is CPU
        common = 1.0 + cpu_share * (factor - 1.0) * float(rng.lognormal(0.0, 0.1)) if factor else 1.0
        latency_factor, calls_factor, blocks_factor, temp_after = _factors(rng, common, kind, k == culprit)
        arrays = _series_arrays(
            rng,
            change=change if (factor or k == culprit) else None,
            ends=episode_end if (factor and k != culprit) else None,
            first_fraction=first_fraction,
            latency_factor=latency_factor,
            calls_factor=calls_factor,
            blocks_factor=blocks_factor,
            temp_after=temp_after,
            latency_ms=latency,
            calls_per_s=calls_per_s,
        )
        totals += arrays["total_exec_time"] / 60_000.0
        _append(columns, arrays, queryid, number)
        series.append(
            SeriesTruth(queryid, pool[k], kind if k == culprit else None, bool(factor), latency_factor)
        )
        text_rows.append((name, queryid, pool[k]))
    neighbours: list[int] = []
    if neighbour_load is not None and change is not None:
        statements = int(rng.integers(1, 3))
        stop = episode_end if episode_end is not None else INTERVALS
        for j in range(statements):
            queryid = number * 100 + 50 + j
            latency = float(np.exp(rng.uniform(np.log(200.0), np.log(2000.0))))
            load = neighbour_load / statements
            arrays = _series_arrays(
                rng,
                change=None,
                ends=None,
                first_fraction=1.0,
                latency_factor=1.0,
                calls_factor=1.0,
                blocks_factor=1.0,
                temp_after=None,
                latency_ms=latency,
                calls_per_s=load * 1000.0 / latency,
            )
            present = np.zeros(INTERVALS, dtype=bool)
            present[change:stop] = True
            arrays = {c: np.where(present, v, 0) for c, v in arrays.items()}
            totals += arrays["total_exec_time"] / 60_000.0
            _append(columns, arrays, queryid, number)
            neighbours.append(queryid)
            text_rows.append((name, queryid, NEIGHBOUR_TEXTS[j]))
    if has_activity:
        on_cpu = rng.poisson(totals)
        for i in range(INTERVALS):
            activity.append(
                {
                    "instance": name,
                    "captured_at": START + (i + 1) * STEP,
                    "active_on_cpu": int(on_cpu[i]),
                    "parallel_workers": 0,
                    "cores": cores,
                }
            )
    if deploy_at is not None:
        deploy_rows.append(_deploy_row(name, number, deploy_at))
    return InstanceTruth(
        instance=name,
        scenario=scenario,
        at_deploy=at_deploy,
        deploy_at=deploy_at,
        change_at=START + change * STEP if change is not None else None,
        episode_factor=factor,
        episode_ends_at=START + episode_end * STEP if episode_end is not None else None,
        series=tuple(series),
        cores=cores,
        true_cores=true_cores,
        neighbours=tuple(neighbours),
        neighbour_load=neighbour_load,
    )


def _append(
    columns: dict[str, list[np.ndarray]], arrays: dict[str, np.ndarray], queryid: int, number: int
) -> None:
    for column, values in arrays.items():
        columns.setdefault(column, []).append(values)
    columns.setdefault("queryid", []).append(np.full(INTERVALS, queryid, dtype=np.int64))
    columns.setdefault("instance_number", []).append(np.full(INTERVALS, number, dtype=np.int64))


def _samples_frame(columns: dict[str, list[np.ndarray]], ends: list[datetime]) -> pl.DataFrame:
    flat = {name: np.concatenate(parts) for name, parts in columns.items()}
    rows = flat["queryid"].shape[0]
    interval_end = pl.Series("interval_end", ends * (rows // INTERVALS), dtype=UTC_TS)
    calls = np.maximum(flat["calls"], 1)
    frame = pl.DataFrame(
        {
            "instance": pl.Series([f"db{n:04d}" for n in flat.pop("instance_number")], dtype=pl.String),
            "interval_start": interval_end - STEP,
            "interval_end": interval_end,
            "interval_seconds": 60.0,
            "userid": 10,
            "dbid": 5,
            "toplevel": True,
            **flat,
            "mean_exec_time": flat["total_exec_time"] / calls,
            "evictions": 0,
        }
    )
    missing = [c for c in SAMPLE_DELTAS if c not in frame.columns]
    frame = frame.filter(pl.col("total_exec_time") > 0)  # a neighbour's statement before it appeared
    return pl.concat(
        [frame.select("instance"), QUERY_SAMPLES.conform(frame.drop("instance"))], how="horizontal"
    ).with_columns(*(pl.col(c).fill_null(0) for c in missing))


def _texts_frame(rows: list[tuple[str, int, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"instance": pl.String, "queryid": pl.Int64, "query": pl.String}, orient="row"
    ).with_columns(
        pl.lit(START, dtype=UTC_TS).alias("captured_at"),
        pl.lit(5, dtype=pl.Int64).alias("dbid"),
        pl.lit(10, dtype=pl.Int64).alias("userid"),
        pl.lit(False).alias("is_explain"),
        pl.lit(False).alias("is_radar"),
    )


def _deploys_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    if not rows:
        return DEPLOY_EVENTS.empty()
    return DEPLOY_EVENTS.conform(pl.DataFrame(rows, schema_overrides={"deployed_at": UTC_TS}))


def frames_hash(data: ContentionData) -> str:
    """SHA-256 over the samples' values (every column, in order) and the deploy times."""
    digest = hashlib.sha256()
    for name in data.samples.columns:
        column = data.samples[name]
        if column.dtype == pl.String:
            digest.update("\0".join(column.to_list()).encode())
        elif column.dtype == pl.Boolean:
            digest.update(column.cast(pl.Int8).to_numpy().tobytes())
        elif isinstance(column.dtype, pl.Datetime):
            digest.update(column.dt.epoch("us").to_numpy().astype("<i8").tobytes())
        elif column.dtype.is_float():
            digest.update(column.to_numpy().astype("<f8").tobytes())
        else:
            digest.update(column.to_numpy().astype("<i8").tobytes())
    digest.update(data.deploys["deployed_at"].dt.epoch("us").to_numpy().astype("<i8").tobytes())
    return digest.hexdigest()
