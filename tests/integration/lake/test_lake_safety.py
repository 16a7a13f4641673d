"""Lake safety: bad files are quarantined (never fatal, never silently deleted), temp files and locks are
safe with overlapping runs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.cli.common import EXIT_LOCKED, EXIT_STORAGE
from jobs.cli.main import main
from jobs.collect.collector import snapshot_fleet
from jobs.collect.fleet import FleetConfig
from jobs.detect.samples import samples_from_snapshots
from jobs.detect.samples_job import SAMPLES_LOCK, run_samples_job
from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake import views as duckdb_views
from jobs.lake.compaction import compact_lake
from jobs.local.embedded import EmbeddedFleet
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS, STATEMENT_SNAPSHOTS
from jobs.schemas.registry import TABLES
from jobs.schemas.table import TableSchema
from tests.conftest import FleetFactory
from tests.support.compaction_lakes import DAY, write_snapshots
from tests.support.lakes import write_step_change_lake
from tests.support.midnight_lakes import write_midnight_lake

WORKTREE = Path(__file__).resolve().parents[3]
PYTHON = Path(sys.executable)  # the interpreter running the tests (its venv has the project)


def parts_of(schema: TableSchema) -> dict[str, str]:
    return {k: {"instance": "db1", "date": "2026-03-01"}.get(k, "x") for k in schema.partition_by}


def one_row(schema: TableSchema) -> pl.DataFrame:
    return schema.conform(pl.DataFrame({c.name: [None] for c in schema.columns}))


def truncated_copy(good: Path, name: str = "bad.parquet") -> Path:
    data = good.read_bytes()
    bad = good.parent / name
    bad.write_bytes(data[: len(data) // 2])
    return bad


def marked(table: pa.Table, schema: TableSchema) -> pa.Table:
    """``table`` with the metadata the radar writes: a file of ``schema``'s, whatever its columns."""
    return table.replace_schema_metadata({lake.TABLE_KEY: schema.name})


def wrong_type_file(folder: Path, schema: TableSchema, name: str) -> Path | None:
    """A whole Parquet file of the table whose first non-string column holds strings (cannot be cast)."""
    column = next((c.name for c in schema.columns if c.dtype != pl.String()), None)
    if column is None:
        return None
    path = folder / name
    pq.write_table(marked(pa.table({column: ["not a value of this type"]}), schema), path)
    return path


def assert_quarantined(root: Path, table: str, original: Path, incidents: list[lake.LakeIncident]) -> None:
    assert not original.exists(), f"{original} is still in the table"
    moved = lake.quarantine_path(root, table, original)
    assert moved.exists(), f"{original} is not in the quarantine"
    note = json.loads(Path(f"{moved}{lake.NOTE_SUFFIX}").read_text())
    assert note["original_path"] == str(original) and note["table"] == table
    assert note["reason"] and datetime.fromisoformat(note["quarantined_at"]) <= datetime.now(UTC)
    named = [i for i in incidents if i.path == original]
    assert named and named[-1].action == "quarantined" and named[-1].moved_to == moved
    assert str(original) in named[-1].message()


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_bad_file_in_any_table_is_quarantined_and_every_reader_goes_on(lake_root: Path, table: str) -> None:
    schema = TABLES[table]
    parts = parts_of(schema)
    good = lake.write_table(lake_root, schema, one_row(schema), parts, "good")
    lake.write_table(lake_root, schema, one_row(schema), parts, "good2")

    # Truncated: found by the envelope check of scan_table (the lazy path every reader takes).
    mark = lake.incident_mark()
    truncated = truncated_copy(good)
    assert lake.scan_table(lake_root, table).collect().height == 2
    assert_quarantined(lake_root, table, truncated, lake.incidents_since(mark))

    # Not Parquet at all, found before DuckDB globs the files: the view reads the good ones.
    mark = lake.incident_mark()
    garbage = good.parent / "garbage.parquet"
    garbage.write_bytes(b"this is not a parquet file, just some bytes")
    conn = duckdb_views.connect(lake_root)
    assert conn.execute(f"select count(*) from {table}").fetchone() == (2,)
    assert_quarantined(lake_root, table, garbage, lake.incidents_since(mark))

    # A whole file whose column cannot be cast: only a read finds it; read_table quarantines and retries.
    mark = lake.incident_mark()
    wrong = wrong_type_file(good.parent, schema, "wrong.parquet")
    if wrong is not None:
        assert lake.read_table(lake_root, table).height == 2
        assert_quarantined(lake_root, table, wrong, lake.incidents_since(mark))
    assert len(lake.quarantined_files(lake_root)) == (3 if wrong is not None else 2)


def test_a_single_file_read_quarantines_a_bad_file_and_reads_a_good_one(lake_root: Path) -> None:
    schema = TABLES["plan_snapshots"]
    good = lake.write_table(lake_root, schema, one_row(schema), parts_of(schema), "good")
    bad = truncated_copy(good)
    mark = lake.incident_mark()
    assert lake.read_file(lake_root, schema, good) is not None
    assert lake.read_file(lake_root, schema, bad) is None
    assert lake.read_file(lake_root, schema, good.parent / "gone.parquet") is None
    assert_quarantined(lake_root, schema.name, bad, lake.incidents_since(mark))


def test_castable_differences_are_read_not_quarantined(lake_root: Path) -> None:
    folder = lake.partition_dir(lake_root, QUERY_TEXTS, {"instance": "a", "date": "2026-03-01"})
    folder.mkdir(parents=True)
    pq.write_table(
        marked(pa.table({"queryid": pa.array([7], pa.int32()), "query": ["select 1"]}), QUERY_TEXTS),
        folder / "x.parquet",
    )
    mark = lake.incident_mark()
    assert lake.read_table(lake_root, QUERY_TEXTS)["queryid"].to_list() == [7]
    assert lake.incidents_since(mark) == []


def test_a_read_error_no_file_explains_is_a_lake_error_naming_the_table(lake_root: Path) -> None:
    lake.write_table(
        lake_root, QUERY_TEXTS, pl.DataFrame({"query": ["abc"]}), {"instance": "a", "date": "d"}, "t"
    )
    mark = lake.incident_mark()
    with pytest.raises(locks.LakeError, match="cannot read lake table query_texts"):
        lake.read_table(lake_root, QUERY_TEXTS, lambda f: f.select(pl.col("query").str.to_integer()))
    assert lake.incidents_since(mark) == [] and len(lake.table_files(lake_root, QUERY_TEXTS)) == 1


def test_a_bad_file_is_skipped_not_moved_while_a_compaction_holds_the_lake(lake_root: Path) -> None:
    write_snapshots(lake_root, DAY, 3)
    files = lake.table_files(lake_root, STATEMENT_SNAPSHOTS)
    bad = truncated_copy(files[0])
    mark = lake.incident_mark()
    with locks.exclusive_lock(lake_root, locks.COMPACTION_LOCK):
        assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height == 6
        assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height == 6  # skipped again, reported once
    incidents = lake.incidents_since(mark)
    assert [(i.path, i.action) for i in incidents] == [(bad, "skipped")]
    assert "compaction is running" in incidents[0].message() and bad.exists()
    # The compaction itself quarantines the bad file of the partition it merges, and merges the rest.
    done = compact_lake(lake_root, today=DAY + timedelta(days=1))
    assert [(d.files_before, d.rows) for d in done] == [(3, 6)]
    assert_quarantined(lake_root, STATEMENT_SNAPSHOTS.name, bad, lake.incidents_since(mark))


def test_a_bad_file_in_a_read_only_lake_is_skipped_with_a_warning(
    lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = lake.write_table(lake_root, QUERY_TEXTS, one_row(QUERY_TEXTS), {"instance": "a", "date": "d"}, "t")
    bad = truncated_copy(good)

    def read_only(src: object, dst: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(lake.os, "rename", read_only)
    mark = lake.incident_mark()
    assert lake.read_table(lake_root, QUERY_TEXTS).height == 1
    [incident] = lake.incidents_since(mark)
    assert incident.action == "skipped" and incident.path == bad and bad.exists()
    assert "read-only" in incident.message()
    # DuckDB views list the good files instead of a glob that would hit the bad one.
    assert duckdb_views.connect(lake_root).execute("select count(*) from query_texts").fetchone() == (1,)


# ---------------------------------------------------------------------------------------------------------
# The CLI commands: a poisoned lake, a normal exit, the file named, no traceback


def poison(root: Path, table: str, kind: str = "truncated") -> Path:
    """A bad file beside an existing file of ``table``."""
    good = lake.table_files(root, table)[0]
    if kind == "truncated":
        return truncated_copy(good, f"poison-{table}.parquet")
    wrong = wrong_type_file(good.parent, TABLES[table], f"poison-{table}.parquet")
    assert wrong is not None
    return wrong


@pytest.fixture
def analysed_lake(lake_root: Path) -> Path:
    """Samples + texts + a deploy (tests/support/lakes.py), snapshots of another instance, one detection
    run."""
    write_step_change_lake(lake_root)
    write_snapshots(lake_root, DAY, 5, instance="db2")
    assert main(["--lake", str(lake_root), "detect"]) == 0
    return lake_root


@pytest.mark.parametrize(
    ("command", "poisoned"),
    [
        (["samples"], [("statement_snapshots", "truncated"), ("snapshot_runs", "truncated")]),
        (["detect"], [("query_texts", "wrong_type"), ("query_samples", "truncated")]),
        (["drift"], [("query_samples", "wrong_type"), ("query_texts", "truncated")]),
        (
            ["report", "--week", "2026-W45"],
            [("finding_states", "truncated"), ("deploy_events", "wrong_type")],  # the report reads findings
        ),
        (["sql", "select count(*) from query_texts"], [("query_texts", "truncated")]),
        (["sql", "select count(*), max(captured_at) from query_texts"], [("query_texts", "wrong_type")]),
    ],
)
def test_cli_commands_go_on_past_bad_files_and_name_them(
    analysed_lake: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    poisoned: list[tuple[str, str]],
) -> None:
    if not lake.table_files(analysed_lake, "snapshot_runs"):
        lake.write_table(
            analysed_lake,
            "snapshot_runs",
            pl.DataFrame({"captured_at": [datetime(2026, 11, 27, tzinfo=UTC)], "status": ["ok"]}),
            {"instance": "db2", "date": "2026-11-27"},
            "r",
        )
    bad = [(table, poison(analysed_lake, table, kind)) for table, kind in poisoned]
    capsys.readouterr()
    args = ["--lake", str(analysed_lake), *command]
    if command[0] == "report":
        args += ["--out", str(tmp_path / "reports")]
    assert main(args) == 0
    out = capsys.readouterr().out
    for table, path in bad:
        moved = lake.quarantine_path(analysed_lake, table, path)
        assert f"warning: lake file {path} quarantined to {moved}: " in out, out
        assert not path.exists()
    assert "Traceback" not in out


def test_sql_errors_are_clear_errors_not_tracebacks(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--lake", str(lake_root), "sql", "selec nothing"]) == 2
    assert "DuckDB query failed: Parser Error" in capsys.readouterr().out


def test_samples_cli_reports_a_foreign_file_it_moved(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_midnight_lake(lake_root)
    assert main(["--lake", str(lake_root), "samples"]) == 0
    folder = lake.table_files(lake_root, QUERY_SAMPLES)[0].parent
    foreign = folder / "copied-by-hand.parquet"
    pq.write_table(pa.table({"calls": [1]}), foreign)
    capsys.readouterr()
    assert main(["--lake", str(lake_root), "samples", "--rebuild"]) == 0
    moved = lake.quarantine_path(lake_root, QUERY_SAMPLES, foreign)
    out = capsys.readouterr().out
    assert f"warning: lake file {foreign} quarantined to {moved}: not written by the samples job" in out
    assert lake.quarantine_path(lake_root, QUERY_SAMPLES, foreign).exists()


# ---------------------------------------------------------------------------------------------------------
# Only the lake's own files are data


def misplaced_snapshot_file(root: Path, name: str = "copied") -> tuple[Path, int]:
    """A statement_snapshots file of the lake copied into a query_samples partition; its rows."""
    source = lake.table_files(root, STATEMENT_SNAPSHOTS)[-1]
    target = lake.table_files(root, QUERY_SAMPLES)[0].parent / f"{name}-{source.name}"
    target.write_bytes(source.read_bytes())
    return target, pq.read_metadata(target).num_rows


def test_a_file_of_another_table_is_quarantined_on_the_first_read_and_never_counted(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: a statement_snapshots file in query_samples was counted by `radar sql` (its columns cast:
    the missing ones read as nulls) until a samples rebuild quarantined it."""
    write_step_change_lake(lake_root)
    write_snapshots(lake_root, DAY, 3, instance="db1")
    samples = lake.read_table(lake_root, QUERY_SAMPLES).height
    foreign, rows = misplaced_snapshot_file(lake_root)
    assert rows > 0
    capsys.readouterr()
    count = "select count(*) as n from query_samples"
    assert main(["--lake", str(lake_root), "sql", count, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"n": samples}], out + err
    moved = lake.quarantine_path(lake_root, QUERY_SAMPLES, foreign)
    assert f"lake file {foreign} quarantined to {moved}: a statement_snapshots file" in err
    assert not foreign.exists() and moved.exists()
    assert json.loads(Path(f"{moved}{lake.NOTE_SUFFIX}").read_text())["table"] == "query_samples"

    # The same on every other read path: polars (first read of this process's cache too), one file.
    readers = {
        "read_table": lambda: lake.read_table(lake_root, QUERY_SAMPLES).height,
        "scan_table": lambda: lake.scan_table(lake_root, QUERY_SAMPLES).collect().height,
        "views": lambda: duckdb_views.query(lake_root, count)["n"][0],
    }
    for name, read in readers.items():
        foreign, _ = misplaced_snapshot_file(lake_root, name)
        mark = lake.incident_mark()
        assert read() == samples, name
        assert_quarantined(lake_root, QUERY_SAMPLES.name, foreign, lake.incidents_since(mark))
    foreign, _ = misplaced_snapshot_file(lake_root, "read_file")
    assert lake.read_file(lake_root, QUERY_SAMPLES, foreign) is None
    assert not foreign.exists()


def test_files_the_radar_did_not_write_or_outside_partition_folders_are_not_data(lake_root: Path) -> None:
    write_step_change_lake(lake_root)
    own = lake.table_files(lake_root, QUERY_SAMPLES)[0]
    expected = lake.read_table(lake_root, QUERY_SAMPLES).height
    # The table's own columns and rows, written by another tool (no radar.table): not counted.
    unmarked = own.parent / "exported-by-hand.parquet"
    pq.write_table(pq.read_table(own).replace_schema_metadata({}), unmarked)
    # A radar file of this table, but in a folder that is no partition of it (its hive columns would lie).
    stray = own.parent.parent / "backup" / own.name
    stray.parent.mkdir()
    stray.write_bytes(own.read_bytes())
    mark = lake.incident_mark()
    assert lake.read_table(lake_root, QUERY_SAMPLES).height == expected
    incidents = lake.incidents_since(mark)
    assert_quarantined(lake_root, QUERY_SAMPLES.name, unmarked, incidents)
    assert_quarantined(lake_root, QUERY_SAMPLES.name, stray, incidents)
    reasons = {i.path: i.reason for i in incidents}
    assert reasons[unmarked].startswith("not written by the radar")
    assert reasons[stray].startswith("not in a partition folder of query_samples")


def test_compaction_quarantines_a_foreign_file_instead_of_merging_it(lake_root: Path) -> None:
    """Merged, a foreign file's rows would become the table's own (the merged file carries its mark)."""
    write_snapshots(lake_root, DAY, 3)
    expected = lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height
    folder = lake.table_files(lake_root, STATEMENT_SNAPSHOTS)[0].parent
    texts = lake.write_table(
        lake_root, QUERY_TEXTS, one_row(QUERY_TEXTS), {"instance": "x", "date": "d"}, "t"
    )
    foreign = folder / "zz-foreign.parquet"
    os.rename(texts, foreign)
    mark = lake.incident_mark()
    assert [(d.files_before, d.rows) for d in compact_lake(lake_root, today=DAY + timedelta(days=1))] == [
        (3, expected)
    ]
    assert_quarantined(lake_root, STATEMENT_SNAPSHOTS.name, foreign, lake.incidents_since(mark))
    assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height == expected


# ---------------------------------------------------------------------------------------------------------
# A full disk: one line naming the path and what was kept, exit 74, nothing collected lost


def disk_full_for(monkeypatch: pytest.MonkeyPatch, *folders: str) -> None:
    """Parquet writes into a path containing any of ``folders`` fail as a full disk does (at write())."""
    write = pq.write_table

    def full_disk(table: pa.Table, where: object, *args: object, **kwargs: object) -> None:
        if any(folder in str(getattr(where, "name", where)) for folder in folders):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(table, where, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pq, "write_table", full_disk)  # the module jobs.lake.io imports when it writes


def test_a_full_disk_stops_samples_with_one_line_naming_the_file_and_what_was_kept(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: a full disk gave `radar samples` an OSError (exit 70 "a bug in radar", or exit 2 as if
    the user had erred) that said nothing of what survived."""
    for instance in ("db1", "db2"):
        write_snapshots(lake_root, DAY, 4, instance=instance)
    snapshots = lake.read_table(lake_root, STATEMENT_SNAPSHOTS)
    clean = shutil.copytree(lake_root, tmp_path / "clean")
    assert main(["--lake", str(clean), "samples"]) == 0
    capsys.readouterr()
    disk_full_for(monkeypatch, "/query_samples/instance=db2/")
    assert main(["--lake", str(lake_root), "samples"]) == EXIT_STORAGE
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("error:")]
    assert "Traceback" not in out and "internal error" not in out
    assert line.startswith("error: disk full (ENOSPC: No space left on device): cannot write ")
    assert f"{lake_root}/query_samples/instance=db2/date=2026-11-27/" in line
    assert line.endswith(
        "kept: every file already in the lake, whole (this one was not written; no temp file left); samples "
        "of db1 committed; db2: not committed (its frontier unchanged), the next run redoes it; "
        "statement_snapshots untouched; free space, then run again"
    )
    assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).equals(snapshots)
    assert not list(lake_root.rglob(f"*{lake.TEMP_SUFFIX}"))
    monkeypatch.undo()  # space again: the next run finishes what the full disk stopped
    assert main(["--lake", str(lake_root), "samples"]) == 0
    done = lake.read_table(lake_root, QUERY_SAMPLES).sort("instance", "queryid", "interval_end")
    assert done.equals(lake.read_table(clean, QUERY_SAMPLES).sort("instance", "queryid", "interval_end"))


def test_a_full_disk_stops_detect_with_one_line_and_the_run_uncommitted(
    lake_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_step_change_lake(lake_root)
    disk_full_for(monkeypatch, "/analysis_runs/", "/finding_states/")
    assert main(["--lake", str(lake_root), "detect"]) == EXIT_STORAGE
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("error:")]
    assert line.startswith("error: disk full (ENOSPC: No space left on device): cannot write ")
    assert "this detection run is not committed (analysis_runs unchanged): the next run analyses" in line
    assert (
        not lake.table_files(lake_root, "analysis_runs") and lake.read_table(lake_root, QUERY_SAMPLES).height
    )
    monkeypatch.undo()
    assert main(["--lake", str(lake_root), "detect"]) == 0
    assert lake.table_files(lake_root, "analysis_runs")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs (root only: skipped where mount is not allowed), unmounted after the test."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_leaving(filler: Path, free_bytes: int) -> None:
    """Fill the file system of ``filler`` up, then give ``free_bytes`` back (a disk that filled meanwhile)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        written = 0
        while True:
            try:
                written += os.write(fd, b"\0" * 65536)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        os.ftruncate(fd, max(0, written - free_bytes))
    finally:
        os.close(fd)


def test_a_really_full_disk_gives_samples_and_detect_exit_74_and_a_readable_lake(small_disk: Path) -> None:
    """The kernel's ENOSPC on a tmpfs with 128 KiB left (the lock file fits, a 250 KB samples file does
    not), through `radar` in its own process."""
    from jobs.local.simulate.simulated_fleet import FleetShape
    from jobs.local.simulate.writer import write_fleet

    root = small_disk / "lake"
    shape = FleetShape(instances=2, statements=300, minutes=30, seed=3, regressions=0, deploys_per_hour=0)
    write_fleet(root, shape, fast=True)
    snapshots = lake.read_table(root, STATEMENT_SNAPSHOTS)
    filler = small_disk / "filler"
    fill_leaving(filler, 128 << 10)
    for command in ("samples", "detect"):
        proc = run_radar("--lake", str(root), command)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == EXIT_STORAGE, out + err
        assert "Traceback" not in out + err and "internal error" not in out + err
        [line] = [line for line in out.splitlines() if line.startswith("error:")]
        assert line.startswith("error: disk full (ENOSPC: No space left on device): cannot write ")
        assert f"cannot write {root}/query_samples/instance=sim-0000/" in line, line
        assert "kept: every file already in the lake" in line and "statement_snapshots untouched" in line
    assert lake.read_table(root, STATEMENT_SNAPSHOTS).equals(snapshots)
    assert not list(root.rglob(f"*{lake.TEMP_SUFFIX}"))
    filler.unlink()
    assert run_radar("--lake", str(root), "samples").wait(timeout=240) == 0
    assert lake.read_table(root, QUERY_SAMPLES).height > 0


# ---------------------------------------------------------------------------------------------------------
# Nothing deletes a file it did not write


def test_a_samples_rebuild_removes_only_its_own_files_and_quarantines_foreign_ones(lake_root: Path) -> None:
    write_midnight_lake(lake_root)
    run_samples_job(lake_root)
    folder = next(p.parent for p in lake.table_files(lake_root, QUERY_SAMPLES) if "2026-11-29" in str(p))
    sample = (
        lake.read_table(lake_root, QUERY_SAMPLES)
        .filter(pl.col("date") == "2026-11-29")
        .drop("instance", "date")
    )
    older_own = lake.write_table(
        lake_root,
        QUERY_SAMPLES,
        sample,
        {"instance": "alpha", "date": "2026-11-29"},
        lake.stem_for(datetime(2026, 11, 29, 1, tzinfo=UTC)),
    )
    radar_named_otherwise = lake.write_table(
        lake_root, QUERY_SAMPLES, sample, {"instance": "alpha", "date": "2026-11-29"}, "restored-backup"
    )
    own_name_no_metadata = folder / older_own.name.replace("T01", "T02")
    pq.write_table(sample.to_arrow(), own_name_no_metadata)
    not_parquet = folder / "notes.txt"
    not_parquet.write_text("left by an operator")
    mark = lake.incident_mark()
    report = run_samples_job(lake_root, mode="rebuild")
    assert not older_own.exists(), "the job's own older file is replaced"
    moved = {i.path for i in lake.incidents_since(mark) if i.action == "quarantined"}
    assert moved == {radar_named_otherwise, own_name_no_metadata}
    for path in moved:
        assert lake.quarantine_path(lake_root, QUERY_SAMPLES, path).exists()
    assert not_parquet.read_text() == "left by an operator"
    assert report.sample_rows == 2
    assert lake.read_table(lake_root, QUERY_SAMPLES).height == 2


def test_compaction_deletes_only_the_files_it_merged(lake_root: Path) -> None:
    write_snapshots(lake_root, DAY, 4)
    folder = lake.table_files(lake_root, STATEMENT_SNAPSHOTS)[0].parent
    (folder / "README.txt").write_text("operator note")
    live_temp = folder / f"{lake.TEMP_MARK}20261127T235959000000Z.{'a' * 32}{lake.TEMP_SUFFIX}"
    live_temp.write_bytes(b"a writer is still writing this")
    done = compact_lake(lake_root, today=DAY + timedelta(days=1))
    assert [(d.files_before, d.rows) for d in done] == [(4, 8)]
    assert (folder / "README.txt").read_text() == "operator note"
    assert live_temp.exists(), "a fresh temp file (a live writer's) is moved back, not deleted"
    assert not list((lake_root / "_compaction").rglob("*")) or all(
        p.is_dir() for p in (lake_root / "_compaction").rglob("*")
    )


# ---------------------------------------------------------------------------------------------------------
# Temp files


def test_a_write_leaves_other_writers_fresh_temp_files_and_removes_stale_ones(lake_root: Path) -> None:
    parts = {"instance": "a", "date": "2026-03-01"}
    folder = lake.partition_dir(lake_root, STATEMENT_SNAPSHOTS, parts)
    folder.mkdir(parents=True)
    same_stem_live = folder / f"{lake.TEMP_MARK}s.{'1' * 32}{lake.TEMP_SUFFIX}"
    other_stem_live = folder / f"{lake.TEMP_MARK}t.{'2' * 32}{lake.TEMP_SUFFIX}"
    stale = folder / f"{lake.TEMP_MARK}s.{'3' * 32}{lake.TEMP_SUFFIX}"
    for path in (same_stem_live, other_stem_live, stale):
        path.write_bytes(b"partial")
    config = locks.LakeConfig(stale_temp_after_s=3600)
    old = time.time() - 3601
    os.utime(stale, (old, old))
    young = time.time() - 3000
    os.utime(other_stem_live, (young, young))
    lake.write_table(
        lake_root, STATEMENT_SNAPSHOTS, pl.DataFrame({"queryid": [1]}), parts, "s", config=config
    )
    assert same_stem_live.exists() and other_stem_live.exists()
    assert not stale.exists()


def test_compaction_sweeps_stale_temp_files_of_the_whole_lake(lake_root: Path) -> None:
    write_snapshots(lake_root, DAY, 1)
    today = lake.partition_dir(lake_root, QUERY_TEXTS, {"instance": "db1", "date": "2026-12-01"})
    today.mkdir(parents=True)
    stale, fresh = today / ".tmp-a.x.partial", today / ".tmp-b.y.partial"
    stale.write_bytes(b"")
    fresh.write_bytes(b"")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    compact_lake(lake_root, today=DAY + timedelta(days=1))
    assert not stale.exists() and fresh.exists()


# ---------------------------------------------------------------------------------------------------------
# Locks and overlapping runs


@pytest.fixture
def held_samples_lock(lake_root: Path) -> Iterator[Path]:
    with locks.exclusive_lock(lake_root, SAMPLES_LOCK) as path:
        yield path


def test_a_second_samples_run_fails_clearly_while_the_lock_is_held(
    lake_root: Path, held_samples_lock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_midnight_lake(lake_root)
    with pytest.raises(
        locks.LakeLockError, match=rf"another run holds the samples lock \(pid {os.getpid()}, since"
    ):
        run_samples_job(lake_root, lake_config=locks.LakeConfig(lock_wait_s=0))
    assert main(["--lake", str(lake_root), "--lock-wait-s", "0.2", "samples"]) == EXIT_LOCKED
    assert "another run holds the samples lock" in capsys.readouterr().out
    assert main(["--lake", str(lake_root), "--lock-wait-s", "0", "detect"]) == EXIT_LOCKED
    assert not lake.table_files(lake_root, QUERY_SAMPLES)


def test_a_samples_run_waits_within_the_bound_for_the_lock(lake_root: Path) -> None:
    write_midnight_lake(lake_root)
    released = threading.Event()

    def hold() -> None:
        with locks.exclusive_lock(lake_root, SAMPLES_LOCK):
            started.set()
            time.sleep(0.5)
        released.set()

    started = threading.Event()
    holder = threading.Thread(target=hold)
    holder.start()
    started.wait(5)
    report = run_samples_job(lake_root, lake_config=locks.LakeConfig(lock_wait_s=10))
    holder.join()
    assert released.is_set() and report.sample_rows == 2


def test_compaction_takes_the_compaction_lock(lake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_snapshots(lake_root, DAY, 2)
    with locks.exclusive_lock(lake_root, locks.COMPACTION_LOCK):
        with pytest.raises(locks.LakeLockError, match="another run holds the compaction lock"):
            compact_lake(lake_root, today=DAY + timedelta(days=1), config=locks.LakeConfig(lock_wait_s=0))
        assert main(["--lake", str(lake_root), "--lock-wait-s", "0", "compact"]) == EXIT_LOCKED
    assert len(compact_lake(lake_root, today=DAY + timedelta(days=1))) == 1


def run_radar(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(PYTHON), "-m", "jobs.cli.main", *args],
        cwd=WORKTREE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.slow
def test_two_samples_runs_at_once_neither_crashes_and_the_lake_is_right(lake_root: Path) -> None:
    for instance in ("db1", "db2", "db3"):
        write_snapshots(lake_root, DAY, 240, instance=instance)
        write_snapshots(lake_root, DAY + timedelta(days=1), 240, instance=instance)
    expected = samples_from_snapshots(lake.scan_table(lake_root, STATEMENT_SNAPSHOTS), None).samples
    for lock_wait in ("30", "0"):  # both succeed (the second waits), or the second reports the lock
        procs = [run_radar("--lake", str(lake_root), "--lock-wait-s", lock_wait, "samples") for _ in range(2)]
        results = [(p.wait(timeout=240), *p.communicate()) for p in procs]
        for code, out, err in results:
            assert "Traceback" not in out + err, out + err
            assert code in (0, EXIT_LOCKED), out + err
            if code == EXIT_LOCKED:
                assert "another run holds the samples lock (pid" in out
        assert any(code == 0 for code, _, _ in results)
        if lock_wait == "30":
            assert [code for code, _, _ in results] == [0, 0]
        got = lake.read_table(lake_root, QUERY_SAMPLES)
        assert got.height == expected.height
        assert got["calls"].sum() == expected["calls"].sum()
        assert not list(lake_root.rglob(f"*{lake.TEMP_SUFFIX}"))
        assert not (lake_root / lake.QUARANTINE).exists()


# ---------------------------------------------------------------------------------------------------------
# Snapshots against real servers


@pytest.fixture(scope="module")
def safety_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    return fleet_factory(["alpha", "beta"])


@pytest.mark.postgres
def test_snapshot_goes_on_collecting_with_a_truncated_query_texts_file(
    safety_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = FleetConfig.from_embedded(safety_fleet)
    first = snapshot_fleet(config, lake_root)
    assert not first.failed
    texts = lake.table_files(lake_root, QUERY_TEXTS)
    bad = truncated_copy(texts[0], "zz-truncated.parquet")
    mark = lake.incident_mark()
    second = snapshot_fleet(config, lake_root)
    assert [r.status for r in second.results] == ["ok", "ok"], [r.error for r in second.results]
    assert_quarantined(lake_root, QUERY_TEXTS.name, bad, lake.incidents_since(mark))
    # The CLI, with a fresh poison file: every instance collected, the file named, exit 0.
    bad = truncated_copy(texts[0], "zz-truncated-again.parquet")
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(safety_fleet.fleet_config_toml())
    capsys.readouterr()
    assert main(["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot"]) == 0
    out = capsys.readouterr().out
    assert f"warning: lake file {bad} quarantined to " in out and "failed" not in out
    runs = lake.read_table(lake_root, "snapshot_runs")
    assert runs.group_by("instance").len().sort("instance")["len"].to_list() == [3, 3]
    assert set(runs["status"]) == {"ok"}


@pytest.mark.postgres
def test_two_snapshots_at_once_both_finish_and_the_lake_is_readable(
    safety_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(safety_fleet.fleet_config_toml())
    for _ in range(2):
        procs = [
            run_radar("--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot") for _ in range(2)
        ]
        for proc in procs:
            code = proc.wait(timeout=120)
            out, err = proc.communicate()
            assert code == 0 and "Traceback" not in out + err, out + err
    runs = lake.read_table(lake_root, "snapshot_runs")
    assert runs.filter(pl.col("status") == "ok").group_by("instance").len().sort("instance")[
        "len"
    ].to_list() == [
        4,
        4,
    ]
    assert not list(lake_root.rglob(f"*{lake.TEMP_SUFFIX}"))
    mark = lake.incident_mark()
    for table in TABLES:
        lake.read_table(lake_root, table)
    assert lake.incidents_since(mark) == []
    assert lake.read_table(lake_root, STATEMENT_SNAPSHOTS).height > 0


def test_the_samples_asset_names_quarantined_files_in_its_metadata(lake_root: Path) -> None:
    import dagster as dg

    from orchestration.assets.samples import query_samples
    from orchestration.resources import LakeResource

    write_midnight_lake(lake_root)
    bad = truncated_copy(lake.table_files(lake_root, STATEMENT_SNAPSHOTS)[0])
    with dg.instance_for_test() as instance:
        # the snapshots' days, as a snapshot run registers them (orchestration/partitions.py)
        instance.add_dynamic_partitions("collection_days", ["2026-11-29", "2026-11-30"])
        result = dg.materialize(
            [query_samples],
            partition_key="2026-11-30",
            resources={"lake": LakeResource(root=str(lake_root))},
            instance=instance,
        )
    assert result.success
    metadata = result.asset_materializations_for_node("query_samples")[0].metadata
    assert metadata["lake_files_quarantined"].value == 1
    assert str(bad) in metadata["lake_incidents"].value
    assert metadata["sample_rows"].value == 2  # a run appends every new snapshot (both days: the first run)
