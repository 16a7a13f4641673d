"""The per-execution drift assets and checks materialized for real on lake files (no server needed):
anchor by run config, score, the stale-baseline and degenerate-samples checks, and a re-anchor."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from jobs.lake import io as lake
from orchestration.assets.drift import (
    degenerate_samples,
    drift_sample_baselines,
    execution_drift,
    stale_baseline,
)
from orchestration.definitions import defs
from orchestration.resources import LakeResource
from tests.support.drift_frames import T0, executions, table_stats, write_executions, write_table_stats

H = timedelta(hours=1)
MIN = timedelta(minutes=1)
NOW = T0 + 2 * H


def lognormal(seed: int, n: int, mu: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(mu, 0.2, n)


def anchor_config(version: str, start: object, end: object) -> dict[str, object]:
    values = {"baseline_version": version, "window_start": str(start), "window_end": str(end)}
    return {"ops": {"drift_sample_baselines": {"config": values}}}


def score_config(now: object) -> dict[str, object]:
    return {"ops": {"execution_drift": {"config": {"now": str(now)}}}}


def test_definitions_wire_the_stage_into_the_analysis_job() -> None:
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"drift_sample_baselines", "execution_drift"} <= keys
    job = defs.resolve_job_def("analysis_job")
    assert "execution_drift" in job.graph.node_names()
    assert "drift_sample_baselines" not in job.graph.node_names()  # anchoring is explicit, never scheduled
    checks = {key.name for key in defs.resolve_asset_graph().asset_check_keys}
    assert {"stale_baseline", "degenerate_samples"} <= checks


def test_anchor_score_stale_check_and_reanchor_as_assets(lake_root: Path) -> None:
    # q1-q3 steady for an hour; after an ANALYZE of "orders" at NOW - 8 min all run at 3x the cost (three
    # BLOCKed pairs: [drift.samples] stale_min_block_pairs)
    base = pl.concat(
        [
            executions(
                f"q{i}", T0, lognormal(i, 400), cost=lognormal(10 + i, 400) * 10, step=timedelta(seconds=9)
            )
            for i in (1, 2, 3)
        ]
    )
    cand = pl.concat(
        [
            executions(
                f"q{i}",
                NOW - 8 * MIN,
                lognormal(20 + i, 300),
                cost=lognormal(30 + i, 300) * 30,
                step=MIN / 60,
            )
            for i in (1, 2, 3)
        ]
    )
    write_executions(lake_root, pl.concat([base, cand]))
    write_table_stats(
        lake_root,
        table_stats(
            [
                {
                    "instance": "alpha",
                    "captured_at": NOW - MIN,
                    "dbname": "app",
                    "relid": 1,
                    "schemaname": "public",
                    "relname": "orders",
                    "last_analyze": NOW - 8 * MIN,
                    "analyze_count": 2,
                    "autoanalyze_count": 0,
                }
            ]
        ),
    )
    res = {"lake": LakeResource(root=str(lake_root))}
    with dg.instance_for_test() as instance:
        refused = dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            raise_on_error=False,
            run_config=anchor_config("", T0, T0 + H),
        )
        assert not refused.success
        anchored = dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            run_config=anchor_config("v1", T0, T0 + H),
        )
        meta = anchored.asset_materializations_for_node("drift_sample_baselines")[0].metadata
        assert (meta["baseline_version"].value, meta["pairs"].value) == ("v1", 9)
        again = dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            raise_on_error=False,
            run_config=anchor_config("v1", T0, T0 + H),
        )
        assert not again.success  # a version is never rewritten

        scored = dg.materialize(
            [execution_drift, stale_baseline, degenerate_samples],
            resources=res,
            instance=instance,
            run_config=score_config(NOW),
        )
        assert scored.success
        meta = scored.asset_materializations_for_node("execution_drift")[0].metadata
        assert (meta["pairs"].value, meta["BLOCK"].value, meta["PASS"].value) == (9, 3, 6)
        assert (meta["insufficient_samples"].value, meta["no_baseline"].value, meta["degenerate"].value) == (
            0,
            0,
            0,
        )
        assert "| cost" in meta["by_metric"].value
        checks = {c.check_name: c for c in scored.get_asset_check_evaluations()}
        stale = checks["stale_baseline"]
        assert not stale.passed and stale.severity == dg.AssetCheckSeverity.WARN
        assert "baseline likely stale" in stale.description and "alpha:app.public.orders" in stale.description
        assert checks["degenerate_samples"].passed
        flagged = lake.read_table(lake_root, "execution_drift").filter(pl.col("flag") == "BLOCK")
        assert set(flagged["metric"]) == {"cost"}

        # re-anchor over the window after the ANALYZE, score again: the check clears
        dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            run_config=anchor_config("v2", NOW - 8 * MIN, NOW),
        )
        rescored = dg.materialize(
            [execution_drift, stale_baseline, degenerate_samples],
            resources=res,
            instance=instance,
            run_config=score_config(NOW + MIN),
        )
        meta = rescored.asset_materializations_for_node("execution_drift")[0].metadata
        assert meta["BLOCK"].value == 0
        assert all(c.passed for c in rescored.get_asset_check_evaluations())


def test_degenerate_check_fails_on_thin_windows(lake_root: Path) -> None:
    write_executions(lake_root, executions("q1", T0, lognormal(1, 300), step=MIN / 10))
    res = {"lake": LakeResource(root=str(lake_root))}
    with dg.instance_for_test() as instance:
        dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            run_config=anchor_config("v1", T0, T0 + H),
        )
        result = dg.materialize(
            [execution_drift, stale_baseline, degenerate_samples],
            resources=res,
            instance=instance,
            run_config=score_config(NOW),  # nothing ran in the window: every pair is insufficient_samples
        )
        meta = result.asset_materializations_for_node("execution_drift")[0].metadata
        assert (meta["WARN"].value, meta["insufficient_samples"].value, meta["degenerate"].value) == (3, 3, 3)
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert not checks["degenerate_samples"].passed
        assert "widen the capture window" in checks["degenerate_samples"].description
        assert checks["stale_baseline"].passed


@pytest.mark.parametrize("bad", ["yesterday", ""])
def test_anchor_run_config_errors_fail_the_run_with_the_key(lake_root: Path, bad: str) -> None:
    res = {"lake": LakeResource(root=str(lake_root))}
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [drift_sample_baselines],
            resources=res,
            instance=instance,
            raise_on_error=False,
            run_config=anchor_config("v1", bad, T0 + H),
        )
        assert not result.success
        failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
        assert failure is not None
        assert ("window_start" in failure.description) if bad else ("needs run config" in failure.description)


def test_scoring_an_empty_lake_succeeds_with_nothing_to_judge(lake_root: Path) -> None:
    res = {"lake": LakeResource(root=str(lake_root))}
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [execution_drift, stale_baseline, degenerate_samples], resources=res, instance=instance
        )
        meta = result.asset_materializations_for_node("execution_drift")[0].metadata
        assert (meta["pairs"].value, meta["BLOCK"].value) == (0, 0)
        assert all(c.passed for c in result.get_asset_check_evaluations())
    assert lake.table_files(lake_root, "execution_drift") == []
