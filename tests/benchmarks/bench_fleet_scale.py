"""Fleet scale (issue 14): collection-side writes, the samples job, one full detection pass and one shard's
samples run on a simulated fleet, with each leg's wall time and peak memory.

Shape: the issue's 1,000 instances x 1,000 statements x 120 one-minute snapshots by default (120 million
statement_snapshots rows, about 240,000 files); shrink it with BENCH_FLEET_SCALE_INSTANCES,
BENCH_FLEET_SCALE_STATEMENTS, BENCH_FLEET_SCALE_MINUTES. Every leg runs in its own spawned interpreter, so
its peak RSS is its own: the child reports ``ru_maxrss`` of itself, and the parent polls the child's
``/proc/<pid>/status`` (VmRSS, VmHWM) to stop a leg past BENCH_FLEET_SCALE_MAX_RSS_GIB (default 10) or
BENCH_FLEET_SCALE_MAX_MINUTES (default 30): a leg the machine cannot hold is a result ("stopped"), not a
crash of the benchmark or of the machine's other work. Legs, per lake backend (see ``BACKENDS``):

- write (ours): ``write_fleet(fast=True)``, the collector's bytes and names (a test compares them with the
  collector's writers), generation included: rows/s, files, bytes;
- write peers on the first BENCH_FLEET_SCALE_PEER_INSTANCES instances (default 20): plain
  ``pl.DataFrame.write_parquet`` (zstd) of the same frames into the same layout (the peer of
  ``bench_fleet_sim``), ``write_fleet(fast=True)`` on the same subset (the ratio is taken on equal rows) and
  ``write_fleet()`` through the collector's own writers (conform and fsync per file);
- one shard: with BENCH_FLEET_SCALE_SHARDS shards (default 8, ``jobs.collect.shards.shard_of``), what the
  Dagster ``query_samples`` run of shard 0 does on a lake without samples: ``run_samples_per_instance``
  (append mode, so each instance without a frontier is rebuilt, the samples lock taken per instance);
- samples: ``run_samples_job(mode="rebuild")`` over the whole lake (it replaces the shard's samples too);
- detection: ``run_detection(incremental=False, rebuild_samples=False)``, one full pass, over lakes of the
  first N instances (BENCH_FLEET_SCALE_DETECTION_INSTANCES, default 10,20), of shard 0's instances and of
  the whole fleet, smallest first; then shard 0's sharded detection as Dagster runs it (jobs.pipeline.sharded:
  phase 1, its candidates; phase 2, its detection run), each phase its own leg, on the whole lake. The
  smaller lakes hold hard links to those instances' samples and texts, and every deploy. A
  detection leg whose peak RSS, projected linearly in instances from the detection legs already
  measured, is past the memory cap is skipped and reported with the projection (its memory grows with
  the fleet: at 50 instances the whole-fleet pass reached the 10 GiB cap after 71 s).

Results: a table on stdout and .bench/results/fleet_scale.json (and fleet_scale-<shape>.json). The work
folder (.bench/fleet-scale, about 0.12 GB per million snapshot rows) is removed at the end unless
BENCH_FLEET_SCALE_KEEP=1.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import resource
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobs.collect.shards import names_in_shards
from jobs.local.simulate.simulated_fleet import FleetShape, instance_name

BENCH_DIR = Path(".bench")
RESULTS_DIR = BENCH_DIR / "results"
WORK = BENCH_DIR / "fleet-scale"
ISSUE_SHAPE = (1000, 1000, 120)
"""The issue's shape: instances, statements, one-minute snapshots."""
GIB = 1024**3


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(f"BENCH_FLEET_SCALE_{name}", default))


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_FLEET_SCALE_{name}", default))


def shape() -> FleetShape:
    """The simulated fleet; ``regressions`` 2 so the detection pass has something true to find."""
    return FleetShape(
        instances=_env_int("INSTANCES", ISSUE_SHAPE[0]),
        statements=_env_int("STATEMENTS", ISSUE_SHAPE[1]),
        minutes=_env_int("MINUTES", ISSUE_SHAPE[2]),
        seed=20261202,
        regressions=2,
    )


# ---------------------------------------------------------------------------------------------------------
# Lake backends: the lake root is the one thing a backend decides.


@dataclass(frozen=True)
class LakeBackend:
    """Where a leg's lake lives. ``root`` maps the run's work folder to the lake root the jobs are given;
    ``subset_lake`` builds a lake holding only some instances' samples (for the shard-sized detection)."""

    name: str
    root: Callable[[Path], str]
    subset_lake: Callable[[str, str, list[str]], str] | None


def _local_subset_lake(root: str, target: str, instances: list[str]) -> str:
    """A local lake of ``instances``' samples and texts (hard links, no copy) and every deploy event."""
    from jobs.schemas.collected import DEPLOY_EVENTS, QUERY_SAMPLES, QUERY_TEXTS

    source, dest = Path(root), Path(target)
    shutil.rmtree(dest, ignore_errors=True)
    for table in (QUERY_SAMPLES.name, QUERY_TEXTS.name):
        for name in instances:
            folder = source / table / f"instance={name}"
            if folder.exists():
                shutil.copytree(folder, dest / table / f"instance={name}", copy_function=os.link)
    if (source / DEPLOY_EVENTS.name).exists():
        shutil.copytree(source / DEPLOY_EVENTS.name, dest / DEPLOY_EVENTS.name, copy_function=os.link)
    return str(dest)


BACKENDS: list[LakeBackend] = [
    LakeBackend("local disk", lambda work: str(work / "lake"), _local_subset_lake),
    # The local object store is not a backend here: moto's S3 server holds a bucket in memory, which a lake of
    # this shape (14 GB) would exhaust; bench_object_store compares both backends on a smaller fleet.
]


def lake_arg(root: str) -> Any:
    """The lake root as the jobs take it: a Path for a local folder (the one place a URL root would be
    handled differently)."""
    return Path(root)


# ---------------------------------------------------------------------------------------------------------
# Legs (each runs in its own interpreter; module-level so a spawned child can import them).


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _bytes_under(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def leg_write(fleet: FleetShape, root: str, fast: bool) -> dict[str, Any]:
    from jobs.local.simulate.writer import write_fleet

    shutil.rmtree(lake_arg(root), ignore_errors=True)
    report = write_fleet(lake_arg(root), fleet, fast=fast)
    return {
        "seconds": report.seconds,
        "generate_seconds": report.generate_seconds,
        "rows": report.snapshot_rows,
        "files": report.files,
        "bytes": report.bytes_written,
    }


def leg_plain_write_parquet(fleet: FleetShape, root: str) -> dict[str, Any]:
    """The peer: each snapshot's frames written with polars' own writer into the collector's layout (the
    fleet-sim benchmark's peer, one home)."""
    from tests.benchmarks.bench_fleet_sim import run_plain_polars

    result = run_plain_polars(fleet, root)
    return {k: result[k] for k in ("seconds", "rows", "files", "bytes")}


def leg_shard_samples(root: str, shard: int, shard_count: int) -> dict[str, Any]:
    """What Dagster's query_samples run of one shard does on a lake without samples yet."""
    from jobs.collect.shards import names_in_shards
    from jobs.detect.config import SampleConfig
    from jobs.detect.samples_job import lake_instances, run_samples_per_instance

    names = names_in_shards(lake_instances(lake_arg(root)), [shard], shard_count)
    report = run_samples_per_instance(lake_arg(root), SampleConfig(), names, mode="append")
    return _samples_figures(report)


def _samples_figures(report: Any) -> dict[str, Any]:
    """What a samples leg reports, from the job's report."""
    return {
        "seconds": report.seconds,
        "rows": report.snapshot_rows,
        "sample_rows": report.sample_rows,
        "instances": report.instances,
        "files": report.files_written,
    }


def leg_samples(root: str) -> dict[str, Any]:
    from jobs.detect.samples_job import run_samples_job

    report = run_samples_job(lake_arg(root), mode="rebuild")
    dropped = int(report.dropped_counts["count"].sum()) if report.dropped_counts.height else 0
    return {**_samples_figures(report), "dropped": dropped}


def leg_detection(root: str, fleet: FleetShape) -> dict[str, Any]:
    """One full detection pass over the samples already in the lake (the samples leg's work not redone)."""
    from jobs.detect.verdicts import DETECTED
    from jobs.lake.io import read_table
    from jobs.pipeline.detection import DetectionConfig, run_detection
    from jobs.schemas.collected import QUERY_SAMPLES

    sample_rows = read_table(lake_arg(root), QUERY_SAMPLES, lambda f: f.select("queryid")).height
    config = DetectionConfig(incremental=False, rebuild_samples=False)
    started = time.perf_counter()
    outcome = run_detection(lake_arg(root), config, now=fleet.end + timedelta(minutes=1))
    seconds = time.perf_counter() - started
    detected = [
        frame.filter(frame["status"] == DETECTED).height if "status" in frame.columns else 0
        for frame in (outcome.regressions, outcome.unannounced)
    ]
    return {
        "seconds": seconds,
        "rows": sample_rows,
        "deploy_results": outcome.regressions.height,
        "unannounced_results": outcome.unannounced.height,
        "detected_deploy": detected[0],
        "detected_unannounced": detected[1],
    }


def leg_shard_detection(root: str, fleet: FleetShape, shard_count: int, phase: int) -> dict[str, Any]:
    """One phase of shard 0's sharded detection pass (jobs.pipeline.sharded) on the whole lake, full: phase 1
    records its candidates and change points, phase 2 is its detection run reusing them (the other shards'
    candidates are not recorded here: their count does not change the pass's cost, and without them its
    verdicts are the shard's own full pass's, which the summary compares)."""
    import polars as pl

    from jobs.detect.verdicts import DETECTED
    from jobs.lake.io import read_table
    from jobs.pipeline.detection import DetectionConfig
    from jobs.pipeline.sharded import record_shard_candidates, run_shard_detection, shard_instances
    from jobs.schemas.collected import QUERY_SAMPLES

    names = list(shard_instances(lake_arg(root), 0, shard_count))
    rows = read_table(
        lake_arg(root), QUERY_SAMPLES, lambda f: f.filter(pl.col("instance").is_in(names)).select("queryid")
    ).height
    config = DetectionConfig(incremental=False, rebuild_samples=False)
    at = fleet.end + timedelta(minutes=1)
    started = time.perf_counter()
    if phase == 1:
        recorded = record_shard_candidates(lake_arg(root), config, 0, shard_count, now=at)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "rows": rows, "instances": recorded.instances, **recorded.candidates}
    result = run_shard_detection(lake_arg(root), config, 0, shard_count, now=at + timedelta(seconds=1))
    seconds = time.perf_counter() - started
    outcome = result.outcome
    return {
        "seconds": seconds,
        "rows": rows,
        "instances": result.instances,
        "change_point_searches_reused": result.memo.hits,
        "change_point_searches_run": result.memo.misses,
        "deploy_results": outcome.regressions.height,
        "unannounced_results": outcome.unannounced.height,
        "detected_deploy": outcome.regressions.filter(outcome.regressions["status"] == DETECTED).height,
        "detected_unannounced": outcome.unannounced.filter(outcome.unannounced["status"] == DETECTED).height,
    }


def _child(conn: Any, function: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> None:
    try:
        result = function(*args)
        result["peak_rss_mib"] = _peak_rss_mib()
        conn.send(("ok", result))
    except BaseException as exc:  # the parent reports it as the leg's outcome
        conn.send(("error", repr(exc)))
    finally:
        conn.close()


def _proc_status_kib(pid: int) -> dict[str, int]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def run_leg(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``function(*args)`` in a fresh interpreter, stopped past the memory or time cap (then reported with
    ``stopped``, the RSS reached and the seconds run). Peak RSS: the child's own ru_maxrss, or the highest
    VmHWM the parent saw when the child was stopped."""
    cap_kib = _env_float("MAX_RSS_GIB", 10.0) * GIB / 1024
    cap_s = _env_float("MAX_MINUTES", 30.0) * 60
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, function, args))
    started = time.perf_counter()
    child.start()
    send.close()
    seen = {"hwm_kib": 0}
    stopped: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            status = _proc_status_kib(child.pid or 0)
            seen["hwm_kib"] = max(seen["hwm_kib"], status.get("VmHWM", 0), status.get("VmRSS", 0))
            elapsed = time.perf_counter() - started
            if status.get("VmRSS", 0) > cap_kib or elapsed > cap_s:
                why = "memory" if status.get("VmRSS", 0) > cap_kib else "time"
                stopped.append(f"stopped at the {why} cap after {elapsed:.0f} s")
                child.kill()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    message: tuple[str, Any] | None = None
    try:
        message = receive.recv()
    except EOFError:
        message = None
    child.join()
    done.set()
    watcher.join()
    wall = time.perf_counter() - started
    if message is not None and message[0] == "ok":
        result = dict(message[1])
        result["peak_rss_mib"] = max(result["peak_rss_mib"], seen["hwm_kib"] / 1024)
        result["process_wall_s"] = wall
        return result
    reason = stopped[0] if stopped else (message[1] if message else f"child exit code {child.exitcode}")
    return {"stopped": reason, "seconds": wall, "peak_rss_mib": seen["hwm_kib"] / 1024, "rows": 0}


# ---------------------------------------------------------------------------------------------------------
# The run


def _drop_caches_hint() -> None:
    """Flush dirty pages between legs so one leg's writeback is not charged to the next."""
    os.sync()


def run_backend(backend: LakeBackend, fleet: FleetShape, work: Path) -> dict[str, dict[str, Any]]:
    peer_instances = min(fleet.instances, _env_int("PEER_INSTANCES", 20))
    collector_instances = min(fleet.instances, _env_int("COLLECTOR_INSTANCES", 5))
    shard_count = _env_int("SHARDS", 8)
    root = backend.root(work)
    subset = replace(fleet, instances=peer_instances, regressions=0)
    results: dict[str, dict[str, Any]] = {}

    def leg(name: str, function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        print(f"  [{backend.name}] {name} ...", flush=True)
        result = run_leg(function, *args)
        result["backend"] = backend.name
        results[name] = result
        _drop_caches_hint()
        print(f"  [{backend.name}] {name}: {_summary(result)}", flush=True)
        return result

    leg("write: write_fleet(fast=True), whole fleet (ours)", leg_write, fleet, root, True)
    peer_root = str(work / "peer")
    leg(f"write: write_fleet(fast=True), {peer_instances} inst (ours)", leg_write, subset, peer_root, True)
    leg(
        f"write: plain write_parquet, {peer_instances} inst (peer)",
        leg_plain_write_parquet,
        subset,
        peer_root,
    )
    leg(
        f"write: collector writers, {collector_instances} inst",
        leg_write,
        replace(subset, instances=collector_instances),
        peer_root,
        False,
    )
    shutil.rmtree(peer_root, ignore_errors=True)
    shard = leg(f"samples: shard 0 of {shard_count} (per instance)", leg_shard_samples, root, 0, shard_count)
    shard["shard_count"] = shard_count
    leg("samples: run_samples_job rebuild, whole fleet", leg_samples, root)
    everyone = [instance_name(i) for i in range(fleet.instances)]
    detections: list[tuple[str, list[str], str]] = []
    if backend.subset_lake is not None:
        for size in detection_sizes(fleet.instances):
            detections.append((f"detection: first {size} instances, full pass", everyone[:size], "subset"))
        shard_names = names_in_shards(everyone, [0], shard_count)
        detections.append((f"detection: shard 0 of {shard_count}, full pass", shard_names, "subset"))
    detections.append(("detection: whole fleet, full pass", everyone, "whole"))
    measured: list[tuple[int, float]] = []
    timed: list[tuple[int, float]] = []
    for name, names, kind in sorted(detections, key=lambda d: len(d[1])):
        projected = project_linear(measured, len(names))
        if projected is not None and projected > _env_float("MAX_RSS_GIB", 10.0) * 1024:
            results[name] = {
                "skipped": f"projected {projected:,.0f} MiB > cap (linear fit over {len(measured)} "
                f"measured detection legs)",
                "projected_peak_rss_mib": projected,
                "projected_seconds": project_linear(timed, len(names)),
                "instances": len(names),
                "backend": backend.name,
            }
            print(f"  [{backend.name}] {name}: SKIPPED, {results[name]['skipped']}", flush=True)
            continue
        lake = root
        if kind == "subset" and backend.subset_lake is not None:
            lake = backend.subset_lake(root, str(work / "subset-lake"), names)
        result = leg(name, leg_detection, lake, fleet)
        result["instances"] = len(names)
        if "stopped" not in result:
            measured.append((len(names), result["peak_rss_mib"]))
            timed.append((len(names), result["seconds"]))
    # The sharded detection as Dagster runs it: shard 0's two phases on the whole lake (its instances only).
    shard_names = names_in_shards(everyone, [0], shard_count)
    projected = project_linear(measured, len(shard_names))
    for phase in (1, 2):
        name = f"detection: shard 0 of {shard_count}, sharded, phase {phase}"
        if projected is not None and projected > _env_float("MAX_RSS_GIB", 10.0) * 1024:
            results[name] = {"skipped": f"projected {projected:,.0f} MiB > cap", "backend": backend.name}
            continue
        leg(name, leg_shard_detection, root, fleet, shard_count, phase)
    return results


def detection_sizes(instances: int) -> list[int]:
    """Fleet sizes (first N instances) the detection pass is also measured at, to see how its memory grows
    (BENCH_FLEET_SCALE_DETECTION_INSTANCES, comma separated; default 10,20)."""
    raw = os.environ.get("BENCH_FLEET_SCALE_DETECTION_INSTANCES", "10,20")
    return sorted({int(x) for x in raw.split(",") if x.strip() and 0 < int(x) < instances})


def project_linear(points: list[tuple[int, float]], n: int) -> float | None:
    """Least-squares line through (instances, peak MiB), evaluated at ``n``; None below two points."""
    if len({x for x, _ in points}) < 2:
        return None
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y + slope * (n - mean_x)


def _summary(r: dict[str, Any]) -> str:
    if "stopped" in r:
        return f"STOPPED ({r['stopped']}), peak {r['peak_rss_mib']:,.0f} MiB"
    return f"{r['seconds']:.1f} s, {r.get('rows', 0):,} rows, peak {r['peak_rss_mib']:,.0f} MiB"


def print_table(fleet: FleetShape, results: dict[str, dict[str, Any]]) -> None:
    print(
        f"{'leg':58} {'inst':>5} {'rows':>12} {'files':>8} {'GB':>6} {'seconds':>8} {'rows/s':>10} "
        f"{'peak MiB':>9}"
    )
    for name, r in results.items():
        if "skipped" in r:
            print(f"{name:58} {r['instances']!s:>5} {'SKIPPED':>12}  {r['skipped']}")
            continue
        if "stopped" in r:
            print(
                f"{name:58} {'':>5} {'':>12} {'':>8} {'':>6} {r['seconds']:>8.1f} {'STOPPED':>10} "
                f"{r['peak_rss_mib']:>9,.0f}  {r['stopped']}"
            )
            continue
        r["rows_per_second"] = r["rows"] / r["seconds"] if r["seconds"] else 0.0
        gb = f"{r['bytes'] / 1e9:>6.2f}" if "bytes" in r else f"{'':>6}"
        inst = r.get("instances", "")
        print(
            f"{name:58} {inst!s:>5} {r['rows']:>12,} {r.get('files', 0):>8,} {gb} {r['seconds']:>8.1f} "
            f"{r['rows_per_second']:>10,.0f} {r['peak_rss_mib']:>9,.0f}"
        )


def write_ratio(results: dict[str, dict[str, Any]]) -> float | None:
    ours = next(
        (
            r
            for n, r in results.items()
            if n.startswith("write: write_fleet(fast=True), ") and "inst (ours)" in n and "stopped" not in r
        ),
        None,
    )
    peer = next((r for n, r in results.items() if "(peer)" in n and "stopped" not in r), None)
    if ours is None or peer is None:
        return None
    return (ours["rows"] / ours["seconds"]) / (peer["rows"] / peer["seconds"])


def main() -> None:
    fleet = shape()
    issue = (fleet.instances, fleet.statements, fleet.minutes) == ISSUE_SHAPE
    which = "the issue shape" if issue else "NOT the issue shape 1000 x 1000 x 120: a smaller run"
    print(
        f"shape: {fleet.instances} instances x {fleet.statements} statements x {fleet.minutes} one-minute "
        f"snapshots ({which})"
        f"; caps per leg {_env_float('MAX_RSS_GIB', 10.0):g} GiB, {_env_float('MAX_MINUTES', 30.0):g} min; "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    started = time.perf_counter()
    everything: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        for name, result in run_backend(backend, fleet, WORK).items():
            everything[f"{backend.name}: {name}" if len(BACKENDS) > 1 else name] = result
        if os.environ.get("BENCH_FLEET_SCALE_KEEP") != "1":
            shutil.rmtree(WORK, ignore_errors=True)
    total = time.perf_counter() - started
    print_table(fleet, everything)
    ratio = write_ratio(everything)
    if ratio is not None:
        print(f"write_fleet(fast) / plain write_parquet on the same instances: throughput x{ratio:.2f}")
    for name, r in everything.items():
        if name.startswith("detection") and "deploy_results" in r:
            print(
                f"{name}: {r['deploy_results']:,} deploy results ({r['detected_deploy']} detected), "
                f"{r['unannounced_results']:,} unannounced ({r['detected_unannounced']} detected); "
                f"{fleet.regressions} injected in the fleet"
            )
    print(f"total wall time {total:.0f} s")
    payload = {
        "shape": fleet.as_json(),
        "issue_shape": issue,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "results": everything,
        "throughput_ratio_vs_plain_write_parquet": ratio,
        "total_seconds": total,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, default=str)
    (RESULTS_DIR / "fleet_scale.json").write_text(text)
    (RESULTS_DIR / f"fleet_scale-{fleet.instances}x{fleet.statements}x{fleet.minutes}.json").write_text(text)


if __name__ == "__main__":
    main()
