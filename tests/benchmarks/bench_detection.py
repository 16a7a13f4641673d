"""Detection cost: a full run against an incremental run after 15 new minutes, at one and two days of history.

The lake (tests/benchmarks/detection_lake.py; default 20 instances x 500 queries = 10,000 series, one
snapshot a minute, 15 instance deploys per instance and day = 300 a day, 6 true regressions) is generated
once per shape and cached under ``.bench/``. Every measured run gets its own copy of the lake and its own
fresh interpreter (peak RSS via ``resource.getrusage`` of that process; wall time of ``run_detection``
alone, not of the interpreter start):

- full: the history plus the 15 new minutes, ``run_detection(lake, DetectionConfig(incremental=False),
  now=end + 15 min)``: samples rebuilt from every snapshot, every deploy and series analysed. The peer.
- incremental: ``run_detection(..., incremental=True, now=end)`` on the history (establishes the state;
  reported, not compared), then the 15 new minutes are appended (the collector's files, one per snapshot
  per instance) and ``run_detection(..., incremental=True, now=end + 15 min)`` is measured.

- reference: ``reference_pass``, one DuckDB query over the same snapshots (window LAG deltas, per-series
  count/mean/variance of interval latency): what any detector must at least do (issue 25). The full run
  is reported as a multiple of it (goal: <= 3x).
- samples peer: ``samples_peer_pass``, per instance the same LAG deltas for every counter the samples keep,
  materialized as Arrow rows (what the samples rebuild must hold; it also drops and writes): the named peer
  of the full run's samples step (its ``run_samples_job`` line in ``--profile``).
- budgeted (``--budget-mib M``): the full run within a memory budget of M MiB (jobs.pipeline.budgeted:
  chunks of instances, each pass in its own process); its peak is this process's plus its largest pass's.

Reported per history length: wall s and peak MiB of each, full / incremental (goal >= 20x), and for each
kind of run 2 days / 1 day (goal: the incremental run stays flat, about 1x). On a build whose
``DetectionConfig`` has no ``incremental`` field the incremental rows say so and only the full run is
measured. ``--profile`` (or RADAR_DETECTION_BENCH_PROFILE=1) also times each step (samples rebuild, reading,
deploy analysis, unannounced analysis, work evidence, resource regressions, contention, plan diffs, writing)
with the RSS reached during it, of the full run, the first incremental run and the first measured
incremental run; a stopped run keeps the profile of the steps it reached (the open ones marked).

Sizes: ``--quick`` (or RADAR_DETECTION_BENCH_QUICK=1: 4 instances x 100 queries, 6 h and 12 h), or
``--instances/--queries/--days`` (days: the base history; the doubled one is run too unless ``--no-double``).
Results: .bench/results/detection.json (and detection-<shape>.json) and a Markdown table on stdout.

Each measured run is stopped past 25 min or 85% of the memory available at the start (``--max-minutes``,
``--max-rss-gib``) and reported as stopped, so a run the machine cannot hold is a result, not a crash. At
10,000 series x 1 day (commit 10d4f34) a full run's memory goes to full-width copies of every sample inside
``detect_regressions``: ``fingerprinted_samples`` (RSS 4.3 -> 10.6 GiB, samples alone 4.3), the deploy windows
gathered from it and the sorts of those; the profile names the step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.benchmarks.detection_lake import TAIL_MINUTES, GeneratedLake, LakeShape, append_tail, build_lake
from tests.support.procs import PROC, process_stats

BENCH_DIR = Path(".bench")
RESULTS = BENCH_DIR / "results" / "detection.json"
WORK = BENCH_DIR / "detection-work"
GOAL_INCREMENTAL_RATIO = 20.0
"""An incremental run after 15 new minutes must be at least this many times cheaper than a full run."""
NOT_AVAILABLE = "incremental mode not available in this build"

# (module, function) wrapped by --profile: the steps of run_detection and, nested, the heavy parts of the
# analyses. A function is wrapped in every listed module that calls it by a global name; absent names are
# skipped (the code under test may have moved them).
PROFILED_STEPS: tuple[tuple[str, str], ...] = (
    ("jobs.pipeline.detection", "run_samples_job"),
    ("jobs.pipeline.detection", "read_inputs"),
    ("jobs.pipeline.detection", "read_inputs_in_scope"),
    ("jobs.pipeline.detection", "plan_run"),
    ("jobs.pipeline.detection", "read_scoped_samples"),
    ("jobs.pipeline.detection", "commit_run"),
    ("jobs.pipeline.detection", "read_activity"),
    ("jobs.pipeline.detection", "fingerprinted_samples"),
    ("jobs.pipeline.detection", "detect_regressions"),
    ("jobs.pipeline.detection", "detect_unannounced_regressions"),
    ("jobs.pipeline.detection", "attach_work_evidence"),
    ("jobs.pipeline.detection", "detect_resource_regressions"),
    ("jobs.pipeline.detection", "scoped_deploy_windows"),
    ("jobs.pipeline.detection", "deploy_resource_regressions"),
    ("jobs.pipeline.detection", "unannounced_resource_regressions"),
    ("jobs.pipeline.detection", "separate_contention"),
    ("jobs.pipeline.detection", "plan_diffs_for_regressions"),
    ("jobs.pipeline.detection", "write_run_table"),
    ("jobs.detect.work", "deploy_resource_regressions"),
    ("jobs.detect.work", "unannounced_resource_regressions"),
    ("jobs.detect.deploy_analysis", "fingerprinted_samples"),
    ("jobs.detect.unannounced", "fingerprinted_samples"),
    ("jobs.detect.work", "fingerprinted_samples"),
    ("jobs.detect.contention", "fingerprinted_samples"),
    ("jobs.detect.deploy_analysis", "deploy_window_points"),
    ("jobs.detect.work", "deploy_window_points"),
    ("jobs.detect.deploy_analysis", "_changepoint_and_welch"),
    ("jobs.detect.work", "_changepoint_and_welch"),
    ("jobs.detect.unannounced", "consecutive_segment_tests"),
    ("jobs.detect.work", "consecutive_segment_tests"),
    ("jobs.detect.contention", "merge_intervals"),
    ("jobs.detect.contention", "series_identity"),
    ("jobs.detect.contention", "series_shifts"),
    ("jobs.detect.contention", "moment_loads"),
    ("jobs.detect.contention", "instance_slowdowns"),
    ("jobs.detect.contention", "_judged_at"),
)


def incremental_supported() -> bool:
    from jobs.pipeline.detection import DetectionConfig

    return "incremental" in {f.name for f in dataclasses.fields(DetectionConfig)}


def detection_config(incremental: bool) -> Any:
    """DetectionConfig with ``incremental`` set when this build has the field (full runs only otherwise)."""
    from jobs.pipeline.detection import DetectionConfig

    if incremental_supported():
        return DetectionConfig(incremental=incremental)  # type: ignore[call-arg]
    if incremental:
        raise RuntimeError(NOT_AVAILABLE)
    return DetectionConfig()


class RssSampler:
    """Current RSS of this process sampled every few milliseconds into every open step's peak (ru_maxrss
    cannot be reset between steps, and steps nest)."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.open: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def current_mib() -> float:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        now = self.current_mib()
        for step in list(self.open):
            step["rss_mib"] = max(step["rss_mib"], now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


PROGRESS_ENV = "RADAR_DETECTION_BENCH_PROGRESS"


def _note_progress(open_steps: list[dict[str, Any]], steps: list[dict[str, Any]]) -> None:
    """The steps open right now, for the parent to name when it has to stop this run, and every step so far
    (``<progress>.steps.json``), so a stopped run keeps the profile of what it did finish."""
    path = os.environ.get(PROGRESS_ENV)
    if path:
        Path(path).write_text(
            " > ".join(f"{s['step']} (from {s['rss_start_mib']:.0f} MiB)" for s in open_steps)
        )
        Path(path).with_suffix(".steps.json").write_text(
            json.dumps([{**s, "open": any(s is o for o in open_steps)} for s in steps])
        )


def _steps_of_stopped_run(progress: Path, highest_mib: float) -> list[dict[str, Any]]:
    """The profile a stopped child left: finished steps as they were, open ones timed up to now and at the
    highest RSS the parent saw (the child could not record its last moments)."""
    path = progress.with_suffix(".steps.json")
    if not path.exists():
        return []
    steps = json.loads(path.read_text())
    for step in steps:
        if step.pop("open", False):
            step["seconds"] = time.time() - step["started_wall"]
            step["rss_mib"] = max(step["rss_mib"], highest_mib)
            step["stopped_in"] = True
        step.pop("started_wall", None)
    return steps


def _profiled(steps: list[dict[str, Any]], sampler: RssSampler) -> Callable[[], None]:
    """Wrap PROFILED_STEPS where they are looked up; returns the undo. Each call appends a step (in start
    order, with its nesting depth) holding its wall seconds and the highest RSS seen while it ran."""
    import importlib

    patched: list[tuple[Any, str, Callable[..., Any]]] = []

    def wrap(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start_mib = sampler.current_mib()
            step = {"step": name, "depth": len(sampler.open), "seconds": 0.0, "rss_start_mib": start_mib}
            step["rss_mib"] = start_mib
            step["started_wall"] = time.time()
            steps.append(step)
            sampler.open.append(step)
            _note_progress(sampler.open, steps)
            sampler.sample()
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                step["seconds"] = time.perf_counter() - started
                sampler.sample()
                sampler.open.remove(step)
                _note_progress(sampler.open, steps)
                del step["started_wall"]

        return timed

    for module_name, name in PROFILED_STEPS:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            original = getattr(module, name)
            patched.append((module, name, original))
            setattr(module, name, wrap(name, original))

    def undo() -> None:
        for module, name, original in reversed(patched):
            setattr(module, name, original)

    return undo


def measured_run(lake_root: str, now_iso: str, incremental: bool, profile: bool) -> dict[str, Any]:
    """One run_detection in this (fresh) process: wall s, peak RSS MiB, what it found, the step profile."""
    from jobs.pipeline.detection import run_detection

    config = detection_config(incremental)
    steps: list[dict[str, Any]] = []
    sampler = RssSampler() if profile else None
    undo = _profiled(steps, sampler) if sampler is not None else None
    before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    started = time.perf_counter()
    try:
        outcome = run_detection(Path(lake_root), config, now=datetime.fromisoformat(now_iso))
    finally:
        seconds = time.perf_counter() - started
        if undo is not None:
            undo()
        if sampler is not None:
            sampler.stop()
    detected = outcome.detected
    unannounced = outcome.unannounced
    return {
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "rss_before_mib": before_mib,
        "deploy_rows": outcome.regressions.height,
        "unannounced_rows": unannounced.height,
        "detected": sorted(
            {(r["instance"], r["queryid"], str(r["deployed_at"])) for r in detected.iter_rows(named=True)}
        ),
        "unannounced_detected": int((unannounced["status"] == "detected").sum()) if unannounced.height else 0,
        "sample_rows_written": outcome.samples_report.sample_rows if outcome.samples_report else None,
        "steps": steps,
    }


def budgeted_run(lake_root: str, now_iso: str, budget_mib: int) -> dict[str, Any]:
    """One full run within a memory budget (jobs.pipeline.budgeted) from this (fresh) process: wall s, this
    process's peak RSS, each chunk's pass peak (their own processes), the chunks."""
    from jobs.detect.config import MemoryConfig
    from jobs.pipeline.budgeted import run_detection_in_budget

    config = dataclasses.replace(detection_config(False), memory=MemoryConfig(budget_mib=budget_mib))
    started = time.perf_counter()
    run = run_detection_in_budget(Path(lake_root), config, now=datetime.fromisoformat(now_iso))
    seconds = time.perf_counter() - started
    here = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    passes = max(run.chunk_peak_rss_mib, default=0.0)
    helpers = helper_peaks_mib(os.getpid())
    return {
        "seconds": seconds,
        # this process, the helpers that outlive a pass (the fork server the passes are forked from, the
        # resource tracker) and the largest pass, at most at once (shared pages counted in each: an upper
        # bound)
        "peak_rss_mib": here + sum(helpers.values()) + passes,
        "coordinator_peak_rss_mib": here,
        "helpers_peak_rss_mib": helpers,
        "largest_pass_peak_rss_mib": passes,
        "chunks": [len(c) for c in run.chunks],
        "detected": sorted(
            {
                (r["instance"], r["queryid"], str(r["deployed_at"]))
                for r in run.outcome.detected.iter_rows(named=True)
            }
        ),
    }


def helper_peaks_mib(parent: int) -> dict[str, float]:
    """Peak RSS (VmHWM) of each live child process of ``parent``, by its command (Linux /proc)."""
    peaks: dict[str, float] = {}
    for pid, (_, ppid) in process_stats().items():
        if ppid != parent:
            continue
        try:
            status = (PROC / str(pid) / "status").read_text()
            command = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                name = "fork server" if "forkserver" in command else command[:60]
                peaks[name] = peaks.get(name, 0.0) + int(line.split()[1]) / 1024.0
    return peaks


def reference_pass(lake_root: str) -> dict[str, Any]:
    """The least any detector must do, in one DuckDB query (issue 25's peer): read every statement
    snapshot's series key, time, calls and total execution time, take per-interval deltas by window LAG,
    and per series the count, mean and variance of interval latency (Δtotal_exec_time / Δcalls, intervals
    with calls). Wall time and peak RSS of this process, as for the measured runs."""
    import duckdb

    files = str(Path(lake_root) / "statement_snapshots" / "**" / "*.parquet")
    started = time.perf_counter()
    connection = duckdb.connect()
    series, intervals = connection.execute(
        """
        with snapshots as (
            select instance, dbid, userid, queryid, toplevel, captured_at, calls, total_exec_time
            from read_parquet(?, hive_partitioning = true, union_by_name = true)
        ), deltas as (
            select instance, dbid, userid, queryid, toplevel,
                   calls - lag(calls) over w as calls,
                   total_exec_time - lag(total_exec_time) over w as exec_ms
            from snapshots
            window w as (partition by instance, dbid, userid, queryid, toplevel order by captured_at)
        ), per_series as (
            select instance, dbid, userid, queryid, toplevel, count(*) as n,
                   avg(exec_ms / calls) as mean_ms, var_samp(exec_ms / calls) as variance
            from deltas where calls > 0
            group by all
        )
        select count(*), sum(n) from per_series
        """,
        [files],
    ).fetchone() or (0, 0)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "series": int(series or 0),
        "intervals": int(intervals or 0),
    }


def samples_peer_pass(lake_root: str) -> dict[str, Any]:
    """The samples step's peer: per instance, one DuckDB query differencing every counter the samples keep
    (``SAMPLE_DELTAS``, window LAG over each entry's snapshots) and materializing the per-interval rows as
    Arrow, as the samples rebuild must (it also applies the drop rules and writes the rows). The reference
    above aggregates the deltas it computes and never holds them; at the samples' width that aggregate
    costs about what the narrow one does (a scratch run: 3.5 s for 24 counters at 10,000 series x 1 day),
    so the rows' materialization is what separates the two."""
    import duckdb

    from jobs.detect.samples import SAMPLE_DELTAS

    deltas = ", ".join(f"{c} - lag({c}) over w as {c}" for c in SAMPLE_DELTAS)
    started = time.perf_counter()
    connection = duckdb.connect()
    rows = 0
    for folder in sorted((Path(lake_root) / "statement_snapshots").glob("instance=*")):
        files = str(folder / "**" / "*.parquet").replace("'", "''")
        table = connection.sql(
            f"""
            with snapshots as (
                select dbid, userid, queryid, toplevel, captured_at, {", ".join(SAMPLE_DELTAS)}
                from read_parquet('{files}', hive_partitioning = true, union_by_name = true)
            )
            select dbid, userid, queryid, toplevel, lag(captured_at) over w as interval_start,
                   captured_at as interval_end, {deltas}
            from snapshots
            window w as (partition by dbid, userid, queryid, toplevel order by captured_at)
            """
        ).to_arrow_table()
        rows += table.num_rows
        del table
    return {
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "rows": rows,
    }


@dataclass(frozen=True)
class RunLimits:
    """A measured run is stopped (and reported as such) past these: the machine is shared, and a run the
    code cannot finish is a result too."""

    max_seconds: float = 25 * 60.0
    max_rss_mib: float = 0.0
    """0 = 85% of the memory available when the benchmark starts."""

    def rss_cap_mib(self) -> float:
        if self.max_rss_mib > 0:
            return self.max_rss_mib
        with open("/proc/meminfo") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return 0.85 * int(fields["MemAvailable"].split()[0]) / 1024.0


def _child(connection: Any, function: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> None:
    try:
        connection.send(("ok", function(*args)))
    except BaseException as exc:  # reported by the parent, whatever it was
        connection.send(("error", repr(exc)))
    finally:
        connection.close()


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def in_fresh_process(
    function: Callable[..., dict[str, Any]], *args: Any, limits: RunLimits | None = None
) -> dict[str, Any]:
    """Run in a new interpreter so its peak RSS and caches are its own; stop it past ``limits`` and return
    ``{"stopped": why, ...}`` instead of its result."""
    limits = limits or RunLimits()
    cap = limits.rss_cap_mib()
    context = multiprocessing.get_context("spawn")
    progress = WORK / "progress.txt"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.unlink(missing_ok=True)
    progress.with_suffix(".steps.json").unlink(missing_ok=True)
    os.environ[PROGRESS_ENV] = str(progress.resolve())  # inherited by the child
    receiver, sender = context.Pipe(duplex=False)
    # Not daemonic: a budgeted run starts its passes as processes of its own (a daemon may not).
    process = context.Process(target=_child, args=(sender, function, args))
    started = time.perf_counter()
    process.start()
    sender.close()
    highest = 0.0
    why = None
    try:
        while not receiver.poll(0.2):
            highest = max(highest, _rss_mib(process.pid or 0))
            elapsed = time.perf_counter() - started
            if not process.is_alive():
                why = f"the process ended without a result (exit code {process.exitcode}; out of memory?)"
            elif highest > cap:
                why = f"stopped at {highest:,.0f} MiB RSS (cap {cap:,.0f} MiB) after {elapsed:.0f} s"
            elif elapsed > limits.max_seconds:
                why = (
                    f"stopped after {elapsed:.0f} s (limit {limits.max_seconds:.0f} s) at {highest:,.0f} MiB"
                )
            if why:
                break
        if why is None:
            try:
                status, value = receiver.recv()
            except EOFError:
                status, value = "error", f"no result (exit code {process.join(5) or process.exitcode})"
            if status == "ok":
                return value
            why = f"failed: {value}"
    finally:
        if process.is_alive():
            process.kill()
        process.join()
    where = progress.read_text() if progress.exists() else ""
    if where:
        why = f"{why}; in {where}"
    return {
        "stopped": why,
        "seconds": None,
        "peak_rss_mib": None,
        "highest_rss_seen_mib": highest,
        "stopped_after_s": time.perf_counter() - started,
        "steps": _steps_of_stopped_run(progress, highest),
    }


def lake_copy(generated: GeneratedLake, name: str) -> Path:
    target = WORK / f"{generated.shape.key}-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(generated.root, target)
    return target


def folder_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def bench_shape(
    shape: LakeShape,
    profile: bool,
    limits: RunLimits,
    repeats: int,
    full_only: bool = False,
    budget_mib: int = 0,
) -> dict[str, Any]:
    generated = build_lake(BENCH_DIR, shape)
    os.sync()  # flush generated files now, so no measured run's fsyncs wait for them
    end = shape.end
    later = end + timedelta(minutes=TAIL_MINUTES)
    out: dict[str, Any] = {
        "shape": dataclasses.asdict(shape),
        "series": shape.instances * shape.queries,
        "deploys": generated.deploys,
        "snapshot_rows": generated.snapshot_rows,
        "lake_mib": folder_mib(generated.root),
        "generated_seconds": generated.seconds,
        "injected": [
            (r.instance, r.queryid, str(r.deployed_at)) for r in sorted(generated.regressions, key=str)
        ],
    }
    print(
        f"lake {shape.key}: {out['series']:,} series, {generated.deploys} deploys, "
        f"{generated.snapshot_rows:,} snapshot rows, {out['lake_mib']:.0f} MiB "
        f"(generated in {generated.seconds:.0f} s; 0 = cached)",
        flush=True,
    )

    full_lake = lake_copy(generated, "full")
    append_tail(full_lake, generated.tail)
    out["reference"] = in_fresh_process(reference_pass, str(full_lake), limits=limits)
    print(f"  DuckDB reference pass: {describe(out['reference'])}", flush=True)
    out["samples_peer"] = in_fresh_process(samples_peer_pass, str(full_lake), limits=limits)
    peer = describe(out["samples_peer"])
    print(f"  DuckDB deltas materialized (the samples step's peer): {peer}", flush=True)
    out["full"] = in_fresh_process(
        measured_run, str(full_lake), later.isoformat(), False, profile, limits=limits
    )
    shutil.rmtree(full_lake, ignore_errors=True)
    print(f"  full run: {describe(out['full'])}", flush=True)
    out["full_found_injected"] = found_injected(out["injected"], out["full"])
    if budget_mib:
        budget_lake = lake_copy(generated, "budgeted")
        append_tail(budget_lake, generated.tail)
        run = in_fresh_process(budgeted_run, str(budget_lake), later.isoformat(), budget_mib, limits=limits)
        shutil.rmtree(budget_lake, ignore_errors=True)
        out["budgeted"] = run
        if run.get("seconds") is not None:
            same = run["detected"] == out["full"].get("detected")
            print(
                f"  full run within {budget_mib:,} MiB: {run['seconds']:.1f} s "
                f"(x{run['seconds'] / out['reference']['seconds']:.1f} the reference), chunks of "
                f"{run['chunks']} instances; peak RSS {run['coordinator_peak_rss_mib']:,.0f} MiB here + "
                f"{sum(run['helpers_peak_rss_mib'].values()):,.0f} MiB helpers "
                f"({', '.join(f'{k} {v:,.0f}' for k, v in run['helpers_peak_rss_mib'].items()) or 'none'}) + "
                f"{run['largest_pass_peak_rss_mib']:,.0f} MiB the largest pass = {run['peak_rss_mib']:,.0f} "
                f"MiB; deploy verdicts {'the same as' if same else 'DIFFERENT from'} the one-pass run's",
                flush=True,
            )
        else:
            print(f"  full run within {budget_mib:,} MiB: {run.get('stopped')}", flush=True)

    if full_only:
        out["incremental"] = None
        out["incremental_note"] = "not run (--full-only)"
        return out
    if not incremental_supported():
        out["incremental"] = None
        out["incremental_note"] = NOT_AVAILABLE
        print(f"  incremental: {NOT_AVAILABLE}", flush=True)
        return out
    inc_lake = lake_copy(generated, "incremental")
    first = in_fresh_process(measured_run, str(inc_lake), end.isoformat(), True, profile, limits=limits)
    out["incremental_first"] = first
    print(f"  incremental, first run (no state yet): {describe(first)}", flush=True)
    out["tail_files"] = append_tail(inc_lake, generated.tail)
    if first.get("stopped"):
        out["incremental"] = {
            **first,
            "stopped": f"not measured: the first run {first['stopped']}",
            "steps": [],
        }
    else:
        # The same incremental run from the same state, ``repeats`` times (each on its own copy): it is short,
        # so a busy machine's noise matters; the median is reported, every figure is kept.
        tries = []
        for k in range(max(1, repeats)):
            attempt = WORK / f"{shape.key}-incremental-{k}"
            shutil.rmtree(attempt, ignore_errors=True)
            shutil.copytree(inc_lake, attempt)
            tries.append(
                in_fresh_process(
                    measured_run, str(attempt), later.isoformat(), True, profile and k == 0, limits=limits
                )
            )
            shutil.rmtree(attempt, ignore_errors=True)
        out["incremental"] = median_run(tries)
        out["incremental_tries"] = [
            {"seconds": t["seconds"], "peak_rss_mib": t["peak_rss_mib"]} for t in tries
        ]
    shutil.rmtree(inc_lake, ignore_errors=True)
    out["incremental_found_injected"] = found_injected(out["injected"], first, out["incremental"])
    tries = ", ".join(
        f"{t['seconds']:.1f}" for t in out.get("incremental_tries", []) if t["seconds"] is not None
    )
    print(
        f"  incremental after {TAIL_MINUTES} new minutes: {describe(out['incremental'])}"
        + (f" (median of {tries} s)" if tries else ""),
        flush=True,
    )
    return out


def median_run(tries: list[dict[str, Any]]) -> dict[str, Any]:
    """The try with the median wall time (a stopped try, if any, is the result: it did not finish)."""
    stopped = [t for t in tries if t.get("stopped")]
    if stopped:
        return stopped[0]
    ordered = sorted(tries, key=lambda t: t["seconds"])
    chosen = dict(ordered[len(ordered) // 2])
    if not chosen.get("steps"):  # the profile came from the first try
        chosen["steps"] = tries[0].get("steps", [])
    return chosen


def describe(run: dict[str, Any]) -> str:
    if run.get("stopped"):
        return str(run["stopped"])
    return f"{run['seconds']:.1f} s, {run['peak_rss_mib']:,.0f} MiB peak RSS"


def found_injected(injected: list[Any], *runs: dict[str, Any]) -> int:
    """How many injected (instance, queryid, deploy time) the runs report as detected at their deploy."""
    found = {tuple(d) for run in runs for d in run.get("detected", [])}
    return sum(1 for r in injected if tuple(r) in found)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x: float | None, pattern: str = "{:.1f}") -> str:
    return "-" if x is None else pattern.format(x)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios: full / incremental within each history, and longer / base history for each kind of run."""
    for r in runs:
        inc = r.get("incremental")
        reference = r.get("reference") or {}
        r["full_over_reference_seconds"] = _ratio(r["full"]["seconds"], reference.get("seconds"))
        r["full_over_incremental_seconds"] = _ratio(r["full"]["seconds"], inc and inc["seconds"])
        r["full_over_incremental_peak_mib"] = _ratio(r["full"]["peak_rss_mib"], inc and inc["peak_rss_mib"])
    scaling: dict[str, Any] = {}
    if len(runs) >= 2:
        base, longer = runs[0], runs[-1]
        for kind in ("full", "incremental"):
            a, b = base.get(kind), longer.get(kind)
            scaling[kind] = {
                "seconds": _ratio(b and b["seconds"], a and a["seconds"]),
                "peak_mib": _ratio(b and b["peak_rss_mib"], a and a["peak_rss_mib"]),
            }
        scaling["history_ratio"] = longer["shape"]["days"] / base["shape"]["days"]
    return scaling


def print_table(runs: list[dict[str, Any]], scaling: dict[str, Any]) -> None:
    print(
        "\n| history | series | deploys | reference s | reference MiB | full s | full MiB | full / reference "
        "| incremental s | incremental MiB | full / incr. (time) | full / incr. (memory) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        inc = r.get("incremental")
        reference = r.get("reference") or {}
        print(
            f"| {r['shape']['days']:g} d | {r['series']:,} | {r['deploys']} "
            f"| {_fmt(reference.get('seconds'))} "
            f"| {_fmt(reference.get('peak_rss_mib'), '{:.0f}')} | {_fmt(r['full']['seconds'])} "
            f"| {_fmt(r['full']['peak_rss_mib'], '{:.0f}')} "
            f"| {_fmt(r['full_over_reference_seconds'], 'x{:.1f}')} "
            f"| {_fmt(inc and inc['seconds'])} "
            f"| {_fmt(inc and inc['peak_rss_mib'], '{:.0f}')} "
            f"| {_fmt(r['full_over_incremental_seconds'], 'x{:.1f}')} "
            f"| {_fmt(r['full_over_incremental_peak_mib'], 'x{:.1f}')} |"
        )
    for r in runs:
        for kind in ("full", "incremental_first", "incremental"):
            if (r.get(kind) or {}).get("stopped"):
                print(f"{r['shape']['days']:g} d {kind}: {r[kind]['stopped']}")
    if runs and runs[0].get("incremental") is None:
        print(f"\nincremental: {runs[0].get('incremental_note', NOT_AVAILABLE)}")
    if scaling:
        history = scaling["history_ratio"]
        for kind in ("full", "incremental"):
            s = scaling[kind]
            print(
                f"{kind}: history x{history:g} -> time {_fmt(s['seconds'], 'x{:.2f}')}, "
                f"peak memory {_fmt(s['peak_mib'], 'x{:.2f}')}"
            )
    ok = [r["full_over_incremental_seconds"] for r in runs if r["full_over_incremental_seconds"]]
    if ok:
        verdict = "met" if min(ok) >= GOAL_INCREMENTAL_RATIO else "NOT met"
        print(f"goal incremental >= {GOAL_INCREMENTAL_RATIO:g}x cheaper (time): {verdict}")
    for r in runs:
        print(
            f"{r['shape']['days']:g} d: injected regressions found by the full run "
            f"{r['full_found_injected']}/{len(r['injected'])}"
            + (
                f", by the incremental runs {r['incremental_found_injected']}/{len(r['injected'])}"
                if r.get("incremental")
                else ""
            )
        )
        peer = (r.get("samples_peer") or {}).get("seconds")
        rebuild = [x for x in (r.get("full") or {}).get("steps") or [] if x["step"] == "run_samples_job"]
        if peer and rebuild:
            print(
                f"  full run's samples rebuild {rebuild[0]['seconds']:.1f} s: "
                f"x{rebuild[0]['seconds'] / peer:.2f} its peer (DuckDB deltas materialized, {peer:.1f} s)"
            )
        for kind in ("full", "incremental_first", "incremental"):
            steps = (r.get(kind) or {}).get("steps") or []
            total = (r.get(kind) or {}).get("seconds") or (r.get(kind) or {}).get("stopped_after_s")
            if steps and total:
                stopped = " (stopped; '*': open at the stop)" if r[kind].get("stopped") else ""
                print(f"  {kind} run steps ({r['shape']['days']:g} d){stopped}:")
                for step in steps:
                    label = "  " * step["depth"] + step["step"] + ("*" if step.get("stopped_in") else "")
                    print(
                        f"    {label:44} {step['seconds']:8.1f} s "
                        f"{100 * step['seconds'] / total:5.1f}%   RSS {step['rss_start_mib']:7.0f} -> "
                        f"{step['rss_mib']:7.0f} MiB"
                    )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_detection", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", default=bool(os.environ.get("RADAR_DETECTION_BENCH_QUICK"))
    )
    parser.add_argument("--instances", type=int)
    parser.add_argument("--queries", type=int)
    parser.add_argument("--days", type=float, help="base history in days (the doubled one runs too)")
    parser.add_argument("--deploys-per-day", type=float, help="deploys per instance and day (default 15)")
    parser.add_argument("--max-minutes", type=float, default=25.0, help="stop a measured run after this")
    parser.add_argument(
        "--max-rss-gib",
        type=float,
        default=0.0,
        help="stop a measured run above this RSS (0: 85%% of available)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="incremental runs measured (median reported)")
    parser.add_argument("--full-only", action="store_true", help="measure the full run only")
    parser.add_argument("--no-double", action="store_true", help="only the base history")
    parser.add_argument(
        "--budget-mib",
        type=int,
        default=0,
        help="also measure a full run within this memory budget (jobs.pipeline.budgeted)",
    )
    parser.add_argument(
        "--profile", action="store_true", default=bool(os.environ.get("RADAR_DETECTION_BENCH_PROFILE"))
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse([] if argv is None else argv)
    base = LakeShape(instances=4, queries=100, days=0.25) if args.quick else LakeShape()
    base = dataclasses.replace(
        base,
        instances=args.instances or base.instances,
        queries=args.queries or base.queries,
        days=args.days or base.days,
        deploys_per_instance_day=args.deploys_per_day or base.deploys_per_instance_day,
    )
    shapes = [base] if args.no_double else [base, dataclasses.replace(base, days=2 * base.days)]
    print(
        f"detection: {base.instances} instances x {base.queries} queries, history "
        f"{' and '.join(f'{s.days:g} d' for s in shapes)}; incremental mode: "
        f"{'yes' if incremental_supported() else NOT_AVAILABLE}",
        flush=True,
    )
    limits = RunLimits(max_seconds=args.max_minutes * 60.0, max_rss_mib=args.max_rss_gib * 1024.0)
    print(
        f"limits per measured run: {args.max_minutes:g} min, {limits.rss_cap_mib():,.0f} MiB RSS", flush=True
    )
    runs = [
        bench_shape(shape, args.profile, limits, args.repeats, args.full_only, args.budget_mib)
        for shape in shapes
    ]
    scaling = summarize(runs)
    print_table(runs, scaling)
    document = json.dumps(
        {
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "quick": args.quick,
            "incremental_supported": incremental_supported(),
            "goal_full_over_incremental": GOAL_INCREMENTAL_RATIO,
            "runs": runs,
            "scaling": scaling,
        },
        indent=2,
        default=str,
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(document)
    by_shape = RESULTS.with_name(f"detection-{base.key}.json")  # every size run keeps its own figures
    by_shape.write_text(document)
    print(f"\nwrote {RESULTS} and {by_shape}")


if __name__ == "__main__":
    main(sys.argv[1:])
