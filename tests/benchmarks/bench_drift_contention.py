"""Per-execution latency drift under a CPU-heavy neighbour: latency BLOCKs of unchanged queries with the
host guard (``[drift.samples] instance_shift_share``) and without it, on a real PostgreSQL server.

One embedded server runs auto_explain as a sampler (sample_rate 1.0). Six queries (point lookups and small
range sums over six tables) run ``PER_PHASE`` times each per phase; each round has four phases:

1. baseline, quiet: anchored as the baseline (``jobs.drift.baselines.baseline_rows``);
2. control, quiet: nothing changed;
   (only the six queries are counted; the neighbour's and the bench's own statements are scored too, as
   ``no_baseline`` rows, and count towards nothing here)
3. contended: a ``CpuNeighbour`` (2 sessions of CPU-bound SQL) on the same server, nothing else changed;
4. contended + regression: the neighbour, and t0 lost its primary key (a sequential scan: cost, latency and
   cardinality of q0 move).

Each later phase is scored against the baseline by ``score_execution_drift`` (the calibrated default), with
the guard on (default) and off (``instance_shift_min_pairs`` out of reach). Printed per phase: latency
BLOCKs among the unchanged queries (false: the queries did not change) and whether q0's regression still
BLOCKs. ``RADAR_BENCH_DRIFT_CONTENTION_ROUNDS`` rounds (default 3).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import polars as pl
import psycopg
from psycopg.types.numeric import Int4

from jobs.drift.baselines import baseline_rows
from jobs.drift.config import DriftConfig, SampleDriftConfig
from jobs.drift.execution import score_execution_drift
from jobs.drift.scorer import query_hash
from jobs.lake.io import scan_table
from jobs.local.embedded import EmbeddedFleet
from jobs.plans.auto_explain import ingest_auto_explain_logs
from jobs.plans.config import AutoExplainSamplerConfig
from jobs.query.identity import fingerprint_text
from tests.support.pg_workload import CpuNeighbour, server_clock

RESULTS = Path(".bench/results")
ROUNDS = int(os.environ.get("RADAR_BENCH_DRIFT_CONTENTION_ROUNDS", "3"))
PER_PHASE = 300
TABLES = 6
PHASES = ("control", "contended", "contended + regression")


def query_of(i: int) -> str:
    return f"SELECT v FROM t{i} WHERE id = %s" if i % 2 == 0 else f"SELECT sum(v) FROM t{i} WHERE id <= %s"


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(TABLES):
            conn.execute(f"CREATE TABLE t{i} (id int PRIMARY KEY, v int)")
            conn.execute(f"INSERT INTO t{i} SELECT g, g FROM generate_series(1, 20000) g")
        conn.execute("ANALYZE")


def run_phase(conn: psycopg.Connection) -> None:
    for k in range(PER_PHASE):
        for i in range(TABLES):
            conn.execute(query_of(i), (Int4(1 + (k * 37 + i) % (20000 if i % 2 == 0 else 40)),))


def one_round(dsn: str, log_dir: Path, lake_root: Path) -> dict[str, dict[str, object]]:
    marks: list[datetime] = []
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        run_phase(conn)  # warm-up, outside every window
        marks.append(server_clock(conn))
        run_phase(conn)  # baseline
        marks.append(server_clock(conn))
        run_phase(conn)  # control
        marks.append(server_clock(conn))
        with CpuNeighbour(dsn, sessions=2) as neighbour:
            neighbour.start()
            run_phase(conn)  # contended
            marks.append(server_clock(conn))
            conn.execute("ALTER TABLE t0 DROP CONSTRAINT t0_pkey")
            run_phase(conn)  # contended + regression
            marks.append(server_clock(conn))
        conn.execute("ALTER TABLE t0 ADD PRIMARY KEY (id)")
        conn.execute("SELECT 'end of the round' AS marker")
    time.sleep(1.0)  # the logging collector writes the last records
    ingest_auto_explain_logs(log_dir, "bench", lake_root)
    samples = scan_table(lake_root, "execution_samples").collect().filter(pl.col("logged_at") > marks[0])
    baseline = baseline_rows(
        samples, version="quiet", window_start=marks[0], window_end=marks[1], created_at=marks[1]
    )
    hashes = [query_hash(fingerprint_text(query_of(i).replace("%s", "$1"))[0]) for i in range(TABLES)]
    q0 = pl.DataFrame({"query_hash": hashes[:1]})
    others = pl.DataFrame({"query_hash": hashes[1:]})  # the five queries that never change
    assert samples.join(q0, on="query_hash", how="semi").height, "q0's samples are found by its query_hash"
    out: dict[str, dict[str, object]] = {}
    for phase, (start, end) in zip(PHASES, pairwise(marks[1:]), strict=True):
        window = SampleDriftConfig(current_window=end - start)
        guarded = DriftConfig(samples=window)
        unguarded = DriftConfig(samples=replace(window, instance_shift_min_pairs=10**6))
        row: dict[str, object] = {}
        for name, config in (("guard", guarded), ("no guard", unguarded)):
            drift = score_execution_drift(samples.filter(pl.col("logged_at") <= end), baseline, end, config)
            latency = drift.filter(pl.col("metric") == "latency")
            unchanged = latency.join(others, on="query_hash", how="semi")
            regressed = latency.join(q0, on="query_hash", how="semi")
            row[name] = {
                "unchanged_latency_block": int((unchanged["flag"] == "BLOCK").sum()),
                "unchanged_latency_warn": int((unchanged["flag"] == "WARN").sum()),
                "unchanged_pairs": unchanged.height,
                "q0_latency": regressed["flag"].to_list(),
            }
        out[phase] = row
    return out


def main() -> None:
    root = Path(tempfile.gettempdir()) / "prr-bench" / uuid.uuid4().hex[:8]
    root.parent.mkdir(parents=True, exist_ok=True)
    root.parent.chmod(0o755)
    fleet = EmbeddedFleet.create(root, ["bench"], sampler=AutoExplainSamplerConfig(sample_rate=1.0))
    lake_root = root / "lake"
    totals = {phase: {g: [0, 0, 0] for g in ("guard", "no guard")} for phase in PHASES}
    q0_blocks = {g: 0 for g in ("guard", "no guard")}
    rounds = []
    try:
        server = fleet.server("bench")
        setup(server.dsn)
        for _ in range(ROUNDS):
            result = one_round(server.dsn, server.log_dir, lake_root)
            rounds.append(result)
            for phase in PHASES:
                for guard in ("guard", "no guard"):
                    r = result[phase][guard]
                    assert isinstance(r, dict)
                    t = totals[phase][guard]
                    t[0] += r["unchanged_latency_block"]
                    t[1] += r["unchanged_latency_warn"]
                    t[2] += r["unchanged_pairs"]
            for guard in ("guard", "no guard"):
                r = result["contended + regression"][guard]
                assert isinstance(r, dict)
                q0_blocks[guard] += int(r["q0_latency"] == ["BLOCK"])
    finally:
        fleet.destroy()
    print(f"\n{ROUNDS} rounds, {TABLES} queries x {PER_PHASE} executions per phase, sampler 1.0")
    print(f"{'phase':26s} {'guard':9s} latency BLOCK / WARN of unchanged pairs")
    for phase in PHASES:
        for guard in ("guard", "no guard"):
            block, warn, pairs = totals[phase][guard]
            print(f"{phase:26s} {guard:9s} {block:3d} / {warn:3d} of {pairs}")
    print(
        f"q0 (lost its index, under contention) latency BLOCK: guard {q0_blocks['guard']}/{ROUNDS}, "
        f"no guard {q0_blocks['no guard']}/{ROUNDS}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"rounds": rounds, "totals": totals, "q0_blocks": q0_blocks}
    (RESULTS / "drift_contention.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
