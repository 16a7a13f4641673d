"""The gate's power (issue 23): how often `radar gate` says what is true, run as CI runs it.

Two embedded PG18 servers. The baseline's server is pinned to one CPU (with the radar's client), the
candidate's to the other, which a busy-loop neighbour shares: the candidate is loaded on its server only.
Three scenarios (tests/fixtures/gate_power.sql): a primary-key lookup, a lookup through the customer
index, and a CPU-bound scan whose work is proportional to the rows of ``power_facts`` (100,000 on the
baseline). Cases, each a candidate database on the loaded server:

- ``identical``: the baseline's data;
- ``x1.3`` / ``x1.1``: 30% / 10% more rows in ``power_facts`` (a true data-size regression of facts_sum);
- ``index_drop``: the customer index dropped (by_customer reads the table).

Profiles: ``aa`` gives ``--calibration-dsn`` (a copy of the baseline on the candidate's server, the
recommended two-server setup); ``default`` gives none (calibration auto picks the probe). Every run is the
CLI in a subprocess, ``radar gate --scenarios ... --format json``, exactly as CI calls it; its exit code
is checked against the JSON's. Each aa run is also judged again by the design's verdict rule from its own
raw measurements (``jobs.gate.replay``, no server): the same data, the two rules side by side.

Criteria (issue 23): identical -> 0 BLOCK and <= 1 WARN; x1.3 -> never PASS and WARN or BLOCK in >= 95%;
x1.1 -> never PASS; index drop -> BLOCK every run; false PASS (a PASS whose CI reaches the threshold) 0.

``BENCH_GATE_POWER_RUNS`` (20; ``BENCH_GATE_POWER_RUNS_<PROFILE>`` for one profile),
``BENCH_GATE_POWER_PROFILES`` (aa,default), ``BENCH_GATE_POWER_CASES`` (all), ``BENCH_GATE_POWER_MAX_SECONDS``
(120, the per-run budget).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from jobs.gate.replay import replay_report, stored_config
from jobs.gate.suite_report import suite_report_dict
from jobs.local.embedded import EmbeddedFleet
from tests.benchmarks.common import fresh_bench_folder

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "fixtures" / "gate_power.sql"
RESULTS = Path(".bench/results")
RUNS = int(os.environ.get("BENCH_GATE_POWER_RUNS", "20"))
PROFILES = os.environ.get("BENCH_GATE_POWER_PROFILES", "aa,default").split(",")
ALL_CASES = {"identical": "same", "x1.3": "x13", "x1.1": "x11", "index_drop": "noindex"}
CASES = {
    name: db
    for name, db in ALL_CASES.items()
    if name in os.environ.get("BENCH_GATE_POWER_CASES", ",".join(ALL_CASES)).split(",")
}
MAX_SECONDS = float(os.environ.get("BENCH_GATE_POWER_MAX_SECONDS", "120"))
PROFILE_RUNS = {
    p: int(os.environ[f"BENCH_GATE_POWER_RUNS_{p.upper()}"])
    for p in PROFILES
    if f"BENCH_GATE_POWER_RUNS_{p.upper()}" in os.environ
}
"""Fewer runs for one profile (``BENCH_GATE_POWER_RUNS_DEFAULT=5``): its runs are the first ones."""
AFFECTED = {"identical": None, "x1.3": "facts_sum", "x1.1": "facts_sum", "index_drop": "by_customer"}
FACT_ROWS = 100_000
VERDICT_EXITS = {"PASS": 0, "WARN": 1, "BLOCK": 2, "INCONCLUSIVE": 4}


def _schema(facts: int, index: bool) -> str:
    """The benchmark's data, deterministic: 200,000 orders of 10,000 customers; ``facts`` rows in 7 groups."""
    return f"""
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
CREATE TABLE power_orders (id int PRIMARY KEY, customer_id int NOT NULL, amount numeric NOT NULL);
INSERT INTO power_orders SELECT g, 1 + (g * 7919) % 10000, (g % 997) / 7.0 FROM generate_series(1, 200000) g;
{"CREATE INDEX power_orders_customer_idx ON power_orders (customer_id);" if index else ""}
CREATE TABLE power_facts (grp int NOT NULL, amount numeric NOT NULL);
INSERT INTO power_facts SELECT g % 7, (g % 1009) / 3.0 FROM generate_series(1, {facts}) g;
VACUUM ANALYZE power_orders;
VACUUM ANALYZE power_facts;
"""


def _database(server: Any, name: str, facts: int = FACT_ROWS, index: bool = True) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(server.dsn_for(name), autocommit=True) as conn:
        for statement in _schema(facts, index).split(";\n"):  # VACUUM: not in a transaction block
            if statement.strip():
                conn.execute(statement)
    return server.dsn_for(name)


def _postmaster(server: Any) -> int:
    return int((server.data_dir / "postmaster.pid").read_text().splitlines()[0])


def _wallclock_row(report: dict[str, Any], scenario: str) -> dict[str, Any] | None:
    return next(
        (r for r in report["rows"] if r["scenario"] == scenario and r["measurement"] == "wallclock"), None
    )


def _false_pass(report: dict[str, Any], verdict: str, scenarios: list[str]) -> bool:
    """A PASS whose wallclock CI reaches the threshold for one of ``scenarios``."""
    if verdict != "PASS":
        return False
    for name in scenarios:
        row = _wallclock_row(report, name)
        if row is not None and row["ci_high"] is not None and row["ci_high"] >= 1 + row["threshold"]:
            return True
    return False


def one_run(case: str, profile: str, seed: int, dsns: dict[str, str], cpu: int) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "jobs.cli.main", "gate",
        "--baseline", dsns["base"], "--candidate", dsns[case],
        "--scenarios", str(SCENARIOS), "--format", "json", "--seed", str(seed),
        "--max-seconds", str(MAX_SECONDS),
    ]  # fmt: skip
    if profile == "aa":
        argv += ["--calibration-dsn", dsns["copy"]]
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=MAX_SECONDS + 120,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),  # the client beside the baseline's server
    )
    seconds = time.perf_counter() - started
    out: dict[str, Any] = {"exit": done.returncode, "seconds": round(seconds, 2), "seed": seed}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        out["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return out
    verdict = report["verdict"]
    out["verdict"] = verdict
    out["exit_matches"] = done.returncode == report["exit_code"] == VERDICT_EXITS[verdict]
    out["scenarios"] = {s["name"]: s["verdict"] for s in report["scenarios"]}
    names = [AFFECTED[case]] if AFFECTED[case] else [s["name"] for s in report["scenarios"]]
    out["false_pass"] = _false_pass(report, verdict, names)
    row = _wallclock_row(report, AFFECTED[case] or "facts_sum")
    if row is not None:
        keys = ("ratio", "ci_low", "ci_high", "raw_ratio", "verdict", "decided_by")
        out["wallclock"] = {k: row[k] for k in keys}
    out["calibration"] = report["calibration"]["mode"]
    out["undecided"] = [
        f"{r['scenario']}.{r['measurement']} x{r['ratio']:.3f} up to x{r['rules_out']:.3f}"
        for r in report["rows"]
        if r.get("decided") is False and r["rules_out"] is not None
    ]
    out["cycles"] = {s["name"]: len(s["cycles"]) for s in report["scenarios"]}
    if profile == "aa":  # the same measurements judged by the design's rule
        design_config = replace(stored_config(report, "run"), verdict_rule="design")
        design = replay_report(report, design_config, "run")
        design_dict = suite_report_dict(design)
        out["design_verdict"] = design.verdict
        out["design_false_pass"] = _false_pass(design_dict, design.verdict, names)
    return out


def summarise(runs: list[dict[str, Any]], case: str) -> dict[str, Any]:
    """Counts per case. The run's verdict is the worst scenario's, and INCONCLUSIVE outranks WARN (a run
    with an undecided scenario must not exit 0 under --no-fail-on-warn), so whether the regression was
    found is read on the affected scenario's own verdict; "never PASS" on the run's."""
    verdicts = Counter(r.get("verdict", "ERROR") for r in runs)
    n = len(runs)
    ratios = [r["wallclock"]["ratio"] for r in runs if r.get("wallclock")]
    affected = AFFECTED[case]
    found = Counter(r.get("scenarios", {}).get(affected, "ERROR") for r in runs) if affected else Counter()
    flagged = found.get("WARN", 0) + found.get("BLOCK", 0)
    criteria = {
        "identical": verdicts.get("BLOCK", 0) == 0 and verdicts.get("WARN", 0) <= 1,
        "x1.3": verdicts.get("PASS", 0) == 0 and flagged >= 0.95 * n,
        "x1.1": verdicts.get("PASS", 0) == 0,
        "index_drop": verdicts.get("BLOCK", 0) == n,
    }[case]
    out = {
        "runs": n,
        "verdicts": dict(verdicts),
        "affected_scenario_verdicts": dict(found),
        "errors": [r["error"] for r in runs if "error" in r],
        "exit_codes_match": all(r.get("exit_matches", False) for r in runs if "error" not in r),
        "false_pass": sum(bool(r.get("false_pass")) for r in runs),
        "median_seconds": statistics.median(r["seconds"] for r in runs) if runs else None,
        "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
        "criterion_met": criteria and not any("error" in r for r in runs),
    }
    if any("design_verdict" in r for r in runs):
        design = Counter(r["design_verdict"] for r in runs if "design_verdict" in r)
        out["design_rule_verdicts"] = dict(design)
        out["design_rule_false_pass"] = sum(bool(r.get("design_false_pass")) for r in runs)
    return out


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("bench_gate_power: needs 2 CPUs to load one server only; skipped")
        return
    folder = fresh_bench_folder(f"gate-power-{os.getpid()}")
    fleet = EmbeddedFleet.create(folder / "fleet", ["pbase", "pcand"])
    hog = None
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {p: {c: [] for c in CASES} for p in PROFILES}
    started = time.perf_counter()
    try:
        base, cand = fleet.server("pbase"), fleet.server("pcand")
        dsns = {
            "base": _database(base, "power"),
            "copy": _database(cand, "copy"),
            "same": _database(cand, "same"),
            "x13": _database(cand, "x13", facts=int(FACT_ROWS * 1.3)),
            "x11": _database(cand, "x11", facts=int(FACT_ROWS * 1.1)),
            "noindex": _database(cand, "noindex", index=False),
        }
        dsns = {**dsns, **{name: dsns[db] for name, db in CASES.items()}}
        os.sched_setaffinity(_postmaster(base), {cpus[0]})
        os.sched_setaffinity(_postmaster(cand), {cpus[1]})
        # A busy loop on the candidate's CPU that ends with this process (a killed benchmark leaves no hog).
        hog = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os\nos.sched_setaffinity(0, {{{cpus[1]}}})\nparent = os.getppid()\n"
                "while os.getppid() == parent: pass",
            ]
        )
        for i in range(RUNS):  # cases and profiles interleaved, so the host's drift hits them alike
            for case in CASES:
                for profile in PROFILES:
                    if i >= PROFILE_RUNS.get(profile, RUNS):
                        continue
                    got = one_run(case, profile, 5000 + i, dsns, cpus[0])
                    runs[profile][case].append(got)
                    said = got.get("verdict", got.get("error"))
                    ratio = got.get("wallclock", {}).get("ratio")
                    print(
                        f"run {i + 1}/{RUNS} {case:>10} {profile:>7}: {said} exit {got['exit']} "
                        f"{got['seconds']:.1f} s, ratio {ratio}, cycles {got.get('cycles')}, "
                        f"undecided {got.get('undecided')}",
                        flush=True,
                    )
                    partial = RESULTS / "gate_power.partial.json"
                    partial.parent.mkdir(parents=True, exist_ok=True)
                    partial.write_text(json.dumps(runs, indent=1, default=str))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        fleet.destroy()
        shutil.rmtree(folder, ignore_errors=True)
    summary = {p: {c: summarise(r, c) for c, r in per.items()} for p, per in runs.items()}
    result = {
        "runs_per_case": RUNS,
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "summary": summary,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gate_power.json").write_text(json.dumps(result, indent=2, default=str))
    print_table(summary)


def print_table(summary: dict[str, dict[str, dict[str, Any]]]) -> None:
    """The README's table: run verdicts, the affected scenario's, the design rule's on the same data."""
    print("\n| case | profile | PASS | WARN | BLOCK | INCONCLUSIVE | affected scenario | false PASS | "
          "median ratio | median s | criterion | design rule on the same data (false PASS) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for profile, per in summary.items():
        for case, s in per.items():
            v = s["verdicts"]
            design = s.get("design_rule_verdicts")
            design_text = (
                "–" if design is None else
                f"{', '.join(f'{k} {n}' for k, n in sorted(design.items()))} ({s['design_rule_false_pass']})"
            )  # fmt: skip
            met = "met" if s["criterion_met"] else "NOT met"
            found = s.get("affected_scenario_verdicts") or {}
            found_text = ", ".join(f"{k} {n}" for k, n in sorted(found.items())) or "–"
            print(
                f"| {case} | {profile} | {v.get('PASS', 0)} | {v.get('WARN', 0)} | {v.get('BLOCK', 0)} | "
                f"{v.get('INCONCLUSIVE', 0)} | {found_text} | {s['false_pass']} | {s['median_ratio']} | "
                f"{s['median_seconds']} | {met} | {design_text} |"
            )


if __name__ == "__main__":
    main()
