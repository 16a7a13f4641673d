"""The contention benchmark's generator: its frames say what its labels say (pure, quick)."""

from __future__ import annotations

import polars as pl
import pytest

from jobs.schemas.collected import QUERY_SAMPLES, SAMPLE_DELTAS
from tests.benchmarks.contention_data import (
    CONTENTION,
    CONTENTION_REGRESSION,
    INDEX_DROP,
    INTERVALS,
    LATENCY,
    QUIET,
    QUIET_REGRESSION,
    SCENARIO_CYCLE,
    TEMP_SPILL,
    ContentionData,
    InstanceTruth,
    frames_hash,
    generate,
)


@pytest.fixture(scope="module")
def data() -> ContentionData:
    return generate(40, seed=7)


def _ratios(data: ContentionData, truth: InstanceTruth) -> pl.DataFrame:
    """Per series of the instance: after / before ratios of latency, calls and work per call, using only
    whole intervals clearly inside each regime (the first new-regime interval may be partly affected)."""
    assert truth.change_at is not None
    rows = data.samples.filter(pl.col("instance") == truth.instance)
    last = truth.episode_ends_at
    before = rows.filter(pl.col("interval_end") <= truth.change_at)
    after = rows.filter(pl.col("interval_start") > truth.change_at)
    if last is not None:
        after = after.filter(pl.col("interval_end") <= last)

    def per_query(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.group_by("queryid").agg(
            (pl.col("total_exec_time").sum() / pl.col("calls").sum()).alias("latency"),
            pl.col("calls").mean().alias("calls"),
            ((pl.col("shared_blks_hit") + pl.col("shared_blks_read")).sum() / pl.col("calls").sum()).alias(
                "blocks"
            ),
            (pl.col("temp_blks_written").sum() / pl.col("calls").sum()).alias("temp"),
            (pl.col("rows").sum() / pl.col("calls").sum()).alias("rows"),
        )

    joined = per_query(before).join(per_query(after), on="queryid", suffix="_after")
    return joined.select(
        "queryid",
        (pl.col("latency_after") / pl.col("latency")).alias("latency"),
        (pl.col("calls_after") / pl.col("calls")).alias("calls"),
        (pl.col("blocks_after") / pl.col("blocks")).alias("blocks"),
        pl.col("temp"),
        pl.col("temp_after"),
        (pl.col("rows_after") / pl.col("rows")).alias("rows"),
    )


def test_frames_have_every_sample_column_and_one_row_per_interval(data: ContentionData) -> None:
    assert set(QUERY_SAMPLES.column_names) <= set(data.samples.columns)
    for column in SAMPLE_DELTAS:
        assert data.samples[column].null_count() == 0, column
    assert (data.samples["calls"] > 0).all()
    per_series = data.samples.group_by("instance", "queryid").len()
    assert (per_series["len"] == INTERVALS).all()
    assert per_series.height == sum(len(t.series) for t in data.truths)
    keys = data.texts.select("instance", "queryid").unique()
    assert keys.height == data.texts.height == per_series.height
    for truth in data.truths:
        assert 8 <= len(truth.series) <= 30
        assert len({s.query for s in truth.series}) == len(truth.series)  # one fingerprint per series


def test_scenarios_cycle_and_deploys_match_the_labels(data: ContentionData) -> None:
    deployed = dict(zip(data.deploys["instance"], data.deploys["deployed_at"], strict=True))
    for number, truth in enumerate(data.truths):
        assert (truth.scenario, truth.at_deploy) == SCENARIO_CYCLE[number % len(SCENARIO_CYCLE)]
        assert deployed.get(truth.instance) == truth.deploy_at
        assert (truth.deploy_at is not None) == truth.at_deploy
        if truth.at_deploy and truth.scenario != QUIET:
            assert truth.change_at == truth.deploy_at
        assert truth.episode == (truth.scenario in (CONTENTION, CONTENTION_REGRESSION))
        expected_true = 1 if truth.scenario in (CONTENTION_REGRESSION, QUIET_REGRESSION) else 0
        assert len(truth.true_queryids) == expected_true
        assert (truth.change_at is None) == (truth.scenario == QUIET)


def test_episodes_slow_most_series_together_with_work_unchanged(data: ContentionData) -> None:
    episodes = [t for t in data.truths if t.episode]
    assert episodes
    for truth in episodes:
        assert truth.episode_factor is not None and 1.3 <= truth.episode_factor <= 3.0
        contended = [s for s in truth.series if s.contended]
        assert len(contended) >= 0.5 * len(truth.series)
        ratios = {r["queryid"]: r for r in _ratios(data, truth).iter_rows(named=True)}
        for s in truth.series:
            r = ratios[s.queryid]
            if s.regression is not None:
                continue
            assert r["latency"] == pytest.approx(s.latency_factor, rel=0.25), (truth.instance, s.queryid, r)
            if s.contended:
                assert s.latency_factor > 1.0 and r["calls"] < 1.0
            else:
                assert s.latency_factor == 1.0
            # Work per call unchanged: blocks, rows and temp blocks (most series have none).
            assert 0.85 < r["blocks"] < 1.15 and 0.85 < r["rows"] < 1.15
            assert r["temp_after"] == pytest.approx(r["temp"], rel=0.15), (truth.instance, s.queryid, r)
        common = sorted(ratios[s.queryid]["latency"] for s in contended if s.regression is None)
        median = common[len(common) // 2]
        assert median == pytest.approx(truth.episode_factor, rel=0.25)


def test_true_regressions_have_their_labelled_signature(data: ContentionData) -> None:
    kinds = set()
    for truth in data.truths:
        for s in truth.series:
            if s.regression is None:
                continue
            kinds.add(s.regression)
            r = _ratios(data, truth).filter(pl.col("queryid") == s.queryid).row(0, named=True)
            common = truth.episode_factor or 1.0
            if s.regression == INDEX_DROP:
                assert 35 < r["blocks"] < 70 and r["latency"] > 10 * common
            elif s.regression == LATENCY:
                assert 0.85 < r["blocks"] < 1.15 and r["latency"] > 2.0 * common
            else:
                assert s.regression == TEMP_SPILL
                assert r["temp_after"] >= 40 and r["latency"] > 1.8 * common
            assert 0.85 < r["rows"] < 1.15
    assert kinds == {INDEX_DROP, LATENCY, TEMP_SPILL}


def test_generation_is_deterministic_and_the_hash_sees_a_change(data: ContentionData) -> None:
    again = generate(40, seed=7)
    assert frames_hash(again) == frames_hash(data)
    assert again.truths == data.truths
    assert frames_hash(generate(40, seed=8)) != frames_hash(data)
    changed = ContentionData(
        data.samples.with_columns(pl.col("rows") + (pl.int_range(pl.len()) == 5).cast(pl.Int64)),
        data.texts,
        data.deploys,
        data.truths,
    )
    assert frames_hash(changed) != frames_hash(data)


def test_small_instances_have_a_neighbour_whose_load_slows_them_by_processor_sharing() -> None:
    data = generate(10, seed=7, small_instances=30)
    assert generate(10, seed=7).samples.equals(data.samples.filter(pl.col("instance") < "db0010"))
    small = [t for t in data.truths if t.small]
    assert len(small) == 30 and all(1 <= len(t.series) <= 3 for t in small)
    assert data.activity is not None and set(data.activity["instance"]) <= {t.instance for t in small}
    for t in small:
        neighbour = data.samples.filter(pl.col("queryid").is_in(list(t.neighbours)))
        if not t.episode:
            assert neighbour.height == 0
            continue
        assert t.change_at is not None and t.neighbour_load is not None and t.true_cores is not None
        assert neighbour["interval_start"].min() >= t.change_at  # it appears at the change
        seconds = neighbour.group_by("interval_end").agg(pl.col("total_exec_time").sum() / 60_000.0)
        assert seconds["total_exec_time"].median() == pytest.approx(t.neighbour_load, rel=0.2)
        assert t.episode_factor is not None and t.episode_factor >= 1.0
        contended = [s for s in t.series if s.regression is None]
        assert all(s.latency_factor <= t.episode_factor * 1.5 for s in contended)
