"""The lake on an object store: the same pipeline on a local S3 server (moto) and on a local folder gives
the same results; writes, quarantine, locks and compaction keep their guarantees there."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.compaction import compact_lake
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath
from jobs.lake.views import query
from jobs.local.simulate.simulated_fleet import FleetShape
from jobs.local.simulate.writer import load_ground_truth, write_fleet
from jobs.pipeline.detection import DetectionConfig, run_detection
from jobs.publish.weekly import write_weekly_report
from jobs.schemas.collected import QUERY_SAMPLES, SNAPSHOT_RUNS, STATEMENT_SNAPSHOTS

SHAPE = FleetShape(
    instances=2,
    statements=8,
    minutes=120,
    seed=5,
    regressions=1,
    deploys_per_hour=1.0,
    restarts_per_hour=0.5,
    resets_per_hour=0,
    evictions_per_hour=0,
    clock_steps_per_hour=0,
    failed_snapshots_per_hour=0.5,
)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _pipeline(root: LakePath, out: Path) -> dict[str, object]:
    """Simulated snapshots written through the collector's writers, samples, detection, views, weekly
    report, as `radar` runs them; returns what a user sees."""
    report = write_fleet(root, SHAPE)
    outcome = run_detection(root, DetectionConfig(), now=SHAPE.end)
    week = SHAPE.end.strftime("%G-W%V")
    files = write_weekly_report(root, week, out)
    return {
        "truth": load_ground_truth(report.truth_path)["regressions"],
        "snapshots": _sorted(lake.read_table(root, STATEMENT_SNAPSHOTS).drop("instance", "date")),
        "samples": _sorted(lake.read_table(root, QUERY_SAMPLES)),
        "regressions": _sorted(outcome.regressions.drop("run_id", strict=False)),
        "detected": sorted((r["instance"], r["queryid"]) for r in outcome.detected.iter_rows(named=True)),
        "view": query(
            root,
            "select instance, count(*) as n, sum(calls) as calls from query_samples group by 1 order by 1",
        ),
        "report": files.markdown.read_text().replace(str(out), "<out>"),
    }


@pytest.mark.slow  # ~30 s: the whole simulated pipeline twice
def test_the_pipeline_gives_the_same_results_on_s3_and_on_a_local_folder(
    s3_lake: ObjectPath, tmp_path: Path
) -> None:
    on_s3 = _pipeline(s3_lake, tmp_path / "report-s3")
    local = _pipeline(tmp_path / "lake", tmp_path / "report-local")
    assert on_s3["truth"] and on_s3["detected"], "the simulated regression must be found"
    assert {(r["instance"], r["queryid"]) for r in on_s3["truth"]} == set(on_s3["detected"])  # type: ignore[union-attr]
    for key in ("snapshots", "samples", "regressions", "view"):
        left, right = on_s3[key], local[key]
        assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
        assert left.height > 0, key
        assert left.equals(right), key
    assert on_s3["detected"] == local["detected"]
    assert on_s3["report"] == local["report"]
    # the files are really in the bucket, and none on the local disk under the bucket's name
    assert len(lake.table_files(s3_lake, STATEMENT_SNAPSHOTS)) == len(
        lake.table_files(tmp_path / "lake", STATEMENT_SNAPSHOTS)
    )


def test_two_concurrent_writers_to_the_bucket_lose_nothing(s3_lake: ObjectPath) -> None:
    """Two collectors (threads here, each its own instances and one shared partition) write at once; every
    file and row is there after, none overwritten."""
    frames = {
        name: pl.DataFrame({"instance": [name], "status": ["ok"], "captured_at": [SHAPE.start]})
        for name in ("w1", "w2")
    }
    written: dict[str, list[str]] = {"w1": [], "w2": []}
    barrier = threading.Barrier(2)

    def writer(name: str) -> None:
        barrier.wait()
        for i in range(40):
            at = SHAPE.start + timedelta(minutes=i)
            frame = frames[name].with_columns(pl.lit(at).alias("captured_at"))
            path = lake.write_table(
                s3_lake,
                SNAPSHOT_RUNS,
                frame.drop("instance"),
                {"instance": "shared", "date": at.date().isoformat()},
                f"{lake.stem_for(at)}-{name}",
            )
            written[name].append(str(path))

    threads = [threading.Thread(target=writer, args=(n,)) for n in written]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    files = {str(p) for p in lake.table_files(s3_lake, SNAPSHOT_RUNS)}
    assert files == set(written["w1"]) | set(written["w2"])
    assert lake.read_table(s3_lake, SNAPSHOT_RUNS).height == 80


def test_the_object_store_lock_admits_one_run_and_names_the_holder(s3_lake: ObjectPath) -> None:
    config = locks.LakeConfig(lock_wait_s=0.3)
    held = r"another run holds the samples lock \(pid \d+ on "
    with (
        locks.exclusive_lock(s3_lake, "samples", config),
        pytest.raises(locks.LakeLockError, match=held),
        locks.exclusive_lock(s3_lake, "samples", config),
    ):
        pass
    with locks.exclusive_lock(s3_lake, "samples", config):  # released: taken again at once
        pass
    assert not (s3_lake / "_locks" / "samples.lock").exists()


def test_a_dead_runs_lock_is_taken_over_after_its_lease(s3_lake: ObjectPath) -> None:
    dead = {
        "pid": 1,
        "host": "gone",
        "since": "2026-01-01T00:00:00+00:00",
        "token": "x",
        "expires_at_epoch": 1,
    }
    (s3_lake / "_locks" / "compaction.lock").write_text(json.dumps(dead))
    with locks.exclusive_lock(s3_lake, "compaction", locks.LakeConfig(lock_wait_s=0.5)):
        assert "gone" not in (s3_lake / "_locks" / "compaction.lock").read_text()


@pytest.mark.parametrize("garbage", ['{"expires_at_epoch": "soon"}', "[1, 2]", "not json"])
def test_a_lock_object_this_code_did_not_write_is_taken_over(s3_lake: ObjectPath, garbage: str) -> None:
    (s3_lake / "_locks" / "samples.lock").write_text(garbage)
    with locks.exclusive_lock(s3_lake, "samples", locks.LakeConfig(lock_wait_s=0.5)):
        assert "token" in (s3_lake / "_locks" / "samples.lock").read_text()


def test_a_merged_file_with_foreign_replaces_metadata_hides_nothing(s3_lake: ObjectPath) -> None:
    frame = pl.DataFrame({"status": ["ok"], "captured_at": [SHAPE.start]})
    parts = {"instance": "a", "date": "2026-01-01"}
    lake.write_table(s3_lake, SNAPSHOT_RUNS, frame, parts, "one")
    folder = lake.partition_dir(s3_lake, SNAPSHOT_RUNS, parts)
    lake.write_file(folder / "compacted-x.parquet", SNAPSHOT_RUNS, frame, metadata={lake.REPLACES_KEY: "42"})
    assert lake.read_table(s3_lake, SNAPSHOT_RUNS).height == 2


def test_the_lock_is_renewed_while_held(s3_lake: ObjectPath) -> None:
    config = locks.LakeConfig(lock_wait_s=0.2, object_lock_lease_s=1.0)
    with locks.exclusive_lock(s3_lake, "samples", config):
        threading.Event().wait(1.6)  # past the first lease: renewed, so still held
        with pytest.raises(locks.LakeLockError), locks.exclusive_lock(s3_lake, "samples", config):
            pass


def test_a_bad_object_is_quarantined_with_a_note_and_the_rest_read(s3_lake: ObjectPath) -> None:
    good = pl.DataFrame({"status": ["ok"], "captured_at": [SHAPE.start]})
    lake.write_table(s3_lake, SNAPSHOT_RUNS, good, {"instance": "a", "date": "2026-01-01"}, "good")
    bad = s3_lake / "snapshot_runs/instance=a/date=2026-01-01/bad.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    assert lake.read_table(s3_lake, SNAPSHOT_RUNS).height == 1
    assert not bad.exists()
    notes = lake.quarantined_files(s3_lake)
    assert [n["original_path"] for n in notes] == [str(bad)]
    assert (s3_lake / "_quarantine/snapshot_runs/instance=a/date=2026-01-01/bad.parquet").exists()


@pytest.mark.slow  # 9-35 s each on a real server: make test stays under 10 minutes beside a CPU hog
def test_compaction_on_the_bucket_merges_a_day_and_readers_never_double_count(s3_lake: ObjectPath) -> None:
    write_fleet(s3_lake, SHAPE, fast=True)
    before = _sorted(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS))
    files_before = len(lake.table_files(s3_lake, STATEMENT_SNAPSHOTS))
    done = compact_lake(s3_lake, today=SHAPE.end.date() + timedelta(days=2))
    assert done and all(d.files_before > 1 for d in done)
    after_files = lake.table_files(s3_lake, STATEMENT_SNAPSHOTS)
    assert len(after_files) < files_before
    assert all(p.name.startswith("compacted-") for p in after_files)
    assert _sorted(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS)).equals(before)


@pytest.mark.slow  # 9-35 s each on a real server: make test stays under 10 minutes beside a CPU hog
def test_a_compaction_that_died_before_its_deletes_is_never_read_twice_and_is_finished(
    s3_lake: ObjectPath,
) -> None:
    """The merged object is PUT, the process dies before deleting what it replaces: readers drop the
    replaced files (the merged file names them) and the next compaction deletes them."""
    write_fleet(s3_lake, SHAPE, fast=True)
    before = _sorted(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS))
    folder = lake.table_files(s3_lake, STATEMENT_SNAPSHOTS)[0].parent
    sources = sorted(folder.glob("*.parquet"))
    merged = lake.scan_file_columns(sources, STATEMENT_SNAPSHOTS).collect()
    names = sorted(p.name for p in sources)

    lake.write_file(
        folder / f"compacted-{sources[0].stem}-{sources[-1].stem}.parquet",
        STATEMENT_SNAPSHOTS,
        merged,
        metadata={lake.REPLACES_KEY: json.dumps(names)},
    )
    assert _sorted(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS)).equals(before)
    assert query(s3_lake, "select count(*) as n from statement_snapshots")["n"][0] == before.height
    compact_lake(s3_lake, today=SHAPE.end.date() + timedelta(days=2))
    assert [p.name for p in folder.glob("*.parquet")] == [
        f"compacted-{sources[0].stem}-{sources[-1].stem}.parquet"
    ]
    assert _sorted(lake.read_table(s3_lake, STATEMENT_SNAPSHOTS)).equals(before)


def test_views_on_the_bucket_read_a_column_no_object_has_as_null(s3_lake: ObjectPath) -> None:
    """An older radar's objects (one column fewer): the view still works, through the fsspec adapter."""
    frame = pl.DataFrame({"status": ["ok"], "captured_at": [SHAPE.start]})
    path = lake.write_table(s3_lake, SNAPSHOT_RUNS, frame, {"instance": "a", "date": "2026-01-01"}, "one")
    assert isinstance(path, ObjectPath)
    older = pq.read_table(pa.BufferReader(path.read_bytes())).drop_columns(["status"])
    lake.put_parquet(path, older)  # same envelope metadata, one PUT
    assert lake.read_file_metadata(path)["radar.table"] == "snapshot_runs"
    rows = query(s3_lake, "select instance, status from snapshot_runs")
    assert rows.rows() == [("a", None)]


def test_a_foreign_object_is_quarantined_on_the_first_read_and_a_large_own_object_is_read(
    s3_lake: ObjectPath,
) -> None:
    """One ranged request of each object's end: a statement_snapshots object in snapshot_runs is moved
    out before polars or the views count it; an object larger than that request is checked by its footer."""
    runs = pl.DataFrame({"status": ["ok"], "captured_at": [SHAPE.start]})
    parts = {"instance": "a", "date": "2026-01-01"}
    lake.write_table(s3_lake, SNAPSHOT_RUNS, runs, parts, "own")
    many = 30_000
    large = pl.DataFrame({"status": [f"ok {i:x}" for i in range(many)], "captured_at": [SHAPE.start] * many})
    big = lake.write_table(s3_lake, SNAPSHOT_RUNS, large, parts, "large")
    assert big.stat().st_size > 64 << 10
    folder = lake.partition_dir(s3_lake, SNAPSHOT_RUNS, parts)
    for reader in ("polars", "views"):
        foreign = folder / f"foreign-{reader}.parquet"
        lake.write_file(foreign, STATEMENT_SNAPSHOTS, pl.DataFrame({"queryid": [1, 2, 3]}))
        if reader == "polars":
            assert lake.read_table(s3_lake, SNAPSHOT_RUNS).height == 1 + many
        else:
            assert query(s3_lake, "select count(*) as n from snapshot_runs")["n"][0] == 1 + many
        assert not foreign.exists()
        assert (s3_lake / f"_quarantine/snapshot_runs/instance=a/date=2026-01-01/{foreign.name}").exists()
    notes = lake.quarantined_files(s3_lake)
    assert {n["reason"] for n in notes} == {
        "a statement_snapshots file (its radar.table metadata), not snapshot_runs data"
    }
