"""The regression detector on tiny inline series: each stage's decision, identity merging, FDR control."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from jobs.collect.deploys import DeployEvent, events_frame, load_deploy_events, mark_deploy
from jobs.detect.config import ChangePointConfig, RegressionConfig
from jobs.detect.deploy_analysis import detect_regressions
from jobs.detect.findings import latest_states, update_findings
from jobs.detect.segments import piece_statistics, settle_boundary, welch_tests
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.lake import views as duckdb_views
from jobs.lake.io import write_table
from jobs.query.series import RegressionInputError
from jobs.schemas.analysed import FINDING_STATES, PERFORMANCE_REGRESSIONS
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS
from tests.support.lakes import SERIES_STEP, series_samples, series_texts
from tests.support.series import DEPLOY_AT, deploy, noise

STEP = SERIES_STEP
CONFIG = RegressionConfig(window_before=timedelta(minutes=5), window_after=timedelta(minutes=10))
QUERY = "select sum(amount) from orders where customer_id = $1"
CALLS = 1000


def samples_for(
    values: np.ndarray | list[float], *, instance: str = "alpha", queryid: int = 11, first: int = -30
) -> pl.DataFrame:
    """tests.support.lakes.series_samples with this file's default queryid."""
    return series_samples(values, instance=instance, queryid=queryid, first=first)


texts_for = series_texts


def one(samples: pl.DataFrame, config: RegressionConfig = CONFIG, instance: str | None = "alpha") -> dict:
    texts = texts_for([("alpha", 11, QUERY), ("alpha", 12, QUERY), ("beta", 11, QUERY)])
    out = detect_regressions(samples, texts, deploy(instance), config)
    assert out.height == 1
    return out.row(0, named=True)


def test_step_at_the_deploy_is_detected_at_the_change_point() -> None:
    values = np.concatenate([noise(30, 1.0, 1), noise(60, 5.0, 2)])
    row = one(samples_for(values))
    assert (row["status"], row["reason"]) == ("detected", "detected")
    assert row["changepoint_index"] == 30
    assert row["detected_change_at"] == DEPLOY_AT
    assert row["before_count"] == 30 and row["after_count"] == 60
    assert row["before_mean_ms"] == pytest.approx(values[:30].mean())
    assert row["after_mean_ms"] == pytest.approx(values[30:].mean())
    assert row["p_value"] < 1e-10 and row["confidence"] > 0.999
    assert row["latency_change"] > 3
    assert row["deploy_version"] == "v42" and row["query"] == QUERY and row["queryid"] == 11


def test_no_step_is_rejected_at_stage_zero() -> None:
    row = one(samples_for(noise(90, 1.0, 3)))
    assert (row["status"], row["reason"]) == ("no_regression", "below_latency_change_threshold")
    assert abs(row["latency_change"]) < 0.2
    assert row["changepoint_index"] is None  # no further work was done


def test_outliers_after_the_deploy_are_not_a_regression() -> None:
    values = noise(90, 1.0, 4)
    values[[40, 55, 70]] = [80.0, 120.0, 60.0]  # spikes lift the naive post mean far above 20%
    row = one(samples_for(values))
    assert row["latency_change"] > 0.2
    assert row["status"] == "no_regression"
    assert row["reason"] in {"no_significant_change_point", "welch_not_significant"}


def test_shift_far_from_the_deploy_is_not_attributed_to_it() -> None:
    values = np.concatenate([noise(66, 1.0, 5), noise(24, 5.0, 6)])  # shift 6 min after; tolerance 3 min
    row = one(samples_for(values))
    assert CONFIG.tolerance() == timedelta(minutes=3)
    assert (row["status"], row["reason"]) == ("no_regression", "change_point_outside_tolerance")
    assert row["detected_change_at"] == DEPLOY_AT + timedelta(minutes=6)


def test_shift_shortly_before_the_deploy_is_within_tolerance() -> None:
    values = np.concatenate([noise(24, 1.0, 7), noise(66, 5.0, 8)])  # one minute before the deploy
    row = one(samples_for(values))
    assert row["status"] == "detected"
    assert row["detected_change_at"] == DEPLOY_AT - timedelta(minutes=1)


def test_improvement_and_thin_data_are_not_regressions() -> None:
    faster = one(samples_for(np.concatenate([noise(30, 5.0, 9), noise(60, 1.0, 10)])))
    assert (faster["status"], faster["reason"]) == ("no_regression", "below_latency_change_threshold")
    thin = one(samples_for(np.concatenate([noise(3, 1.0, 11), noise(60, 5.0, 12)]), first=-3))
    assert (thin["status"], thin["reason"]) == ("insufficient_data", "too_few_samples")


def test_queryid_rotation_at_the_deploy_is_one_regression_under_the_new_queryid() -> None:
    before = samples_for(noise(30, 1.0, 13), queryid=11)
    after = samples_for(noise(60, 5.0, 14), queryid=12, first=0)
    row = one(pl.concat([before, after]))
    assert row["status"] == "detected"
    assert row["queryid"] == 12 and row["queryids"] == "11,12"


def test_queryids_sharing_an_interval_merge_calls_weighted() -> None:
    a = samples_for(np.concatenate([noise(30, 1.0, 15), noise(60, 1.0, 16)]), queryid=11)
    b = samples_for(np.concatenate([noise(30, 1.0, 17), noise(60, 9.0, 18)]), queryid=12)
    row = one(pl.concat([a, b]))
    assert row["status"] == "detected"
    assert row["after_mean_ms"] == pytest.approx(
        ((a["total_exec_time"] + b["total_exec_time"]) / (a["calls"] + b["calls"]))[30:].mean()
    )


def test_fleet_deploy_analyses_every_instance_and_output_is_deterministic() -> None:
    alpha = samples_for(np.concatenate([noise(30, 1.0, 19), noise(60, 5.0, 20)]))
    beta = samples_for(noise(90, 1.0, 21), instance="beta")
    samples = pl.concat([alpha, beta])
    texts = texts_for([("alpha", 11, QUERY), ("beta", 11, QUERY)])
    out = detect_regressions(samples, texts, deploy(None), CONFIG)
    assert out["instance"].to_list() == ["alpha", "beta"]
    assert out["status"].to_list() == ["detected", "no_regression"]
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=3)
    assert out.equals(detect_regressions(shuffled, texts.reverse(), deploy(None), CONFIG))


def test_thresholds_are_config_fields_with_the_issue_defaults() -> None:
    default = RegressionConfig()
    assert (default.latency_change_threshold, default.changepoint_tolerance, default.p_value_threshold) == (
        0.20,
        0.20,
        0.05,
    )
    assert default.changepoint_tolerance_floor == timedelta(minutes=2)
    assert default.deploy_max_change_points == 5
    with pytest.raises(ValueError, match="deploy_max_change_points"):
        RegressionConfig(deploy_max_change_points=0)
    assert default.tolerance() == timedelta(minutes=12)
    short = RegressionConfig(window_before=timedelta(minutes=2), window_after=timedelta(minutes=2))
    assert short.tolerance() == timedelta(minutes=2)
    strict = RegressionConfig(latency_change_threshold=10.0, window_before=CONFIG.window_before)
    values = np.concatenate([noise(30, 1.0, 22), noise(60, 5.0, 23)])
    assert one(samples_for(values), strict)["reason"] == "below_latency_change_threshold"


def test_bad_samples_are_named() -> None:
    bad = samples_for([1.0] * 10).with_columns(pl.lit(0).alias("calls"))
    with pytest.raises(RegressionInputError, match="instance alpha queryid 11"):
        one(bad)


def test_vectorized_welch_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    pieces = [rng.normal(m, s, n) for m, s, n in [(1, 0.1, 7), (1.2, 0.5, 30), (5, 2, 5), (5, 0.01, 40)]]
    values = np.concatenate(pieces)
    ids = np.repeat(np.arange(4), [p.size for p in pieces])
    count, mean, squares = piece_statistics(values, ids, 4)
    welch = welch_tests(
        count[[0, 2]], mean[[0, 2]], squares[[0, 2]], count[[1, 3]], mean[[1, 3]], squares[[1, 3]]
    )
    for k, (a, b) in enumerate([(0, 1), (2, 3)]):
        expected = stats.ttest_ind(pieces[b], pieces[a], equal_var=False)
        assert welch.t[k] == pytest.approx(expected.statistic, rel=1e-10)
        assert welch.p[k] == pytest.approx(expected.pvalue, rel=1e-8)


def test_unannounced_finds_steps_and_controls_false_discoveries() -> None:
    frames, prints = [], []
    for s in range(60):  # 60 pure-noise queries and 3 that step up at different times
        frames.append(samples_for(noise(150, 1.0 + s, 100 + s), queryid=s, first=-150))
        prints.append(("alpha", s, f"select {s} from t_{chr(97 + s % 26)}{chr(97 + s // 26)}"))
    for k, at in enumerate([40, 90, 120]):
        values = np.concatenate([noise(at, 2.0, 300 + k), noise(150 - at, 3.0, 400 + k)])
        frames.append(samples_for(values, queryid=1000 + k, first=-150))
        prints.append(("alpha", 1000 + k, f"select * from stepped_{'xyz'[k]}"))
    config = RegressionConfig(unannounced_changepoint=ChangePointConfig(min_segment=10))
    out = detect_unannounced_regressions(pl.concat(frames), texts_for(prints), config)
    assert out.height == 63
    found = out.filter(pl.col("status") == "detected")
    assert sorted(found["queryid"].to_list()) == [1000, 1001, 1002]
    at_index = dict(zip(found["queryid"], found["changepoint_index"], strict=True))
    assert at_index == {1000: 40, 1001: 90, 1002: 120}
    assert (found["p_adjusted"] >= found["p_value"]).all()
    assert out["fdr_method"][0].startswith("benjamini-hochberg q=0.05")
    assert set(out["analysis"]) == {"unannounced"}


def test_duckdb_views_show_samples_deploys_and_detected_regressions(lake_root: Path) -> None:
    values = np.concatenate([noise(30, 1.0, 24), noise(60, 5.0, 25)])
    samples = samples_for(values).with_columns(pl.lit(5).alias("dbid"), pl.lit(10).alias("userid"))
    texts = texts_for([("alpha", 11, QUERY)]).with_columns(pl.lit(DEPLOY_AT).alias("captured_at"))
    mark_deploy(lake_root, version="v42", instances=["alpha"], at=DEPLOY_AT)
    write_table(
        lake_root, QUERY_SAMPLES, samples.drop("instance"), {"instance": "alpha", "date": "2026-11-29"}, "s"
    )
    write_table(
        lake_root, QUERY_TEXTS, texts.drop("instance"), {"instance": "alpha", "date": "2026-11-29"}, "t"
    )
    found = detect_regressions(samples, texts, load_deploy_events(lake_root), CONFIG)
    states = FINDING_STATES.empty()
    for minute, stem in enumerate(("run1", "run2")):  # two analysis runs writing the same finding
        write_table(lake_root, PERFORMANCE_REGRESSIONS, found, {"date": "2026-11-29"}, stem)
        changed = update_findings(
            latest_states(states), found, computed_at=DEPLOY_AT + timedelta(minutes=minute)
        )
        assert changed.height == (1 if stem == "run1" else 0), "an unchanged finding writes no state"
        states = pl.concat([states, changed])
        if changed.height:
            write_table(lake_root, FINDING_STATES, changed, {"date": "2026-11-29"}, stem)
    with duckdb_views.connect(lake_root) as con:
        detected = con.execute("select queryid, deploy_version, query from regressions_detected").fetchall()
        latency = con.execute("select count(*), count(query) from query_latency").fetchone()
        deploys = con.execute("select version, scope from deploys_recent").fetchall()
    assert detected == [(11, "v42", QUERY)]
    assert latency == (90, 90)
    assert deploys == [("v42", "instance")]


def test_a_significant_but_immaterial_slowdown_is_not_reported() -> None:
    """0.01 ms -> 0.03 ms at 100 calls/s: +200%, very significant, 2 ms of extra work per second."""
    values = np.concatenate([noise(30, 0.01, 40), noise(60, 0.03, 41)])
    row = one(samples_for(values))
    assert (row["status"], row["reason"]) == ("no_regression", "below_materiality_threshold")
    assert row["p_value"] < 1e-6
    assert row["added_load_ms_per_s"] == pytest.approx((row["after_mean_ms"] - row["before_mean_ms"]) * 100)
    # The same shift is reported when the thresholds say it matters.
    loose = RegressionConfig(
        window_before=CONFIG.window_before, window_after=CONFIG.window_after, min_added_load_ms_per_s=1.0
    )
    assert one(samples_for(values), loose)["status"] == "detected"


def test_a_rare_query_that_got_much_slower_per_call_is_material() -> None:
    """One call per 10 s going 20 ms -> 90 ms: 7 ms/s of extra load, but each call is 70 ms slower."""
    values = np.concatenate([noise(30, 20.0, 42), noise(60, 90.0, 43)])
    rare = samples_for(values).with_columns(pl.lit(1).alias("calls"), (pl.col("total_exec_time") / CALLS))
    row = one(rare)
    assert row["added_load_ms_per_s"] < CONFIG.min_added_load_ms_per_s
    assert row["status"] == "detected"


def test_unannounced_step_that_came_back_down_is_not_a_regression() -> None:
    bump = np.concatenate([noise(40, 1.0, 44), noise(20, 8.0, 45), noise(40, 1.0, 46)])
    step = np.concatenate([noise(40, 1.0, 47), noise(60, 8.0, 48)])
    samples = pl.concat([samples_for(bump, queryid=11), samples_for(step, queryid=21, instance="beta")])
    texts = texts_for([("alpha", 11, QUERY), ("beta", 21, "select 2 from t where id = $1")])
    out = detect_unannounced_regressions(samples, texts, CONFIG).sort("instance")
    assert out.select("instance", "status", "reason").rows() == [
        ("alpha", "no_regression", "recovered"),
        ("beta", "detected", "detected"),
    ]
    ongoing_off = RegressionConfig(
        window_before=CONFIG.window_before, window_after=CONFIG.window_after, require_ongoing=False
    )
    again = detect_unannounced_regressions(samples, texts, ongoing_off).sort("instance")
    assert again["status"].to_list() == ["detected", "detected"]


# ---------------------------------------------------------------------------------------------------------
# Several steps in one window: drop at t1 (deploy), restore at t2, drop again at t3 (deploy)

MINUTE = timedelta(minutes=1)
SAMPLE = timedelta(seconds=15)
PER_MINUTE = 4
STEPS_START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
FAST_MS, SLOW_MS = 0.14, 110.0
STEPS_CONFIG = RegressionConfig(window_before=timedelta(minutes=30), window_after=timedelta(minutes=30))


def stepped_series(
    changes: list[tuple[float, float]], samples: int, seed: int
) -> tuple[pl.DataFrame, np.ndarray]:
    """15-second samples from STEPS_START; ``changes``: (sample, new level) in time order, FAST_MS first.

    Why 15 s and not the 1 minute of many servers: binary segmentation cannot split a short bump out of a
    segment (both sides of its best split are mixed), so a restore lasting 6 samples between two drops is
    beyond it; at 24 samples it is found (see the report of issue 8).

    A sample whose interval holds a change reports the time-weighted mix of both levels (equal call rates),
    as pg_stat_statements would. Returns the samples and each sample's value where it is pure (NaN where
    it is mixed).
    """
    noise_factor = np.random.default_rng(seed).lognormal(0.0, 0.05, samples)
    values = np.empty(samples)
    pure = np.empty(samples)
    for i in range(samples):
        level, mixed, weighted, since = FAST_MS, False, 0.0, float(i)
        for at, new_level in changes:
            if at <= i:
                level = new_level
            elif at < i + 1:
                weighted += level * (at - since)
                level, since, mixed = new_level, at, True
        weighted += level * (i + 1 - since)
        values[i] = weighted * noise_factor[i]
        pure[i] = np.nan if mixed else values[i]
    samples = pl.DataFrame(
        {
            "instance": "alpha",
            "queryid": 11,
            "interval_start": [STEPS_START + i * SAMPLE for i in range(samples)],
            "interval_end": [STEPS_START + (i + 1) * SAMPLE for i in range(samples)],
            "calls": CALLS,
            "total_exec_time": values * CALLS,
        },
        schema_overrides={
            "interval_start": pl.Datetime("us", "UTC"),
            "interval_end": pl.Datetime("us", "UTC"),
        },
    )
    return samples, pure


def deploys_at(*at_samples: float) -> pl.DataFrame:
    return events_frame(
        [
            DeployEvent(version=f"v{k}", deployed_at=STEPS_START + m * SAMPLE, instance="alpha")
            for k, m in enumerate(at_samples, start=1)
        ]
    ).drop("date")


T1, T2, T3 = 160, 188, 212  # 15-s samples: drop at 40 min (deploy v1), restore at 47, drop at 53 (v2)
TOTAL = 400


def test_drop_restore_redrop_both_deploys_are_detected_at_their_own_step() -> None:
    """Index dropped at t1 (deploy v1), restored at t2, dropped again at t3 (deploy v2, 13 min later).

    The window of v2 holds all three steps; its most significant one is not v2's, so before this rule
    v2 got change_point_outside_tolerance. Each deploy now gets its nearest change point, and Welch's
    segments stop at the neighbouring change points: v1's after-mean is the slow level only (not the
    minutes after the restore), v2's before-mean the restored fast level only (not the first drop's).
    """
    samples, pure = stepped_series([(T1, SLOW_MS), (T2, FAST_MS), (T3, SLOW_MS)], TOTAL, seed=50)
    texts = texts_for([("alpha", 11, QUERY)])
    out = detect_regressions(samples, texts, deploys_at(T1, T3), STEPS_CONFIG)
    rows = {r["deploy_version"]: r for r in out.iter_rows(named=True)}
    for version, at in (("v1", T1), ("v2", T3)):
        row = rows[version]
        assert (row["status"], row["reason"]) == ("detected", "detected"), (version, row)
        assert row["detected_change_at"] == STEPS_START + at * SAMPLE
        assert row["before_mean_ms"] == pytest.approx(FAST_MS, rel=0.05)
        assert row["after_mean_ms"] == pytest.approx(SLOW_MS, rel=0.05)
    # Segments end one sample short of a neighbouring change point (its transition may sit on our side).
    assert rows["v1"]["after_count"] == T2 - T1 - 1, "t1..t2 only: the restored minutes are not 'after'"
    assert rows["v2"]["before_count"] == T3 - T2 - 1, "t2..t3 only: the first drop's minutes are not 'before'"
    assert rows["v1"]["after_mean_ms"] == pytest.approx(pure[T1 : T2 - 1].mean(), rel=1e-9)
    assert rows["v2"]["before_mean_ms"] == pytest.approx(pure[T2 + 1 : T3].mean(), rel=1e-9)


def test_the_interval_straddling_the_deploy_belongs_to_neither_mean() -> None:
    """Deploys 5 s into a 15-s sample: that sample mixes both levels (37 ms at 0.14 -> 110 ms) and
    would lift a 0.14 ms before-mean to ~0.4 ms, or lower the after-mean. Both means equal the pure
    regimes' means, whichever side of the cut E-divisive put the straddling sample on."""
    t1, t3 = T1 + 1 / 3, T3 + 1 / 3
    samples, pure = stepped_series([(t1, SLOW_MS), (T2 + 0.5, FAST_MS), (t3, SLOW_MS)], TOTAL, seed=51)
    texts = texts_for([("alpha", 11, QUERY)])
    out = detect_regressions(samples, texts, deploys_at(t1, t3), STEPS_CONFIG)
    rows = {r["deploy_version"]: r for r in out.iter_rows(named=True)}
    v1, v2 = rows["v1"], rows["v2"]
    assert (v1["status"], v2["status"]) == ("detected", "detected")
    # The change is dated at the first wholly slow sample, T + 1 (issue 21: it was dated where E-divisive
    # put the cut, here the straddling sample, and a later run could put it one sample later): the
    # straddling sample mixes both regimes (1/3 fast, 2/3 slow) and is in neither level. The unannounced
    # analysis, which knows no deploy, dates it the same, so one_row_per_finding can merge the two.
    assert v1["mixed_index"] == v1["changepoint_index"] - 1
    assert v1["detected_change_at"] == STEPS_START + (T1 + 1) * SAMPLE
    assert v2["detected_change_at"] == STEPS_START + (T3 + 1) * SAMPLE
    unannounced = detect_unannounced_regressions(samples, texts, STEPS_CONFIG)
    assert unannounced["detected_change_at"].to_list() == [v2["detected_change_at"]]
    # v1's window: samples ending after deployed_at - 30 min, i.e. from sample T1 - 120 on.
    assert v1["before_count"] == 120 and v1["before_mean_ms"] == pytest.approx(
        pure[T1 - 120 : T1].mean(), rel=1e-9
    )
    # After: pure slow samples up to the restore, one short of it (the restore's mixed sample T2).
    assert v1["after_count"] == T2 - T1 - 1  # T1 + 1 .. T2 - 1: the restore cut fell after its mixed T2
    assert v1["after_mean_ms"] == pytest.approx(np.nanmean(pure[T1 + 1 : T2]), rel=1e-9)
    assert v2["before_mean_ms"] < 1.02 * FAST_MS
    # Before: fast samples after the restore; the restore cut fell after its mixed sample T2, so the
    # guard next to it drops the pure T2 + 1 (the price of not knowing on which side the mix fell).
    assert v2["before_mean_ms"] == pytest.approx(pure[T2 + 2 : T3].mean(), rel=1e-9)
    # After: the window ends at deployed_at + 30 min, within sample T3 + 120 (not in the window).
    assert v2["after_mean_ms"] == pytest.approx(pure[T3 + 1 : T3 + 120].mean(), rel=1e-9)


def test_fast_slow_fast_slow_in_both_windows_is_found_at_each_deploy_own_step() -> None:
    """12-sample phases, drop at v1, restore, drop again at v2: each window holds fast-slow-fast-slow, whose
    single global split is mixed and insignificant here (p 0.06), so binary segmentation (and any gate on
    that split) reports no change point for either deploy; seeded segmentation finds all three steps."""
    phase = 12
    samples, pure = stepped_series([(phase, SLOW_MS), (2 * phase, FAST_MS), (3 * phase, SLOW_MS)], 48, seed=1)
    texts = texts_for([("alpha", 11, QUERY)])
    out = detect_regressions(samples, texts, deploys_at(phase, 3 * phase), STEPS_CONFIG)
    rows = {r["deploy_version"]: r for r in out.iter_rows(named=True)}
    for version, at in (("v1", phase), ("v2", 3 * phase)):
        row = rows[version]
        assert (row["status"], row["reason"]) == ("detected", "detected"), (version, row)
        assert row["detected_change_at"] == STEPS_START + at * SAMPLE
        assert row["changepoint_p_value"] <= 0.01
        assert row["before_mean_ms"] == pytest.approx(FAST_MS, rel=0.1)
        assert row["after_mean_ms"] == pytest.approx(SLOW_MS, rel=0.1)
    # Each side is one regime, bounded by the neighbouring change point (one sample short of it).
    assert rows["v1"]["after_count"] == phase - 1 and rows["v2"]["before_count"] == phase - 1
    assert rows["v1"]["after_mean_ms"] == pytest.approx(pure[phase : 2 * phase - 1].mean(), rel=1e-9)
    assert rows["v2"]["before_mean_ms"] == pytest.approx(pure[2 * phase + 1 : 3 * phase].mean(), rel=1e-9)
    binary = replace(STEPS_CONFIG, changepoint=replace(STEPS_CONFIG.changepoint, segmentation="binary"))
    before = detect_regressions(samples, texts, deploys_at(phase, 3 * phase), binary)
    assert set(before["reason"]) == {"no_significant_change_point"}


def _short_fleet(seed: int) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, str]]:
    """Short stepped series (x2 with 10 a side, x500 with 12 and 11 a side; CV 5%) among 60 series without
    a step: quiet, noisy with spikes, and trending (+10% over the series), n 20 to 200."""
    rng = np.random.default_rng(seed)
    frames, prints, kinds = [], [], {}

    def add(queryid: int, values: np.ndarray, kind: str) -> None:
        frames.append(samples_for(values, queryid=queryid, first=-len(values)))
        letters = "".join(chr(97 + int(d)) for d in f"{queryid:04d}")
        prints.append(("alpha", queryid, f"select * from t_{letters}"))
        kinds[queryid] = kind

    for q in range(60):
        n = int(rng.integers(20, 200))
        kind = ("quiet", "noisy", "trending")[q % 3]
        if kind == "quiet":
            values = rng.lognormal(0.0, 0.05, n)
        elif kind == "noisy":
            values = rng.lognormal(0.0, 0.4, n) * np.where(rng.random(n) < 0.05, 10.0, 1.0)
        else:
            values = np.linspace(1.0, 1.1, n) * rng.lognormal(0.0, 0.05, n)
        add(q, 5.0 * values, kind)
    add(1000, 5.0 * np.r_[rng.lognormal(0, 0.05, 10), 2.0 * rng.lognormal(0, 0.05, 10)], "x2 lognormal")
    add(
        1001,
        5.0 * np.r_[1 + 0.05 * rng.standard_normal(10), 2.0 + 0.1 * rng.standard_normal(10)],
        "x2 normal",
    )
    add(1002, 5.0 * np.r_[rng.lognormal(0, 0.05, 12), 500.0 * rng.lognormal(0, 0.05, 11)], "x500")
    return pl.concat(frames), texts_for(prints), kinds


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unannounced_finds_short_steps_in_a_fleet_and_leaves_steady_series_unreported(seed: int) -> None:
    """Issue 8, build 4. Before: none of the three was found (no_significant_change_point): at 10 + 10 the
    normal Mann-Whitney tail times 11 splits gave at best p 0.002, the fleet's per-round BH asked for
    0.05 / 63, and white noise's lag-1 correlation (spread 0.2 at this n) widened the variance further."""
    samples, texts, kinds = _short_fleet(seed)
    out = detect_unannounced_regressions(samples, texts)
    assert out.height == len(kinds)
    detected = set(out.filter(pl.col("status") == "detected")["queryid"].to_list())
    assert detected == {1000, 1001, 1002}, {q: kinds[q] for q in detected ^ {1000, 1001, 1002}}
    found = out.filter(pl.col("queryid") >= 1000).sort("queryid")
    assert found["changepoint_index"].to_list() == [10, 10, 12]
    assert (found["p_adjusted"] < 0.05).all()


def test_an_earlier_slower_episode_in_the_window_does_not_hide_the_deploy_own_step() -> None:
    """Index dropped (300 ms), restored, dropped again at the deploy (100 ms: the table is warmer): the
    naive pre-mean of the window (~100 ms) equals the new level, so stage 0 alone said
    below_latency_change_threshold; the samples next to the deploy go 0.14 -> 100 ms (seen on a real
    server under CPU load, tests/integration/detect/test_regressions_pg.py)."""
    samples, _pure = stepped_series([(40, 300.0), (80, FAST_MS), (120, 100.0)], 160, seed=4)
    texts = texts_for([("alpha", 11, QUERY)])
    out = detect_regressions(samples, texts, deploys_at(120), STEPS_CONFIG)
    row = out.row(0, named=True)
    assert abs(row["latency_change"]) < STEPS_CONFIG.latency_change_threshold  # the premise
    assert (row["status"], row["reason"]) == ("detected", "detected"), row
    assert row["detected_change_at"] == STEPS_START + 120 * SAMPLE
    assert row["before_mean_ms"] == pytest.approx(FAST_MS, rel=0.1)
    assert row["after_mean_ms"] == pytest.approx(100.0, rel=0.1)
    exact = detect_regressions(samples, texts, deploys_at(120), replace(STEPS_CONFIG, local_change_samples=0))
    assert exact.row(0, named=True)["reason"] == "below_latency_change_threshold"  # issue 3's stage 0
    with pytest.raises(ValueError):
        RegressionConfig(local_change_samples=-1)


def test_a_deploy_finding_that_came_back_down_keeps_when_it_recovered_and_the_level_now() -> None:
    """Slow from the deploy at sample 60 to sample 100, then fast again: still the deploy's finding (it
    happened), with its own slow level as the after mean, the time it came back and the level now."""
    samples, _pure = stepped_series([(60, SLOW_MS), (100, FAST_MS)], 160, seed=5)
    texts = texts_for([("alpha", 11, QUERY)])
    row = detect_regressions(samples, texts, deploys_at(60), STEPS_CONFIG).row(0, named=True)
    assert row["status"] == "detected", row
    assert row["after_mean_ms"] == pytest.approx(SLOW_MS, rel=0.1)
    assert row["recovered_at"] == STEPS_START + 100 * SAMPLE
    assert row["latest_mean_ms"] == pytest.approx(FAST_MS, rel=0.1)
    ongoing, _pure = stepped_series([(60, SLOW_MS)], 160, seed=5)
    row = detect_regressions(ongoing, texts, deploys_at(60), STEPS_CONFIG).row(0, named=True)
    assert (row["status"], row["recovered_at"], row["latest_mean_ms"]) == ("detected", None, None)


def test_a_step_inside_an_interval_settles_to_one_boundary_whichever_cut_was_found() -> None:
    """Issue 21, the rule alone: 0.15 ms, a minute mixing both (25.4 ms), then 40 ms. E-divisive may cut
    before or after the mixed minute, or (with fewer than min_segment new samples) one sample early; each
    settles to the same sides: the mixed minute in neither, the onset the first wholly new minute."""
    values = np.r_[np.full(20, 0.15), [25.39], np.full(8, 40.0)]
    config = RegressionConfig()
    settled = []
    for cut in (19, 20, 21):  # early (an old sample in "after"), at the mixed minute, after it
        before, after = np.arange(0, cut), np.arange(cut, values.shape[0])
        boundary = settle_boundary(values, before, after, cut, config)
        settled.append(
            (boundary.before.tolist(), boundary.after.tolist(), boundary.mixed, boundary.first_new)
        )
    assert settled == [(list(range(20)), list(range(21, 29)), 20, 21)] * 3
    # Off: the sides as the change point found them (the old, moving levels).
    kept = settle_boundary(
        values, np.arange(0, 21), np.arange(21, 29), 21, replace(config, settle_step_boundary=False)
    )
    assert (kept.mixed, kept.first_new, kept.before.tolist()[-1]) == (None, 21, 20)


def test_a_small_noisy_step_keeps_the_boundary_it_was_found_at() -> None:
    """+30% under 8% noise: every sample is within the noise of both levels, so nothing moves and no
    sample is called mixed (the levels stay what they were before issue 21)."""
    rng = np.random.default_rng(21)
    values = np.r_[np.full(30, 1.0), np.full(30, 1.3)] * rng.lognormal(0, 0.08, 60)
    boundary = settle_boundary(values, np.arange(0, 30), np.arange(30, 60), 30, RegressionConfig())
    assert (boundary.mixed, boundary.first_new) == (None, 30)
    assert boundary.before.tolist() == list(range(30)) and boundary.after.tolist() == list(range(30, 60))


def test_the_level_before_a_step_is_read_on_the_samples_before_it_by_every_path() -> None:
    """``pre_step_levels``: 1.0 ms, an earlier small step to 0.6 ms, then x8 (at a deploy). The level before
    is the 0.6 ms samples (one past the earlier change point) whichever path reports the step and however
    many samples follow it: the large-step rule after 3 and 6, the segment tests after 20, the deploy
    analysis after 6 and 20 (the soak read 0.041 ms, then 0.067 ms before one step as two paths took
    turns)."""
    texts = texts_for([("alpha", 11, QUERY)])
    before = np.r_[noise(28, 1.0, 1), noise(12, 0.6, 2)]
    expected = before[29:].mean()
    levels = {}
    for k in (3, 6, 20):
        samples = samples_for(np.r_[before, noise(k, 5.0, 3)], first=-40)
        found = detect_unannounced_regressions(samples, texts, CONFIG).row(0, named=True)
        assert found["status"] == "detected", found
        levels[("unannounced", k, found["confirmed_by"])] = (found["before_mean_ms"], found["before_count"])
        if k > 3:
            at_deploy = one(samples)
            assert at_deploy["status"] == "detected", at_deploy
            levels[("deploy", k)] = (at_deploy["before_mean_ms"], at_deploy["before_count"])
    assert set(levels) >= {("unannounced", 3, "large_step"), ("unannounced", 20, "segments")}, levels
    assert all(level == (pytest.approx(expected), 11) for level in levels.values()), levels
    # The rule before: the large-step rule's reference is every sample before (both levels).
    old = replace(CONFIG, pre_step_levels=False)
    samples = samples_for(np.r_[before, noise(3, 5.0, 3)], first=-40)
    found = detect_unannounced_regressions(samples, texts, old).row(0, named=True)
    assert found["before_mean_ms"] == pytest.approx(before.mean()), found
    # A deploy window searched for one change point (the deploy's) still reads the level since the earlier
    # step; the rule before read both levels (the window's 30 samples before the deploy).
    samples = samples_for(np.r_[before, noise(12, 5.0, 3)], first=-40)
    single = replace(CONFIG, deploy_max_change_points=1)
    assert one(samples, single)["before_mean_ms"] == pytest.approx(expected)
    assert one(samples, replace(single, pre_step_levels=False))["before_mean_ms"] == pytest.approx(
        before[10:].mean()
    )
