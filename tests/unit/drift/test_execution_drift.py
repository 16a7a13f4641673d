"""The per-execution drift stage: anchored baselines, scoring the current window, the stage's checks, and
`radar drift anchor-samples | score | score --payload | checks` (tiny inline frames and real lake files)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from jobs.cli.main import main
from jobs.drift.baselines import (
    BaselineError,
    anchor_sample_baselines,
    baseline_rows,
    load_sample_baselines,
    select_baselines,
)
from jobs.drift.checks import (
    NO_BASELINE,
    analysed_tables,
    degenerate_samples_check,
    stale_baseline_check,
)
from jobs.drift.config import DriftConfig, SampleDriftConfig
from jobs.drift.execution import (
    INSTANCE_WIDE_LATENCY,
    check_lake,
    counts_by_metric,
    degenerate_count,
    run_execution_drift,
    score_execution_drift,
    worst_flag,
)
from jobs.drift.scorer import query_hash
from jobs.lake import io as lake
from tests.support.drift_frames import (
    T0,
    drift_rows,
    executions,
    table_stats,
    write_executions,
    write_table_stats,
)

H = timedelta(hours=1)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
CONFIG = DriftConfig()
NOW = T0 + 2 * H  # the candidate window of NOW is (NOW - 10m, NOW]
CAND_START = NOW - 10 * MIN


def lognormal(seed: int, n: int, mu: float = 0.0, sigma: float = 0.2) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(mu, sigma, n)


def anchor(samples: pl.DataFrame, version: str = "v1", **kw: object) -> pl.DataFrame:
    args: dict[str, object] = {
        "version": version,
        "window_start": T0,
        "window_end": T0 + H,
        "created_at": T0 + H,
    }
    args.update(kw)
    return baseline_rows(samples, **args)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# Baselines


def test_baseline_keeps_at_most_max_samples_seeded_and_byte_identical_in_any_row_order() -> None:
    config = SampleDriftConfig(max_baseline_samples=50)
    samples = pl.concat(
        [executions("q1", T0, lognormal(1, 400)), executions("q2", T0, lognormal(2, 30), instance="beta")]
    )
    first = anchor(samples, config=config)
    again = anchor(samples.sample(fraction=1.0, shuffle=True, seed=5), config=config)
    assert first.equals(again)
    buffers = [io.BytesIO(), io.BytesIO()]
    first.write_parquet(buffers[0])
    again.write_parquet(buffers[1])
    assert buffers[0].getvalue() == buffers[1].getvalue()
    by_pair = {(r["instance"], r["metric"]): r for r in first.iter_rows(named=True)}
    assert (
        len(by_pair[("alpha", "latency")]["samples"]) == 50
        and by_pair[("alpha", "latency")]["n_window"] == 400
    )
    assert len(by_pair[("beta", "latency")]["samples"]) == 30  # fewer than the bound: every sample kept
    kept = by_pair[("alpha", "latency")]["samples"]
    assert set(kept) <= set(samples.filter(pl.col("instance") == "alpha")["latency_ms"].to_list())
    assert len(set(kept)) == 50  # without replacement
    # a pair never depends on the others: beta's 400 (sorted after alpha's) alone give the same subsample
    wide = pl.concat([samples, executions("q1", T0, lognormal(3, 400), instance="gamma")])
    gamma = anchor(wide, config=config).filter(
        (pl.col("instance") == "gamma") & (pl.col("metric") == "latency")
    )
    alone = anchor(wide.filter(pl.col("instance") == "gamma"), config=config)
    assert alone.filter(pl.col("metric") == "latency")["samples"].to_list() == gamma["samples"].to_list()
    # another seed, another subsample (the seed is used)
    other = anchor(samples, config=replace(config, seed=1))
    assert (
        other.filter((pl.col("instance") == "alpha") & (pl.col("metric") == "latency"))["samples"][
            0
        ].to_list()
        != kept
    )


def test_baseline_bound_is_exact_and_each_pair_draws_its_own_subsample() -> None:
    config = SampleDriftConfig(max_baseline_samples=20)
    values = np.arange(21.0)
    samples = pl.concat(
        [
            executions("q1", T0, values),  # 21: one over the bound
            executions("q2", T0, values),  # the same values in another pair
            executions("q3", T0, values[:20]),  # exactly the bound: all kept
        ]
    )
    rows = anchor(samples, config=config).filter(pl.col("metric") == "latency")
    kept = dict(zip(rows["query_hash"], rows["samples"].to_list(), strict=True))
    assert [len(kept[query_hash(q)]) for q in ("q1", "q2", "q3")] == [20, 20, 20]
    assert kept[query_hash("q3")] == values[:20].tolist()
    assert kept[query_hash("q1")] != kept[query_hash("q2")]  # the seed is mixed with the pair's key


def test_baseline_subsample_is_uniform_over_the_window() -> None:
    # 2,000 samples valued by their position; the kept 500 spread over the whole window (mean near 1000).
    config = SampleDriftConfig(max_baseline_samples=500)
    rows = anchor(executions("q1", T0, np.arange(2000.0)), window_end=T0 + 2 * H, config=config)
    kept = np.asarray(rows.filter(pl.col("metric") == "latency")["samples"][0].to_list())
    assert kept.size == 500 and abs(kept.mean() - 999.5) < 60 and kept.min() < 50 and kept.max() > 1950
    assert (np.diff(kept) > 0).all()  # in logged order


def test_baseline_window_is_start_exclusive_end_inclusive_and_per_instance() -> None:
    samples = pl.concat(
        [executions("q1", T0 - SEC, [1.0, 2.0, 3.0]), executions("q1", T0, [5.0, 6.0], instance="beta")]
    )
    # alpha logs at T0, T0 + 1 s, T0 + 2 s: the window (T0, T0 + 1 s] holds only the second
    rows = anchor(samples, window_start=T0, window_end=T0 + SEC)
    lat = rows.filter(pl.col("metric") == "latency")
    assert lat.select("instance", "n_window").rows() == [("alpha", 1), ("beta", 1)]
    assert lat["samples"].to_list() == [[2.0], [5.0]]
    only_beta = anchor(samples, instance="beta", window_end=T0 + H)
    assert set(only_beta["instance"]) == {"beta"}
    assert only_beta.filter(pl.col("metric") == "latency")["samples"].to_list() == [[5.0, 6.0]]
    meta = lat.row(0, named=True)
    assert (meta["fingerprint"], meta["queryid"], meta["baseline_version"]) == ("q1", 7, "v1")
    assert (meta["window_start"], meta["window_end"]) == (T0, T0 + SEC)


def test_null_metric_is_no_sample_of_it() -> None:
    rows = anchor(executions("q1", T0, [1.0, 2.0], cardinality=None))
    assert sorted(rows["metric"]) == ["cost", "latency"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"version": ""}, "version must not be empty"),
        ({"version": "  "}, "version must not be empty"),
        ({"window_start": T0 + H, "window_end": T0 + H}, "is not before end"),
        ({"window_start": T0 + 5 * H, "window_end": T0 + 6 * H}, "no execution samples"),
        ({"instance": "gamma"}, "no execution samples of instance gamma"),
    ],
)
def test_anchor_refuses_an_empty_version_or_window(kw: dict[str, object], message: str) -> None:
    with pytest.raises(BaselineError, match=message):
        anchor(executions("q1", T0, [1.0, 2.0]), **kw)


def test_negative_sample_is_rejected_naming_instance_and_query() -> None:
    with pytest.raises(BaselineError, match=r"instance alpha, query_hash [0-9a-f]{64}.*latency value -1.0"):
        anchor(executions("q1", T0, [1.0, -1.0]))


def test_newest_version_per_pair_unless_one_is_named() -> None:
    samples = pl.concat([executions("q1", T0, [1.0, 2.0]), executions("q2", T0, [3.0])])
    v1 = anchor(samples, version="v1", created_at=T0 + H)
    v2 = anchor(samples.filter(pl.col("fingerprint") == "q1"), version="v2", created_at=T0 + 2 * H)
    both = pl.concat([v2, v1])
    newest = select_baselines(both).filter(pl.col("metric") == "latency")
    assert dict(zip(newest["query_hash"], newest["baseline_version"], strict=True)) == {
        query_hash("q1"): "v2",
        query_hash("q2"): "v1",  # q2 was not re-anchored: its newest is still v1
    }
    assert set(select_baselines(both, "v1")["baseline_version"]) == {"v1"}
    with pytest.raises(BaselineError, match=r"no anchored baseline of version 'v9'.*known versions: v1, v2"):
        select_baselines(both, "v9")


# ---------------------------------------------------------------------------------------------------------
# Scoring


def history(seed: int = 0) -> pl.DataFrame:
    """q-steady: the same latency in the baseline hour and the candidate window; q-slow: 3x slower now."""
    base = pl.concat(
        [
            executions("q-steady", T0, lognormal(seed, 600), step=5 * SEC),
            executions("q-slow", T0, lognormal(seed + 1, 600), step=5 * SEC),
        ]
    )
    cand = pl.concat(
        [
            executions("q-steady", CAND_START, lognormal(seed + 2, 300), step=SEC),
            executions("q-slow", CAND_START, lognormal(seed + 3, 300, mu=1.1), step=SEC),
        ]
    )
    return pl.concat([base, cand])


def test_a_block_says_whether_the_plan_shape_changed() -> None:
    """The design's stronger signal (issue 27): a BLOCK beside a plan shape the baseline's window never
    ran. q-slow runs shape "s2" now where its baseline ran "s1"; q-steady keeps "s1"; a baseline anchored
    before shapes were kept (no shapes) says nothing (null), never False."""
    samples = history().with_columns(
        pl.when((pl.col("fingerprint") == "q-slow") & (pl.col("logged_at") > CAND_START))
        .then(pl.lit("s2"))
        .otherwise(pl.lit("s1"))
        .alias("shape_hash")
    )
    baselines = anchor(samples)
    assert set(baselines["shapes"].to_list()[0]) == {"s1"}
    drift = score_execution_drift(samples, baselines, NOW, CONFIG)
    by = {(r["fingerprint"], r["metric"]): r for r in drift.iter_rows(named=True)}
    slow, steady = by[("q-slow", "latency")], by[("q-steady", "latency")]
    assert (slow["flag"], slow["plan_changed"], slow["new_shapes"]) == ("BLOCK", True, ["s2"])
    assert (steady["plan_changed"], steady["new_shapes"]) == (False, [])
    old = score_execution_drift(samples, baselines.drop("shapes"), NOW, CONFIG)
    assert old["plan_changed"].null_count() == old.height


def test_scoring_flags_the_shifted_latency_and_passes_the_rest() -> None:
    samples = history()
    drift = score_execution_drift(samples, anchor(samples), NOW, CONFIG)
    flags = {(r["fingerprint"], r["metric"]): (r["flag"], r["reason"]) for r in drift.iter_rows(named=True)}
    assert flags[("q-slow", "latency")][0] == "BLOCK"
    assert {flags[k][0] for k in flags if k != ("q-slow", "latency")} == {"PASS"}
    row = drift.filter((pl.col("fingerprint") == "q-slow") & (pl.col("metric") == "latency")).row(
        0, named=True
    )
    assert (row["n_baseline"], row["n_candidate"], row["baseline_version"]) == (600, 300, "v1")
    assert (row["window_start"], row["window_end"], row["scored_at"]) == (CAND_START, NOW, NOW)
    assert row["queryid"] == 7 and row["instance"] == "alpha" and row["profile"] == "calibrated"
    assert worst_flag(drift) == "BLOCK"
    by_metric = {r["metric"]: r for r in counts_by_metric(drift).iter_rows(named=True)}
    assert (by_metric["latency"]["BLOCK"], by_metric["latency"]["PASS"], by_metric["cost"]["PASS"]) == (
        1,
        1,
        2,
    )


def busy_host(slowed: int, *, queries: int = 6, cost_moved: tuple[int, ...] = ()) -> pl.DataFrame:
    """``queries`` queries on alpha; the first ``slowed`` 3x slower now (a busy host), their plans unchanged
    unless listed in ``cost_moved`` (then the root cost doubled too)."""
    parts = []
    for i in range(queries):
        parts.append(executions(f"q{i}", T0, lognormal(10 + i, 600), step=5 * SEC))
        mu = 1.1 if i < slowed else 0.0
        cost = 20.0 if i in cost_moved else 10.0
        parts.append(executions(f"q{i}", CAND_START, lognormal(40 + i, 300, mu=mu), step=SEC, cost=cost))
    return pl.concat(parts)


def test_a_host_wide_slowdown_is_the_instances_not_each_querys() -> None:
    samples = busy_host(4, cost_moved=(3,))
    base = samples.filter(pl.col("logged_at") <= T0 + H)
    drift = score_execution_drift(samples, anchor(base), NOW, CONFIG)
    rows = {(r["fingerprint"], r["metric"]): (r["flag"], r["reason"]) for r in drift.iter_rows(named=True)}
    for q in ("q0", "q1", "q2"):  # slowed with the host, plan unchanged: the instance's, WARN not BLOCK
        assert rows[(q, "latency")] == ("WARN", INSTANCE_WIDE_LATENCY)
    assert rows[("q3", "latency")][0] == "BLOCK"  # its plan's cost moved too: still the query's
    assert rows[("q3", "cost")][0] == "BLOCK"
    assert {rows[(q, "latency")][0] for q in ("q4", "q5")} == {"PASS"}


def test_the_host_guard_needs_its_share_and_its_pairs() -> None:
    at_share = busy_host(3)  # 3 of 6 = the 0.5 share: the guard applies
    drift = score_execution_drift(
        at_share, anchor(at_share.filter(pl.col("logged_at") <= T0 + H)), NOW, CONFIG
    )
    latency = drift.filter(pl.col("metric") == "latency")
    assert latency.filter(pl.col("reason") == INSTANCE_WIDE_LATENCY).height == 3
    below = busy_host(2)  # 2 of 6: two queries slowed, not the host; they BLOCK
    drift = score_execution_drift(below, anchor(below.filter(pl.col("logged_at") <= T0 + H)), NOW, CONFIG)
    assert drift.filter((pl.col("metric") == "latency") & (pl.col("flag") == "BLOCK")).height == 2
    few = busy_host(4, queries=4)  # 4 pairs < instance_shift_min_pairs (5): nothing to tell apart
    drift = score_execution_drift(few, anchor(few.filter(pl.col("logged_at") <= T0 + H)), NOW, CONFIG)
    assert drift.filter((pl.col("metric") == "latency") & (pl.col("flag") == "BLOCK")).height == 4


def test_candidate_window_is_now_minus_current_window_exclusive_to_now_inclusive() -> None:
    base = executions("q1", T0, lognormal(0, 300), step=5 * SEC)
    # 250 candidates exactly in the window, one at its start (out) and one after now (out)
    inside = executions("q1", CAND_START, lognormal(1, 250), step=2 * SEC)  # last one at NOW - 10 m + 500 s
    edges = pl.concat(
        [
            executions("q1", CAND_START - SEC, [1.0], session="edge-start"),  # logged at CAND_START: out
            executions("q1", NOW, [1.0], session="edge-after"),  # logged at NOW + 1 s: out
            executions("q1", NOW - SEC, [1.0], session="edge-now"),  # logged at NOW: in
        ]
    )
    samples = pl.concat([base, inside, edges])
    drift = score_execution_drift(samples, anchor(base), NOW, CONFIG)
    assert set(drift["n_candidate"]) == {251}
    wider = score_execution_drift(
        samples, anchor(base), NOW, replace(CONFIG, samples=SampleDriftConfig(current_window=11 * MIN))
    )
    assert set(wider["n_candidate"]) == {252}


def test_unanchored_and_thin_pairs_are_rows_never_dropped() -> None:
    base = pl.concat(
        [executions("q-thin", T0, lognormal(0, 300)), executions("q-idle", T0, lognormal(1, 300))]
    )
    cand = pl.concat(
        [
            executions("q-thin", CAND_START, lognormal(2, 20)),  # 20 samples now: under the 200 floor
            executions("q-new", CAND_START, lognormal(3, 400), instance="beta"),  # no baseline anywhere
        ]
    )
    drift = score_execution_drift(pl.concat([base, cand]), anchor(base), NOW, CONFIG)
    got = {(r["instance"], r["fingerprint"], r["metric"]): r for r in drift.iter_rows(named=True)}
    assert len(got) == 9  # 3 pairs x 3 metrics: q-idle ran not at all now, and is still there
    thin = got[("alpha", "q-thin", "latency")]
    assert (thin["flag"], thin["reason"], thin["n_candidate"]) == ("WARN", "insufficient_samples", 20)
    idle = got[("alpha", "q-idle", "latency")]
    assert (idle["flag"], idle["reason"], idle["n_candidate"], idle["js"]) == (
        "WARN",
        "insufficient_samples",
        0,
        None,
    )
    new = got[("beta", "q-new", "latency")]
    assert (new["flag"], new["reason"], new["n_baseline"], new["n_candidate"]) == (
        "WARN",
        NO_BASELINE,
        0,
        400,
    )
    assert (new["baseline_version"], new["js"], new["fingerprint"], new["queryid"]) == (
        None,
        None,
        "q-new",
        7,
    )
    assert new["shard"] == int(query_hash("q-new")[-8:], 16) % 64
    assert degenerate_count(drift) == 9
    counts = counts_by_metric(drift).filter(pl.col("metric") == "latency").row(0, named=True)
    assert (counts["insufficient_samples"], counts["no_baseline"], counts["WARN"]) == (2, 1, 3)


def test_a_baseline_without_identity_takes_the_candidates_most_common() -> None:
    # the candidate's identity is looked up only for rows whose baseline does not name it: it must still be
    # the most common fingerprint and queryid of that pair's samples (ties: the smallest)
    base = executions("q1", T0, lognormal(0, 300))
    cand = pl.concat(
        [
            executions("q1", CAND_START, lognormal(1, 200), queryid=9),
            executions("q1", CAND_START, lognormal(2, 100), queryid=8, session="other"),
        ]
    )
    unnamed = anchor(base).with_columns(
        pl.lit(None, dtype=pl.String).alias("fingerprint"), pl.lit(None, dtype=pl.Int64).alias("queryid")
    )
    drift = score_execution_drift(pl.concat([base, cand]), unnamed, NOW, CONFIG)
    assert drift.height == 3
    assert set(zip(drift["fingerprint"], drift["queryid"], strict=True)) == {("q1", 9)}
    named = score_execution_drift(pl.concat([base, cand]), anchor(base), NOW, CONFIG)
    assert set(named["queryid"]) == {7}  # the baseline's own, when it names one


def test_instances_are_scored_apart() -> None:
    # the same query on two instances: only beta's got slower; alpha's verdict must not see beta's samples
    base = pl.concat(
        [executions("q1", T0, lognormal(0, 400)), executions("q1", T0, lognormal(1, 400), instance="beta")]
    )
    cand = pl.concat(
        [
            executions("q1", CAND_START, lognormal(2, 300)),
            executions("q1", CAND_START, lognormal(3, 300, mu=1.5), instance="beta"),
        ]
    )
    drift = score_execution_drift(pl.concat([base, cand]), anchor(base), NOW, CONFIG)
    lat = drift.filter(pl.col("metric") == "latency")
    assert dict(zip(lat["instance"], lat["flag"], strict=True)) == {"alpha": "PASS", "beta": "BLOCK"}


def test_scoring_a_named_version() -> None:
    samples = history()
    old = anchor(samples, version="old", created_at=T0 + H)
    # "new" anchored over the candidate window itself: q-slow's new latency is its baseline now
    new = anchor(samples, version="new", window_start=CAND_START, window_end=NOW, created_at=NOW)
    both = pl.concat([old, new])
    newest = score_execution_drift(samples, both, NOW, CONFIG)
    assert set(newest["baseline_version"]) == {"new"} and set(newest["flag"]) == {"PASS"}
    named = score_execution_drift(samples, both, NOW, CONFIG, version="old")
    assert "BLOCK" in set(named["flag"]) and set(named["baseline_version"]) == {"old"}


def test_scoring_is_deterministic_in_any_row_order() -> None:
    samples = history()
    baselines = anchor(samples)
    first = score_execution_drift(samples, baselines, NOW, CONFIG)
    again = score_execution_drift(samples.reverse(), baselines.reverse(), NOW, CONFIG)
    assert first.equals(again)


def test_scoring_with_nothing_gives_no_rows() -> None:
    empty = executions("q1", T0, [])
    drift = score_execution_drift(empty, anchor(executions("q1", T0, [1.0])).clear(), NOW, CONFIG)
    assert drift.height == 0 and worst_flag(drift) is None


# ---------------------------------------------------------------------------------------------------------
# Checks


def scored(n_block: int, n_pass: int, extra: list[tuple[str, str]] | None = None) -> pl.DataFrame:
    return drift_rows(
        [("BLOCK", "js_block")] * n_block + [("PASS", "within_bands")] * n_pass + (extra or []), NOW
    )


ANY_COUNT = replace(CONFIG, samples=SampleDriftConfig(stale_min_block_pairs=1))
"""The share alone decides (the minimum number of BLOCKed pairs set to 1)."""


def test_stale_baseline_check_at_its_boundary() -> None:
    stats = table_stats([stats_row("orders", NOW - MIN, last_analyze=NOW - 5 * MIN)])
    at_limit = stale_baseline_check(scored(1, 19), stats, NOW, ANY_COUNT)  # 1 of 20 = 5%: not above
    assert at_limit.passed and at_limit.metadata["block_share"] == 0.05
    over = stale_baseline_check(scored(2, 18), stats, NOW, ANY_COUNT)  # 10%
    assert not over.passed and over.description.startswith("baseline likely stale: 2 of 20 scored pairs")
    assert "re-anchor: radar drift anchor-samples --version reanchor-" in over.description
    stricter = replace(CONFIG, samples=SampleDriftConfig(stale_block_share=0.04, stale_min_block_pairs=1))
    assert not stale_baseline_check(scored(1, 19), stats, NOW, stricter).passed  # the threshold is config


def test_a_few_blocked_pairs_are_not_a_stale_baseline_whatever_their_share() -> None:
    """2 of 15 pairs BLOCK (13%, over the 5% share) once read a dropped index as a stale baseline: at
    least stale_min_block_pairs (3) BLOCKed pairs are needed (issue 27)."""
    stats = table_stats([stats_row("orders", NOW - MIN, last_analyze=NOW - 5 * MIN)])
    two = stale_baseline_check(scored(2, 13), stats, NOW, CONFIG)
    assert two.passed and "limit 5.0% and 3 pairs" in two.description
    assert not stale_baseline_check(scored(3, 12), stats, NOW, CONFIG).passed


def test_a_re_anchor_comes_only_from_a_stats_event_after_the_anchor_and_ends_at_the_first_block() -> None:
    """An ANALYZE before the baseline was anchored explains nothing it did not see: no re-anchor (the
    BLOCKs are to be looked at as regressions). After it, the window runs from the ANALYZE to the first
    BLOCK scored after it, never over the good baseline and the BLOCKed phase together (issue 27)."""
    earlier = scored(4, 6).with_columns(
        pl.lit("v1").alias("baseline_version"),
        pl.lit(NOW - 3 * MIN).cast(pl.Datetime("us", "UTC")).alias("scored_at"),
    )
    drift = pl.concat([earlier, scored(4, 6).with_columns(pl.lit("v1").alias("baseline_version"))])
    anchors = drift.select("baseline_version", "instance", "query_hash", "metric").unique()
    stats = table_stats([stats_row("orders", NOW - MIN, last_analyze=NOW - 8 * MIN, analyze_count=2)])
    before = anchors.with_columns(pl.lit(NOW - 6 * MIN).cast(pl.Datetime("us", "UTC")).alias("window_end"))
    check = stale_baseline_check(drift, stats, NOW, CONFIG, anchors=before)
    assert not check.passed and check.metadata["reanchor"] is None and check.metadata["analysed_tables"] == []
    assert "no stats event explains them, so no re-anchor is proposed" in check.description
    after = anchors.with_columns(pl.lit(NOW - 9 * MIN).cast(pl.Datetime("us", "UTC")).alias("window_end"))
    check = stale_baseline_check(drift, stats, NOW, CONFIG, anchors=after)
    assert check.metadata["analysed_tables"] == ["alpha:app.public.orders"]
    assert check.metadata["reanchor"] == (  # from the ANALYZE (11:52) to the first BLOCK after it (11:57)
        "radar drift anchor-samples --version reanchor-20261201T115700Z --start 2026-12-01T11:52:00Z "
        "--end 2026-12-01T11:57:00Z --instance alpha"
    )


def test_stale_baseline_check_counts_verdicts_only_and_latest_per_pair_in_its_window() -> None:
    stats = table_stats([])
    # 1 BLOCK of 20 verdicts: 40 insufficient/no_baseline rows do not shrink or grow the denominator
    thin = [("WARN", "insufficient_samples")] * 30 + [("WARN", "no_baseline")] * 10
    assert stale_baseline_check(scored(1, 19, thin), stats, NOW, CONFIG).metadata["scored_pairs"] == 20
    # an older run BLOCKed everything; the latest row of each pair PASSes: not stale
    older = drift_rows([("BLOCK", "js_block")] * 20, NOW - 2 * MIN)
    latest = drift_rows([("PASS", "within_bands")] * 20, NOW - MIN)
    assert stale_baseline_check(pl.concat([older, latest]), stats, NOW, CONFIG).passed
    # BLOCKs scored before the stale window (10 min) are not counted
    long_ago = drift_rows([("BLOCK", "js_block")] * 20, NOW - 10 * MIN)
    check = stale_baseline_check(long_ago, stats, NOW, CONFIG)
    assert check.passed and check.metadata["scored_pairs"] == 0


def stats_row(relname: str, captured_at: object, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "instance": "alpha",
        "captured_at": captured_at,
        "dbname": "app",
        "relid": abs(hash(relname)) % 10_000,
        "schemaname": "public",
        "relname": relname,
        "analyze_count": 1,
        "autoanalyze_count": 0,
        "last_analyze": T0,
    }
    row.update(kw)
    return row


def test_stale_baseline_check_names_the_tables_analysed_in_the_lookback() -> None:
    stats = table_stats(
        [
            stats_row("orders", NOW - 40 * MIN, last_analyze=T0),
            stats_row("orders", NOW - MIN, last_analyze=NOW - 5 * MIN, analyze_count=2),  # ANALYZE 5 min ago
            stats_row("items", NOW - MIN, last_analyze=None, last_autoanalyze=NOW - 29 * MIN),  # autoanalyze
            stats_row("old", NOW - MIN, last_analyze=NOW - 31 * MIN),  # before the 30 min lookback
            stats_row(
                "beta_t", NOW - MIN, instance="beta", last_analyze=NOW - MIN
            ),  # not a BLOCKing instance
        ]
    )
    check = stale_baseline_check(scored(5, 5), stats, NOW, CONFIG)
    assert not check.passed
    assert check.metadata["analysed_tables"] == ["alpha:app.public.items", "alpha:app.public.orders"]
    assert (
        "tables analysed in the last 30m: alpha:app.public.items, alpha:app.public.orders"
        in check.description
    )
    # the suggested window starts at the latest ANALYZE, for the BLOCKing instance
    assert check.metadata["reanchor"] == (
        "radar drift anchor-samples --version reanchor-20261201T120000Z --start 2026-12-01T11:55:00Z "
        "--end 2026-12-01T12:00:00Z --instance alpha"
    )
    none = stale_baseline_check(scored(5, 5), table_stats([]), NOW, CONFIG)
    assert "no table of alpha was analysed in the last 30m" in none.description
    # with the BLOCKed queries' plan relations known, only their own analysed tables are named
    drift = scored(5, 5)
    blocked = drift.filter(pl.col("flag") == "BLOCK")["query_hash"].unique().to_list()
    passing = drift.filter(pl.col("flag") == "PASS")["query_hash"].unique().to_list()
    relations = pl.DataFrame(
        {
            "instance": "alpha",
            "query_hash": [blocked[0], passing[0]],
            "relation": ["orders", "items"],  # items is read only by a query that PASSes
        }
    )
    narrowed = stale_baseline_check(drift, stats, NOW, CONFIG, relations)
    assert narrowed.metadata["analysed_tables"] == ["alpha:app.public.orders"]
    unrelated = relations.with_columns(pl.lit("elsewhere").alias("relation"))
    wide = stale_baseline_check(drift, stats, NOW, CONFIG, unrelated)  # none of theirs: every analysed one
    assert wide.metadata["analysed_tables"] == ["alpha:app.public.items", "alpha:app.public.orders"]


def test_analysed_tables_sees_a_grown_analyze_count_without_a_timestamp() -> None:
    # a server whose last_analyze is unknown (null) but whose count grew within the lookback
    stats = table_stats(
        [
            stats_row("t", NOW - 45 * MIN, last_analyze=None, analyze_count=3),
            stats_row("t", NOW - MIN, last_analyze=None, analyze_count=4),
            stats_row("u", NOW - 45 * MIN, last_analyze=None, analyze_count=3),
            stats_row("u", NOW - MIN, last_analyze=None, analyze_count=3),  # unchanged: not analysed
        ]
    )
    assert analysed_tables(stats, NOW, 30 * MIN)["relname"].to_list() == ["t"]
    # snapshots after now are not looked at
    assert analysed_tables(stats, NOW - 10 * MIN, 30 * MIN).height == 0


def test_degenerate_check_at_its_boundary_and_leaves_no_baseline_out() -> None:
    thin = ("WARN", "insufficient_samples")
    at_limit = degenerate_samples_check(scored(0, 9, [thin]), NOW, CONFIG)  # 1 of 10: not above 10%
    assert at_limit.passed
    unanchored = [("WARN", "no_baseline")] * 50  # they need an anchor, not a wider window: not counted
    assert degenerate_samples_check(scored(0, 9, [thin, *unanchored]), NOW, CONFIG).passed
    assert not degenerate_samples_check(scored(0, 8, [thin, thin, *unanchored]), NOW, CONFIG).passed
    over = degenerate_samples_check(scored(0, 8, [thin, thin]), NOW, CONFIG)
    assert not over.passed
    assert "2 of 10 pairs (20.0%, limit 10.0%) have fewer than 200 samples on a side" in over.description
    assert "widen the capture window ([drift.samples] current_window, now 10m" in over.description
    assert over.metadata["thin_candidate"] == 2 and over.metadata["thin_baseline"] == 0
    looser = replace(CONFIG, samples=SampleDriftConfig(degenerate_share=0.25))
    assert degenerate_samples_check(scored(0, 8, [thin, thin]), NOW, looser).passed
    assert degenerate_samples_check(scored(0, 0), NOW, CONFIG).passed  # nothing to judge


# ---------------------------------------------------------------------------------------------------------
# The lake edge


def test_anchor_and_score_on_lake_files(lake_root: Path) -> None:
    samples = history()
    write_executions(lake_root, samples)
    rows = anchor_sample_baselines(lake_root, version="v1", start=T0, end=T0 + H, now=T0 + H)
    assert rows.height == 6 and load_sample_baselines(lake_root).equals(rows)
    with pytest.raises(BaselineError, match="'v1' is already anchored for instance alpha"):
        anchor_sample_baselines(lake_root, version="v1", start=T0, end=T0 + H)
    drift = run_execution_drift(lake_root, CONFIG, NOW)
    stored = lake.read_table(lake_root, "execution_drift").drop("date")
    assert stored.equals(drift) and drift.height == 6
    assert drift.filter(pl.col("flag") == "BLOCK")["fingerprint"].to_list() == ["q-slow"]
    # the stale check over the lake, as of its latest run: 1 BLOCK of 6 scored pairs is above 5%, and it
    # names the table table_stats_snapshots saw analysed 3 minutes before
    write_table_stats(lake_root, table_stats([stats_row("orders", NOW - MIN, last_analyze=NOW - 3 * MIN)]))
    stale, degenerate = check_lake(lake_root, ANY_COUNT)
    assert not stale.passed and stale.metadata["block_pairs"] == 1 and degenerate.passed
    assert check_lake(lake_root, CONFIG)[0].passed  # one BLOCKed pair is below stale_min_block_pairs (3)
    assert stale.metadata["analysed_tables"] == ["alpha:app.public.orders"]


# ---------------------------------------------------------------------------------------------------------
# CLI


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def payload_file(tmp_path: Path, samples: object, **over: object) -> str:
    body: dict[str, object] = {
        "query_hash": query_hash("q-slow"),
        "metric": "latency",
        "baseline_version": "v1",
        "candidate_samples": samples,
    }
    body.update(over)
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(body))
    return str(path)


@pytest.fixture()
def anchored_lake(lake_root: Path) -> Path:
    write_executions(lake_root, history())
    anchor_sample_baselines(lake_root, version="v1", start=T0, end=T0 + H, now=T0 + H)
    return lake_root


def test_cli_anchor_samples_and_its_refusals(capsys: pytest.CaptureFixture[str], lake_root: Path) -> None:
    write_executions(lake_root, history())
    lk = ["--lake", str(lake_root)]
    start, end = T0.isoformat(), (T0 + H).isoformat()
    code, out, err = cli(
        capsys,
        *lk,
        "drift",
        "anchor-samples",
        "--version",
        "v1",
        "--start",
        start,
        "--end",
        end,
        "--format",
        "json",
    )
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 6 and {r["n_kept"] for r in rows} == {600} and rows[0]["baseline_version"] == "v1"
    code, _, err = cli(
        capsys, *lk, "drift", "anchor-samples", "--version", "v1", "--start", start, "--end", end
    )
    assert code == 2 and "already anchored" in _ + err
    code, out, _ = cli(
        capsys, *lk, "drift", "anchor-samples", "--version", "", "--start", start, "--end", end
    )
    assert code == 2 and "needs --version" in out
    code, out, _ = cli(
        capsys, *lk, "drift", "anchor-samples", "--version", "v2", "--start", end, "--end", end
    )
    assert code == 2 and "is not before end" in out
    late, later = (T0 + 5 * H).isoformat(), (T0 + 6 * H).isoformat()
    code, out, _ = cli(
        capsys, *lk, "drift", "anchor-samples", "--version", "v2", "--start", late, "--end", later
    )
    assert code == 2 and "no execution samples logged in" in out
    assert set(load_sample_baselines(lake_root)["baseline_version"]) == {"v1"}  # nothing written on refusal


def test_cli_score_exits_by_the_worst_flag(capsys: pytest.CaptureFixture[str], anchored_lake: Path) -> None:
    lk = ["--lake", str(anchored_lake)]
    code, out, err = cli(capsys, *lk, "drift", "score", "--now", NOW.isoformat(), "--format", "json")
    assert code == 2  # q-slow's latency BLOCKs
    rows = json.loads(out)
    assert [(r["flag"], r["metric"]) for r in rows] == [("BLOCK", "latency")]
    # one BLOCKed pair of six: above the 5% share, below stale_min_block_pairs (3): not a stale baseline
    assert "PASS: 5  WARN: 0  BLOCK: 1" in err and "check stale_baseline ok" in err
    assert len(lake.read_table(anchored_lake, "execution_drift")) == 6
    # a window holding none of the samples: every baseline pair is WARN insufficient_samples (exit 1)
    later = (NOW + H).isoformat()
    code, out, err = cli(capsys, *lk, "drift", "score", "--now", later, "--format", "json", "--all")
    assert code == 1 and {r["reason"] for r in json.loads(out)} == {"insufficient_samples"}
    assert "check degenerate_samples FAILED" in err
    # only PASS pairs: exit 0 (the wider window reaches back into the baseline hour)
    code, out, err = cli(
        capsys, *lk, "drift", "score", "--now", (T0 + H).isoformat(), "--current-window", "50m"
    )
    assert code == 0, out
    code, out, _ = cli(
        capsys,
        *lk,
        "drift",
        "score",
        "--now",
        NOW.isoformat(),
        "--profile",
        "design",
        "--format",
        "csv",
        "--all",
    )
    assert code == 2 and out.count("design") == 6  # --profile is [drift.score] profile
    checks = [*lk, "drift", "checks", "--now", NOW.isoformat(), "--format", "json"]
    code, out, _ = cli(capsys, *checks)  # the run at NOW: one BLOCKed pair, below stale_min_block_pairs
    assert code == 0 and [r["passed"] for r in json.loads(out)] == [True, True]
    code, out, _ = cli(capsys, "--set", "drift.samples.stale_min_block_pairs=1", *checks)
    assert code == 1 and [r["passed"] for r in json.loads(out)] == [False, True]


@pytest.mark.parametrize(
    ("samples", "code", "flag"),
    [
        (lognormal(10, 300).tolist(), 0, "PASS"),
        (lognormal(11, 50).tolist(), 1, "WARN"),  # under 200 samples: insufficient_samples
        (lognormal(12, 300, mu=1.2).tolist(), 2, "BLOCK"),
    ],
)
def test_cli_score_payload_exits_0_1_2(
    capsys: pytest.CaptureFixture[str],
    anchored_lake: Path,
    tmp_path: Path,
    samples: list[float],
    code: int,
    flag: str,
) -> None:
    got, out, _ = cli(
        capsys,
        "--lake",
        str(anchored_lake),
        "drift",
        "score",
        "--payload",
        payload_file(tmp_path, samples),
        "--format",
        "json",
    )
    score = json.loads(out)
    assert (got, score["flag"]) == (code, flag)
    assert (score["instance"], score["baseline_version"], score["n_baseline"]) == ("alpha", "v1", 600)
    assert score["query_hash"] == query_hash("q-slow") and score["metric"] == "latency"


def test_cli_score_payload_errors_have_their_own_exit_codes(
    capsys: pytest.CaptureFixture[str], anchored_lake: Path, tmp_path: Path
) -> None:
    lk = ["--lake", str(anchored_lake), "drift", "score", "--payload"]
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, [1.0, -2.0]))
    assert code == 3 and "candidate_samples/1" in out
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, ["1.0"]))
    assert code == 3 and "candidate_samples/0" in out
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, [1.0], extra=1))
    assert code == 3 and "extra" in out
    code, out, _ = cli(capsys, *lk, str(tmp_path / "missing.json"))
    assert code == 3 and "unreadable" in out
    (tmp_path / "bad.json").write_text("{not json")
    code, out, _ = cli(capsys, *lk, str(tmp_path / "bad.json"))
    assert code == 3 and "not JSON" in out
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, [1.0], baseline_version="v7"))
    assert code == 4 and "no anchored baseline of version 'v7'" in out and "anchored for it: v1" in out
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, [1.0], query_hash=query_hash("unknown")))
    assert code == 4 and "none" in out
    code, out, _ = cli(capsys, *lk, payload_file(tmp_path, [1.0]), "--instance", "beta")
    assert code == 4 and "on instance beta" in out


def test_cli_score_payload_on_several_instances_needs_instance(
    capsys: pytest.CaptureFixture[str], lake_root: Path, tmp_path: Path
) -> None:
    write_executions(
        lake_root, pl.concat([history(), history(5).with_columns(pl.lit("beta").alias("instance"))])
    )
    anchor_sample_baselines(lake_root, version="v1", start=T0, end=T0 + H, now=T0 + H)
    lk = [
        "--lake",
        str(lake_root),
        "drift",
        "score",
        "--payload",
        payload_file(tmp_path, lognormal(3, 300).tolist()),
    ]
    code, out, _ = cli(capsys, *lk)
    assert code == 4 and "several instances" in out and "alpha, beta" in out
    code, out, _ = cli(capsys, *lk, "--instance", "beta", "--format", "json")
    assert code == 0 and json.loads(out)["instance"] == "beta"


def test_drift_exit_codes_are_documented() -> None:
    from jobs.cli.parser import EXIT_CODES

    epilog = EXIT_CODES["drift"]
    for line in (
        "2  score (--payload): BLOCK",
        "3  score --payload:",
        "4  score --payload: no anchored baseline",
    ):
        assert line in epilog


def test_scoring_an_instance_flattens_the_lists_as_they_lie_and_scores_what_the_arrays_would() -> None:
    """_score_instance joins keys only and hands the lists' segments as they lie to the kernel: the rows
    are those of score_drift_arrays on the pairs in key order, a null inside a baseline list is dropped,
    an empty list is an empty side, and a null list (or a key with no sample at all) is left to the
    caller; a candidate without a baseline is not scored here."""
    from jobs.drift.config import DriftScoreConfig
    from jobs.drift.execution import _score_instance
    from jobs.drift.scorer import score_drift_arrays

    rng = np.random.default_rng(4)
    keys = [query_hash(f"inst{i}") for i in range(6)]
    b0 = list(rng.lognormal(0, 1, 250))
    base_lists = [[*b0, None], list(rng.lognormal(0, 1, 220)), [], None, [], list(rng.lognormal(0, 1, 260))]
    cand_lists = {
        keys[5]: rng.lognormal(0.3, 1, 240),
        keys[0]: rng.lognormal(0, 1, 300),
        keys[2]: rng.lognormal(0, 1, 210),
        keys[3]: np.full(3, 2.0),
    }
    base = pl.DataFrame(
        {"query_hash": keys, "metric": ["latency"] * 6, "samples": base_lists},
        schema={"query_hash": pl.String, "metric": pl.String, "samples": pl.List(pl.Float64)},
    )
    cand = pl.DataFrame(
        {
            "query_hash": [*cand_lists, "f" * 64],
            "metric": ["latency"] * 5,
            "value": [list(v) for v in cand_lists.values()] + [[1.0] * 5],
        },
        schema={"query_hash": pl.String, "metric": pl.String, "value": pl.List(pl.Float64)},
    )
    config = DriftConfig(score=DriftScoreConfig(profile="design", compute_wasserstein=True))
    got = _score_instance(base, cand, config)
    scored = [0, 1, 2, 5]  # 3: a null list; 4: no sample on either side
    expected_base = [np.array(b0), np.array(base_lists[1]), np.zeros(0), np.array(base_lists[5])]
    expected_cand = [cand_lists[keys[0]], np.zeros(0), cand_lists[keys[2]], cand_lists[keys[5]]]
    expected = score_drift_arrays(
        pl.DataFrame({"query_hash": [keys[i] for i in scored], "metric": ["latency"] * 4}),
        np.concatenate(expected_base),
        np.concatenate(([0], np.cumsum([v.size for v in expected_base]))),
        np.concatenate(expected_cand),
        np.concatenate(([0], np.cumsum([v.size for v in expected_cand]))),
        config.score,
    )
    assert got.equals(expected)
    assert sorted(got["n_baseline"].to_list()) == [0, 220, 250, 260]  # the null in the first list dropped
