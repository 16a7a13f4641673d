"""The detection split per shard, with the fleet-wide Benjamini-Hochberg step between its two phases.

A fleet too large for one detection pass is split into shards (``jobs.collect.shards``: a stable hash of
the instance name); each shard's pass reads, analyses, records findings of and commits only its instances,
so shards run on different machines and one shard's failure stops no other. Everything in the detection is
per instance except the Benjamini-Hochberg step of the unannounced analyses, which a whole-fleet run takes
over every candidate of the fleet. So a shard's pass has two phases:

  1. ``record_shard_candidates``: the shard's unannounced candidate steps (latency, and work per call) are
     found and their Welch p-values written to ``fdr_candidates`` (``shard=shard-k``; the shard's older
     file is removed: only the latest pass of each shard counts). Nothing else is written or committed.
  2. ``run_shard_detection`` (after every shard's phase 1): the shard's full detection, each candidate
     adjusted among its own and every other shard's latest recorded candidates (``jobs.detect.fleet_fdr``),
     then its analysis tables, findings and watermarks written as a whole-fleet run writes them.

With the same candidates, phase 2 gives each candidate the adjusted p a whole-fleet run gives it. What
differs from a whole-fleet run: the change-point search's own rounds (``jobs.detect.changepoint``, a
Benjamini-
Hochberg step over the series of one call at each round) run per shard; and a shard whose phase 1 has not
run (or failed) counts with its previous candidates, or none (``ShardCandidates.missing`` names it).
Phase 2 does not search again what phase 1 searched: phase 1 keeps the change points it found
(``changepoint_memo``, keyed by a digest of the searched series; jobs.detect.changepoint_memo) and phase 2
reuses them when its series are the same (a sample that arrived in between makes that search run again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np
import polars as pl

from jobs.collect.shards import shard_key, shard_of
from jobs.detect.changepoint_memo import ChangePointMemo
from jobs.detect.findings import run_id_for
from jobs.detect.fleet_fdr import LATENCY, RESOURCE, CandidateRecorder, FleetFdr
from jobs.detect.samples_job import SamplesJobReport, run_samples_job
from jobs.detect.scope import ShardOfRun
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.detect.work import unannounced_resource_regressions
from jobs.lake import io as lake
from jobs.lake.storage import LakePath, lake_path
from jobs.pipeline.detection import (
    DetectionConfig,
    DetectionOutcome,
    detection_config_digest,
    read_inputs_in_scope,
    run_detection,
    settings_changed_for,
)
from jobs.query.series import fingerprinted_samples
from jobs.schemas.analysed import CHANGEPOINT_MEMO, FDR_CANDIDATES
from jobs.schemas.collected import QUERY_SAMPLES, STATEMENT_SNAPSHOTS
from jobs.schemas.table import TableSchema

FAMILIES = (LATENCY, RESOURCE)


def shard_instances(lake_root: LakePath, shard: int, shard_count: int) -> tuple[str, ...]:
    """The instances with snapshots or samples in the lake that belong to ``shard`` (from the folder names
    alone). Snapshots too: an instance whose samples no run has built yet (a new lake, a new instance) is
    the shard's, and its pass builds them; listed by samples alone, such a shard was silently empty."""
    names: set[str] = set()
    for table in (STATEMENT_SNAPSHOTS, QUERY_SAMPLES):
        base = lake_path(lake_root) / table.name
        if base.exists():
            names |= {f.name.removeprefix("instance=") for f in base.glob("instance=*")}
    return tuple(sorted(n for n in names if shard_of(n, shard_count) == shard))


def shard_of_run(
    lake_root: LakePath, shard: int, shard_count: int, config: DetectionConfig, computed_at: datetime
) -> ShardOfRun:
    if not 0 <= shard < shard_count:
        raise ValueError(f"shard {shard} is not one of 0..{shard_count - 1}")
    return ShardOfRun(
        label=f"{shard_key(shard)} of {shard_count}",
        instances=shard_instances(lake_root, shard, shard_count),
        since=computed_at - config.regression.history,
    )


@dataclass(frozen=True)
class RecordedCandidates:
    """What phase 1 of a shard's pass recorded."""

    shard: str
    instances: int
    candidates: dict[str, int]
    """Per family, how many candidate steps."""
    path: LakePath


def unannounced_candidates(
    lake_root: LakePath, config: DetectionConfig, of_run: ShardOfRun, computed_at: datetime
) -> tuple[CandidateRecorder, ChangePointMemo, SamplesJobReport | None]:
    """Phase 1's work for some instances (a shard's, a chunk's): their samples brought up to date when
    ``config.rebuild_samples`` (as phase 2 would), then their unannounced searches (latency, work per call)
    run as phase 2 will run them, keeping each family's raw candidate p-values and the change points
    found. Returns those and the samples job's report."""
    digest = detection_config_digest(config)
    if config.incremental and settings_changed_for(lake_root, digest, of_run):
        config = replace(config, incremental=False)
    report = None
    if config.rebuild_samples:
        mode = "append" if config.incremental else "rebuild"
        report = run_samples_job(
            lake_root, config.samples, instances=list(of_run.instances), lake_config=config.lake, mode=mode
        )
    state, samples, texts, _, _ = read_inputs_in_scope(lake_root, config, computed_at, digest, of_run)
    recorder, memo = CandidateRecorder(), ChangePointMemo()
    if samples.height and config.unannounced:
        samples = fingerprinted_samples(samples, texts, config.regression.identity)
        detect_unannounced_regressions(
            samples, texts, config.regression, state.scope, recorder.adjust(LATENCY), memo=memo
        )
        unannounced_resource_regressions(
            samples, texts, config.regression, state.scope, recorder.adjust(RESOURCE), memo=memo
        )
    return recorder, memo, report


def record_shard_candidates(
    lake_root: LakePath,
    config: DetectionConfig,
    shard: int,
    shard_count: int,
    now: datetime | None = None,
) -> RecordedCandidates:
    """Phase 1: the shard's unannounced candidates' p-values, written to ``fdr_candidates``. Reads what
    phase 2 will read (the same scope: nothing is committed in between) and runs the same unannounced
    searches on the same identified samples, so phase 2's own candidates are these."""
    computed_at = (now or datetime.now(UTC)).astimezone(UTC)
    of_run = shard_of_run(lake_root, shard, shard_count, config, computed_at)
    recorder, memo, _ = unannounced_candidates(lake_root, config, of_run, computed_at)
    frames = [
        pl.DataFrame(
            {"family": family, "p_value": recorder.p_values(family)},
            schema={"family": pl.String, "p_value": pl.Float64},
        ).with_row_index("position")
        for family in FAMILIES
    ]
    rows = pl.concat(frames).with_columns(
        pl.col("position").cast(pl.Int64),
        pl.lit(run_id_for(computed_at)).alias("run_id"),
        pl.lit(computed_at).cast(pl.Datetime("us", "UTC")).alias("computed_at"),
        pl.lit(shard_count, dtype=pl.Int64).alias("shard_count"),
    )
    key = shard_key(shard)
    # Written even when empty: "this shard has no candidate" is an answer, not a missing shard.
    stem = f"{lake.stem_for(computed_at)}-of{shard_count}"
    # The memo first: phase 2 starts from the candidates file, which then always has its memo beside it.
    found = memo.to_frame().with_columns(pl.lit(run_id_for(computed_at)).alias("run_id"))
    memo_path = lake.write_table(lake_root, CHANGEPOINT_MEMO, found, {"shard": key}, stem)
    path = lake.write_table(lake_root, FDR_CANDIDATES, rows, {"shard": key}, stem)
    for table, latest in ((CHANGEPOINT_MEMO, memo_path), (FDR_CANDIDATES, path)):
        for older in lake_path(lake_root).joinpath(table.name, f"shard={key}").glob("*.parquet"):
            if older.name < latest.name:
                older.unlink(missing_ok=True)
    return RecordedCandidates(
        key, len(of_run.instances), {f: int(recorder.p_values(f).size) for f in FAMILIES}, path
    )


@dataclass(frozen=True)
class ShardCandidates:
    """The other shards' latest recorded candidates, as phase 2 of one shard uses them."""

    fleet: FleetFdr
    used: pl.DataFrame
    """(shard, run_id, computed_at, latency, resource): whose candidates were counted, and from when."""
    missing: list[str]
    """Other shards with no recorded candidates for this shard count (never run, or always failed)."""


def pass_files(lake_root: LakePath, table: TableSchema, shard: int, shard_count: int) -> list[LakePath]:
    """A shard's phase-1 files of ``table`` written with this shard count, newest first (names start with
    the pass's time)."""
    folder = lake_path(lake_root) / table.name / f"shard={shard_key(shard)}"
    return sorted(folder.glob(f"*-of{shard_count}.parquet"), key=lambda p: p.name, reverse=True)


def other_shards_candidates(lake_root: LakePath, shard: int, shard_count: int) -> ShardCandidates:
    """Every other shard's latest ``fdr_candidates`` file recorded with this shard count."""
    parts: dict[str, list[np.ndarray]] = {f: [] for f in FAMILIES}
    used, missing = [], []
    for other in range(shard_count):
        if other == shard:
            continue
        key = shard_key(other)
        rows = None
        for path in pass_files(
            lake_root, FDR_CANDIDATES, other, shard_count
        ):  # the newest readable file of this shard count (a bad one is quarantined)
            rows = lake.read_file(lake_root, FDR_CANDIDATES, path)
            if rows is not None:
                break
        if rows is None:
            missing.append(key)
            continue
        counts = {}
        for family in FAMILIES:
            values = rows.filter(pl.col("family") == family).sort("position")["p_value"].to_numpy()
            parts[family].append(values.astype(np.float64))
            counts[family] = int(values.size)
        run_id = rows["run_id"][0] if rows.height else None
        at = rows["computed_at"][0] if rows.height else None
        used.append({"shard": key, "run_id": run_id, "computed_at": at, **counts})
    fleet = FleetFdr(
        {f: np.concatenate(parts[f]) if parts[f] else np.empty(0, dtype=np.float64) for f in FAMILIES}
    )
    schema = {
        "shard": pl.String,
        "run_id": pl.String,
        "computed_at": pl.Datetime("us", "UTC"),
        LATENCY: pl.Int64,
        RESOURCE: pl.Int64,
    }
    return ShardCandidates(fleet, pl.DataFrame(used, schema=schema), missing)


@dataclass(frozen=True)
class ShardDetection:
    outcome: DetectionOutcome
    candidates: ShardCandidates
    instances: int
    memo: ChangePointMemo
    """The change points phase 1 found; its hits and misses say which searches phase 2 reused."""


def own_memo(lake_root: LakePath, shard: int, shard_count: int) -> ChangePointMemo:
    """The change points of the shard's latest phase 1 (empty when none is readable)."""
    files = pass_files(lake_root, CHANGEPOINT_MEMO, shard, shard_count)
    frame = lake.read_file(lake_root, CHANGEPOINT_MEMO, files[0]) if files else None
    return ChangePointMemo() if frame is None else ChangePointMemo.from_frame(frame)


def run_shard_detection(
    lake_root: LakePath,
    config: DetectionConfig,
    shard: int,
    shard_count: int,
    now: datetime | None = None,
) -> ShardDetection:
    """Phase 2: the shard's detection run (``jobs.pipeline.detection.run_detection`` over its instances), its
    unannounced candidates adjusted among every shard's (the other shards' latest phase 1)."""
    computed_at = (now or datetime.now(UTC)).astimezone(UTC)
    of_run = shard_of_run(lake_root, shard, shard_count, config, computed_at)
    others = other_shards_candidates(lake_root, shard, shard_count)
    memo = own_memo(lake_root, shard, shard_count)
    outcome = run_detection(lake_root, config, computed_at, shard=of_run, fleet=others.fleet, memo=memo)
    return ShardDetection(outcome, others, len(of_run.instances), memo)


# ---------------------------------------------------------------------------------------------------------
# When phase 2 starts (the Dagster sensor's decision, pure but for listing the lake)


def latest_candidate_runs(lake_root: LakePath, shard_count: int) -> dict[str, str]:
    """Per shard with a recorded phase 1 of this shard count: the run id of its latest (from the file's
    name, no read)."""
    latest = {}
    for shard in range(shard_count):
        files = pass_files(lake_root, FDR_CANDIDATES, shard, shard_count)
        if files:
            latest[shard_key(shard)] = files[0].name.split("-of", 1)[0]
    return latest


def analysis_round(
    latest: dict[str, str], consumed: dict[str, str], shard_count: int, now: datetime, wait_s: float
) -> str | None:
    """The round to start phase 2 for (its id: the newest phase-1 run id), or None to wait. Phase 2 starts
    once every shard recorded candidates newer than those the last round consumed, or ``wait_s`` after
    the first of them did (a failing or slow shard then counts with its previous candidates, or none)."""
    new = {shard: run for shard, run in latest.items() if run > consumed.get(shard, "")}
    if not new:
        return None
    oldest = datetime.strptime(min(new.values()), "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
    if len(new) == shard_count or (now - oldest).total_seconds() >= wait_s:
        return max(new.values())
    return None
