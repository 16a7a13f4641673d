"""A full detection run within a memory budget: the fleet's instances in chunks, one after the other.

A full run holds every sample of the fleet at once, so its memory grows with the fleet (about 10 GiB at
10,000 series over one day). With ``[detector.memory] budget_mib`` set, a run that reads every sample (a
full run, the first run, a settings change) and whose estimate exceeds the budget is split: instances are
packed into chunks whose estimate fits (largest first, each into the first chunk with room; an instance is
never split, its contention analysis needs all its series), then each chunk gets the two phases of a
sharded pass (jobs.pipeline.sharded), each pass in a fresh process (one at a time; this process keeps only
the candidates' p-values, the change points found and the outcome), with nothing recorded in between:

  1. every chunk's unannounced candidates (raw p-values) and change points, its samples rebuilt first;
  2. every chunk's detection, its candidates adjusted among every chunk's (the fleet-wide Benjamini-Hochberg
     step a one-pass run takes), its change-point searches reused from phase 1.

An incremental run reads only what is new and is never split. A pass's estimate is ``base_mib`` plus the
larger of its analysis (``sample_bytes`` per row of its instances) and its samples rebuild
(``rebuild_bytes`` per snapshot row of its largest instance, or of its largest piece of days: ``[samples]
rebuild_piece_rows``), an instance's rows being its snapshot or
sample rows, whichever are more; the constants are settings, measured by ``bench_detection``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import multiprocessing
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

import numpy as np
import polars as pl

from jobs.detect.changepoint_memo import ChangePointMemo
from jobs.detect.config import MemoryConfig
from jobs.detect.findings import latest_states
from jobs.detect.fleet_fdr import FleetFdr
from jobs.detect.samples_job import SamplesJobReport, peak_rss_mib
from jobs.detect.scope import ShardOfRun, latest_run
from jobs.lake import io as lake
from jobs.lake.storage import LakePath
from jobs.pipeline.detection import (
    DetectionConfig,
    DetectionOutcome,
    detection_config_digest,
    run_detection,
    settings_changed_for,
)
from jobs.pipeline.sharded import FAMILIES, unannounced_candidates
from jobs.schemas.analysed import FINDING_STATES
from jobs.schemas.collected import QUERY_SAMPLES, STATEMENT_SNAPSHOTS

MIB = 1 << 20
_PR_SET_PDEATHSIG = 1
_T = TypeVar("_T")


def rows_per_instance(lake_root: LakePath) -> dict[str, int]:
    """Per instance, the rows a full pass reads: its snapshot or sample rows, whichever is more (from the
    files' metadata: no data is read)."""
    rows: dict[str, int] = {}
    for table in (STATEMENT_SNAPSHOTS, QUERY_SAMPLES):
        counted = lake.scan_table(lake_root, table).group_by("instance").len().collect()
        for name, count in counted.iter_rows():
            rows[name] = max(rows.get(name, 0), int(count))
    return rows


def estimated_mib(
    rows: list[int], memory: MemoryConfig, rebuilds: bool = True, piece_rows: int | None = None
) -> float:
    """One pass's estimated peak memory over instances of ``rows`` sample rows each: the larger of its
    analysis (every row at once) and, when it ``rebuilds`` the samples, the rebuild of its largest
    instance (of its largest piece of days: ``[samples] rebuild_piece_rows``)."""
    analysis = sum(rows) * memory.sample_bytes
    largest = min(max(rows, default=0), piece_rows or max(rows, default=0))
    rebuild = largest * memory.rebuild_bytes if rebuilds else 0
    return memory.base_mib + max(analysis, rebuild) / MIB


def plan_chunks(
    rows: Mapping[str, int], memory: MemoryConfig, rebuilds: bool = True, piece_rows: int | None = None
) -> tuple[tuple[str, ...], ...]:
    """Instances packed into chunks whose estimate, with the coordinating process's share, fits the budget
    (first fit, largest first; ties by name, so the same lake gives the same chunks). One chunk of every
    instance when the budget is 0 or one pass fits; an instance that alone exceeds it is a chunk of its
    own."""
    names = sorted(rows)

    def estimate(of: list[int]) -> float:
        return estimated_mib(of, memory, rebuilds, piece_rows)

    if memory.budget_mib <= 0 or estimate(list(rows.values())) <= memory.budget_mib:
        return (tuple(names),) if names else ()
    room = memory.budget_mib - memory.coordinator_mib
    chunks: list[list[str]] = []
    for name in sorted(names, key=lambda n: (-rows[n], n)):
        for chunk in chunks:
            if estimate([rows[n] for n in [*chunk, name]]) <= room:
                chunk.append(name)
                break
        else:
            chunks.append([name])
    return tuple(tuple(sorted(chunk)) for chunk in chunks)


def reads_every_sample(lake_root: LakePath, config: DetectionConfig) -> bool:
    """This run will read every sample: a full run, the first one, or one whose settings changed."""
    if not config.incremental:
        return True
    latest = latest_run(lake_root)
    return latest is None or settings_changed_for(lake_root, detection_config_digest(config), None)


@dataclass(frozen=True)
class BudgetedRun:
    outcome: DetectionOutcome
    chunks: tuple[tuple[str, ...], ...]
    """The instances of each pass (one chunk, or none when not estimated: the run was not split)."""
    estimated_mib: tuple[float, ...]
    """Each chunk's estimate."""
    peak_rss_mib: float
    """This process's peak resident memory after the run."""
    chunk_peak_rss_mib: tuple[float, ...] = ()
    """Per chunk, the larger peak of its two passes' processes (the run's memory: this process's plus the
    largest of these)."""


def run_detection_in_budget(
    lake_root: LakePath, config: DetectionConfig, now: datetime | None = None
) -> BudgetedRun:
    """``run_detection``, split into chunks of instances when it reads every sample and its estimate
    exceeds ``config.memory.budget_mib``."""
    computed_at = (now or datetime.now(UTC)).astimezone(UTC)
    if config.memory.budget_mib > 0:
        # The estimate counts one instance's rebuild at a time: no differencing of the next one ahead.
        config = replace(config, samples=replace(config.samples, rebuild_ahead=False))
    chunks: tuple[tuple[str, ...], ...] = ()
    rows: dict[str, int] = {}
    pieces = config.samples.rebuild_piece_rows
    if config.memory.budget_mib > 0 and reads_every_sample(lake_root, config):
        rows = rows_per_instance(lake_root)
        chunks = plan_chunks(rows, config.memory, config.rebuild_samples, pieces)
    if len(chunks) <= 1:
        outcome = run_detection(lake_root, config, computed_at)
        whole = (estimated_mib(list(rows.values()), config.memory, config.rebuild_samples, pieces),)
        return BudgetedRun(outcome, chunks, whole if rows else (), peak_rss_mib())
    outcome, peaks = run_chunked_detection(lake_root, config, chunks, computed_at)
    estimates = tuple(
        estimated_mib([rows[n] for n in chunk], config.memory, config.rebuild_samples, pieces)
        for chunk in chunks
    )
    return BudgetedRun(outcome, chunks, estimates, peak_rss_mib(), peaks)


def chunk_of_run(
    chunk: tuple[str, ...], index: int, count: int, config: DetectionConfig, at: datetime
) -> ShardOfRun:
    return ShardOfRun(
        label=f"chunk-{index} of {count}", instances=chunk, since=at - config.regression.history
    )


Candidates = dict[str, np.ndarray]


def chunk_candidates(
    lake_root: LakePath, config: DetectionConfig, of_run: ShardOfRun, computed_at: datetime
) -> tuple[Candidates, pl.DataFrame, SamplesJobReport | None, float]:
    """Phase 1 of a chunk (in its own process): raw candidate p-values per family, the change points found
    (as a frame), the samples job's report, this process's peak RSS."""
    recorder, memo, report = unannounced_candidates(lake_root, config, of_run, computed_at)
    return {f: recorder.p_values(f) for f in FAMILIES}, memo.to_frame(), report, peak_rss_mib()


def chunk_detection(
    lake_root: LakePath,
    config: DetectionConfig,
    of_run: ShardOfRun,
    computed_at: datetime,
    others: Candidates,
    memo: pl.DataFrame,
) -> tuple[PackedOutcome, float]:
    """Phase 2 of a chunk (in its own process): its detection run, adjusted among ``others``, packed."""
    found = ChangePointMemo.from_frame(memo)
    outcome = run_detection(lake_root, config, computed_at, shard=of_run, fleet=FleetFdr(others), memo=found)
    return PackedOutcome.of(outcome), peak_rss_mib()


PACKED_FRAMES = (
    "regressions",
    "unannounced",
    "plan_diffs",
    "resource_regressions",
    "instance_slowdowns",
    "findings",
    "finding_changes",
)


@dataclass(frozen=True)
class PackedOutcome:
    """A pass's outcome with its frames as zstd-compressed Arrow IPC: the coordinating process holds every
    pass's rows until the last pass ends, and as frames they were half the run's memory at once (2 GiB
    of 5.2 at 10,000 series x 7 days) while a pass ran beside them; unpacked after the last pass."""

    frames: dict[str, bytes]
    rest: DetectionOutcome

    @classmethod
    def of(cls, outcome: DetectionOutcome) -> PackedOutcome:
        packed = {}
        for name in PACKED_FRAMES:
            buffer = io.BytesIO()
            getattr(outcome, name).write_ipc(buffer, compression="zstd")
            packed[name] = buffer.getvalue()
        empty = {name: getattr(outcome, name).clear() for name in PACKED_FRAMES}
        return cls(packed, replace(outcome, **empty))

    def unpacked(self) -> DetectionOutcome:
        frames = {name: pl.read_ipc(io.BytesIO(data)) for name, data in self.frames.items()}
        return replace(self.rest, **frames)


def run_chunked_detection(
    lake_root: LakePath, config: DetectionConfig, chunks: tuple[tuple[str, ...], ...], computed_at: datetime
) -> tuple[DetectionOutcome, tuple[float, ...]]:
    """The two phases over ``chunks`` (every instance in exactly one), as one full run at ``computed_at``.
    Each pass runs in a fresh process, one at a time: a process keeps memory it freed (its allocators'
    caches), so passes in this one would stack up; a pass's own process gives all of it back."""
    settings_changed = config.incremental and settings_changed_for(
        lake_root, detection_config_digest(config), None
    )
    config = replace(config, incremental=False)
    runs = [chunk_of_run(chunk, i, len(chunks), config, computed_at) for i, chunk in enumerate(chunks)]
    allocator = {
        "return_freed_after_ms": config.memory.return_freed_after_ms,
        "huge_pages": config.memory.pass_huge_pages,
    }
    first = [
        in_own_process(chunk_candidates, of_run, lake_root, config, of_run, computed_at, **allocator)
        for of_run in runs
    ]
    analysed = replace(config, rebuild_samples=False)  # phase 1 rebuilt them
    second = []
    for i, of_run in enumerate(runs):
        others = {
            f: np.concatenate([c[0][f] for j, c in enumerate(first) if j != i] or [np.empty(0)])
            for f in FAMILIES
        }
        second.append(
            in_own_process(
                chunk_detection,
                of_run,
                lake_root,
                analysed,
                of_run,
                computed_at,
                others,
                first[i][1],
                **allocator,
            )
        )
    outcomes = [packed.unpacked() for packed, _ in second]
    merged = merged_outcomes(outcomes, lake_root, [n for chunk in chunks for n in chunk])
    reports = [c[2] for c in first if c[2] is not None]
    peaks = tuple(max(c[3], p) for c, (_, p) in zip(first, second, strict=True))
    report = SamplesJobReport.summed(reports, sum(r.seconds for r in reports)) if reports else None
    return replace(merged, samples_report=report, settings_changed=settings_changed), peaks


ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
"""Polars' allocator (jemalloc, its symbols prefixed) reads its options from this variable when polars is
imported, after polars' own (the later of two settings of an option wins)."""


def returning_freed(after_ms: int, huge_pages: bool = MemoryConfig.pass_huge_pages) -> str:
    """The allocator options of a pass: freed memory given back after ``after_ms`` ([detector.memory]
    return_freed_after_ms). 0 purges on every free, which made the passes a quarter slower than a short
    delay for a few percent of peak; polars' own delay keeps a second's frees for reuse. ``huge_pages``
    ([detector.memory] pass_huge_pages): what it gives back comes again as transparent huge pages where
    the system grants them on request, 512 times fewer page faults."""
    return ("thp:always," if huge_pages else "") + f"dirty_decay_ms:{after_ms},muzzy_decay_ms:0"


@contextmanager
def _returning_freed_memory(after_ms: int, huge_pages: bool) -> Iterator[None]:
    """A pass started inside gives the memory it frees back within ``after_ms`` instead of keeping it for
    reuse (polars keeps it half a second to a second): its peak is then about what its steps hold at once,
    not what each step once touched (one week of 500 series, at once: 3,636 -> 3,206 MiB, 55 -> 64 s;
    bench_detection). Options already in the variable stay, before these."""
    options = returning_freed(after_ms, huge_pages)
    before = os.environ.get(ALLOCATOR_ENV)
    os.environ[ALLOCATOR_ENV] = options if not before else f"{before},{options}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ALLOCATOR_ENV, None)
        else:
            os.environ[ALLOCATOR_ENV] = before


PRELOADED = ["jobs.pipeline.budgeted"]
"""What the fork server imports once, so that a pass forked from it starts at once (a spawned pass
imported the detection for 1.6-1.9 s, 40 times in a run of 20 chunks)."""


def _pass_context() -> BaseContext:
    """Passes are forked from a fork server that has imported the detection (``PRELOADED``), where Linux
    can tell a pass that its run ended (``os.pidfd_open``); elsewhere each pass is a fresh interpreter. Not
    this process forked: its threads (polars' pool) may hold locks a fork would copy held."""
    if hasattr(os, "pidfd_open") and "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOADED)
        return context
    return multiprocessing.get_context("spawn")


def in_own_process(
    work: Callable[..., _T],
    of_run: ShardOfRun,
    *args: Any,
    return_freed_after_ms: int = MemoryConfig.return_freed_after_ms,
    huge_pages: bool = MemoryConfig.pass_huge_pages,
) -> _T:
    """``work(*args)`` in a fresh process (forked from the fork server, or spawned), its allocator giving
    freed memory back after ``return_freed_after_ms`` (and taking it again as huge pages with
    ``huge_pages``); its exception is raised here as it was there.

    A forked pass has the allocator of the fork server, which reads the option once, when this process's
    first pass starts it: a later run in the same process with another value keeps the first (a CLI run and
    a Dagster run are each a process of their own)."""
    context = _pass_context()
    with ProcessPoolExecutor(
        max_workers=1, mp_context=context, initializer=_end_with_run, initargs=(os.getpid(),)
    ) as pool:
        # The pass starts in submit: it (or the fork server it is forked from) inherits the environment then.
        with _returning_freed_memory(return_freed_after_ms, huge_pages):
            future = pool.submit(work, *args)
        try:
            return future.result()
        except BrokenProcessPool:
            raise RuntimeError(
                f"the detection pass of {of_run.label} ({', '.join(of_run.instances)}) ended without a "
                "result (killed, or out of memory?): nothing of it was committed; a lower [detector.memory] "
                "budget_mib gives smaller chunks"
            ) from None


def merged_outcomes(
    outcomes: list[DetectionOutcome], lake_root: LakePath, instances: list[str]
) -> DetectionOutcome:
    """The chunks' outcomes as one run's; findings of instances in no chunk (gone from the lake) as the
    lake has them, as a one-pass run shows them."""

    def concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
        return pl.concat(frames, how="diagonal_relaxed")

    rest = latest_states(lake.read_table(lake_root, FINDING_STATES)).filter(
        ~pl.col("instance").is_in(instances)
    )
    return DetectionOutcome(
        concat([o.regressions for o in outcomes]),
        concat([o.unannounced for o in outcomes]),
        concat([o.plan_diffs for o in outcomes]),
        files=[f for o in outcomes for f in o.files],
        resource_regressions=concat([o.resource_regressions for o in outcomes]),
        instance_slowdowns=concat([o.instance_slowdowns for o in outcomes]),
        findings=concat([*(o.findings for o in outcomes), rest]),
        finding_changes=concat([o.finding_changes for o in outcomes]),
    )


def _end_with_run(run_pid: int) -> None:
    """A pass's process ends when the run's process does: a run killed by a timeout leaves no pass behind
    to go on analysing and writing beside the next run.

    A spawned pass is the run's child: Linux's parent-death signal. A forked one is the fork server's, and
    the fork server ends only when every process holding its "alive" pipe has, the pass included: so the
    pass watches the run's process itself (a pidfd, readable once that process has ended) and ends."""
    parent = os.getppid()
    if parent != run_pid and hasattr(os, "pidfd_open"):
        try:
            watched = os.pidfd_open(run_pid)
        except OSError:  # the run ended before the pass started
            os._exit(1)
        threading.Thread(target=_ended_with, args=(watched,), name="end-with-run", daemon=True).start()
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the pass ends when it is done
        return
    if os.getppid() != parent:  # the run ended before the signal was asked for
        os._exit(1)


def _ended_with(watched: int) -> None:
    """Wait for the watched process to end, then end this one at once, as the parent-death signal would:
    what a pass writes itself (the samples of its instances) is crash-safe on its own (files before their
    frontier), and the run's rows are written by the run's process after the last pass."""
    poller = select.poll()
    poller.register(watched, select.POLLIN)
    while not poller.poll(None):
        pass
    os.kill(os.getpid(), signal.SIGKILL)
