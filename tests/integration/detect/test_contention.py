"""Contention vs regression (jobs.detect.contention) on tiny inline series: every rule once."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from jobs.collect.deploys import DeployEvent, events_frame, mark_deploy
from jobs.detect.config import ContentionConfig, RegressionConfig
from jobs.detect.contention import separate_contention
from jobs.detect.deploy_analysis import detect_regressions
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.pipeline.detection import DetectionConfig, detect_from_frames, run_detection
from jobs.publish.console import print_detection
from jobs.schemas.analysed import INSTANCE_SLOWDOWNS
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.lakes import SERIES_DEPLOY_AT, SERIES_STEP, series_samples, series_texts

CONFIG = RegressionConfig(window_before=timedelta(minutes=5), window_after=timedelta(minutes=10))
DEFAULT = ContentionConfig()
BEFORE, AFTER = 30, 60


def instance_frames(
    factors: list[float],
    *,
    instance: str = "alpha",
    seed: int = 0,
    first: int = -BEFORE,
    levels: list[float] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One query per factor on ``instance``: latency ×factor from the deploy on (queryids 100, 101, ...),
    ``levels`` ms before it (default 2 ms, 3 ms, ...: all above min_compared_latency_ms)."""
    rng = np.random.default_rng(seed)
    samples, texts = [], []
    for i, factor in enumerate(factors):
        level = levels[i] if levels else 2.0 + i
        before = level * rng.lognormal(0.0, 0.1, BEFORE)
        after = level * factor * rng.lognormal(0.0, 0.1, AFTER)
        samples.append(
            series_samples(np.concatenate([before, after]), instance=instance, queryid=100 + i, first=first)
        )
        texts.append((instance, 100 + i, f"select {i} from t{i} where id = $1"))
    return pl.concat(samples), series_texts(texts)


def deploy_at(at=SERIES_DEPLOY_AT) -> pl.DataFrame:
    return events_frame([DeployEvent(version="v7", deployed_at=at, instance=None)]).drop("date")


def run(
    samples: pl.DataFrame,
    texts: pl.DataFrame,
    work_changed: dict[int, bool | None] | None = None,
    config: ContentionConfig = DEFAULT,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Deploy analysis, then (optionally) the work helper's column set explicitly, then contention."""
    found = detect_regressions(samples, texts, deploy_at(), CONFIG)
    assert found.filter(pl.col("status") == "detected").height >= 1  # the premise: the detector fires
    if work_changed is not None:
        found = found.with_columns(
            pl.col("queryid")
            .replace_strict(work_changed, default=None, return_dtype=pl.Boolean)
            .alias("work_changed")
        )
    return separate_contention(found, samples, texts, config)


def by_queryid(frame: pl.DataFrame) -> dict[int, dict]:
    return {row["queryid"]: row for row in frame.iter_rows(named=True)}


def test_many_queries_slowing_together_are_one_instance_slowdown_not_n_regressions() -> None:
    samples, texts = instance_frames([2.0] * 8)
    before = detect_regressions(samples, texts, deploy_at(), CONFIG)
    assert before.filter(pl.col("status") == "detected").height == 8  # N query regressions without it
    out, slowdowns = run(samples, texts)
    assert out.height == 8
    assert set(out["status"]) == {"no_regression"} and set(out["reason"]) == {"instance_slowdown"}
    assert set(out["kind"]) == {"contention"}
    assert out["instance_slowdown_ratio"].to_numpy() == pytest.approx(2.0, rel=0.1)
    assert out["slowdown_excess"].to_numpy() == pytest.approx(1.0, abs=0.15)
    assert slowdowns.height == 1
    row = slowdowns.row(0, named=True)
    assert (row["instance"], row["analysis"], row["deploy_version"]) == ("alpha", "deploy", "v7")
    assert row["began_at"] == SERIES_DEPLOY_AT
    assert (row["queries"], row["series_compared"], row["findings_suppressed"]) == (8, 8, 8)
    assert row["queryids"] == ",".join(str(q) for q in range(100, 108))
    assert row["median_ratio"] == pytest.approx(2.0, rel=0.1) and row["max_ratio"] >= row["median_ratio"]
    assert row["work_unchanged"] is None  # no work evidence given
    assert row["calls_per_s_before"] == pytest.approx(800.0) and row["calls_per_s_after"] == pytest.approx(
        800.0
    )
    assert row["summary"].startswith("8 of 8 queries on alpha 2") and "at deploy v7" in row["summary"]
    assert "work per call not measured" in row["summary"]
    assert slowdowns.columns == INSTANCE_SLOWDOWNS.column_names


def test_a_query_whose_slowdown_clearly_exceeds_the_common_one_is_kept_as_both() -> None:
    samples, texts = instance_frames([2.0] * 7 + [10.0])
    out, slowdowns = run(samples, texts)
    rows = by_queryid(out)
    assert (rows[107]["status"], rows[107]["kind"]) == ("detected", "both")
    assert rows[107]["slowdown_excess"] == pytest.approx(5.0, rel=0.15)
    assert rows[107]["instance_slowdown_ratio"] == pytest.approx(2.0, rel=0.1)
    assert all(rows[q]["kind"] == "contention" for q in range(100, 107))
    assert slowdowns["findings_suppressed"].to_list() == [7]


def test_a_query_only_somewhat_slower_than_the_common_shift_is_contention() -> None:
    samples, texts = instance_frames([2.0] * 7 + [5.0])  # ×2.5 the common one: below excess_factor 3
    out, _ = run(samples, texts)
    assert by_queryid(out)[107]["kind"] == "contention"


def test_a_query_whose_work_changed_is_kept_inside_an_episode() -> None:
    samples, texts = instance_frames([2.0] * 8)
    out, slowdowns = run(samples, texts, work_changed={q: q == 103 for q in range(100, 108)})
    rows = by_queryid(out)
    assert (rows[103]["status"], rows[103]["kind"]) == ("detected", "both")
    assert all(rows[q]["status"] == "no_regression" for q in range(100, 108) if q != 103)
    assert slowdowns["work_unchanged"].to_list() == [False]
    assert slowdowns["findings_suppressed"].to_list() == [7]


def test_work_changed_false_or_null_or_missing_are_judged_on_latency() -> None:
    samples, texts = instance_frames([2.0] * 8)
    unchanged, slowdowns = run(samples, texts, work_changed=dict.fromkeys(range(100, 108), False))
    assert set(unchanged["kind"]) == {"contention"}
    assert slowdowns["work_unchanged"].to_list() == [True]
    assert "work per call unchanged" in slowdowns["summary"][0]
    unknown, _ = run(samples, texts, work_changed=dict.fromkeys(range(100, 108)))
    missing, _ = run(samples, texts)
    assert set(unknown["kind"]) == set(missing["kind"]) == {"contention"}


def test_a_lone_slowed_query_with_flat_neighbours_is_a_regression_of_its_own() -> None:
    samples, texts = instance_frames([1.0] * 7 + [3.0])  # tripled alone, work unchanged (lock waits)
    out, slowdowns = run(samples, texts, work_changed=dict.fromkeys(range(100, 108), False))
    row = by_queryid(out)[107]
    assert (row["status"], row["kind"]) == ("detected", "plan_or_work")
    assert row["instance_slowdown_ratio"] is None
    assert row["slowdown_excess"] == pytest.approx(3.0, rel=0.15)
    assert slowdowns.height == 0
    assert out.filter(pl.col("queryid") != 107)["kind"].is_null().all()  # never detected: no kind


def test_too_few_other_series_make_no_episode() -> None:
    samples, texts = instance_frames([2.0] * 3)  # 3 series < min_series 4
    out, slowdowns = run(samples, texts)
    assert slowdowns.height == 0
    assert set(out["status"]) == {"detected"} and set(out["kind"]) == {"plan_or_work"}
    # The same series with a lower bar are an episode: the count is the config field, not a constant.
    _, lowered = run(samples, texts, config=ContentionConfig(min_series=3, min_shifted_series=2))
    assert lowered.height == 1


def test_a_minority_of_shifted_series_is_no_episode() -> None:
    samples, texts = instance_frames([2.0] * 3 + [1.0] * 5)  # 3 of 8 < min_shifted_share 0.5
    out, slowdowns = run(samples, texts)
    assert slowdowns.height == 0
    assert set(out.filter(pl.col("status") == "detected")["queryid"]) == {100, 101, 102}


def test_the_finding_itself_is_left_out_of_the_common_shift() -> None:
    # 3 flat, 3 ×2, 1 ×20: with itself counted the ×20 query would make 4 of 7 shifted (an episode
    # judged against its own slowdown); the others alone are 3 of 6: an episode still, and the ×20 is both.
    samples, texts = instance_frames([1.0] * 3 + [2.0] * 3 + [20.0])
    out, slowdowns = run(samples, texts)
    rows = by_queryid(out)
    assert slowdowns.height == 1 and slowdowns["queries"][0] == 4
    assert rows[106]["kind"] == "both"
    # Its common shift is the median of the six others (1 1 1 2 2 2 → ×1.41), not of all seven (×2).
    assert rows[106]["instance_slowdown_ratio"] == pytest.approx(2**0.5, rel=0.12)


def test_sub_millisecond_series_are_not_compared_but_are_judged() -> None:
    # Four 2-5 ms queries ×2 and six flat 0.05 ms ones (CPU contention barely reaches those), plus a
    # 0.05 ms query that lost its index (×100).
    factors = [2.0] * 4 + [1.0] * 6 + [100.0]
    levels = [2.0, 3.0, 4.0, 5.0] + [0.05] * 7
    samples, texts = instance_frames(factors, levels=levels)
    out, slowdowns = run(samples, texts)
    assert slowdowns["series_compared"].to_list() == [4] and slowdowns["queries"].to_list() == [4]
    rows = by_queryid(out)
    assert (rows[110]["status"], rows[110]["kind"]) == ("detected", "both")  # below the floor, still judged
    assert all(rows[q]["kind"] == "contention" for q in range(100, 104))
    # Without the floor the flat tiny queries dilute the episode away (4 of 11 shifted).
    _, diluted = run(samples, texts, config=ContentionConfig(min_compared_latency_ms=0.0))
    assert diluted.height == 0


def test_in_an_uneven_episode_the_most_sensitive_query_is_not_a_regression() -> None:
    # The others slowed ×1.2 to ×6 (long queries suffer more preemption): their median is ×2.45, and a
    # ×12 query is 4.9× that, above excess_factor 3 — but inside their spread (2 x 1.48 MAD: ×6.6).
    samples, texts = instance_frames([1.2, 1.4, 2.0, 3.0, 5.0, 6.0, 12.0])
    out, slowdowns = run(samples, texts)
    row = by_queryid(out)[106]
    assert row["slowdown_excess"] > ContentionConfig().excess_factor  # the premise
    assert (row["status"], row["kind"]) == ("no_regression", "contention")
    assert slowdowns.height == 1


def test_the_interval_straddling_the_moment_is_on_neither_side() -> None:
    from jobs.detect.contention import series_shifts

    # 20 intervals of 10 s, offset 5 s from the moment: the tenth runs from -5 s to +5 s.
    ends = [SERIES_DEPLOY_AT + timedelta(seconds=10 * (i - 9) + 5) for i in range(20)]
    series = pl.DataFrame(
        {
            "instance": "alpha",
            "series": "5:f",
            "fingerprint": "f",
            "queryid": 1,
            "interval_start": [e - SERIES_STEP for e in ends],
            "interval_end": ends,
            "calls": 10,
            "interval_seconds": 10.0,
            "value": [1.0] * 9 + [50.0] + [2.0] * 10,
        },
        schema_overrides={
            "interval_start": pl.Datetime("us", "UTC"),
            "interval_end": pl.Datetime("us", "UTC"),
        },
    )
    moments = pl.DataFrame(
        {"moment": [0], "instance": ["alpha"], "at": [SERIES_DEPLOY_AT]},
        schema_overrides={"moment": pl.Int64, "at": pl.Datetime("us", "UTC")},
    )
    shift = series_shifts(series, moments, ContentionConfig(window_samples=20)).row(0, named=True)
    assert (shift["before_n"], shift["after_n"]) == (9, 10)
    assert shift["log_ratio"] == pytest.approx(np.log(2.0))


def test_a_chain_of_unannounced_change_times_is_judged_at_its_median() -> None:
    # Seven queries ×2 at the deploy time (no deploy marked), one more ×2 100 s earlier: one chain (within
    # same_moment_within). At its earliest time the seven were still flat; at its median they all stepped.
    samples, texts = instance_frames([2.0] * 7)
    early = 20.0 * np.concatenate([np.ones(20), 2.0 * np.ones(70)])
    samples = pl.concat([samples, series_samples(early, queryid=200)])
    texts = pl.concat([texts, series_texts([("alpha", 200, "select early from e where id = $1")])])
    found = detect_unannounced_regressions(samples, texts, CONFIG)
    assert found.filter(pl.col("status") == "detected").height == 8
    out, slowdowns = separate_contention(found, samples, texts)
    assert slowdowns["began_at"].to_list() == [SERIES_DEPLOY_AT]
    assert out.filter(pl.col("queryid") != 200)["reason"].unique().to_list() == ["instance_slowdown"]


EPISODES = 100


def labelled_episodes(instances: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame, dict, dict]:
    """Every instance slows at the deploy by a common factor (×1.3-3); each series by common^U(0.5, 1.5)
    (long queries suffer more), noise 5-25% per sample; 8% of series are true regressions on top: half
    with work changed (×1.2-10 more), half latency only (×3-20 more). Table names are letters: the
    fingerprint treats relation names that differ only in trailing digits as one (t10 = t11)."""
    rng = np.random.default_rng(seed)
    samples, texts, truth = [], [], {}
    for n in range(instances):
        instance, common, noise = f"i{n}", float(rng.uniform(1.3, 3.0)), float(rng.uniform(0.05, 0.25))
        for q in range(int(rng.integers(6, 16))):
            level = float(np.exp(rng.uniform(0.0, np.log(200.0))))
            own = common ** float(rng.uniform(0.5, 1.5))
            kind = None
            if rng.random() < 0.08:
                kind = "work" if rng.random() < 0.5 else "latency"
                own *= float(rng.uniform(1.2, 10.0) if kind == "work" else rng.uniform(3.0, 20.0))
            values = level * np.concatenate(
                [rng.lognormal(0, noise, BEFORE), own * rng.lognormal(0, noise, AFTER)]
            )
            queryid = 1000 * n + q
            samples.append(series_samples(values, instance=instance, queryid=queryid))
            texts.append((instance, queryid, f"select {q} from tbl_{chr(97 + q)} where id = $1"))
            truth[(instance, queryid)] = kind
    work = {key: kind == "work" for key, kind in truth.items()}
    return pl.concat(samples), series_texts(texts), truth, work


def test_labelled_contention_episodes_report_no_contention_only_query_and_keep_true_ones() -> None:
    samples, texts, truth, work = labelled_episodes(EPISODES, seed=0)
    found = detect_regressions(samples, texts, deploy_at(), CONFIG)
    assert found.filter(pl.col("status") == "detected").height > 0.9 * len(truth)  # N regressions alone
    keys = pl.DataFrame(
        {
            "instance": [k[0] for k in work],
            "queryid": [k[1] for k in work],
            "work_changed": list(work.values()),
        }
    )
    out, slowdowns = separate_contention(
        found.drop("work_changed", strict=False).join(keys, on=["instance", "queryid"], how="left"),
        samples,
        texts,
    )
    reported = {
        (r["instance"], r["queryid"])
        for r in out.filter(pl.col("status") == "detected").iter_rows(named=True)
    }
    assert slowdowns.height == EPISODES
    false_episodes = {key[0] for key in reported if truth[key] is None}
    assert len(false_episodes) <= 0.01 * EPISODES, sorted(false_episodes)  # the bar: <= 1%
    true = [key for key, kind in truth.items() if kind is not None]
    assert len(reported & set(true)) >= 0.95 * len(true)


def test_other_instances_do_not_count() -> None:
    alpha, alpha_texts = instance_frames([2.0] * 2 + [1.0], instance="alpha")
    beta, beta_texts = instance_frames([2.0] * 8, instance="beta", seed=1)
    samples, texts = pl.concat([alpha, beta]), pl.concat([alpha_texts, beta_texts])
    out, slowdowns = run(samples, texts)
    assert slowdowns["instance"].to_list() == ["beta"]
    assert set(out.filter(pl.col("instance") == "alpha")["kind"].drop_nulls()) == {"plan_or_work"}
    assert set(out.filter(pl.col("instance") == "beta")["kind"]) == {"contention"}


def test_an_unannounced_episode_is_found_at_the_change_time() -> None:
    samples, texts = instance_frames([2.0] * 8)
    found = detect_unannounced_regressions(samples, texts, CONFIG)
    assert found.filter(pl.col("status") == "detected").height == 8
    out, slowdowns = separate_contention(found, samples, texts)
    assert set(out["reason"]) == {"instance_slowdown"}
    assert slowdowns.height == 1
    row = slowdowns.row(0, named=True)
    assert (row["analysis"], row["deploy_id"]) == ("unannounced", None)
    assert abs(row["began_at"] - SERIES_DEPLOY_AT) <= 2 * SERIES_STEP
    assert "from 2026-11-29" in row["summary"]


def test_the_result_is_deterministic_and_independent_of_row_order() -> None:
    samples, texts = instance_frames([2.0] * 6 + [9.0, 1.0])
    first = run(samples, texts)
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=5)
    second = run(shuffled, texts.reverse())
    for a, b in zip(first, second, strict=True):
        assert a.equals(b)


def test_detect_from_frames_and_run_detection_carry_the_slowdowns(lake_root: Path) -> None:
    samples, texts = instance_frames([2.0] * 7 + [10.0])
    found = detect_from_frames(samples, texts, deploy_at(), PLAN_SNAPSHOTS.empty())
    assert found.instance_slowdowns.height >= 1
    assert found.regressions.filter(pl.col("status") == "detected")["queryid"].to_list() == [107]
    assert found.unannounced.filter(pl.col("status") == "detected")["kind"].to_list() == ["both"]

    # The same through the lake: run_detection writes instance_slowdowns, DuckDB has a view of it.
    contention_lake(lake_root)
    outcome = run_detection(lake_root, DetectionConfig(rebuild_samples=False))
    assert outcome.instance_slowdowns.height >= 1
    written = lake.scan_table(lake_root, INSTANCE_SLOWDOWNS).collect()
    assert written.height == outcome.instance_slowdowns.height
    assert set(written["analysis"]) == {"deploy", "unannounced"}
    stored = lake.scan_table(lake_root, "performance_regressions").collect()
    assert stored.filter(pl.col("reason") == "instance_slowdown").height >= 7
    connection = duckdb_views.connect(lake_root)
    assert connection.execute("select count(*) from instance_slowdowns").fetchone()[0] == written.height
    console = Console(record=True, width=200)
    print_detection(outcome, console)
    shown = console.export_text()
    assert "Instance slowdowns" in shown and "7 of 7 queries on alpha" not in shown  # 8 compared
    assert "both (instance ×" in shown and "7 series not reported: 7 instance_slowdown" in shown
    console = Console(record=True, width=200)
    print_detection(outcome, console, show_all=True)  # --all: each series not reported, with its reason
    assert "alpha: select 1 from t1 where id = $1 → instance_slowdown" in console.export_text()


def contention_lake(lake_root: Path) -> None:
    """query_samples + texts + a deploy in the lake: seven queries ×2 at the deploy, one ×10."""
    samples, texts = instance_frames([2.0] * 7 + [10.0])
    part = {"instance": "alpha", "date": "2026-11-29"}
    lake.write_table(lake_root, "query_samples", samples.drop("instance"), part, "s")
    lake.write_table(
        lake_root, "query_texts", texts.drop("instance").with_columns(dbid=5, userid=10), part, "t"
    )
    mark_deploy(lake_root, version="v7", instances=["alpha"], at=SERIES_DEPLOY_AT.isoformat())


def test_the_regressions_asset_materializes_instance_slowdowns(lake_root: Path) -> None:
    import dagster as dg

    from orchestration.assets.regressions import (
        detected_regressions_are_consistent,
        regressions_and_plan_diffs,
    )
    from orchestration.definitions import defs
    from orchestration.resources import LakeResource

    contention_lake(lake_root)
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [regressions_and_plan_diffs, detected_regressions_are_consistent],
            resources={"lake": LakeResource(root=str(lake_root))},
            instance=instance,
        )
        assert result.success
        assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
        materialized = {m.asset_key.to_user_string(): m for m in result.get_asset_materialization_events()}
    assert {"performance_regressions", "instance_slowdowns", "plan_diffs"} <= set(materialized)
    metadata = materialized["instance_slowdowns"].materialization.metadata
    assert metadata["episodes"].value == 2  # the deploy's and the unannounced analysis' moment
    assert metadata["findings_suppressed"].value == 14  # seven queries, in both analyses
    written = lake.scan_table(lake_root, INSTANCE_SLOWDOWNS).collect()
    assert written.height == 2 and set(written["instance"]) == {"alpha"}
    detected = (
        lake.scan_table(lake_root, "performance_regressions").collect().filter(pl.col("status") == "detected")
    )
    assert set(detected["queryid"]) == {107} and set(detected["kind"]) == {"both"}
    assert "instance_slowdowns" in {
        k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()
    }
    analysis = defs.resolve_job_def("detection_job")  # the per-minute detection and its alerts
    assert "instance_slowdowns" in {k.to_user_string() for k in analysis.asset_layer.executable_asset_keys}


def test_bad_findings_are_named_and_a_regression_config_is_accepted() -> None:
    from jobs.query.series import RegressionInputError

    samples, texts = instance_frames([2.0] * 8)
    found = detect_regressions(samples, texts, deploy_at(), CONFIG)
    with pytest.raises(RegressionInputError, match="work_changed must be Boolean"):
        separate_contention(found.with_columns(work_changed=pl.lit("yes")), samples, texts)
    with pytest.raises(RegressionInputError, match=r"missing columns \['status'\]"):
        separate_contention(found.drop("status"), samples, texts)
    with pytest.raises(RegressionInputError, match="instance alpha queryid 100"):
        separate_contention(found, samples.with_columns(calls=pl.lit(0)), texts)
    lowered = RegressionConfig(contention=ContentionConfig(min_series=20))
    assert separate_contention(found, samples, texts, lowered)[1].height == 0  # its contention field is used
    assert separate_contention(found, samples, texts, CONFIG)[1].height == 1


def test_every_threshold_is_a_config_field_with_its_default() -> None:
    defaults = {f.name: f.default for f in fields(ContentionConfig)}
    assert defaults == {
        "window_samples": 10,
        "max_window": timedelta(minutes=30),
        "min_samples_per_side": 5,
        "min_compared_latency_ms": 1.0,
        "shift_threshold": 0.20,
        "min_series": 4,
        "min_shifted_series": 3,
        "min_shifted_share": 0.5,
        "excess_factor": 3.0,
        "spread_factor": 2.0,
        "same_moment_within": timedelta(minutes=2),
        "attach_within": timedelta(minutes=15),
        "load_rule": True,
        "min_load_rise": 0.5,
        "load_window_samples": 20,
        "load_excess_factor": 1.5,
        "peers_outweigh_load": False,
        "peer_latency_share": 0.5,
        "cores_when_unknown": 1.0,
        "min_source_load": 0.05,
        "load_source_share": 0.1,
        "max_load_sources": 3,
    }
    assert RegressionConfig().contention == ContentionConfig()
    for bad in ({"min_series": 1}, {"excess_factor": 1.0}, {"min_shifted_share": 0.0}, {"window_samples": 2}):
        with pytest.raises(ValueError, match="contention"):
            ContentionConfig(**bad)  # type: ignore[arg-type]


def late_step_frames(late_factor: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seven queries ×2 at the deploy time and one more, stepping ×late_factor 4 minutes later (24
    samples: beyond same_moment_within, within attach_within)."""
    samples, texts = instance_frames([2.0] * 7)
    rng = np.random.default_rng(9)
    late = (
        10.0
        * rng.lognormal(0.0, 0.1, BEFORE + AFTER)
        * np.where(np.arange(BEFORE + AFTER) >= BEFORE + 24, late_factor, 1.0)
    )
    samples = pl.concat([samples, series_samples(late, queryid=200, first=-BEFORE)])
    texts = pl.concat([texts, series_texts([("alpha", 200, "select late from l where id = $1")])])
    return samples, texts


def test_a_finding_minutes_off_an_episode_is_judged_inside_it() -> None:
    samples, texts = late_step_frames(2.0)
    found = detect_unannounced_regressions(samples, texts, CONFIG)
    late = by_queryid(found)[200]
    assert late["status"] == "detected"
    assert late["detected_change_at"] == SERIES_DEPLOY_AT + 24 * SERIES_STEP  # its own moment, no episode
    out, slowdowns = separate_contention(found, samples, texts)
    assert slowdowns["began_at"].to_list() == [SERIES_DEPLOY_AT]
    assert (by_queryid(out)[200]["kind"], by_queryid(out)[200]["reason"]) == (
        "contention",
        "instance_slowdown",
    )
    alone, _ = separate_contention(found, samples, texts, ContentionConfig(attach_within=timedelta(0)))
    assert (by_queryid(alone)[200]["kind"], by_queryid(alone)[200]["status"]) == ("plan_or_work", "detected")


def test_a_query_that_steps_far_beyond_the_others_minutes_after_an_episode_is_still_reported() -> None:
    samples, texts = late_step_frames(20.0)
    found = detect_unannounced_regressions(samples, texts, CONFIG)
    out, _slowdowns = separate_contention(found, samples, texts)
    late = by_queryid(out)[200]
    assert (late["status"], late["kind"]) == ("detected", "both")


def test_an_episode_row_and_its_findings_agree_when_the_others_alone_are_too_few() -> None:
    # Five compared series, three ×2 (an episode: 3 of 5). Each ×2 finding has only two shifted others,
    # fewer than min_shifted_series: judged inside the episode all the same, so none is reported.
    samples, texts = instance_frames([2.0] * 3 + [1.0] * 2)
    out, slowdowns = run(samples, texts)
    assert slowdowns["queries"].to_list() == [3]
    rows = by_queryid(out)
    assert all(rows[q]["kind"] == "contention" for q in (100, 101, 102)), [rows[q]["kind"] for q in rows]
