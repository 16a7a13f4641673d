"""The scenario gate (issue 12) on two servers of one host, one of them loaded.

(a) False BLOCKs: identical databases on two embedded PG18 servers; the candidate's server is pinned to
    one CPU that a busy-loop neighbour shares, the baseline's to the other CPU. RUNS runs per profile:
    - single: 1 cycle, no calibration (what a one-shot gate does);
    - cycles: 3 cycles ABBA with median selection, no calibration;
    - probe: 3 cycles + the probe calibration (what calibration = auto picks without a calibration copy);
    - aa_before: 3 cycles + the design's A/A calibration (5 A/A cycles of the baseline against its copy on
      the candidate's server, before the scenario's cycles);
    - aa_interleaved: 3 cycles, each measuring the baseline, the candidate and the copy (what auto picks
      with --calibration-dsn: aa_timing = interleaved).
(b) Time to a decisive BLOCK: the candidate lacks the index one scenario needs (one server, no load);
    the default stop rules against the peer "fixed": every target runs max_measurements measurements in
    every cycle (termination_rules = run_at_most, no CI stop, no early end of the run).
(c) Tail sensitivity, on the pure judgement (no server; the noise of a measured A/A run's wallclock
    samples): a fraction f of the candidate's executions slowed by a factor x; the smallest x at which
    the default judgement BLOCKs, per f, with the p50 comparison alone and with the tail row.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from jobs.gate.config import BLOCK, GateConfig
from jobs.gate.cycle import WALLCLOCK, compare_samples, tail_verdict
from jobs.gate.scenario import ScenarioSuite, load_scenarios
from jobs.gate.suite import SuiteReport, run_scenario_gate
from jobs.gate.verdict import worst
from jobs.local.embedded import EmbeddedFleet
from tests.benchmarks.common import fresh_bench_folder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RESULTS = Path(".bench/results")
RUNS = int(os.environ.get("BENCH_GATE_SUITE_RUNS", "20"))
BASE = GateConfig(
    max_measurements=20, memory_executions=1, warmup_calls=2, bootstrap_resamples=500, suite_max_seconds=120.0
)
ALL_PROFILES = {
    "single": replace(BASE, cycles=1, calibration="off"),
    "cycles": replace(BASE, cycles=3, calibration="off"),
    "probe": replace(BASE, cycles=3, calibration="probe"),
    "aa_before": replace(BASE, cycles=3, calibration="aa", aa_timing="before"),
    "aa_interleaved": replace(BASE, cycles=3, calibration="aa", aa_timing="interleaved"),
}
# BENCH_GATE_SUITE_PROFILES=single,aa_interleaved runs a subset (all by default).
PROFILES = {
    name: ALL_PROFILES[name]
    for name in os.environ.get("BENCH_GATE_SUITE_PROFILES", ",".join(ALL_PROFILES)).split(",")
}
BENCH_SCENARIOS = ("customer_by_id", "orders_by_customer")  # two of the tests' lookups


def bench_suite() -> ScenarioSuite:
    """The primary-key lookup and the lookup through the index the candidate of (b) lacks."""
    suite = load_scenarios(FIXTURES / "gate_lookups.sql")
    return replace(suite, scenarios=tuple(s for s in suite.scenarios if s.name in BENCH_SCENARIOS))


def _postmaster(server: object) -> int:
    return int((server.data_dir / "postmaster.pid").read_text().splitlines()[0])  # type: ignore[attr-defined]


def _asymmetry(report: SuiteReport) -> float | None:
    """The probe's asymmetry, or the median of the scenarios' A/A asymmetries."""
    if report.calibration.asymmetry is not None:
        return round(report.calibration.asymmetry.ratio, 3)
    per_scenario = [s.asymmetry.ratio for s in report.scenarios if s.asymmetry is not None]
    return round(statistics.median(per_scenario), 3) if per_scenario else None


def _summary(report: SuiteReport) -> dict[str, object]:
    return {
        "verdict": report.verdict,
        "seconds": round(report.seconds, 2),
        "asymmetry": _asymmetry(report),
        "wallclock_raw": {
            s.name: round(m.raw_ratio, 3)
            for s in report.scenarios
            for m in s.selected
            if m.measurement == WALLCLOCK
        },
        "scenario_verdicts": {s.name: s.verdict for s in report.scenarios},
    }


def false_blocks(fleet: EmbeddedFleet) -> dict[str, object]:
    base, cand = fleet.server("base"), fleet.server("cand")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"skipped": "needs 2 CPUs"}
    os.sched_setaffinity(_postmaster(base), {cpus[0]})
    os.sched_setaffinity(_postmaster(cand), {cpus[1]})
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpus[1]}}})\nwhile True: pass"]
    )
    suite = bench_suite()
    out: dict[str, object] = {}
    try:
        runs: dict[str, list[dict[str, object]]] = {name: [] for name in PROFILES}
        for i in range(RUNS):  # the profiles interleaved, so the host's drift hits them alike
            for name, config in PROFILES.items():
                report = run_scenario_gate(
                    base.dsn,
                    cand.dsn,
                    suite,
                    replace(config, seed=1000 + i),
                    calibration_dsn=cand.dsn_for("copy"),
                )
                runs[name].append(_summary(report))
        for name, got in runs.items():
            verdicts = Counter(str(r["verdict"]) for r in got)
            out[name] = {
                "runs": len(got),
                "verdicts": dict(verdicts),
                "false_block_rate": verdicts.get(BLOCK, 0) / len(got),
                "median_seconds": statistics.median(float(r["seconds"]) for r in got),  # type: ignore[arg-type]
                "asymmetry_median": _median([r["asymmetry"] for r in got]),
                "runs_detail": got,
            }
    finally:
        hog.kill()
        hog.wait()
        for server in (base, cand):
            os.sched_setaffinity(_postmaster(server), set(cpus))
    return out


def _median(values: list[object]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(known) if known else None


def time_to_block(fleet: EmbeddedFleet) -> dict[str, object]:
    server = fleet.server("base")
    suite = bench_suite()
    decisive = replace(BASE, calibration="off", max_measurements=60)
    fixed = replace(
        decisive, termination_rules=("run_at_most",), min_measurements=60, stop_when_decided=False
    )
    out: dict[str, object] = {}
    for name, config in (("decisive", decisive), ("fixed", fixed)):
        times, verdicts = [], []
        for i in range(3):
            started = time.perf_counter()
            report = run_scenario_gate(server.dsn, server.dsn_for("noindex"), suite, replace(config, seed=i))
            times.append(time.perf_counter() - started)
            verdicts.append(report.verdict)
        out[name] = {
            "seconds": [round(t, 2) for t in times],
            "median_seconds": statistics.median(times),
            "verdicts": verdicts,
        }
    out["ratio_fixed_over_decisive"] = out["fixed"]["median_seconds"] / out["decisive"]["median_seconds"]  # type: ignore[index]
    return out


def tail_sensitivity(noise_sample: list[float]) -> dict[str, object]:
    """Resample the measured A/A wallclock noise; slow a fraction of the candidate's executions."""
    rng = np.random.default_rng(20261201)
    noise = np.asarray(noise_sample, dtype=float)
    noise = noise / np.median(noise)
    config = GateConfig()
    fractions = [0.02, 0.05, 0.10, 0.20, 0.30]
    factors = [1.5, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0]
    table: dict[str, dict[str, float | None]] = {}
    for f in fractions:
        first = {"p50_only": None, "with_tail": None}
        for x in factors:
            base = rng.choice(noise, 60)
            cand = rng.choice(noise, 60)
            slow = rng.random(60) < f
            cand[slow] *= x
            p50 = compare_samples(WALLCLOCK, base, cand, config, how="p50")
            tail = tail_verdict(base, cand, config)
            if first["p50_only"] is None and p50.verdict == BLOCK:
                first["p50_only"] = x
            if first["with_tail"] is None and worst([p50.verdict, tail.verdict]) == BLOCK:
                first["with_tail"] = x
        table[f"{f:.2f}"] = first
    return {"fractions_x_first_block": table, "samples_per_side": 60, "noise_n": int(noise.size)}


def main() -> None:
    folder = fresh_bench_folder("gate-suite")
    fleet = EmbeddedFleet.create(folder / "fleet", ["base", "cand"])
    try:
        schema = (FIXTURES / "gate_schema.sql").read_text()
        for server in fleet.servers:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute(schema)
        base = fleet.server("base")
        with psycopg.connect(fleet.server("cand").dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE copy")
        with psycopg.connect(fleet.server("cand").dsn_for("copy"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute(schema)
        with psycopg.connect(base.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE noindex")
        with psycopg.connect(base.dsn_for("noindex"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute(schema)
            conn.execute("DROP INDEX gate_orders_customer_id_idx")
        report = {
            "false_blocks": false_blocks(fleet),
            "time_to_block": time_to_block(fleet),
        }
        report["tail_sensitivity"] = tail_sensitivity(_aa_samples(base.dsn))
    finally:
        fleet.destroy()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gate_suite.json").write_text(json.dumps(report, indent=2, default=str))
    for name, got in report["false_blocks"].items():  # type: ignore[union-attr]
        if isinstance(got, dict):
            print(
                f"{name:>14}: {got['verdicts']} false BLOCK rate {got['false_block_rate']:.0%} "
                f"median {got['median_seconds']:.1f} s asymmetry {got.get('asymmetry_median')}"
            )
    ttb: dict[str, Any] = report["time_to_block"]  # type: ignore[assignment]
    decisive, fixed = ttb["decisive"]["median_seconds"], ttb["fixed"]["median_seconds"]
    ratio = fixed / decisive
    print(f"time to BLOCK: decisive {decisive:.1f} s, fixed {fixed:.1f} s (fixed / decisive x{ratio:.2f})")
    print("tail: fraction -> first BLOCK factor (p50 only, with tail):")
    for f, first in report["tail_sensitivity"]["fractions_x_first_block"].items():  # type: ignore[index]
        print(f"  {f}: {first['p50_only']}, {first['with_tail']}")


def _aa_samples(dsn: str) -> list[float]:
    """Per-execution wallclock of one quiet A/A cycle (the point lookup), ms."""
    from jobs.gate.measure import TargetSession

    suite = bench_suite()
    scenario = suite.scenarios[0]
    session = TargetSession("baseline", dsn, BASE)
    try:
        import random

        rng = random.Random(1)
        session.run_shared(suite)
        session.start_scenario(scenario, scenario.draw(rng))
        out = []
        for _ in range(200):
            params = scenario.draw(rng)
            session.before(scenario, params)
            out.append(session.execute(scenario, params) / 1e6 / scenario.repeat)
        session.end_scenario(scenario)
        return out
    finally:
        session.close()


if __name__ == "__main__":
    main()
