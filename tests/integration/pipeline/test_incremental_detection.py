"""Incremental detection: snapshots arrive in batches and `run_detection` runs after each; the deploy
regressions found equal those of one full run at the end, and a run with nothing new examines nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from jobs.collect.deploys import mark_deploy
from jobs.detect.config import RegressionConfig
from jobs.detect.deploy_analysis import detect_regressions
from jobs.detect.scope import (
    AnalysisScope,
    deploys_in_scope,
    merged_ranges,
    moved_series,
    plan_run,
    previous_watermarks,
    samples_watermarks,
)
from jobs.detect.verdicts import DETECTED
from jobs.lake import io as lake
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.query.series import SERIES_KEY, fingerprinted_samples
from jobs.schemas.analysed import ANALYSIS_RUNS
from jobs.schemas.collected import QUERY_TEXTS, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from tests.support.lakes import series_samples as inline_series
from tests.support.lakes import snapshot_frame, snapshot_row, write_snapshot_files

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
BOOT = START - timedelta(days=1)
MINUTES = 240
# (instance, queryid, text, {minute: factor from then on})
QUERIES: tuple[tuple[str, int, str, dict[int, float]], ...] = (
    ("alpha", 1, "select * from orders where customer_id = $1", {60: 8.0}),  # at deploy v1 (alpha)
    ("alpha", 2, "select * from customers where id = $1", {}),
    ("alpha", 3, "update stock set n = n - $1 where sku = $2", {150: 6.0}),  # at fleet deploy v2
    ("beta", 1, "select * from orders where customer_id = $1", {}),
    ("beta", 4, "select count(*) from events where kind = $1", {150: 9.0}),  # at fleet deploy v2
    ("beta", 5, "select * from audit where at > $1", {200: 7.0}),  # at v3, marked late
)
DEPLOYS: tuple[tuple[str, list[str] | None, int], ...] = (("v1", ["alpha"], 60), ("v2", None, 150))
LATE_DEPLOY = ("v3", ["beta"], 200)


def series_samples(instance: str, queryid: int, origin: datetime, values: list[float]) -> pl.DataFrame:
    """One-minute samples ending at origin, origin + 1 min, ... (100 calls each)."""
    frame = inline_series(
        np.asarray(values),
        calls=100,
        instance=instance,
        queryid=queryid,
        first=-1,
        origin=origin,
        step=timedelta(minutes=1),
    )
    return frame.with_columns(pl.col("queryid").cast(pl.Int64), pl.col("calls").cast(pl.Int64))


def at(minute: int) -> datetime:
    return START + timedelta(minutes=minute)


def snapshot_rows() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cumulative counters, one snapshot per minute per instance."""
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    totals: dict[tuple[str, int], list[float]] = {(i, q): [0, 0.0] for i, q, _, _ in QUERIES}
    for minute in range(MINUTES + 1):
        for instance in ("alpha", "beta"):
            runs.append({"instance": instance, "captured_at": at(minute), "status": "ok", "dealloc": 0})
        for instance, queryid, _, steps in QUERIES:
            state = totals[(instance, queryid)]
            if minute:
                factor = max([f for m, f in steps.items() if minute > m], default=1.0)
                calls = 60 + int(rng.integers(0, 20))
                state[0] += calls
                state[1] += calls * 2.0 * factor * float(rng.lognormal(0, 0.08))
            rows.append(
                snapshot_row(
                    instance,
                    at(minute),
                    queryid,
                    int(state[0]),
                    state[1],
                    collector_clock=at(minute) + timedelta(milliseconds=30),
                    boot=BOOT,
                )
            )
    snaps = snapshot_frame(rows)
    return snaps, pl.DataFrame(runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})


def write_texts(lake_root: Path) -> None:
    for instance in ("alpha", "beta"):
        mine = [(q, text) for i, q, text, _ in QUERIES if i == instance]
        texts = pl.DataFrame(
            {
                "captured_at": [START] * len(mine),
                "queryid": [q for q, _ in mine],
                "dbid": [5] * len(mine),
                "userid": [10] * len(mine),
                "query": [text for _, text in mine],
                "is_explain": [False] * len(mine),
            }
        )
        lake.write_table(lake_root, QUERY_TEXTS, texts, {"instance": instance, "date": "2026-11-02"}, "t")


def mark(lake_root: Path, version: str, instances: list[str] | None, minute: int) -> None:
    if instances is None:
        mark_deploy(lake_root, version=version, fleet=True, at=at(minute).isoformat())
    else:
        mark_deploy(lake_root, version=version, instances=instances, at=at(minute).isoformat())


def deploy_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["deploy_version"], row["instance"], row["fingerprint"])


def detected(rows: dict[tuple[Any, ...], dict[str, Any]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {
        key: (r["detected_change_at"], r["changepoint_index"], r["before_mean_ms"], r["after_mean_ms"])
        for key, r in rows.items()
        if r["status"] == DETECTED
    }


@pytest.fixture(scope="module")
def history() -> tuple[pl.DataFrame, pl.DataFrame]:
    return snapshot_rows()


@pytest.mark.slow
def test_incremental_runs_find_the_deploy_regressions_of_one_full_run(
    tmp_path: Path, history: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    snaps, runs = history
    full_lake, incremental_lake = tmp_path / "full", tmp_path / "incremental"
    for root in (full_lake, incremental_lake):
        write_texts(root)
        for version, instances, minute in DEPLOYS:
            mark(root, version, instances, minute)
    write_snapshot_files(full_lake, snaps, runs)
    mark(full_lake, *LATE_DEPLOY)
    full = run_detection(
        full_lake, DetectionConfig(incremental=False), now=at(MINUTES) + timedelta(minutes=1)
    )
    full_rows = {deploy_key(r): r for r in full.regressions.to_dicts()}

    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    examined: list[int] = []
    searched: list[int] = []
    unannounced: set[tuple[str, str]] = set()
    cuts = [40, 55, 75, 89, 140, 165, 180, 230, MINUTES]
    start = -1
    for cut in cuts:
        batch = pl.col("captured_at").is_between(at(start + 1), at(cut))
        write_snapshot_files(incremental_lake, snaps.filter(batch), runs.filter(batch))
        if cut == 230:
            mark(incremental_lake, *LATE_DEPLOY)  # recorded after its window's samples were in
        outcome = run_detection(incremental_lake, DetectionConfig(), now=at(cut) + timedelta(seconds=30))
        examined.append(outcome.regressions.select("deploy_id").n_unique())
        searched.append(outcome.unannounced.height)
        found = outcome.unannounced.filter(pl.col("status") == DETECTED)
        unannounced |= set(zip(found["instance"], found["fingerprint"], strict=True))
        for row in outcome.regressions.to_dicts():
            latest[deploy_key(row)] = row
        start = cut

    assert detected(latest) == detected(full_rows)
    assert {k[:2] for k in detected(full_rows)} == {
        ("v1", "alpha"),
        ("v2", "alpha"),
        ("v2", "beta"),
        ("v3", "beta"),
    }
    # Only the deploys whose window the batch fed (the first run, with no state, is a full run and only v1's
    # window has samples); 90..140 feeds v1's last minute and v2; 231..240 is in no window (v3 closed at 230).
    assert examined == [1, 1, 1, 1, 2, 1, 1, 1, 0]

    # Unannounced: every step the full run finds, an incremental run found when its samples came in; the
    # pre-filter searched only the series that moved, never all six after the first (full) run.
    full_steps = full.unannounced.filter(pl.col("status") == DETECTED)
    assert set(zip(full_steps["instance"], full_steps["fingerprint"], strict=True)) <= unannounced
    assert searched[0] == 6 and max(searched[1:]) < 6, searched

    # The last verdict of every (deploy, series) equals the full run's, not just the detected ones.
    common = set(full_rows) & set(latest)
    assert common == set(full_rows)
    for key in common:
        assert latest[key]["status"] == full_rows[key]["status"], key
        assert latest[key]["reason"] == full_rows[key]["reason"], key

    # Nothing new: no snapshot file read, no sample read beyond the watermark, no deploy examined.
    read: list[Path] = []
    real = lake.scan_files

    def recording(root: Path, table: Any, files: Any) -> pl.LazyFrame:
        files = list(files)
        if table in (STATEMENT_SNAPSHOTS, SNAPSHOT_RUNS):
            read.extend(files)
        return real(root, table, files)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lake, "scan_files", recording)
        idle = run_detection(incremental_lake, DetectionConfig(), now=at(MINUTES) + timedelta(minutes=5))
    assert read == []
    assert idle.regressions.height == 0 and idle.unannounced.height == 0
    assert idle.samples_report is not None and idle.samples_report.snapshot_rows == 0
    state = lake.read_table(incremental_lake, ANALYSIS_RUNS).sort("computed_at")
    assert state["mode"].to_list()[-2:] == ["incremental", "incremental"]
    assert state.filter(pl.col("run_id") == state["run_id"].max())["deploys_examined"].to_list() == [0, 0]


@pytest.mark.slow  # about 35-50 s: the slow tier keeps make test under 10 minutes (CI runs both)
def test_a_full_run_after_incremental_ones_sees_everything_again(
    tmp_path: Path, history: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    snaps, runs = history
    write_texts(tmp_path)
    for version, instances, minute in DEPLOYS:
        mark(tmp_path, version, instances, minute)
    write_snapshot_files(tmp_path, snaps, runs)
    first = run_detection(tmp_path, DetectionConfig(), now=at(MINUTES) + timedelta(minutes=1))
    again = run_detection(tmp_path, DetectionConfig(), now=at(MINUTES) + timedelta(minutes=2))
    full = run_detection(tmp_path, DetectionConfig(incremental=False), now=at(MINUTES) + timedelta(minutes=3))
    assert first.regressions.select("deploy_id").n_unique() == 2  # no state yet: a full run
    assert again.regressions.height == 0
    assert full.regressions.select("deploy_id").n_unique() == 2


# ---------------------------------------------------------------------------------------------------------
# Pure parts of the scope


def scope_of(
    previous: dict[str, datetime | None], current: dict[str, datetime], new: frozenset[str] = frozenset()
):
    return AnalysisScope(previous=previous, current=current, new_deploy_ids=new)


def test_only_deploys_whose_window_gets_new_samples_and_only_their_new_series_are_analysed() -> None:
    config = RegressionConfig()
    base = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    samples = pl.concat(
        [
            series_samples("db1", 1, base, [1.0] * 30 + [9.0] * 30),
            series_samples("db1", 2, base, [1.0] * 50),  # its samples stop at 10:50
        ]
    )
    texts = pl.DataFrame(
        {"instance": ["db1", "db1"], "queryid": [1, 2], "query": ["select a from t1", "select b from t2"]},
        schema_overrides={"queryid": pl.Int64},
    )
    deploys = pl.DataFrame(
        {
            "deploy_id": ["d-old", "d-now"],
            "version": ["v0", "v1"],
            "scope": ["instance", "instance"],
            "instance": ["db1", "db1"],
            "deployed_at": [base - timedelta(hours=3), base + timedelta(minutes=30)],
        },
        schema_overrides={"deployed_at": pl.Datetime("us", "UTC")},
    )
    far = [base - timedelta(days=d) for d in range(1, 200)]  # history: deploys long ago, never re-examined
    deploys = pl.concat(
        [
            deploys,
            pl.DataFrame(
                {
                    "deploy_id": [f"d-{i}" for i in range(len(far))],
                    "version": "old",
                    "scope": "fleet",
                    "instance": None,
                    "deployed_at": far,
                },
                schema=deploys.schema,
            ),
        ]
    )
    everything = detect_regressions(samples, texts, deploys, config)
    assert set(everything["deploy_id"]) == {"d-now"}  # d-old has no samples in its window anyway
    scope = scope_of({"db1": base + timedelta(minutes=55)}, {"db1": base + timedelta(minutes=60)})
    scoped = detect_regressions(samples, texts, deploys, config, scope)
    assert scoped["queryid"].to_list() == [1]  # queryid 2 got nothing new in the window
    assert everything.height == 2
    assert scoped.drop("queryids").equals(everything.filter(pl.col("queryid") == 1).drop("queryids"))
    assert deploys_in_scope(deploys, ["db1"], scope, config)["deploy_id"].to_list() == ["d-now"]
    closed = scope_of({"db1": base + timedelta(minutes=61)}, {"db1": base + timedelta(minutes=70)})
    assert detect_regressions(samples, texts, deploys, config, closed).height == 0  # window ended at 11:00
    late = scope_of(
        {"db1": base + timedelta(minutes=61)}, {"db1": base + timedelta(minutes=70)}, frozenset({"d-now"})
    )
    assert detect_regressions(samples, texts, deploys, config, late).height == 2  # a marker no run saw
    assert deploys_in_scope(deploys, ["db1"], closed, config).height == 0


def test_the_unannounced_pre_filter_keeps_only_series_that_moved() -> None:
    base = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    samples = pl.concat(
        [
            series_samples("db1", 1, base, [1.0] * 60 + [1.5] * 5),  # +50 %: moved
            series_samples("db1", 2, base, [1.0] * 60 + [1.1] * 5),  # +10 %: below the 20 % threshold
            series_samples("db1", 3, base, [2.0] * 60 + [1.0] * 5),  # -50 %: moved (a recovery)
            series_samples("db1", 4, base + timedelta(minutes=61), [5.0] * 4),  # new query: no level
            series_samples("db2", 1, base, [1.0] * 65),  # instance never analysed: everything
        ]
    )
    texts = pl.DataFrame(
        {
            "instance": ["db1"] * 4 + ["db2"],
            "queryid": [1, 2, 3, 4, 1],
            "query": [f"select c{i} from t{i}" for i in range(5)],
        },
        schema_overrides={"queryid": pl.Int64},
    )
    moved = moved_series(
        samples, texts, {"db1": base + timedelta(minutes=60), "db2": None}, RegressionConfig()
    )
    names = fingerprinted_samples(samples, texts).join(moved, on=list(SERIES_KEY), how="semi")
    assert sorted(set(zip(names["instance"], names["queryid"], strict=True))) == [
        ("db1", 1),
        ("db1", 3),
        ("db1", 4),
        ("db2", 1),
    ]


def test_overlapping_ranges_merge_per_instance() -> None:
    t = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    ranges = pl.DataFrame(
        {
            "instance": ["a", "a", "a", "b"],
            "start": [t, t + timedelta(minutes=20), t + timedelta(hours=2), t],
            "end": [
                t + timedelta(minutes=30),
                t + timedelta(minutes=40),
                t + timedelta(hours=3),
                t + timedelta(minutes=5),
            ],
        }
    )
    merged = merged_ranges(ranges)
    assert merged.rows() == [
        ("a", t, t + timedelta(minutes=40)),
        ("a", t + timedelta(hours=2), t + timedelta(hours=3)),
        ("b", t, t + timedelta(minutes=5)),
    ]


def test_watermarks_come_from_the_lake(tmp_path: Path, history: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    snaps, runs = history
    write_texts(tmp_path)
    batch = pl.col("captured_at") <= at(30)
    write_snapshot_files(tmp_path, snaps.filter(batch), runs.filter(batch))
    assert previous_watermarks(tmp_path) is None
    run_detection(tmp_path, DetectionConfig(), now=at(31))
    assert samples_watermarks(tmp_path) == {"alpha": at(30), "beta": at(30)}
    assert previous_watermarks(tmp_path) == {"alpha": at(30), "beta": at(30)}
    state = plan_run(tmp_path, pl.DataFrame(), at(32), incremental=True)
    assert state.scope is not None and state.scope.nothing_new


def test_a_detection_run_that_dies_before_its_state_is_committed_is_redone(
    tmp_path: Path, history: tuple[pl.DataFrame, pl.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.pipeline import detection as analysis

    snaps, runs = history
    write_texts(tmp_path)
    for version, instances, minute in DEPLOYS:
        mark(tmp_path, version, instances, minute)
    first = pl.col("captured_at") <= at(50)
    write_snapshot_files(tmp_path, snaps.filter(first), runs.filter(first))
    run_detection(tmp_path, DetectionConfig(), now=at(50) + timedelta(seconds=30))
    later = pl.col("captured_at").is_between(at(51), at(70))
    write_snapshot_files(tmp_path, snaps.filter(later), runs.filter(later))

    def die(*_: Any) -> list[Path]:
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "commit_run", die)
    with pytest.raises(KeyboardInterrupt):
        run_detection(tmp_path, DetectionConfig(), now=at(70) + timedelta(seconds=30))
    monkeypatch.undo()
    assert previous_watermarks(tmp_path) == {"alpha": at(50), "beta": at(50)}  # the old state stands
    redone = run_detection(tmp_path, DetectionConfig(), now=at(70) + timedelta(seconds=40))
    assert set(redone.regressions["deploy_version"]) == {"v1"}  # v1's window (30..90] got 51..70 again
    assert previous_watermarks(tmp_path) == {"alpha": at(70), "beta": at(70)}


def test_changed_analysis_settings_make_the_next_incremental_run_a_full_one(lake_root: Path) -> None:
    """A threshold changed in the config file must re-judge what earlier runs judged with the old one;
    the run records the settings' digest, and the next run with the same settings is incremental again."""
    from dataclasses import replace as replaced

    from tests.support.lakes import write_step_change_lake

    write_step_change_lake(lake_root)
    base = DetectionConfig(rebuild_samples=False)
    first = run_detection(lake_root, base, now=START + timedelta(days=1))
    assert first.detected["queryid"].to_list() == [111] and not first.settings_changed

    same = run_detection(lake_root, base, now=START + timedelta(days=1, minutes=1))
    assert not same.settings_changed and same.regressions.height == 0  # nothing new: nothing examined

    strict = replaced(base, regression=RegressionConfig(latency_change_threshold=20.0))
    changed = run_detection(lake_root, strict, now=START + timedelta(days=1, minutes=2))
    assert changed.settings_changed
    assert changed.regressions.filter(pl.col("queryid") == 111)["status"].to_list() == ["no_regression"]
    runs = lake.read_table(lake_root, ANALYSIS_RUNS).sort("computed_at")
    assert runs["mode"].to_list() == ["full", "incremental", "full"]
    assert runs["config_digest"].n_unique() == 2

    again = run_detection(lake_root, strict, now=START + timedelta(days=1, minutes=3))
    assert not again.settings_changed and again.regressions.height == 0


# ---------------------------------------------------------------------------------------------------------
# Issue 21: a finding's levels and onset do not move between runs


STEP_AT = START + timedelta(minutes=40, seconds=22)  # the primary key dropped inside the minute 40..41
KEY_DROPPED = "update billing set paid = $1 where id = $2"


def minute_samples(minute: int) -> pl.DataFrame:
    """The billing UPDATE's one-minute sample ending at START + minute + 1: 0.15 ms before the drop,
    40 ms after it, and the interval the key was dropped in a mix of both (22 s old, 38 s new)."""
    if minute < 40:
        value = 0.15
    elif minute == 40:
        value = (22 * 0.15 + 38 * 40.0) / 60  # 25.39 ms: 63% of the way up, either side can take it
    else:
        value = 40.0
    end = START + timedelta(minutes=minute + 1)
    return pl.DataFrame(
        {
            "interval_start": [end - timedelta(minutes=1)],
            "interval_end": [end],
            "interval_seconds": [60.0],
            "userid": [10],
            "dbid": [5],
            "toplevel": [True],
            "queryid": [31],
            "calls": [600],
            "total_exec_time": [value * 600],
            "mean_exec_time": [value],
        },
        schema_overrides={
            "interval_start": pl.Datetime("us", "UTC"),
            "interval_end": pl.Datetime("us", "UTC"),
        },
    )


def write_minutes(lake_root: Path, minutes: range) -> None:
    for minute in minutes:
        stem = f"m{minute:03d}"
        parts = {"instance": "alpha", "date": "2026-11-02"}
        lake.write_table(lake_root, "query_samples", minute_samples(minute), parts, stem)


def test_a_step_inside_an_interval_keeps_its_levels_and_onset_in_every_incremental_run(
    tmp_path: Path,
) -> None:
    """The key is dropped 22 s into a minute, two minutes after deploy v812; a restore is deployed 8 minutes
    after the drop. `radar detect` runs after every new minute. Once the step is found, every run reports
    the same levels (0.15 ms → 40 ms, the mixed minute in neither) and the same onset (the first minute
    wholly after the drop), whichever side the change point put the mixed minute on; v813 is a deploy
    after the change, never a candidate cause."""
    texts = pl.DataFrame(
        {
            "captured_at": [START],
            "queryid": [31],
            "dbid": [5],
            "userid": [10],
            "query": [KEY_DROPPED],
            "is_explain": [False],
        }
    )
    lake.write_table(tmp_path, QUERY_TEXTS, texts, {"instance": "alpha", "date": "2026-11-02"}, "t")
    mark(tmp_path, "v812", ["alpha"], 38)
    mark_deploy(
        tmp_path,
        version="v813-restore-pkey",
        instances=["alpha"],
        at=(STEP_AT + 8 * timedelta(minutes=1)).isoformat(),
    )
    config = DetectionConfig(rebuild_samples=False)
    write_minutes(tmp_path, range(0, 41))
    reported: list[tuple[Any, ...]] = []
    for minute in range(41, 56):
        write_minutes(tmp_path, range(minute, minute + 1))
        outcome = run_detection(tmp_path, config, now=at(minute + 1) + timedelta(seconds=30))
        for row in outcome.findings.iter_rows(named=True):
            reported.append(
                (
                    row["onset"],
                    row["detected_change_at"],
                    round(row["before_mean_ms"], 9),
                    round(row["after_mean_ms"], 9),
                    row["deploy_version"],
                    row["other_deploys"],
                    row["deploys_after"],
                )
            )
    assert len(reported) >= 10, reported  # found within the first runs, then shown by every run after
    first_new_minute = START + timedelta(minutes=41)
    assert set(reported) == {
        (
            first_new_minute,
            first_new_minute,
            0.15,
            40.0,
            "v812",
            None,
            "v813-restore-pkey at 2026-11-02T09:48:22Z",
        )
    }
