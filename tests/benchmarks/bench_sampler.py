"""Overhead of auto_explain as a sampler: pgbench throughput with the sampler at sample_rate 0.1 and 1.0
next to the named peer "sampler off" (auto_explain loaded, log_min_duration = -1), same server, same run.

One embedded PostgreSQL 18 server (the fleet's settings), pgbench scale 1, select-only (-S) and the
TPC-B-like default script, 2 clients, ROUNDS rounds of every mode interleaved (off, 0.1, 1.0, off, ...)
so a change of the host's load hits every mode alike; the sampler settings are switched with ALTER SYSTEM
and a reload between pgbench runs (each run opens new sessions). Prints tps per mode (the median over
rounds), the ratio to "sampler off", and the log bytes written per second. Run:
``python -m tests.benchmarks.bench_sampler`` (SAMPLER_BENCH_SECONDS sets the seconds per run, default 5).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

from jobs.local.embedded import EmbeddedFleet, postgres_bin_dir
from jobs.plans.config import AutoExplainSamplerConfig

ROUNDS = 2
SECONDS = int(os.environ.get("SAMPLER_BENCH_SECONDS", "5"))
MODES: dict[str, dict[str, str] | None] = {
    "sampler off": None,
    "sampler 0.1": AutoExplainSamplerConfig(sample_rate=0.1).server_settings(),
    "sampler 1.0": AutoExplainSamplerConfig(sample_rate=1.0).server_settings(),
}
SCRIPTS = {"select-only (-S)": ["-S"], "tpcb-like": []}


def apply(dsn: str, settings: dict[str, str] | None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if settings is None:
            conn.execute("ALTER SYSTEM SET auto_explain.log_min_duration = -1")
        else:
            for key, value in settings.items():
                conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")  # type: ignore[arg-type]
        conn.execute("SELECT pg_reload_conf()")


def log_bytes(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.glob("*"))


def pgbench(port: int, args: list[str]) -> float | None:
    done = subprocess.run(
        [str(postgres_bin_dir() / "pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=SECONDS + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed: {done.stderr[-800:]}")
    match = re.search(r"tps = ([0-9.]+)", done.stdout)
    if "-i" in args:
        return None
    if match is None:
        raise RuntimeError(f"pgbench printed no tps: {done.stdout[-500:]} {done.stderr[-500:]}")
    return float(match.group(1))


def main() -> None:
    root = Path(tempfile.gettempdir()) / "prr-bench" / uuid.uuid4().hex[:8]
    root.parent.mkdir(parents=True, exist_ok=True)
    root.parent.chmod(0o755)
    fleet = EmbeddedFleet.create(root, ["bench"])
    try:
        server = fleet.server("bench")
        pgbench(server.port, ["-i", "-s", "1", "-q", "postgres"])
        for script, flags in SCRIPTS.items():
            tps: dict[str, list[float]] = {mode: [] for mode in MODES}
            rates: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(ROUNDS):
                for mode, settings in MODES.items():
                    apply(server.dsn, settings)
                    before = log_bytes(server.log_dir)
                    run = pgbench(server.port, [*flags, "-c", "2", "-j", "2", "-T", str(SECONDS), "postgres"])
                    assert run is not None
                    tps[mode].append(run)
                    rates[mode].append((log_bytes(server.log_dir) - before) / SECONDS)
            off = statistics.median(tps["sampler off"])
            print(f"\n{script}: {SECONDS} s per run, {ROUNDS} rounds, 2 clients")
            for mode in MODES:
                median = statistics.median(tps[mode])
                runs = ", ".join(f"{t:.0f}" for t in tps[mode])
                print(
                    f"  {mode:12s} tps {median:9.0f} (runs {runs})  "
                    f"ratio vs sampler off {median / off:5.3f}  "
                    f"log {statistics.median(rates[mode]) / 1e6:6.2f} MB/s"
                )
    finally:
        fleet.destroy()


if __name__ == "__main__":
    main()
