"""`make bench`: run every tests/benchmarks/bench_*.py module's ``main()`` in one process, in name order.

Each benchmark prints its own table and writes JSON under .bench/results/. Pass module names to run a subset:
``python -m tests.benchmarks.run_all changepoint collector``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import tests.benchmarks as package


def main(argv: list[str]) -> int:
    wanted = set(argv)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("bench_"))
    failures = 0
    for name in names:
        if wanted and name.removeprefix("bench_") not in wanted and name not in wanted:
            continue
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        try:
            importlib.import_module(f"tests.benchmarks.{name}").main()
        except Exception as exc:
            failures += 1
            print(f"{name} FAILED: {exc!r}", flush=True)
        print(f"=== {name}: {time.perf_counter() - started:.1f} s ===", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
