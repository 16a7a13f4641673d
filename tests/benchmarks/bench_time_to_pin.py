"""Time to a verified pin (issue 30): minutes from a plan regression's onset to its pin verified, at
one-minute snapshots, replayed minute by minute through the per-minute detection, the pin proposal and the
pin check.

Each run (``RADAR_BENCH_TTP_RUNS``, 5; seed 20261207 + run): one instance, ``RADAR_BENCH_TTP_SERIES``
statements (10) with their own latency (2-30 ms), call rate (300-3,000 a minute) and lognormal noise
(sigma 0.05-0.25); at minute ``RADAR_BENCH_TTP_STEP`` (90: the detector's history fills first) statement 0's
plan flips (latency x5 to x20, log-uniform), and its plan history in the lake says so (an index scan before,
a seq scan from the step). Each minute: the snapshot is written as the collector writes it, one incremental
``run_detection`` runs (samples appended, findings updated), then ``run_pin_proposals`` (the catalogue says
the index still exists) and, once a pin is applied, ``check_applied_pins`` with the lake's samples.

What is simulated, not measured on a server: applying. The minute a pin is proposed it is recorded as
applied (a ledger row, as ``write_pin`` writes it) and the statement's latency is back at its old level from
that minute's interval on (what the tier's real-server tests show a pin does). Reported per run: the minutes
from the step to the open finding, to the proposal (= the application), and to the verified pin; then
the median and max over the runs. Two controls follow, each proposing pins every minute a finding is open:
A/A (nothing changes) and contention (every statement x2 from the step, a noisy neighbour, no plan change);
the issue's goal for both is no proposal.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.lake.io import stem_for, write_table
from jobs.schemas.collected import PLAN_SNAPSHOTS, QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from tests.benchmarks.detection_lake import collector_frames
from tests.support.pin_lakes import BAD, GOOD, snapshot

RESULTS = Path(".bench/results")
SEED = 20261207
START = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)
NAME = "ttp-00"


def env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def frames(
    seed: int,
    series: int,
    minutes: int,
    step: int,
    factor: float,
    pinned: int | None,
    scenario: str = "plan",
) -> tuple[np.ndarray, tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]:
    """The instance's collector frames with statement 0 slowed by ``factor`` from ``step`` until ``pinned``
    (scenario plan), every statement x2 from ``step`` (contention: a noisy neighbour, no plan change), or
    nothing (aa); the same seed gives the same noise, so the minutes before a pin do not change when set."""
    r = np.random.default_rng(seed)
    n = minutes + 1
    queryids = r.integers(-(2**62), 2**62, series, dtype=np.int64)
    latency = np.exp(r.uniform(np.log(2.0), np.log(30.0), series))
    latency[0] = max(latency[0], 10.0)  # material at the step by the detector's rules
    calls_per_min = np.exp(r.uniform(np.log(300.0), np.log(3000.0), series))
    sigma = r.uniform(0.05, 0.25, series)
    level = np.ones((n, series))
    if scenario == "plan":
        level[step + 1 : (pinned + 1 if pinned is not None else n), 0] = factor
    elif scenario == "contention":
        level[step + 1 :, :] = 2.0
    calls_step = np.maximum(1, r.poisson(calls_per_min, (n, series)))
    calls_step[0] = 0
    noise = r.lognormal(0.0, 1.0, (n, series)) ** sigma
    calls = np.cumsum(calls_step, axis=0) + 1000
    exec_ms = np.cumsum(calls_step * latency * level * noise, axis=0) + 1000 * latency
    hits = np.cumsum(calls_step * 10, axis=0)
    return queryids, collector_frames(
        START, queryids, calls, exec_ms, hits, np.zeros_like(hits), system_identifier=9_000_000 + seed % 1000
    )


def write_minute(root: Path, tables: tuple[pl.DataFrame, ...], minute: int, series: int) -> None:
    at = START + minute * STEP
    partition = {"instance": NAME, "date": at.strftime("%Y-%m-%d")}
    snapshots, runs, texts = tables
    write_table(
        root, STATEMENT_SNAPSHOTS, snapshots.slice(minute * series, series), partition, f"{stem_for(at)}-t"
    )
    write_table(root, SNAPSHOT_RUNS, runs.slice(minute, 1), partition, f"{stem_for(at)}-t")
    if minute == 0:
        write_table(root, QUERY_TEXTS, texts, partition, f"{stem_for(at)}-t")


def write_plans(root: Path, queryid: int, step: int, changed: bool = True) -> None:
    """Statement 0's plan history: an index scan from the start, a seq scan from the step (when changed)."""
    history = [(GOOD, START), (BAD, START + (step + 1) * STEP)] if changed else [(GOOD, START)]
    for row in [snapshot(plan, at, queryid, dbid=5) for plan, at in history]:
        partition = {"instance": NAME, "date": row["captured_at"].strftime("%Y-%m-%d")}
        write_table(
            root,
            PLAN_SNAPSHOTS,
            PLAN_SNAPSHOTS.conform(pl.DataFrame([row])),
            partition,
            stem_for(row["captured_at"]),
        )


def one_run(run: int, series: int, minutes: int, step: int, scenario: str = "plan") -> dict[str, Any]:
    from jobs.detect.config import RegressionConfig
    from jobs.detect.findings import latest_states
    from jobs.lake import io as lake
    from jobs.pipeline.detection import DetectionConfig, run_detection
    from jobs.plans.config import PinningConfig
    from jobs.plans.pin_apply import check_applied_pins, lake_latencies
    from jobs.plans.pin_ledger import latest_pins, read_pins, run_pin_proposals, write_pins
    from jobs.plans.pins import PlanCatalogue
    from jobs.schemas.analysed import FINDING_STATES, PLAN_PINS

    seed = SEED + run
    factor = float(np.exp(np.random.default_rng(seed).uniform(np.log(5.0), np.log(20.0))))
    queryids, tables = frames(seed, series, minutes, step, factor, None, scenario)
    catalogue = PlanCatalogue.from_rows(
        [{"schemaname": "public", "relname": "orders", "indexname": "orders_customer_id_idx"}]
    )
    pinning = PinningConfig(mode="apply", apply_instances=(NAME,))
    detector = RegressionConfig()

    def never(instance: str) -> str:
        raise AssertionError("the benchmark writes to no server")

    found = proposed = verified = None
    findings_seen: set[str] = set()
    proposals = 0
    folder = Path(tempfile.mkdtemp(prefix="radar-ttp-"))
    root = folder / "lake"
    try:
        write_plans(root, int(queryids[0]), step, changed=scenario == "plan")
        for minute in range(minutes + 1):
            write_minute(root, tables, minute, series)
            now = START + minute * STEP + timedelta(seconds=5)
            run_detection(root, DetectionConfig(), now=now)
            states = latest_states(lake.read_table(root, FINDING_STATES))
            opened = states.filter(pl.col("status") == "open")
            findings_seen.update(opened["finding_id"].to_list())
            if found is None:
                mine = opened.filter(pl.col("queryid") == int(queryids[0]))
                if mine.height and minute > step:
                    found = minute
            if scenario != "plan" and opened.height:
                done = run_pin_proposals(root, lambda f, r: catalogue, pinning, now, decided_by="bench")
                proposals += done.written.filter(pl.col("event") == "proposed").height
                continue
            if found is not None and proposed is None:
                done = run_pin_proposals(root, lambda f, r: catalogue, pinning, now, decided_by="bench")
                row = done.written.filter(pl.col("event") == "proposed")
                if row.height:
                    proposed = minute
                    applied = row.with_columns(
                        pl.lit("applied").alias("event"),
                        pl.lit(now + timedelta(seconds=1)).alias("recorded_at"),
                        pl.col("apply_sql").alias("sql_run"),
                        pl.lit("bench (simulated application: no server)").alias("decided_by"),
                    )
                    write_pins(root, PLAN_PINS.conform(applied), now + timedelta(seconds=1))
                    _, tables = frames(seed, series, minutes, step, factor, minute)
            elif proposed is not None and verified is None:
                checks = check_applied_pins(
                    root,
                    lambda f, r: catalogue,
                    never,
                    pinning,
                    now,
                    latencies_of=lake_latencies(root, detector),
                    detector=detector,
                )
                if any(c.outcome == "verified" for c in checks):
                    verified = minute
                    break
                if any(c.outcome in ("failed", "not_removed") for c in checks):
                    break
        state = latest_pins(read_pins(root)).to_dicts()
        events = sorted({r["event"] for r in state})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "run": run,
        "scenario": scenario,
        "findings_opened": len(findings_seen),
        "pins_proposed": proposals if scenario != "plan" else int(proposed is not None),
        "pin_states": events,
        "factor": round(factor, 2) if scenario == "plan" else None,
        "minutes_to_finding": None if found is None else found - step,
        "minutes_to_pin": None if proposed is None else proposed - step,
        "minutes_to_verified": None if verified is None else verified - step,
        "final_state": state[0]["event"] if state else None,
        "final_reason": state[0]["reason"] if state else None,
    }


def main() -> None:
    runs = env("RADAR_BENCH_TTP_RUNS", 5)
    series = env("RADAR_BENCH_TTP_SERIES", 10)
    step = env("RADAR_BENCH_TTP_STEP", 90)
    minutes = env("RADAR_BENCH_TTP_MINUTES", step + 40)
    began = time.perf_counter()
    results = []
    for run in range(runs):
        results.append(one_run(run, series, minutes, step))
        print(json.dumps(results[-1], default=str), flush=True)
    controls = []
    for run, scenario in enumerate(("aa", "contention"), start=runs):
        controls.append(one_run(run, series, minutes, step, scenario))
        print(json.dumps(controls[-1], default=str), flush=True)
    verified = [r["minutes_to_verified"] for r in results if r["minutes_to_verified"] is not None]
    report = {
        "runs": runs,
        "series": series,
        "step_minute": step,
        "median_minutes_to_verified": statistics.median(verified) if verified else None,
        "max_minutes_to_verified": max(verified) if verified else None,
        "not_verified": runs - len(verified),
        "control_pins_proposed": {c["scenario"]: c["pins_proposed"] for c in controls},
        "per_run": results + controls,
        "seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "per_run"}, indent=2, default=str))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "time_to_pin.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
