"""Write a simulated fleet into a lake exactly as the collector does, plus a ground-truth file.

Each snapshot goes through the collector's own writers (``write_instance_snapshot``: texts, statements,
then the run row, one file each per snapshot per instance, named by ``snapshot_stem``; a failed snapshot
through ``write_failed_run``), deploys through ``write_deploy_events``. The ground truth (what was
injected, every event with its time, and the drops the samples job must count) goes to
``<lake>/_simulation/ground_truth.json`` unless told otherwise; it is not a lake table.

``fast=True`` writes the very same bytes under the very same names (a test compares them) without the
collector path's per-file costs: the rows are conformed to the schema once per instance instead of once
per file, and the files are renamed into place without an fsync (a simulated lake needs no durability).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from jobs.collect.collector import (
    InstanceSnapshot,
    snapshot_stem,
    write_failed_run,
    write_instance_snapshot,
)
from jobs.collect.deploys import write_deploy_events
from jobs.lake import io as lake
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath, lake_path
from jobs.local.simulate.simulated_fleet import FleetShape, InstanceTruth, SimulatedSnapshot, simulate_fleet
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from jobs.schemas.table import SCHEMA_VERSION, TableSchema

TRUTH_FOLDER = "_simulation"
TRUTH_FILE = "ground_truth.json"


@dataclass(frozen=True)
class WriteReport:
    shape: FleetShape
    snapshot_rows: int
    files: int
    bytes_written: int
    seconds: float
    generate_seconds: float
    """Part of ``seconds`` spent generating (the rest is writing)."""
    truth_path: Path

    @property
    def rows_per_second(self) -> float:
        return self.snapshot_rows / self.seconds if self.seconds else 0.0

    @property
    def mb_written(self) -> float:
        return self.bytes_written / 1e6


def default_truth_path(lake_root: LakePath) -> LakePath:
    return lake_path(lake_root) / TRUTH_FOLDER / TRUTH_FILE


def _write_conformed(
    root: LakePath, schema: TableSchema, frame: pl.DataFrame, parts: dict[str, str], stem: str
) -> Path:
    """``jobs.lake.io.write_file``'s bytes for a frame already conformed to ``schema``: the same Arrow schema
    metadata and Parquet options, a temp name renamed into place, no fsync."""
    folder = lake.partition_dir(root, schema, parts)
    folder.mkdir(parents=True, exist_ok=True)
    arrow = frame.to_arrow()
    metadata = dict(arrow.schema.metadata or {})
    metadata.update(
        {b"radar.table": schema.name.encode(), b"radar.schema_version": str(SCHEMA_VERSION).encode()}
    )
    final = folder / f"{stem}.parquet"
    if isinstance(final, ObjectPath):  # one PUT, as jobs.lake.io.write_file does on an object store
        lake.put_parquet(final, arrow.replace_schema_metadata(metadata))
        return final
    tmp = folder / f"{lake.TEMP_MARK}{stem}.sim{lake.TEMP_SUFFIX}"
    arrow = arrow.replace_schema_metadata(metadata)
    with open(tmp, "wb") as handle:
        pq.write_table(arrow, handle, **lake.parquet_options(arrow))
    os.replace(tmp, final)
    return final


def write_snapshot_fast(lake_root: LakePath, snap: SimulatedSnapshot) -> list[LakePath]:
    """What ``write_instance_snapshot`` / ``write_failed_run`` write for this snapshot, byte for byte."""
    parts = {"instance": snap.instance, "date": snap.captured_at.date().isoformat()}
    stem = snapshot_stem(snap.captured_at, {"instance": snap.instance, **snap.run})
    files = []
    if not snap.failed:
        if snap.texts.height:
            files.append(_write_conformed(lake_root, QUERY_TEXTS, snap.texts, parts, stem))
        files.append(_write_conformed(lake_root, STATEMENT_SNAPSHOTS, snap.statements, parts, stem))
    files.append(_write_conformed(lake_root, SNAPSHOT_RUNS, snap.run_row, parts, stem))
    return files


def write_fleet(
    lake_root: LakePath, shape: FleetShape, truth_path: LakePath | None = None, *, fast: bool = False
) -> WriteReport:
    """Generate the fleet instance by instance and write every snapshot as the collector would (through
    its own writers, or with ``fast`` the same bytes without their per-file costs)."""
    lake_root = lake_path(lake_root)
    started = time.perf_counter()
    generating = 0.0
    files = rows = size = 0
    truths: list[InstanceTruth] = []
    fleet = simulate_fleet(shape)
    while True:
        began = time.perf_counter()
        instance = next(fleet, None)
        generating += time.perf_counter() - began
        if instance is None:
            break
        truths.append(instance.truth)
        rows += instance.truth.snapshot_rows
        for snap in instance.snapshots():
            if fast:
                written = write_snapshot_fast(lake_root, snap)
            elif snap.failed:
                written = [
                    write_failed_run(
                        lake_root,
                        snap.instance,
                        snap.captured_at,
                        snap.run["error"],
                        snap.run["failed_phase"],
                    )
                ]
            else:
                written = write_instance_snapshot(
                    lake_root,
                    InstanceSnapshot(snap.instance, snap.captured_at, snap.run, snap.statements, snap.texts),
                )
            files += len(written)
            size += sum(path.stat().st_size for path in written)
    deploys = [d for truth in truths for d in truth.deploys]
    if deploys:
        written = write_deploy_events(lake_root, deploys, stem="simulator")
        files += len(written)
        size += sum(path.stat().st_size for path in written)
    truth_path = lake_path(truth_path) if truth_path else default_truth_path(lake_root)
    write_ground_truth(truth_path, shape, truths)
    return WriteReport(shape, rows, files, size, time.perf_counter() - started, generating, truth_path)


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def ground_truth(shape: FleetShape, truths: list[InstanceTruth]) -> dict[str, Any]:
    """The ground truth as JSON-ready data: what was injected and what the samples job must drop."""

    def drops(grew: bool) -> list[dict[str, Any]]:
        return [
            {"instance": t.instance, "reason": reason, "count": count}
            for t in truths
            for reason, count in sorted(t.expected_drops(shape.statements, grew).items())
        ]

    return {
        "shape": shape.as_json(),
        "snapshot_rows": sum(t.snapshot_rows for t in truths),
        "regressions": [{k: _iso(v) for k, v in asdict(r).items()} for t in truths for r in t.regressions],
        "deploys": [
            {"instance": d.instance, "version": d.version, "deployed_at": d.deployed_at.isoformat()}
            for t in truths
            for d in t.deploys
        ],
        "events": [
            {**{k: _iso(v) for k, v in asdict(e).items()}, "queryids": list(e.queryids)}
            for t in truths
            for e in t.events
        ],
        "expected_drops": {"default": drops(False), "drop_when_dealloc_grew": drops(True)},
    }


def write_ground_truth(path: LakePath, shape: FleetShape, truths: list[InstanceTruth]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ground_truth(shape, truths), indent=1) + "\n")
    return path


def load_ground_truth(path: LakePath | str) -> dict[str, Any]:
    try:
        return json.loads(lake_path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the simulator's ground truth {path}: {exc}") from exc
