"""The gate: statistical termination vs a fixed-iteration run (the named peer), and false BLOCKs.

Two embedded PG18 servers hold the same schema and data (tests/fixtures/gate_schema.sql). The workload
has three queries: an index lookup, an aggregate over an index, and a CPU-bound PL/pgSQL function
(tests/fixtures/gate_bench_function.sql). Scenarios:

(a) identical: the candidate is the same as the baseline;
(b) slower: the candidate's function loops 1.4x as long (a "migration" that made one query ~30% slower
    end to end: the client round trip is part of every call; the measured ratio is reported).

Modes, with the same verdict rules (GateConfig defaults otherwise):
- statistical termination (this gate): rounds until every query's ratio CI settles;
- fixed (the peer): 2,000 calls per query per side (100 rounds of 20), no early stop.
Reported: time to verdict and rounds (median, mean and max over every run of a mode), the verdicts,
the estimated p50 ratio of the slowed query; false BLOCK / WARN rates over FALSE_BLOCK_RUNS statistical
runs of (a), and the BLOCK rate over TRUE_BLOCK_RUNS runs of (b).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections import Counter
from pathlib import Path

import psycopg

from jobs.gate.config import BLOCK, GateConfig
from jobs.gate.runner import run_gate_workload
from jobs.gate.verdict import GateReport
from jobs.gate.workload import parse_workload
from jobs.local.embedded import EmbeddedFleet
from tests.benchmarks.common import fresh_bench_folder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RESULTS = Path(".bench/results")
BASE_ITERATIONS = 40_000
SLOW_FACTOR = 1.4
FIXED_CALLS = 2000
CALLS_PER_ROUND = 20
REPEATS = 3
FALSE_BLOCK_RUNS = 20
TRUE_BLOCK_RUNS = 10
SLOWED_QUERY = "score"

WORKLOAD = """
[[queries]]
name = "customer_by_id"
sql = "SELECT id, name, region FROM gate_customers WHERE id = $1"
params = [{ int_range = [1, 2000] }]

[[queries]]
name = "orders_by_customer"
sql = "SELECT count(*), sum(amount) FROM gate_orders WHERE customer_id = $1"
params = [{ int_range = [1, 2000] }]

[[queries]]
name = "score"
sql = "SELECT gate_score($1)"
params = [{ int_range = [1, 2000] }]
"""


def prepare(dsn: str, iterations: int) -> None:
    function = (FIXTURES / "gate_bench_function.sql").read_text().replace("{iterations}", str(iterations))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((FIXTURES / "gate_schema.sql").read_text())
        conn.execute(function)


def summary(report: GateReport) -> dict[str, object]:
    slowed = next(q for q in report.queries if q.name == SLOWED_QUERY)
    return {
        "verdict": report.verdict,
        "query_verdicts": {q.name: q.verdict for q in report.queries},
        "seconds": report.seconds,
        "measure_seconds": report.termination.measure_seconds,
        "rounds": report.termination.rounds,
        "termination": report.termination.reason,
        "calls_per_side_per_query": max(
            q.latency.n_baseline + q.latency.dropped_baseline for q in report.queries if q.latency
        ),
        "settled_by": {q.name: q.settled_by for q in report.queries},
        "slowed_p50_ratio": slowed.latency.p50_ratio if slowed.latency else None,
        "slowed_p50_ci": list(slowed.latency.p50_ci) if slowed.latency else None,
    }


def run(base_dsn: str, cand_dsn: str, config: GateConfig) -> dict[str, object]:
    workload = parse_workload(WORKLOAD, "bench_gate.WORKLOAD")
    return summary(run_gate_workload(base_dsn, cand_dsn, workload, config))


def main() -> None:
    base_folder = fresh_bench_folder("gate")
    fleet = EmbeddedFleet.create(base_folder / "fleet", ["base", "cand"])
    started = time.perf_counter()
    try:
        base, cand = fleet.server("base"), fleet.server("cand")
        prepare(base.dsn, BASE_ITERATIONS)
        prepare(cand.dsn, BASE_ITERATIONS)
        with psycopg.connect(cand.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE gate_slow")
        prepare(cand.dsn_for("gate_slow"), round(BASE_ITERATIONS * SLOW_FACTOR))
        scenarios = {"identical": cand.dsn, "slower": cand.dsn_for("gate_slow")}
        rounds = FIXED_CALLS // CALLS_PER_ROUND
        modes = {
            "statistical": lambda seed: GateConfig(seed=seed, calls_per_round=CALLS_PER_ROUND),
            "fixed_2000": lambda seed: GateConfig(
                seed=seed,
                calls_per_round=CALLS_PER_ROUND,
                min_rounds=rounds,
                max_rounds=rounds,
                max_seconds=600,
            ),
        }
        runs: dict[str, dict[str, list[dict[str, object]]]] = {s: {m: [] for m in modes} for s in scenarios}
        for repeat in range(REPEATS):  # the two modes alternate, so machine drift hits both
            for scenario, cand_dsn in scenarios.items():
                for mode, make in modes.items():
                    runs[scenario][mode].append(run(base.dsn, cand_dsn, make(1000 + repeat)))
        for scenario, extra in (("identical", FALSE_BLOCK_RUNS), ("slower", TRUE_BLOCK_RUNS)):
            for seed in range(REPEATS, extra):
                runs[scenario]["statistical"].append(
                    run(base.dsn, scenarios[scenario], modes["statistical"](1000 + seed))
                )
    finally:
        fleet.destroy()
        shutil.rmtree(base_folder, ignore_errors=True)

    table = []
    for scenario in scenarios:
        for mode in modes:
            done = runs[scenario][mode]
            verdicts = Counter(str(r["verdict"]) for r in done)
            seconds = [float(r["seconds"]) for r in done]
            rounds_used = [int(r["rounds"]) for r in done]
            table.append(
                {
                    "scenario": scenario,
                    "mode": mode,
                    "runs": len(done),
                    "median_seconds": statistics.median(seconds),
                    "mean_seconds": statistics.fmean(seconds),
                    "max_seconds": max(seconds),
                    "median_rounds": statistics.median(rounds_used),
                    "max_rounds": max(rounds_used),
                    "median_calls_per_side_per_query": statistics.median(
                        int(r["calls_per_side_per_query"]) for r in done
                    ),
                    "verdicts": dict(verdicts),
                    "block_rate": verdicts[BLOCK] / len(done),
                    "median_slowed_p50_ratio": statistics.median(float(r["slowed_p50_ratio"]) for r in done),
                }
            )
    report = {
        "base_iterations": BASE_ITERATIONS,
        "slow_factor": SLOW_FACTOR,
        "fixed_calls": FIXED_CALLS,
        "repeats": REPEATS,
        "table": table,
        "runs": runs,
        "total_seconds": time.perf_counter() - started,
    }
    print("gate on two PG18 servers; medians (mean, max) over every run of each mode")
    print(
        f"{'scenario':<10}{'mode':<13}{'runs':>5}{'time s (mean, max)':>22}{'rounds (max)':>14}{'calls':>7}"
        f"{'score p50 ×':>12}{'BLOCK rate':>11}  verdicts"
    )
    for row in table:
        times = f"{row['median_seconds']:.2f} ({row['mean_seconds']:.2f}, {row['max_seconds']:.1f})"
        print(
            f"{row['scenario']:<10}{row['mode']:<13}{row['runs']:>5}{times:>22}"
            f"{row['median_rounds']:>8.0f} ({row['max_rounds']:>3})"
            f"{row['median_calls_per_side_per_query']:>7.0f}"
            f"{row['median_slowed_p50_ratio']:>12.3f}{row['block_rate']:>11.2f}  {row['verdicts']}"
        )
    for scenario in scenarios:
        stat = next(r for r in table if r["scenario"] == scenario and r["mode"] == "statistical")
        fixed = next(r for r in table if r["scenario"] == scenario and r["mode"] == "fixed_2000")
        print(
            f"{scenario}: statistical termination {fixed['median_seconds'] / stat['median_seconds']:.1f}x "
            f"faster than the fixed run (median), {fixed['mean_seconds'] / stat['mean_seconds']:.1f}x (mean)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gate.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
