"""CLI start-up: `radar --help`, `radar snapshot` and `radar sql` against `python -c pass`, in the same run.

Each command runs as a fresh process (what a user or cron pays), ``REPEATS`` times, interleaved so a busy
moment of the machine hits every command alike; the table gives the median and the spread (min-max) in
milliseconds and the median over `python -c pass`'s.

`radar snapshot` runs against one unreachable instance (127.0.0.1:1, connection refused at once): the
cycle imports and sets up everything a real snapshot does, then spends no time on a server, so its
wall time is the radar's own overhead. It exits 3 (every instance failed), which is expected here. The
same snapshot with ``-X importtime`` gives the cumulative import time of the heaviest top-level modules.

`radar sql` runs on a small lake (tests.support.lakes.write_week_lake: five tables with files, the others
empty) three ways: ``select 1`` (no view defined), a derived view (``lake_summary``: it and the two base
views it reads) and a catalogue query (``duckdb_views()``: every view defined, what every call paid before
`radar sql` defined only the views a query names).
Env RADAR_BENCH_CLI_REPEATS overrides the repeats (default 7).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.benchmarks.common import fresh_bench_folder

RESULTS = Path(".bench/results")
REPEATS = int(os.environ.get("RADAR_BENCH_CLI_REPEATS", "7"))
UNREACHABLE = '[[instances]]\nname = "gone"\ndsn = "postgresql://radar@127.0.0.1:1/postgres"\n'


def commands(base: Path) -> dict[str, tuple[list[str], int]]:
    from tests.support.lakes import write_week_lake

    fleet_file = base / "fleet.toml"
    fleet_file.write_text(UNREACHABLE)
    py = sys.executable
    lake = str(base / "lake")
    sql_lake = base / "sql-lake"
    write_week_lake(sql_lake)
    sql = [py, "-m", "jobs.cli.main", "--lake", str(sql_lake), "sql", "--format", "csv"]
    return {
        "python -c pass": ([py, "-c", "pass"], 0),
        "radar --help": ([py, "-m", "jobs.cli.main", "--help"], 0),
        "radar snapshot --help": ([py, "-m", "jobs.cli.main", "snapshot", "--help"], 0),
        "radar snapshot (unreachable instance)": (
            [
                py,
                "-m",
                "jobs.cli.main",
                "--lake",
                lake,
                "--fleet-file",
                str(fleet_file),
                "snapshot",
                "--format",
                "json",
            ],
            3,
        ),
        "radar sql 'select 1'": ([*sql, "select 1"], 0),
        "radar sql (lake_summary: 3 views)": ([*sql, "select count(*) from lake_summary"], 0),
        "radar sql (duckdb_views(): every view)": ([*sql, "select count(*) from duckdb_views()"], 0),
    }


def timed(argv: list[str], expected: int, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != expected:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}, expected {expected}: {done.stderr[-500:]}")
    return elapsed


def heaviest_imports(argv: list[str], env: dict[str, str], top: int = 8) -> list[tuple[str, float]]:
    """Top-level imports (as `-X importtime` reports them) by cumulative milliseconds."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, env=env)
    found = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", line)
        if match and not match.group(2):  # top level: no nesting indent
            found.append((match.group(3), int(match.group(1)) / 1000))
    return sorted(found, key=lambda item: -item[1])[:top]


def main() -> None:
    base = fresh_bench_folder("cli")
    env = {k: v for k, v in os.environ.items() if k != "RADAR_CONFIG"}  # the built-in settings only
    runs = commands(base)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for argv, code in runs.values():  # warm the OS file cache and the bytecode caches once
        timed(argv, code, env)
    for _ in range(REPEATS):
        for name, (argv, code) in runs.items():
            samples[name].append(timed(argv, code, env))
    baseline = statistics.median(samples["python -c pass"])
    print(f"{REPEATS} runs each, interleaved; wall time of a fresh process")
    print(f"{'command':<40} {'median ms':>10} {'min-max ms':>16} {'x python -c pass':>17}")
    report: dict[str, object] = {"repeats": REPEATS, "commands": {}}
    for name, values in samples.items():
        median = statistics.median(values)
        spread = f"{min(values) * 1000:.0f}-{max(values) * 1000:.0f}"
        ratio = median / baseline
        print(f"{name:<40} {median * 1000:>10.0f} {spread:>16} {ratio:>17.1f}")
        report["commands"][name] = {  # type: ignore[index]
            "median_s": round(median, 4),
            "min_s": round(min(values), 4),
            "max_s": round(max(values), 4),
            "ratio_to_python": round(ratio, 2),
        }
    snapshot_argv = runs["radar snapshot (unreachable instance)"][0]
    imports = heaviest_imports(snapshot_argv, env)
    print("radar snapshot, heaviest top-level imports (cumulative ms, one run):")
    for module, ms in imports:
        print(f"  {module:<36} {ms:>8.0f}")
    report["snapshot_imports_ms"] = dict(imports)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cli.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
