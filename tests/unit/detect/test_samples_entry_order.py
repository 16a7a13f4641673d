"""The differencing in entry order (``_entry_ordered_samples``, the samples rebuild's path) gives the rows
of the general differencing (``_instance_samples``, kept for what one integer cannot order) and the
frontier of ``frontier_of``: every drop reason, every setting, row for row and in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.detect.config import SampleConfig
from jobs.detect.samples import (
    _entry_ordered_samples,
    _finish_samples,
    _instance_samples,
    frontier_of,
    prepared_snapshots,
    samples_and_frontier,
    samples_of_prepared,
)
from jobs.detect.samples_job import run_samples_job
from jobs.schemas.collected import COLLECTION_HEALTH, QUERY_SAMPLES, SAMPLE_FRONTIER
from tests.support.lakes import SNAPSHOT_BOOT, snapshot_frame, snapshot_row, write_snapshot_files

T0 = datetime(2026, 11, 29, 23, 40, tzinfo=UTC)


@st.composite
def histories(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Snapshots of up to two instances whose intervals hit every drop reason: another server, a restart,
    a stats reset, a re-created entry, clock steps (the server's, the collector's, both), decreasing
    counters, evictions; entries that skip snapshots; several (dbid, userid) and top-level pairs, null
    and 64-bit ids; rows in any order."""
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for instance in draw(st.sampled_from([("alpha",), ("alpha", "beta")])):
        entries = [
            (
                q,
                draw(st.sampled_from([5, 6, None, 2**40])),
                draw(st.sampled_from([10, 11])),
                draw(st.booleans()),
            )
            for q in draw(st.lists(st.sampled_from([-3, 7, 2**62]), min_size=1, max_size=3, unique=True))
        ]
        state = {e: [0, 0.0, SNAPSHOT_BOOT] for e in entries}
        system, boot, reset, dealloc, step_s, uptime = 7, SNAPSHOT_BOOT, SNAPSHOT_BOOT, 0, 0.0, 1000.0
        steps = draw(st.integers(2, 10))
        leaves = {e: draw(st.integers(1, steps)) for e in entries}  # gone for good after
        for step in range(steps):
            captured = T0 + timedelta(seconds=60 * step + draw(st.integers(0, 3)))
            event = draw(st.integers(0, 14))
            if event == 0:
                system += 1
            elif event == 1:
                boot = captured - timedelta(seconds=5)
            elif event == 2:
                reset = captured - timedelta(seconds=2)
            elif event == 3:
                captured -= timedelta(seconds=90)  # the server's clock stepped back
            elif event == 4:
                step_s += 10.0  # the collector's clock stepped
            elif event == 5:
                step_s += 10.0  # both stepped: the offset holds, the boot clock shows it
                captured += timedelta(seconds=10)
            uptime += 60.0
            dealloc += draw(st.integers(0, 2))
            runs.append({"instance": instance, "captured_at": captured, "status": "ok", "dealloc": dealloc})
            for entry in entries:
                if step > leaves[entry] or draw(st.integers(0, 5)) == 0:
                    continue
                counters = state[entry]
                if draw(st.integers(0, 7)) == 0:
                    counters[0] = max(0, counters[0] - draw(st.integers(1, 5)))  # decreased
                if draw(st.integers(0, 9)) == 0:
                    counters[2] = captured - timedelta(seconds=1)  # re-created
                counters[0] += draw(st.integers(0, 4))
                counters[1] += draw(st.floats(0, 400, allow_nan=False))
                queryid, dbid, userid, toplevel = entry
                rows.append(
                    snapshot_row(
                        instance,
                        captured,
                        queryid,
                        counters[0],
                        counters[1],
                        collector_clock=captured
                        + timedelta(seconds=step_s, milliseconds=draw(st.integers(0, 300))),
                        boot=boot,
                        system_identifier=system,
                        stats_reset=reset,
                        stats_since=counters[2],
                        dbid=dbid,
                        userid=userid,
                        toplevel=toplevel,
                        collector_boot=1,
                        collector_uptime_s=uptime,
                    )
                )
    order = draw(st.permutations(range(len(rows))))
    frame = snapshot_frame([rows[i] for i in order])
    run_frame = pl.DataFrame(runs, schema_overrides={"captured_at": pl.Datetime("us", "UTC")})
    return frame, run_frame


configs = st.builds(
    SampleConfig,
    min_executions=st.integers(1, 3),
    drop_when_dealloc_grew=st.booleans(),
    max_clock_skew_s=st.sampled_from([2.0, 30.0]),
    frontier_keep=st.sampled_from([timedelta(days=7), timedelta(seconds=30)]),
)


@settings(max_examples=150, deadline=None)
@given(histories(), configs)
def test_entry_order_differencing_gives_the_general_rows(
    history: tuple[pl.DataFrame, pl.DataFrame], config: SampleConfig
) -> None:
    snapshots, runs = history
    prepared = prepared_snapshots(snapshots, runs).collect()
    for (_,), part in prepared.partition_by("instance", as_dict=True).items():
        fast = _entry_ordered_samples(part, config, config.frontier_keep)
        if fast is None:  # what one integer cannot order: two snapshots of an entry at one moment
            continue
        valid, dropped, counts = _instance_samples(part, config)
        assert _finish_samples(fast[0]).equals(_finish_samples(valid))
        assert fast[1].sort("reason").equals(dropped.sort("reason"))
        assert fast[2].sort("interval_end", "reason").equals(counts.sort("interval_end", "reason"))
        if fast[3] is not None:
            assert fast[3].equals(frontier_of(part, config.frontier_keep))
    result, frontier = samples_and_frontier(prepared, config)
    general = samples_of_prepared(prepared, config)
    assert result.samples.equals(general.samples)
    assert result.dropped_counts.equals(general.dropped_counts)
    assert result.interval_counts.equals(general.interval_counts)
    assert frontier.equals(frontier_of(prepared, config.frontier_keep))


@settings(max_examples=10, deadline=None)
@given(histories())
def test_a_rebuild_ahead_writes_the_files_of_one_instance_at_a_time(
    tmp_path_factory: Any, history: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    """The rebuild differences the next instance on a thread while it writes this one: every file of
    query_samples, collection_health and sample_frontier is the one of a rebuild one instance at a time."""
    snapshots, runs = history
    lakes = {}
    for ahead in (True, False):
        root = tmp_path_factory.mktemp("ahead" if ahead else "one")
        write_snapshot_files(root, snapshots, runs)
        report = run_samples_job(root, SampleConfig(rebuild_ahead=ahead), mode="rebuild")
        lakes[ahead] = (root, report)
    (ahead_root, ahead_report), (one_root, one_report) = lakes[True], lakes[False]
    assert ahead_report.sample_rows == one_report.sample_rows
    assert ahead_report.dropped_counts.equals(one_report.dropped_counts)
    for table in (QUERY_SAMPLES, COLLECTION_HEALTH, SAMPLE_FRONTIER):
        files = sorted(p.relative_to(one_root) for p in (one_root / table.name).rglob("*.parquet"))
        assert files == sorted(
            p.relative_to(ahead_root) for p in (ahead_root / table.name).rglob("*.parquet")
        )
        for name in files:
            read = {"hive_partitioning": False}
            assert pl.read_parquet(ahead_root / name, **read).equals(pl.read_parquet(one_root / name, **read))
