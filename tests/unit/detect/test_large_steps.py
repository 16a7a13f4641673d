"""Evidence that grows with the effect (jobs.detect.large_steps): a large step is confirmed with 2 to 15 new
samples, by an exact rank p-value; noise, spikes, moderate steps and short histories wait."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from scipy import special

from jobs.detect.config import RegressionConfig
from jobs.detect.large_steps import large_steps_at_end
from jobs.detect.unannounced import detect_unannounced_regressions
from tests.support.lakes import series_samples, series_texts

CONFIG = RegressionConfig()


def noise(seed: int, n: int, level: float = 10.0) -> np.ndarray:
    return level * np.random.default_rng(seed).lognormal(0.0, 0.1, n)


def found(*series: np.ndarray, config: RegressionConfig = CONFIG) -> dict[int, tuple[int, float]]:
    values = np.concatenate(series)
    sizes = np.array([s.size for s in series])
    steps = large_steps_at_end(values, sizes, config)
    return {
        int(g): (int(k), float(p))
        for g, k, p in zip(steps.group, steps.new_samples, steps.p_value, strict=True)
    }


def test_a_x3_step_is_confirmed_by_its_newest_three_samples_with_the_exact_rank_p() -> None:
    stepped = np.r_[noise(1, 60), 30.0, 31.0, 29.0]
    assert found(stepped) == {0: (3, pytest.approx(1 / special.comb(63, 3)))}
    # two new samples: 1 / C(62, 2) = 5.3e-4, over the default bound (1e-4); allowed when it is looser
    assert found(np.r_[noise(1, 60), 30.0, 31.0]) == {}
    loose = replace(CONFIG, large_step_max_p=1e-3)
    assert found(np.r_[noise(1, 60), 30.0, 31.0], config=loose) == {
        0: (2, pytest.approx(1 / special.comb(62, 2)))
    }


def test_noise_a_spike_a_moderate_step_an_old_step_and_a_short_history_wait() -> None:
    quiet = noise(2, 80)
    spike = np.r_[noise(3, 60), 50.0]  # one sample: never enough
    moderate = np.r_[noise(4, 60), 15.0, 15.5]  # x1.5: the segment tests' job
    old = np.r_[noise(5, 60), np.full(16, 30.0)]  # 16 new samples (> 15): the change-point search's
    short = np.r_[noise(6, 12), 30.0, 31.0]  # 12 reference samples < 20
    dip_inside = np.r_[noise(7, 60), 30.0, 9.0, 31.0]  # the newest are not all new-regime
    assert found(quiet, spike, moderate, old, short, dip_inside) == {}
    assert found(np.r_[noise(1, 60), 30.0, 31.0], config=replace(CONFIG, large_step_ratio=0.0)) == {}
    # the p bound: with 20 reference samples three new ones give 1/1771 = 5.6e-4 > 1e-4, four 1/10626
    assert found(np.r_[noise(8, 20), 30.0, 31.0, 32.0]) == {}
    assert 0 in found(np.r_[noise(8, 20), 30.0, 31.0, 32.0, 31.5])
    # Past min_segment - 1 new samples the rule still looks (up to large_step_max_new_samples); the rule
    # before stopped at 4.
    five = np.r_[noise(5, 60), 30.0, 31.0, 29.0, 30.5, 30.2]
    assert found(five) == {0: (5, pytest.approx(1 / special.comb(65, 5)))}
    assert found(five, config=replace(CONFIG, large_step_max_new_samples=4)) == {}


def unannounced(values: np.ndarray, config: RegressionConfig = CONFIG) -> dict:
    samples = series_samples(values, calls=6000, instance="alpha", queryid=7, first=0)
    out = detect_unannounced_regressions(samples, series_texts([("alpha", 7, QUERY)]), config)
    return out.row(0, named=True)


QUERY = "select total from invoices where account_id = $1"


def test_the_unannounced_analysis_opens_a_large_step_after_three_samples_and_says_so() -> None:
    row = unannounced(np.r_[noise(9, 90), 40.0, 41.0, 39.5])
    assert (row["status"], row["confirmed_by"], row["after_count"]) == ("detected", "large_step", 3), row
    assert row["p_value"] == pytest.approx(1 / special.comb(63, 3))
    # The level before: every sample since the last change point before the step (there is none): 90.
    assert (row["before_mean_ms"], row["before_count"]) == (pytest.approx(noise(9, 90).mean()), 90)
    old_rule = unannounced(np.r_[noise(9, 90), 40.0, 41.0, 39.5], replace(CONFIG, pre_step_levels=False))
    assert old_rule["before_mean_ms"] == pytest.approx(noise(9, 90)[-60:].mean())  # the reference's 60
    # Off: the same series waits for the segment tests (too few new samples for them).
    off = unannounced(np.r_[noise(9, 90), 40.0, 41.0, 39.5], replace(CONFIG, large_step_ratio=0.0))
    assert off["status"] != "detected", off
    # Five new samples: the change-point search finds it (segments), at the same change time.
    later = unannounced(np.r_[noise(9, 90), 40.0, 41.0, 39.5, 40.5, 40.2])
    assert (later["status"], later["confirmed_by"]) == ("detected", "segments"), later
    assert later["detected_change_at"] == row["detected_change_at"]
    assert later["before_mean_ms"] == row["before_mean_ms"]  # one level before, whichever path found it


def test_a_finding_opened_by_a_large_step_keeps_its_identity_when_the_segment_tests_confirm_it() -> None:
    from jobs.detect.findings import latest_states, update_findings
    from tests.unit.detect.test_findings import INTERVALS, MINUTE, T, analysis_row, rows

    fast = analysis_row(T, analysis="unannounced", before=10.0, after=40.0)
    opened = update_findings(
        pl.DataFrame(),
        rows({**fast, "confirmed_by": "large_step", "after_count": 3}),
        computed_at=T + 3 * MINUTE,
        intervals=INTERVALS,
    )
    assert opened.select("status", "opened_by", "opened_on_samples").rows() == [("open", "large_step", 3)]
    # Two samples later the change-point search has it (same change time, levels refined): an update.
    refined = analysis_row(T, analysis="unannounced", before=10.2, after=40.5)
    later = update_findings(
        latest_states(opened),
        rows({**refined, "confirmed_by": "segments", "after_count": 5}),
        computed_at=T + 5 * MINUTE,
        intervals=INTERVALS,
    )
    assert later["finding_id"].to_list() == opened["finding_id"].to_list()
    assert later.select("change", "opened_by", "opened_on_samples", "after_mean_ms").rows() == [
        ("updated", "large_step", 3, 40.5)
    ]


def test_a_first_new_sample_left_in_the_reference_moves_to_the_new_level() -> None:
    """Five samples after the step (the soak's shop-b at one run): the longest run the rule looks at is
    four, so the first new sample (16 ms, lower than the next ones) is the reference's last; the settled
    boundary moves it to the new level, and the level before is the old regime's alone."""
    old = 0.03 * np.random.default_rng(9).lognormal(0.0, 0.1, 40)
    values = np.r_[old, 16.0, 25.6, 23.9, 17.1, 18.2]
    steps = large_steps_at_end(values, np.array([values.size]), CONFIG)
    assert steps.group.tolist() == [0]
    assert int(steps.cut[0]) == old.size  # the onset at the 16 ms sample, as with more samples
    assert float(steps.before_mean[0]) == pytest.approx(float(old.mean()))
    assert float(steps.after_mean[0]) == pytest.approx(float(np.mean([16.0, 25.6, 23.9, 17.1, 18.2])))


# The soak's shop-b `SELECT abalance` (ms per call, one sample a tick, rounded to 0.1 us): 0.06-0.11 ms,
# about 0.04 ms for six samples, the interval its key was dropped in (3.3 ms), then six at about 17.7 ms.
SOAK_SELECT = np.r_[
    [0.076, 0.0785, 0.1107, 0.0772, 0.0784, 0.0888, 0.0614, 0.0421, 0.0481, 0.0652, 0.1012, 0.0618],
    [0.0714, 0.0765, 0.0776, 0.1089, 0.0609, 0.0449, 0.0391, 0.0387, 0.0385, 0.0412, 0.0469, 3.318],
    [17.7102, 17.6057, 17.9689, 17.4464, 18.6848, 18.9796],
]


def test_a_huge_step_after_a_small_earlier_change_is_reported_by_a_first_run() -> None:
    """Both paths find it with six new samples, the interval of the drop mixed, the level before the six
    0.04 ms samples: the segment tests since their rank test leaves a clean step unwidened (it read the
    middle -> low change before the step as serial correlation), the large-step rule past min_segment - 1
    alone when that exemption is off; with neither (the rule before issue 26's fix, widened) it waits."""
    row = unannounced(SOAK_SELECT)
    assert (row["status"], row["confirmed_by"], row["changepoint_index"]) == ("detected", "segments", 24)
    widened = replace(
        CONFIG,
        unannounced_changepoint=replace(CONFIG.unannounced_changepoint, serial_exempt_clean_steps=False),
    )
    by_rule = unannounced(SOAK_SELECT, widened)
    assert (by_rule["status"], by_rule["confirmed_by"], by_rule["changepoint_index"]) == (
        "detected",
        "large_step",
        24,
    )
    for found in (row, by_rule):
        assert found["mixed_index"] == 23
        assert found["before_mean_ms"] == pytest.approx(SOAK_SELECT[18:23].mean())
    before = unannounced(SOAK_SELECT, replace(widened, large_step_max_new_samples=4))
    assert before["status"] != "detected", before
