"""Interval samples from synthetic snapshot frames: deltas, every invalid-delta rule, the lake job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.detect.config import SampleConfig
from jobs.detect.samples import SamplesError, samples_from_snapshots
from jobs.detect.samples_job import lake_instances, run_samples_job
from jobs.lake import io
from jobs.lake import io as lake
from jobs.lake.io import scan_table
from jobs.schemas.collected import QUERY_SAMPLES, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS
from tests.support.midnight_lakes import BOOT, T0, frame, runs_frame, snap, write_midnight_lake


def dropped(result: Any) -> dict[str, int]:
    return dict(zip(result.dropped_counts["reason"], result.dropped_counts["count"], strict=True))


def test_deltas_and_interval_mean_latency() -> None:
    rows = [snap(0, 100, 50.0), snap(1, 300, 250.0), snap(2, 310, 1250.0)]
    result = samples_from_snapshots(frame(rows), None)
    s = result.samples
    assert s.columns == ["instance", *QUERY_SAMPLES.column_names]
    assert s["calls"].to_list() == [200, 10]
    assert s["total_exec_time"].to_list() == [200.0, 1000.0]
    assert s["mean_exec_time"].to_list() == pytest.approx([1.0, 100.0])
    assert s["shared_blks_hit"].to_list() == [600, 30]
    assert s["interval_seconds"].to_list() == [10.0, 10.0]
    assert s["interval_start"][0] == T0 and s["interval_end"][1] == T0 + timedelta(seconds=20)
    assert result.dropped_counts.height == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"calls": 50, "total_exec_time": 10.0}, "counter_decreased"),
        ({"shared_blks_hit": 0}, "counter_decreased"),
        ({"stats_since": BOOT + timedelta(hours=1)}, "entry_recreated"),
        ({"stats_reset": BOOT + timedelta(hours=1)}, "stats_reset"),
        ({"postmaster_start": BOOT + timedelta(hours=1)}, "server_restarted"),
        ({"system_identifier": 8}, "server_replaced"),
    ],
)
def test_invalid_delta_is_dropped_and_counted(change: dict[str, Any], reason: str) -> None:
    # The third snapshot breaks the entry's history; deltas into and after it must not become samples
    # unless the later one is consistent with the new incarnation.
    base = [snap(0, 100, 50.0), snap(1, 200, 150.0)]
    broken = {**snap(2, 300, 250.0), **change}
    identity = {k: v for k, v in change.items() if k not in {"calls", "total_exec_time", "shared_blks_hit"}}
    after = {**snap(3, 310, 260.0), **identity}
    result = samples_from_snapshots(frame([*base, broken, after]), None)
    assert dropped(result) == {reason: 1}
    assert result.samples["interval_end"].to_list() == [
        T0 + timedelta(seconds=10),
        T0 + timedelta(seconds=30),
    ]
    assert (result.samples["calls"] > 0).all()
    assert (result.samples["total_exec_time"] >= 0).all()


def test_dealloc_growth_is_flagged_or_dropped() -> None:
    rows = [snap(0, 100, 50.0), snap(1, 200, 150.0), snap(2, 300, 250.0)]
    runs = runs_frame([3, 3, 5])
    flagged = samples_from_snapshots(frame(rows), runs)
    assert flagged.samples["evictions"].to_list() == [0, 2]
    strict = samples_from_snapshots(frame(rows), runs, SampleConfig(drop_when_dealloc_grew=True))
    assert strict.samples.height == 1
    assert dropped(strict) == {"evicted_in_interval": 1}


def test_intervals_below_min_executions_are_not_samples() -> None:
    rows = [snap(0, 100, 50.0), snap(1, 100, 50.0), snap(2, 103, 60.0), snap(3, 110, 70.0)]
    result = samples_from_snapshots(frame(rows), None, SampleConfig(min_executions=5))
    assert result.samples["calls"].to_list() == [7]
    assert dropped(result) == {"below_min_executions": 2}


def test_entries_and_instances_are_never_differenced_against_each_other() -> None:
    rows = [
        snap(0, 100, 10.0),
        snap(1, 110, 20.0),
        snap(0, 5000, 9000.0, instance="beta"),
        snap(1, 5001, 9001.0, instance="beta"),
        snap(0, 1, 1.0, toplevel=False),
        snap(1, 2, 3.0, toplevel=False),
        snap(0, 1, 1.0, dbid=6),
        snap(1, 4, 4.0, dbid=6),
    ]
    result = samples_from_snapshots(frame(rows), None)
    by_key = {
        (r["instance"], r["dbid"], r["toplevel"]): r["calls"] for r in result.samples.iter_rows(named=True)
    }
    assert by_key == {
        ("alpha", 5, True): 10,
        ("beta", 5, True): 1,
        ("alpha", 5, False): 1,
        ("alpha", 6, True): 3,
    }


def test_rows_hidden_by_privilege_are_ignored() -> None:
    rows = [snap(0, 1, 1.0, queryid=None), snap(1, 9, 9.0, queryid=None), snap(0, 1, 1.0), snap(1, 2, 2.0)]
    assert samples_from_snapshots(frame(rows), None).samples["calls"].to_list() == [1]


def test_missing_column_is_a_clear_error() -> None:
    with pytest.raises(SamplesError, match=r"statement_snapshots: missing columns \['calls'\]"):
        samples_from_snapshots(frame([snap(0, 1, 1.0)]).drop("calls"), None)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for queryid in range(draw(st.integers(1, 3))):
        calls, exec_ms, since = 0, 0.0, BOOT
        for step in range(draw(st.integers(1, 12))):
            if draw(st.booleans()) and draw(st.booleans()):
                calls, exec_ms = draw(st.integers(0, 5)), draw(st.floats(0, 5))  # eviction or reset
                if draw(st.booleans()):
                    since = since + timedelta(minutes=1)
            calls += draw(st.integers(0, 50))
            exec_ms += draw(st.floats(0, 500))
            rows.append(snap(step, calls, exec_ms, queryid=queryid, stats_since=since))
    return rows


@settings(max_examples=60, deadline=None)
@given(histories(), st.randoms(use_true_random=False))
def test_no_negative_samples_and_every_delta_accounted_for(rows: list[dict[str, Any]], rnd: Any) -> None:
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    result = samples_from_snapshots(frame(shuffled), None, SampleConfig(min_executions=2))
    ordered = samples_from_snapshots(frame(rows), None, SampleConfig(min_executions=2))
    assert result.samples.equals(ordered.samples)  # input order never matters
    s = result.samples
    assert (s["calls"] >= 2).all()
    assert (s["total_exec_time"] >= 0).all()
    entries = len({r["queryid"] for r in rows})
    assert s.height + int(result.dropped_counts["count"].sum()) == len(rows) - entries


def test_job_writes_partitioned_samples_and_a_rerun_replaces_them(lake_root: Path) -> None:
    write_midnight_lake(lake_root)
    report = run_samples_job(lake_root)
    again = run_samples_job(lake_root, mode="rebuild")
    appended = run_samples_job(lake_root)  # append: nothing new since the rebuild's watermark
    assert (report.instances, report.snapshot_rows, report.sample_rows) == (1, 4, 2)
    assert again.sample_rows == 2
    assert (appended.sample_rows, appended.files_written) == (0, 0)
    samples = scan_table(lake_root, QUERY_SAMPLES).collect().sort("interval_end")
    assert samples.height == 2
    assert samples["date"].to_list() == ["2026-11-29", "2026-11-30"]
    assert samples["calls"].to_list() == [4, 10]
    assert report.peak_rss_mib > 0 and report.rows_per_second > 0


def test_job_for_a_date_range_writes_only_its_partitions_and_keeps_the_midnight_interval(
    lake_root: Path,
) -> None:
    write_midnight_lake(lake_root)
    day = datetime(2026, 11, 30, tzinfo=UTC).date()
    report = run_samples_job(lake_root, dates=(day, day))
    samples = scan_table(lake_root, QUERY_SAMPLES).collect()
    assert samples["date"].to_list() == ["2026-11-30"]
    assert samples["calls"].to_list() == [10]  # its earlier snapshot was on 11-29, read for continuity
    assert report.sample_rows == 1


# ---------------------------------------------------------------------------------------------------------
# Server time: intervals come from the server's clock; the collector's clock orders snapshots and checks skew


def clocked(step: int, calls: int, server_s: float, collector_s: float, **over: Any) -> dict[str, Any]:
    """A snapshot row whose server clock is T0 + server_s and collector clock T0 + collector_s."""
    return snap(
        step,
        calls,
        float(calls),
        captured_at=T0 + timedelta(seconds=server_s),
        collector_clock=T0 + timedelta(seconds=collector_s),
        **over,
    )


def test_interval_length_is_the_server_clocks_even_when_the_collector_clock_differs() -> None:
    rows = [clocked(0, 10, 0.0, 100.0), clocked(1, 20, 10.0, 110.5), clocked(2, 30, 20.0, 120.2)]
    result = samples_from_snapshots(frame(rows), None)
    assert result.samples["interval_seconds"].to_list() == [10.0, 10.0]
    assert result.dropped_counts.height == 0


@pytest.mark.parametrize(
    ("second", "third"),
    [
        ((10.0, 10.0), (10.0, 20.0)),  # equal captured_at: a zero-length interval
        ((10.0, 10.0), (5.0, 20.0)),  # the server clock went back 5 s between two reads
        ((10.0, 10.0), (23.0, 20.0)),  # the server clock jumped 3 s ahead of the collector's
        ((10.0, 10.0), (20.0, 17.0)),  # the collector's clock was stepped back 3 s
    ],
    ids=["equal", "backward", "server_jumped", "collector_stepped"],
)
def test_zero_backward_or_skewed_intervals_are_dropped_as_clock_skew(
    second: tuple[float, float], third: tuple[float, float]
) -> None:
    rows = [
        clocked(0, 10, 0.0, 0.0),
        clocked(1, 20, *second),
        clocked(2, 30, *third),
        clocked(3, 40, third[0] + 10.0, third[1] + 10.0),
    ]
    result = samples_from_snapshots(frame(rows), None)
    assert dropped(result) == {"clock_skew": 1}
    assert result.samples["calls"].to_list() == [10, 10]
    assert (result.samples["interval_seconds"] > 0).all()


def stepped(step: int, calls: int, clock_s: float, uptime_s: float, boot: int = 1) -> dict[str, Any]:
    """A snapshot row whose server and collector clocks both read T0 + clock_s (they are stepped together,
    so their offset stays 0) and whose collector host had been up ``uptime_s`` (its boot clock: never
    stepped)."""
    return clocked(step, calls, clock_s, clock_s, collector_boot=boot, collector_uptime_s=uptime_s)


def rates(result: Any) -> list[float]:
    samples = result.samples
    return [round(c / s, 3) for c, s in zip(samples["calls"], samples["interval_seconds"], strict=True)]


@pytest.mark.parametrize("factor", [2.2, 4.3])
def test_both_clocks_stepped_back_past_the_previous_snapshot_drop_the_intervals_around_it(
    factor: float,
) -> None:
    """Issue 28: one call a second, a snapshot every 10 s; the snapshot taken at 30 s has both clocks
    stepped back (to 10 + 20 / factor s, before the 20 s snapshot), the next ones are right again. Ordered
    by the clocks, 10 s -> stepped spans 20 s of calls in 20 / factor s: a sample ``factor`` times the real
    rate, which offset and counter checks let through (the offset did not move; only the interval after it
    has counters going down). The collector's boot clock says how long each interval really was."""
    at_30 = 10 + 20 / factor
    rows = [
        stepped(0, 0, 0.0, 100.0),
        stepped(1, 10, 10.0, 110.0),
        stepped(2, 20, 20.0, 120.0),
        stepped(3, 30, at_30, 130.0),
        stepped(4, 40, 40.0, 140.0),
        stepped(5, 50, 50.0, 150.0),
    ]
    result = samples_from_snapshots(frame(rows), None)
    assert rates(result) == [1.0, 1.0, 1.0], "every kept sample has the real rate"
    assert dropped(result) == {"clock_skew": 2}  # 10 s -> stepped, stepped -> 20 s
    assert result.samples["interval_seconds"].to_list() == [10.0, 20.0, 10.0]  # 20 s -> 40 s spans it


def test_both_clocks_stepped_back_within_an_interval_then_forward_drop_both_intervals() -> None:
    """Stepped back 5 s between the 10 s and 20 s snapshots (no reordering: 10 s of calls in 5 s, 2x), and
    forward again before the 40 s one (10 s of calls in 15 s): both intervals dropped, the one between
    two stepped snapshots is right and kept."""
    rows = [
        stepped(0, 0, 0.0, 100.0),
        stepped(1, 10, 10.0, 110.0),
        stepped(2, 20, 15.0, 120.0),
        stepped(3, 30, 25.0, 130.0),
        stepped(4, 40, 40.0, 140.0),
        stepped(5, 50, 50.0, 150.0),
    ]
    result = samples_from_snapshots(frame(rows), None)
    assert rates(result) == [1.0, 1.0, 1.0]
    assert result.samples["interval_end"].to_list() == [T0 + timedelta(seconds=s) for s in (10, 25, 50)]
    assert dropped(result) == {"clock_skew": 2}


@pytest.mark.parametrize("cut", range(1, 6))
def test_an_append_drops_the_stepped_intervals_as_a_rebuild_does(cut: int) -> None:
    """The boot clock travels in the frontier: an append whose first new snapshot follows a stepped one (or
    precedes it) judges that interval as a rebuild does."""
    from jobs.detect.samples import append_samples, empty_frontier

    rows = [stepped(0, 0, 0.0, 100.0), stepped(1, 10, 10.0, 110.0), stepped(2, 20, 15.0, 120.0)]
    rows += [stepped(3, 30, 25.0, 130.0), stepped(4, 40, 40.0, 140.0), stepped(5, 50, 50.0, 150.0)]
    full = samples_from_snapshots(frame(rows), None)
    first, frontier = append_samples(empty_frontier(), frame(rows[:cut]), None)
    second, _ = append_samples(frontier, frame(rows[cut:]), None)
    appended = pl.concat([first.samples, second.samples])
    assert appended.equals(full.samples)
    assert sum(r.dropped_counts["count"].sum() for r in (first, second)) == 2


def test_boot_clocks_of_another_boot_or_none_are_not_compared() -> None:
    """A collector host that rebooted (its boot clock restarted) or a lake written before the boot clock
    was recorded: the interval is judged as before, by the offset and the server clock."""
    rebooted = [stepped(0, 0, 0.0, 5000.0), stepped(1, 10, 10.0, 3.0, boot=2)]
    assert rates(samples_from_snapshots(frame(rebooted), None)) == [1.0]
    older = [clocked(0, 0, 0.0, 0.0), clocked(1, 10, 10.0, 10.0)]
    assert rates(samples_from_snapshots(frame(older), None)) == [1.0]


def test_offset_noise_below_max_clock_skew_is_kept_and_the_threshold_is_a_config_field() -> None:
    rows = [clocked(0, 10, 0.0, 0.0), clocked(1, 20, 10.0, 11.5), clocked(2, 30, 20.0, 21.5)]
    assert samples_from_snapshots(frame(rows), None).samples.height == 2
    strict = samples_from_snapshots(frame(rows), None, SampleConfig(max_clock_skew_s=1.0))
    assert dropped(strict) == {"clock_skew": 1}


def test_snapshots_with_one_captured_at_never_overwrite_each_other_and_rewrites_stay_idempotent(
    lake_root: Path,
) -> None:
    from jobs.collect.collector import InstanceSnapshot, write_instance_snapshot

    def snapshot(calls: int, collector_s: float, server_s: float = 10.0) -> InstanceSnapshot:
        row = clocked(0, calls, server_s, collector_s)
        run = {
            "captured_at": row["captured_at"],
            "collector_clock": row["collector_clock"],
            "status": "ok",
            "system_identifier": 7,
            "statement_rows": 1,
            "dealloc": 0,
        }
        statements = frame([row]).drop("instance")
        return InstanceSnapshot("alpha", row["captured_at"], run, statements, pl.DataFrame())

    first = snapshot(10, 0.0, server_s=0.0)
    a, b = snapshot(20, 10.0), snapshot(30, 11.0)  # one captured_at, two different reads
    for snap_ in (first, a, b, b):  # b twice: the same snapshot again is idempotent
        write_instance_snapshot(lake_root, snap_)
    files = lake_files(lake_root, STATEMENT_SNAPSHOTS)
    assert len(files) == 3
    assert len(lake_files(lake_root, SNAPSHOT_RUNS)) == 3
    kept = scan_table(lake_root, STATEMENT_SNAPSHOTS).collect().sort("collector_clock")
    assert kept["calls"].to_list() == [10, 20, 30]
    report = run_samples_job(lake_root)
    assert dict(zip(report.dropped_counts["reason"], report.dropped_counts["count"], strict=True)) == {
        "clock_skew": 1
    }
    assert scan_table(lake_root, QUERY_SAMPLES).collect()["calls"].to_list() == [10]


def lake_files(lake_root: Path, table: Any) -> list[Path]:
    from jobs.lake.io import table_files

    return table_files(lake_root, table)


def test_a_run_over_named_instances_lists_only_their_folders_and_equals_the_whole_fleet_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's run (named instances) reads each instance's own folder instead of listing the whole table
    per instance, with the same samples as the run over the whole fleet, dates or not."""
    from jobs.detect import samples_job as samples_module
    from jobs.local.simulate.simulated_fleet import FleetShape
    from jobs.local.simulate.writer import write_fleet

    shape = FleetShape(
        instances=3,
        statements=6,
        minutes=120,
        seed=3,
        regressions=0,
        deploys_per_hour=0,
        restarts_per_hour=0.5,
        resets_per_hour=0.5,
        failed_snapshots_per_hour=0.5,
    )
    write_fleet(tmp_path / "lake", shape, fast=True)
    whole = run_samples_job(tmp_path / "lake", SampleConfig(), out_root=tmp_path / "all", mode="rebuild")
    assert whole.sample_rows > 0
    whole_table_scans: list[str] = []
    original = io.scan_table

    def counting(root: object, table: object) -> object:
        whole_table_scans.append(str(table))
        return original(root, table)  # type: ignore[arg-type]

    monkeypatch.setattr(samples_module, "scan_table", counting)
    names = sorted(lake_instances(tmp_path / "lake"))[:2]
    day = shape.start.date()
    for dates in (None, (day, day)):
        out = tmp_path / f"named-{dates is not None}"
        run_samples_job(
            tmp_path / "lake", SampleConfig(), instances=names, out_root=out, mode="rebuild", dates=dates
        )
        mine = lake.read_table(out, QUERY_SAMPLES).sort("instance", "queryid", "interval_end")
        expected = lake.read_table(tmp_path / "all", QUERY_SAMPLES).filter(pl.col("instance").is_in(names))
        if dates is not None:
            expected = expected.filter(pl.col("interval_end").dt.date() == day)
        assert mine.height > 0
        assert mine.equals(expected.sort("instance", "queryid", "interval_end"))
    assert whole_table_scans == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([-3, 7, 2**62]),  # queryid
            st.sampled_from([1, 2, None]),  # dbid
            st.sampled_from([True, False]),  # toplevel
            st.integers(0, 6),  # collector clock, seconds (ties on purpose)
            st.integers(0, 6),  # captured_at, seconds
            st.booleans(),  # collector clock missing
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_entry_order_is_the_five_column_sort(rows: list[tuple[Any, ...]], span_too_long: bool) -> None:
    """The one-integer sort of the differencing orders rows exactly as sorting its five columns would,
    also with ties, null clocks and null ids (where it falls back to that sort)."""
    from jobs.detect.samples import _in_entry_order

    far = timedelta(days=400) if span_too_long else timedelta(0)
    frame = pl.DataFrame(
        {
            "queryid": [r[0] for r in rows],
            "_db_user": [r[1] for r in rows],
            "toplevel": [r[2] for r in rows],
            "_taken": [
                None if r[5] else T0 + timedelta(seconds=r[3]) + (far if i == 0 else timedelta(0))
                for i, r in enumerate(rows)
            ],
            "captured_at": [T0 + timedelta(seconds=r[4]) for r in rows],
            "row": list(range(len(rows))),
        },
        schema_overrides={"queryid": pl.Int64, "_db_user": pl.UInt64, "_taken": pl.Datetime("us", "UTC")},
    )
    key = ("queryid", "_db_user", "toplevel")
    expected = frame.sort([*key, "_taken", "captured_at"], nulls_last=True)
    assert _in_entry_order(frame, key).equals(expected)
    clocked = frame.with_columns(pl.col("_taken").fill_null(pl.col("captured_at")))
    assert _in_entry_order(clocked, key).equals(
        clocked.sort([*key, "_taken", "captured_at"], nulls_last=True)
    )
