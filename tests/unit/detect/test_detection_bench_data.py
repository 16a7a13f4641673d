"""The detection benchmark's generated lake: deterministic, laid out as the collector writes it, and the
real pipeline (samples job + run_detection) finds exactly the injected regressions at their deploys."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl

from jobs.collect.deploys import load_deploy_events
from jobs.lake import io as lake
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.schemas.collected import QUERY_TEXTS, STATEMENT_SNAPSHOTS
from tests.benchmarks.detection_lake import (
    TAIL_MINUTES,
    LakeShape,
    append_tail,
    build_lake,
    generate_instance,
)

SMALL = LakeShape(instances=3, queries=40, days=0.25, deploys_per_instance_day=16, regressions=2, seed=7)


def test_small_lake_detection_finds_the_injected_regressions(tmp_path: Path) -> None:
    generated = build_lake(tmp_path, SMALL)
    assert len(generated.regressions) == 2
    assert generated.deploys == SMALL.instances * 4
    snapshots = lake.read_table(generated.root, STATEMENT_SNAPSHOTS)
    assert snapshots.height == generated.snapshot_rows == SMALL.instances * SMALL.queries * SMALL.minutes
    assert snapshots["captured_at"].max() < SMALL.end
    texts = lake.read_table(generated.root, QUERY_TEXTS)
    assert (
        texts.group_by("instance").agg(pl.col("query").n_unique())["query"].to_list() == [SMALL.queries] * 3
    )

    outcome = run_detection(generated.root, DetectionConfig(), now=SMALL.end)
    found = {(r["instance"], r["queryid"], r["deployed_at"]) for r in outcome.detected.iter_rows(named=True)}
    injected = {(r.instance, r.queryid, r.deployed_at) for r in generated.regressions}
    assert found == injected
    assert outcome.regressions.height == generated.deploys * SMALL.queries  # every deploy x its series


def test_generation_is_deterministic_and_the_tail_continues_the_counters(tmp_path: Path) -> None:
    first = generate_instance(SMALL, 1, 1)
    again = generate_instance(SMALL, 1, 1)
    assert first[0].equals(again[0]) and first[3] == again[3] and first[4] == again[4]
    other_seed = generate_instance(LakeShape(**{**SMALL.__dict__, "seed": 8}), 1, 1)
    assert not first[0].equals(other_seed[0])

    generated = build_lake(tmp_path, SMALL)
    assert build_lake(tmp_path, SMALL).seconds == 0.0  # cached by shape
    copy = tmp_path / "copy"
    copy.mkdir()
    import shutil

    shutil.copytree(generated.root, copy, dirs_exist_ok=True)
    files = append_tail(copy, generated.tail)
    assert files == 2 * SMALL.instances * TAIL_MINUTES  # statement_snapshots + snapshot_runs, one a minute
    snapshots = lake.read_table(copy, STATEMENT_SNAPSHOTS)
    assert snapshots["captured_at"].max() == SMALL.end + timedelta(minutes=TAIL_MINUTES - 1)
    calls = snapshots.sort("captured_at").group_by("instance", "queryid").agg(pl.col("calls").diff().min())
    assert calls["calls"].min() >= 1  # cumulative across the history/tail boundary
    deploys = load_deploy_events(copy)
    assert deploys["deployed_at"].max() == SMALL.end - timedelta(minutes=10)
