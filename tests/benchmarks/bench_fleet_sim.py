"""Fleet simulator throughput: generating and writing a collector-shaped lake, then the samples job on it.

Shape (default 100 instances x 1,000 statements x 60 one-minute snapshots = 6 million statement_snapshots
rows, one file per snapshot per instance as the collector writes them); shrink or grow it with
RADAR_BENCH_SIM_INSTANCES, RADAR_BENCH_SIM_STATEMENTS, RADAR_BENCH_SIM_MINUTES. Contenders, each in a fresh
process (its peak RSS is its own), all on the same generated rows:

- generation only (``jobs.local.simulate.simulated_fleet.simulate_fleet``, every snapshot sliced, nothing
written);
- ``write_fleet(fast=True)``: the collector's bytes and names, conformed once per instance, no fsync;
- peer: plain ``pl.DataFrame.write_parquet`` (zstd) of the same per-snapshot frames into the same layout
  (no schema metadata, no temp file and rename);
- ``write_fleet()`` through the collector's own writers (conform per file, fsync per file), on the first
  RADAR_BENCH_SIM_COLLECTOR_INSTANCES instances (default 5: it is the slow path);
- ``run_samples_job`` (rebuild) on the simulated lake: snapshot rows per second.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from jobs.local.simulate.simulated_fleet import FleetShape

BENCH_DIR = Path(".bench")
RESULTS = BENCH_DIR / "results" / "fleet_sim.json"


def shape() -> FleetShape:
    return FleetShape(
        instances=int(os.environ.get("RADAR_BENCH_SIM_INSTANCES", 100)),
        statements=int(os.environ.get("RADAR_BENCH_SIM_STATEMENTS", 1000)),
        minutes=int(os.environ.get("RADAR_BENCH_SIM_MINUTES", 60)),
        seed=20261202,
        regressions=0,
    )


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _bytes_under(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def run_generate(fleet: FleetShape) -> dict[str, Any]:
    from jobs.local.simulate.simulated_fleet import simulate_fleet

    started = time.perf_counter()
    rows = 0
    for instance in simulate_fleet(fleet):
        for snap in instance.snapshots():
            rows += snap.statements.height
    return {"seconds": time.perf_counter() - started, "rows": rows, "peak_rss_mib": _peak_rss_mib()}


def run_write(fleet: FleetShape, out: str, fast: bool) -> dict[str, Any]:
    from jobs.local.simulate.writer import write_fleet

    shutil.rmtree(out, ignore_errors=True)
    report = write_fleet(Path(out), fleet, fast=fast)
    return {
        "seconds": report.seconds,
        "rows": report.snapshot_rows,
        "files": report.files,
        "bytes": report.bytes_written,
        "peak_rss_mib": _peak_rss_mib(),
    }


def run_plain_polars(fleet: FleetShape, out: str) -> dict[str, Any]:
    from jobs.collect.collector import snapshot_stem
    from jobs.local.simulate.simulated_fleet import simulate_fleet

    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    rows = files = 0
    for instance in simulate_fleet(fleet):
        for snap in instance.snapshots():
            day = snap.captured_at.date().isoformat()
            stem = snapshot_stem(snap.captured_at, {"instance": snap.instance, **snap.run})
            tables = [("snapshot_runs", pl.DataFrame([snap.run]))]
            if not snap.failed:
                tables.append(("statement_snapshots", snap.statements))
                if snap.texts.height:
                    tables.append(("query_texts", snap.texts))
            for table, frame in tables:
                folder = Path(out) / table / f"instance={snap.instance}" / f"date={day}"
                folder.mkdir(parents=True, exist_ok=True)
                frame.write_parquet(folder / f"{stem}.parquet", compression="zstd")
                files += 1
            rows += snap.statements.height if not snap.failed else 0
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "rows": rows,
        "files": files,
        "bytes": _bytes_under(Path(out)),
        "peak_rss_mib": _peak_rss_mib(),
    }


def run_samples(root: str, out: str) -> dict[str, Any]:
    from jobs.detect.samples_job import run_samples_job

    shutil.rmtree(out, ignore_errors=True)
    report = run_samples_job(Path(root), out_root=Path(out), mode="rebuild")
    return {
        "seconds": report.seconds,
        "rows": report.snapshot_rows,
        "sample_rows": report.sample_rows,
        "dropped": int(report.dropped_counts["count"].sum()),
        "peak_rss_mib": report.peak_rss_mib,
    }


def in_fresh_process(function: Any, *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def main() -> None:
    fleet = shape()
    collector_fleet = replace(
        fleet, instances=min(fleet.instances, int(os.environ.get("RADAR_BENCH_SIM_COLLECTOR_INSTANCES", 5)))
    )
    base = BENCH_DIR / "fleet-sim"
    lake, peer, slow, samples_out = base / "lake", base / "plain", base / "collector", base / "samples"
    results: dict[str, dict[str, Any]] = {}
    results["generate only (simulate_fleet)"] = in_fresh_process(run_generate, fleet)
    results["write_fleet(fast=True) (ours)"] = in_fresh_process(run_write, fleet, str(lake), True)
    os.sync()
    results["plain write_parquet (peer)"] = in_fresh_process(run_plain_polars, fleet, str(peer))
    shutil.rmtree(peer, ignore_errors=True)
    os.sync()
    results[f"write_fleet() collector writers, {collector_fleet.instances} inst"] = in_fresh_process(
        run_write, collector_fleet, str(slow), False
    )
    shutil.rmtree(slow, ignore_errors=True)
    results["run_samples_job rebuild on the lake"] = in_fresh_process(
        run_samples, str(lake), str(samples_out)
    )
    shutil.rmtree(base, ignore_errors=True)

    print(f"shape: {fleet.instances} instances x {fleet.statements} statements x {fleet.minutes} minutes")
    print(
        f"{'contender':48} {'rows':>11} {'files':>7} {'seconds':>8} {'rows/s':>11} {'MB/s':>7} {'RSS MiB':>8}"
    )
    for name, r in results.items():
        r["rows_per_second"] = r["rows"] / r["seconds"]
        if "bytes" in r:
            r["mb_per_second"] = r["bytes"] / 1e6 / r["seconds"]
        mbs = f"{r['mb_per_second']:>7.1f}" if "bytes" in r else f"{'':>7}"
        print(
            f"{name:48} {r['rows']:>11,} {r.get('files', 0):>7,} {r['seconds']:>8.1f} "
            f"{r['rows_per_second']:>11,.0f} {mbs} {r['peak_rss_mib']:>8,.0f}"
        )
    ours = results["write_fleet(fast=True) (ours)"]
    plain = results["plain write_parquet (peer)"]
    ratio = ours["rows_per_second"] / plain["rows_per_second"]
    print(f"write_fleet(fast) / plain write_parquet: throughput x{ratio:.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"shape": fleet.as_json(), "results": results, "throughput_ratio_vs_plain_write_parquet": ratio},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
