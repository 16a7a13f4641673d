"""The lake on a local object store vs on the local disk (issue 14): the same simulated fleet written, its
samples built and one full detection pass run on each, in the same run, each leg in its own interpreter.

The object store is moto's S3 server on loopback (in this process; the legs reach it through
``AWS_ENDPOINT_URL`` like any bucket). It keeps objects in memory and answers in Python, so the ratio is an
upper bound of the object-store overhead of the radar's own code paths (request counts, the DuckDB
whole-file cache), not a prediction of S3's latency. Shape: BENCH_OBJECT_STORE_INSTANCES (10) ×
BENCH_OBJECT_STORE_STATEMENTS (1000) × BENCH_OBJECT_STORE_MINUTES (120) one-minute snapshots: the fleet
benchmark's statements and hours on fewer instances, because the moto server holds the bucket in memory.
Results: a table on stdout and .bench/results/object_store.json.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from jobs.local.simulate.simulated_fleet import FleetShape

BENCH_DIR = Path(".bench")
RESULTS = BENCH_DIR / "results" / "object_store.json"


def shape() -> FleetShape:
    def env(name: str, default: int) -> int:
        return int(os.environ.get(f"BENCH_OBJECT_STORE_{name}", default))

    return FleetShape(
        instances=env("INSTANCES", 10),
        statements=env("STATEMENTS", 1000),
        minutes=env("MINUTES", 120),
        seed=20261202,
        regressions=2,
    )


def run_pipeline(root_text: str, fleet: FleetShape) -> dict[str, Any]:
    """In a fresh interpreter: write the fleet (the collector's bytes), rebuild the samples, one full
    detection pass, one DuckDB view query; wall time of each and the process's peak RSS."""
    import logging

    from jobs.detect.config import SampleConfig
    from jobs.detect.samples_job import run_samples_job
    from jobs.lake.storage import lake_path
    from jobs.lake.views import query
    from jobs.local.simulate.writer import write_fleet
    from jobs.pipeline.detection import DetectionConfig, run_detection

    logging.disable(logging.WARNING)
    root = lake_path(root_text)
    out: dict[str, Any] = {}
    began = time.perf_counter()
    report = write_fleet(root, fleet, fast=True)
    out["write_s"] = time.perf_counter() - began
    out["rows"], out["files"], out["bytes"] = report.snapshot_rows, report.files, report.bytes_written
    began = time.perf_counter()
    samples = run_samples_job(root, SampleConfig(), mode="rebuild")
    out["samples_s"] = time.perf_counter() - began
    out["sample_rows"] = samples.sample_rows
    began = time.perf_counter()
    outcome = run_detection(root, DetectionConfig(incremental=False, rebuild_samples=False), now=fleet.end)
    out["detection_s"] = time.perf_counter() - began
    out["detected"] = outcome.detected.height
    began = time.perf_counter()
    out["view_rows"] = int(query(root, "select count(*) as n from query_samples")["n"][0])
    out["view_s"] = time.perf_counter() - began
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


def in_fresh_process(function: Any, *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def main() -> None:
    from tests.support.object_store import new_bucket, s3_server

    fleet = shape()
    local = BENCH_DIR / "object-store" / "lake"
    shutil.rmtree(local.parent, ignore_errors=True)
    results: dict[str, dict[str, Any]] = {}
    results["local disk (peer)"] = in_fresh_process(run_pipeline, str(local), fleet)
    shutil.rmtree(local.parent, ignore_errors=True)
    with s3_server():
        bucket = new_bucket()
        results["local object store (moto S3)"] = in_fresh_process(run_pipeline, str(bucket), fleet)
    peer, ours = results["local disk (peer)"], results["local object store (moto S3)"]
    legs = ("write_s", "samples_s", "detection_s", "view_s")
    ratios = {leg: ours[leg] / peer[leg] for leg in legs}
    same = {k: ours[k] == peer[k] for k in ("rows", "files", "sample_rows", "detected", "view_rows")}
    print(f"shape: {fleet.instances} instances x {fleet.statements} statements x {fleet.minutes} minutes")
    print(f"{'backend':32} {'write s':>8} {'samples s':>10} {'detect s':>9} {'view s':>7} {'RSS MiB':>8}")
    for name, r in results.items():
        print(
            f"{name:32} {r['write_s']:8.1f} {r['samples_s']:10.1f} {r['detection_s']:9.1f} "
            f"{r['view_s']:7.1f} {r['peak_rss_mib']:8.0f}"
        )
    print(
        "object store / local disk: "
        + ", ".join(f"{k.removesuffix('_s')} ×{v:.2f}" for k, v in ratios.items())
    )
    print(f"same rows, files, samples, detections and view rows on both: {same}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "shape": fleet.as_json(),
                "results": results,
                "ratio_object_store_vs_local": ratios,
                "same": same,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
