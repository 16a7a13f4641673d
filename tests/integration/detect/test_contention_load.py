"""Contention judged by the instance's load (jobs.detect.load) on tiny inline series: instances of one to
three statements, where the peer rule has no peers, and the rules that keep load from hiding regressions."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from jobs.detect.config import ContentionConfig, RegressionConfig
from jobs.detect.contention import separate_contention
from jobs.detect.deploy_analysis import detect_regressions
from tests.integration.detect.test_contention import CONFIG, deploy_at
from tests.support.lakes import SERIES_DEPLOY_AT, SERIES_STEP, series_samples, series_texts

BEFORE, AFTER = 30, 60
APP, NEIGHBOUR, OTHER = 100, 900, 101
APP_TEXT = "select customer_id, sum(amount) from orders where id < $1 group by customer_id"
NEIGHBOUR_TEXT = "select count(*) from generate_series($1, $2)"


def app_series(
    factor: float, *, queryid: int = APP, ms: float = 50.0, calls: int = 100, seed: int = 0
) -> pl.DataFrame:
    """``ms`` per call, ``calls`` per 10 s (0.5 s of execution per second at the defaults), ×factor from
    the deploy on."""
    rng = np.random.default_rng(seed)
    values = np.concatenate(
        [ms * rng.lognormal(0.0, 0.05, BEFORE), ms * factor * rng.lognormal(0.0, 0.05, AFTER)]
    )
    return series_samples(values, calls=calls, queryid=queryid, first=-BEFORE)


def neighbour_series(load: float = 2.0) -> pl.DataFrame:
    """A statement that appears at the deploy and runs ``load`` seconds of execution per second."""
    calls = 40
    ms = load * SERIES_STEP.total_seconds() * 1000.0 / calls
    return series_samples(np.full(AFTER, ms), calls=calls, queryid=NEIGHBOUR, first=0)


def texts() -> pl.DataFrame:
    return series_texts(
        [
            ("alpha", APP, APP_TEXT),
            ("alpha", OTHER, "select * from customers where id = $1"),
            ("alpha", NEIGHBOUR, NEIGHBOUR_TEXT),
        ]
    )


def judge(
    samples: pl.DataFrame, config: ContentionConfig = ContentionConfig(), activity: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    regression = RegressionConfig(
        window_before=CONFIG.window_before, window_after=CONFIG.window_after, contention=config
    )
    found = detect_regressions(samples, texts(), deploy_at(), regression)
    found = found.with_columns(pl.lit(False).alias("work_changed"))  # work per call unchanged
    return separate_contention(found, samples, texts(), regression, activity)


def row_of(frame: pl.DataFrame, queryid: int) -> dict:
    return frame.filter(pl.col("queryid") == queryid).row(0, named=True)


def activity(before: float, after: float, cores: int | None) -> pl.DataFrame:
    """activity_snapshots rows every 10 s: ``before`` / ``after`` backends on a CPU."""
    at = [SERIES_DEPLOY_AT + i * SERIES_STEP for i in range(-BEFORE, AFTER)]
    on_cpu = [before if t <= SERIES_DEPLOY_AT else after for t in at]
    return pl.DataFrame(
        {
            "instance": "alpha",
            "captured_at": at,
            "active_on_cpu": pl.Series(np.round(on_cpu).astype(np.int64)),
            "parallel_workers": 0,
            "cores": pl.Series([cores] * len(at), dtype=pl.Int32),
        }
    )


def test_a_lone_query_slowed_by_a_neighbour_that_started_at_the_deploy_is_contention_naming_it() -> None:
    samples = pl.concat([app_series(1.5), neighbour_series(2.0)])
    out, slowdowns = judge(samples)
    app = row_of(out, APP)
    assert (app["status"], app["kind"], app["reason"]) == ("no_regression", "contention", "instance_slowdown")
    # cores unknown: load 0.5 → 2.5 s/s explains up to ×2.5
    assert app["instance_slowdown_ratio"] == pytest.approx(2.5, rel=0.05)
    assert slowdowns.height == 1
    episode = slowdowns.row(0, named=True)
    assert episode["evidence"] == "load" and episode["findings_suppressed"] == 1
    assert episode["load_before"] == pytest.approx(0.5, rel=0.05)
    assert episode["load_after"] == pytest.approx(0.5 * 1.5 + 2.0, rel=0.05)
    assert episode["cores"] is None
    assert episode["load_sources"].startswith("+2.0 s/s from `select count(*) from generate_series")
    assert f"(queryid {NEIGHBOUR})" in episode["load_sources"]
    assert "s of execution per second (cores unknown)" in episode["summary"]
    # a load episode's calls/s are its measured series' (none was compared: null, printed 0.0 → 0.0, before)
    assert episode["calls_per_s_before"] > 0 and episode["calls_per_s_after"] > 0
    assert "calls/s 0.0 → 0.0" not in episode["summary"]


def test_without_the_load_rule_the_same_slowdown_is_a_regression_finding() -> None:
    samples = pl.concat([app_series(1.5), neighbour_series(2.0)])
    out, slowdowns = judge(samples, ContentionConfig(load_rule=False))
    assert (row_of(out, APP)["status"], row_of(out, APP)["kind"]) == ("detected", "plan_or_work")
    assert slowdowns.height == 0


def test_a_slowdown_beyond_what_the_load_explains_stays_a_regression() -> None:
    samples = pl.concat([app_series(10.0), neighbour_series(2.0)])  # the index drop under the same load
    out, _ = judge(samples)
    app = row_of(out, APP)
    assert (app["status"], app["kind"]) == ("detected", "both")
    assert app["slowdown_excess"] == pytest.approx(10.0 / 2.5, rel=0.1)


def test_a_query_whose_own_load_rose_is_not_explained_by_itself() -> None:
    out, slowdowns = judge(app_series(3.0))  # alone: its own load went 0.5 → 1.5 s/s
    assert (row_of(out, APP)["status"], row_of(out, APP)["kind"]) == ("detected", "plan_or_work")
    assert slowdowns.height == 0


def test_queries_that_slowed_alike_do_not_explain_each_other() -> None:
    samples = pl.concat([app_series(2.0), app_series(2.0, queryid=OTHER, seed=1)])  # one deploy slowed both
    out, slowdowns = judge(samples)
    assert out.filter(pl.col("status") == "detected").height == 2
    assert slowdowns.height == 0


def test_one_bad_query_is_the_regression_and_the_neighbour_its_cpu_slowed_is_contention() -> None:
    bad = app_series(10.0, ms=10.0, calls=1000)  # 1 → 10 s of execution per second
    slowed = app_series(1.5, queryid=OTHER, seed=1)
    out, slowdowns = judge(pl.concat([bad, slowed]))
    assert (row_of(out, APP)["status"], row_of(out, APP)["kind"]) == ("detected", "plan_or_work")
    assert (row_of(out, OTHER)["status"], row_of(out, OTHER)["kind"]) == ("no_regression", "contention")
    assert slowdowns.height == 1 and slowdowns["findings_suppressed"].to_list() == [1]


def mix_of(
    long_factor: float, peer_ms: tuple[float, ...], peer_factor: float = 1.0
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(samples, texts): a 15 ms query slowing ×``long_factor`` at the deploy, peers of ``peer_ms``
    slowing ×``peer_factor``, and a neighbour bringing 4 s of execution per second (with the mix's ~0.5
    s/s: explains ×4.5)."""
    peers = [app_series(peer_factor, queryid=OTHER + i, ms=ms, seed=i + 1) for i, ms in enumerate(peer_ms)]
    samples = pl.concat([app_series(long_factor, ms=15.0), *peers, neighbour_series(4.0)])
    texts = series_texts(
        [
            ("alpha", APP, APP_TEXT),
            ("alpha", NEIGHBOUR, NEIGHBOUR_TEXT),
            *(("alpha", OTHER + i, f"select * from peer{i} where id = $1") for i in range(len(peer_ms))),
        ]
    )
    return samples, texts


def judge_mix(
    samples: pl.DataFrame, texts: pl.DataFrame, config: ContentionConfig = ContentionConfig()
) -> pl.DataFrame:
    regression = RegressionConfig(
        window_before=CONFIG.window_before, window_after=CONFIG.window_after, contention=config
    )
    found = detect_regressions(samples, texts, deploy_at(), regression).with_columns(
        pl.lit(False).alias("work_changed")
    )
    return separate_contention(found, samples, texts, regression)[0]


def test_shorter_peers_do_not_outweigh_the_load_for_the_longest_query() -> None:
    # As on a real server pinned to one CPU with eight CPU-bound neighbours: the longest query (15 ms) went
    # ×3.0-3.4, the shorter ones (2-10 ms) stayed near ×1, and the load explained ×5.
    samples, texts = mix_of(3.3, (2.0, 4.0, 8.0, 10.0))
    row = row_of(judge_mix(samples, texts), APP)
    assert (row["status"], row["kind"], row["reason"]) == ("no_regression", "contention", "instance_slowdown")
    assert row["instance_slowdown_ratio"] > 3.3
    # Every compared peer allowed to outweigh the load (the rule of issue 24): its own regression.
    before = row_of(
        judge_mix(samples, texts, ContentionConfig(peers_outweigh_load=True, peer_latency_share=0.0)), APP
    )
    assert (before["status"], before["kind"]) == ("detected", "both")
    with pytest.raises(ValueError, match="peer_latency_share"):
        ContentionConfig(peer_latency_share=1.5)


def test_peers_about_as_long_that_stayed_flat_outweigh_the_load_only_where_allowed() -> None:
    # The same ×4 inside what the load explains, three peers of 10-16 ms flat. By default the load decides:
    # on a real server contention stretched unchanged queries ×3.5-6.5 beside peers as long at ×0.9-1.8.
    samples, texts = mix_of(4.0, (10.0, 12.0, 16.0, 2.0))
    row = row_of(judge_mix(samples, texts), APP)
    assert (row["status"], row["kind"], row["reason"]) == ("no_regression", "contention", "instance_slowdown")
    # Measured against what explains it (the load's ×4.5), not against the flat peers.
    assert row["instance_slowdown_ratio"] > 3.3 and row["slowdown_excess"] < 1.5
    # peers_outweigh_load (the rule before): a cause of its own.
    allowed = row_of(judge_mix(samples, texts, ContentionConfig(peers_outweigh_load=True)), APP)
    assert (allowed["status"], allowed["kind"]) == ("detected", "both")


def test_a_finding_the_load_explains_is_measured_against_the_load_not_its_peers() -> None:
    # Peers ×1.3 (a peer episode), the query ×4.2: clearly beyond the peers (×3.2), within the ×4.5 the
    # load explains. Contention, and its figures say why: the load's slowdown, an excess under
    # load_excess_factor (against the peers it would read ×1.3 and an excess of 3.2).
    samples, texts = mix_of(4.2, (10.0, 12.0, 16.0, 2.0), peer_factor=1.3)
    row = row_of(judge_mix(samples, texts), APP)
    assert (row["status"], row["kind"]) == ("no_regression", "contention")
    assert row["instance_slowdown_ratio"] > 3.3 and row["slowdown_excess"] < 1.5
    allowed = row_of(judge_mix(samples, texts, ContentionConfig(peers_outweigh_load=True)), APP)
    assert (allowed["status"], allowed["kind"]) == ("detected", "both")
    assert allowed["instance_slowdown_ratio"] < 1.5 and allowed["slowdown_excess"] > 3.0


def test_known_cores_with_room_to_spare_explain_nothing() -> None:
    samples = pl.concat([app_series(1.5), neighbour_series(2.0)])
    out, slowdowns = judge(samples, activity=activity(0.0, 0.0, cores=8))
    assert (row_of(out, APP)["status"], row_of(out, APP)["kind"]) == ("detected", "plan_or_work")
    assert slowdowns.height == 0
    # the same load on 2 cores: 0.5 → 2.5 runnable on 2 CPUs explains ×1.25, the query's ×1.5 is within
    # load_excess_factor of that
    out, slowdowns = judge(samples, activity=activity(0.0, 0.0, cores=2))
    assert row_of(out, APP)["kind"] == "contention"
    assert row_of(out, APP)["instance_slowdown_ratio"] == pytest.approx(1.25, rel=0.05)
    assert slowdowns.row(0, named=True)["cores"] == 2


def test_active_backends_pg_stat_statements_has_not_seen_complete_are_load() -> None:
    # A neighbour whose statements run for minutes: no pg_stat_statements row yet, three backends on a CPU.
    out, slowdowns = judge(app_series(1.5), activity=activity(1.0, 4.0, cores=None))
    assert row_of(out, APP)["kind"] == "contention"
    assert slowdowns.row(0, named=True)["evidence"] == "load"
    out, _ = judge(app_series(1.5), activity=activity(1.0, 1.0, cores=None))
    assert row_of(out, APP)["kind"] == "plan_or_work"


def test_the_load_thresholds_are_used() -> None:
    samples = pl.concat([app_series(1.5), neighbour_series(2.0)])
    out, _ = judge(samples, ContentionConfig(min_load_rise=3.0))
    assert row_of(out, APP)["kind"] == "plan_or_work"
    out, _ = judge(samples, ContentionConfig(cores_when_unknown=4.0))  # 2.5 s/s on 4 CPUs: no slowdown
    assert row_of(out, APP)["kind"] == "plan_or_work"
    out, _ = judge(
        pl.concat([app_series(3.0), neighbour_series(2.0)]), ContentionConfig(load_excess_factor=1.1)
    )
    assert row_of(out, APP)["kind"] == "both"
    with pytest.raises(ValueError, match="min_load_rise"):
        ContentionConfig(min_load_rise=0)
    assert timedelta(0) < ContentionConfig().max_window


def test_the_terminal_shows_a_load_episode_and_its_statements_as_text_never_as_markup() -> None:
    from rich.console import Console

    from jobs.publish.console import slowdowns_table

    hostile = 'select count(*) from "[link=https://evil.example]t[/link]" where x = $1'
    samples = pl.concat([app_series(1.5), neighbour_series(2.0)])
    texts_with_markup = texts().with_columns(
        pl.when(pl.col("queryid") == NEIGHBOUR)
        .then(pl.lit(hostile))
        .otherwise(pl.col("query"))
        .alias("query")
    )
    regression = RegressionConfig(window_before=CONFIG.window_before, window_after=CONFIG.window_after)
    found = detect_regressions(samples, texts_with_markup, deploy_at(), regression)
    _, slowdowns = separate_contention(found, samples, texts_with_markup, regression)
    row = slowdowns.row(0, named=True)
    assert "[link=https://evil.example]" in row["load_sources"]
    one_query = slowdowns.with_columns(pl.lit(None, dtype=pl.Float64).alias("median_ratio"))  # none compared
    console = Console(record=True, width=400, color_system=None)
    console.print(slowdowns_table(one_query))
    shown = console.export_text()
    assert "[link=https://evil.example]t[/link]" in shown  # printed as the fleet wrote it
    assert "- → ×1.5" in shown


def test_another_database_on_the_same_host_brings_load_too() -> None:
    """A neighbour on another instance of the same machine (the fleet file's host): its CPU is shared."""
    mine = app_series(1.5)
    theirs = neighbour_series(2.0).with_columns(pl.lit("beta").alias("instance"))
    samples = pl.concat([mine, theirs])
    both = pl.concat([texts(), texts().with_columns(pl.lit("beta").alias("instance"))])
    regression = RegressionConfig(window_before=CONFIG.window_before, window_after=CONFIG.window_after)
    found = detect_regressions(samples, both, deploy_at(), regression).filter(pl.col("instance") == "alpha")
    apart = activity(0.0, 0.0, cores=None).with_columns(pl.lit(None, dtype=pl.String).alias("host"))
    out, slowdowns = separate_contention(found, samples, both, regression, apart)
    assert row_of(out, APP)["kind"] == "plan_or_work"  # another instance, on its own machine: no evidence
    shared = pl.concat(
        [
            apart.with_columns(pl.lit("box").alias("host")),
            apart.with_columns(pl.lit("beta").alias("instance"), pl.lit("box").alias("host")),
        ]
    )
    out, slowdowns = separate_contention(found, samples, both, regression, shared)
    assert row_of(out, APP)["kind"] == "contention"
    sources = slowdowns.filter(pl.col("instance") == "alpha").row(0, named=True)["load_sources"]
    assert "generate_series" in sources and "` on beta (queryid" in sources


def test_the_samples_kept_near_the_moments_are_every_one_the_shifts_and_loads_take() -> None:
    """The contention step merges only the samples within ``max_window`` of a moment (a week of history
    merged whole was its largest frame): what ``near_moments`` takes from them is what it takes from the
    whole history, also for a statement run once in 5 minutes, whose nearest samples lie far apart."""
    from jobs.detect.contention import moments_of
    from jobs.detect.load import near_moments, points_near_moments
    from jobs.query.series import SERIES_KEY, fingerprinted_samples, merge_intervals

    history = 400  # 10-second samples: 66 minutes before the deploy, twice max_window
    rng = np.random.default_rng(3)
    app = series_samples(
        50.0 * rng.lognormal(0.0, 0.05, history + AFTER), calls=100, queryid=APP, first=-history
    )
    sparse = series_samples(np.full(history + AFTER, 5.0), calls=1, queryid=OTHER, first=-history)
    sparse = sparse.gather_every(30)  # one call every 5 minutes: no sample in between
    samples = pl.concat([app, sparse])
    config = ContentionConfig()
    regression = RegressionConfig(window_before=CONFIG.window_before, window_after=CONFIG.window_after)
    found = detect_regressions(samples, texts(), deploy_at(), regression)
    moments, _ = moments_of(found, config)
    points = fingerprinted_samples(samples, texts())
    kept = points_near_moments(points, moments, config, None)
    assert 0 < kept.height < points.height  # the premise: history beyond the windows is left out
    keys = list(SERIES_KEY)
    whole = near_moments(merge_intervals(points, keys), moments, config)
    near = near_moments(merge_intervals(kept, keys), moments, config)
    assert near.height > 0 and near.equals(whole)
    per_series = near.group_by("series").len()
    assert per_series.height == 2 and per_series["len"].min() >= 6  # the sparse one too, minutes apart
