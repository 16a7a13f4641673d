"""Run one change point peer over series read from a JSON file; executed by the peer's own virtualenv.

Stdlib + the peer only (it must not import the project: the peers pin numpy/scipy versions that conflict
with ours). Usage: python cp_peer_runner.py {mongodb|otava} IN.json OUT.json
IN: {"series": [[float, ...], ...]}; OUT: {"change_points": [[int, ...], ...], "seconds": [float, ...]},
change points in the peer's discovery order (the first is its most significant), seconds per series.
"""

from __future__ import annotations

import json
import sys
import time


def run_mongodb(values: list[float], seed: int) -> list[int]:
    from signal_processing_algorithms.determinism import deterministic_numpy_random
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    with deterministic_numpy_random(seed):
        return [int(i) for i in e_divisive(values, pvalue=0.05, permutations=100)]


def run_otava(values: list[float], seed: int) -> list[int]:
    from otava.analysis import compute_change_points

    change_points, _weak = compute_change_points(list(values))
    ordered = sorted(change_points, key=lambda cp: cp.stats.pvalue)
    return [int(cp.index) for cp in ordered]


def main(argv: list[str]) -> int:
    peer, source, target = argv
    runner = {"mongodb": run_mongodb, "otava": run_otava}[peer]
    runner([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 0)  # imports happen here, outside the timed calls
    with open(source) as handle:
        series = json.load(handle)["series"]
    found: list[list[int]] = []
    seconds: list[float] = []
    for number, values in enumerate(series):
        started = time.perf_counter()
        found.append(runner(values, number))
        seconds.append(time.perf_counter() - started)
    with open(target, "w") as handle:
        json.dump({"change_points": found, "seconds": seconds}, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
