"""auto_explain ingest across log rotation: no record lost to copytruncate, create-mode rotation, inode
reuse or truncation. Records come from a real PostgreSQL 18 server (auto_explain, jsonlog); rotations are
done to the server's live log by the real ``logrotate`` when it is installed, and by the same file
operations in Python otherwise (both are run when logrotate is there)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import polars as pl
import psycopg
import pytest

from jobs.lake.io import scan_table
from jobs.local.embedded import SERVICE_USER, EmbeddedServer
from jobs.plans.auto_explain import (
    IngestResult,
    LogFile,
    ingest_auto_explain_logs,
    load_offsets,
    resume_offsets,
)
from jobs.plans.config import AutoExplainConfig
from tests.conftest import FleetFactory

pytestmark = pytest.mark.postgres

STAGES = range(1, 9)
LOGROTATE = shutil.which("logrotate")
# A fixed log_filename: PostgreSQL's jsonlog is then always log/postgresql.json, the way a fleet that
# leaves rotation to logrotate is set up.
ROTATION_SETTINGS = {"log_filename": "'postgresql.log'", "auto_explain.log_min_duration": "0"}


def table(n: int) -> str:
    return f"rot_t{n}_tab"


def query(n: int) -> str:
    return f"SELECT count(*) FROM {table(n)}"


def wait_for(log_dir: Path, needle: bytes, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in log_dir.iterdir():
            try:
                if needle in path.read_bytes():
                    return
            except FileNotFoundError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never reached the log in {log_dir}")


def run_stage(server: EmbeddedServer, *numbers: int) -> None:
    """Run the stage queries; return once each one's auto_explain record is in a log file."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        for n in numbers:
            conn.execute(query(n))  # type: ignore[arg-type]
    for n in numbers:
        wait_for(server.log_dir, table(n).encode())


def ingested_tables(lake_root: Path) -> set[str]:
    snaps = scan_table(lake_root, "plan_snapshots").collect().filter(pl.col("source") == "auto_explain")
    return {r for rels in snaps["relations"].to_list() for r in rels or [] if r.startswith("rot_t")}


def rotated(log: Path, n: int) -> Path:
    """logrotate's name for the n-th rotated copy with ``extension .json``: postgresql.1.json."""
    return log.with_name(f"{log.stem}.{n}{log.suffix}")


def logrotate(log: Path, work: Path, directives: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "logrotate.conf"
    conf.write_text(f"{log} {{\n    extension .json\n    nocompress\n    missingok\n{directives}\n}}\n")
    done = subprocess.run(
        [LOGROTATE or "logrotate", "-f", "-s", str(work / "state"), str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def shift_rotated(log: Path, keep: int) -> None:
    """X.1 → X.2 … up to ``keep``, as logrotate numbers its copies."""
    for n in range(keep - 1, 0, -1):
        if rotated(log, n).exists():
            rotated(log, n).rename(rotated(log, n + 1))


def rotation_server(fleet_factory: FleetFactory) -> tuple[EmbeddedServer, Path]:
    """A server logging to one jsonlog file, with a table per stage (its plans name the stage)."""
    server = fleet_factory(["rot"], ROTATION_SETTINGS).server("rot")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        for n in STAGES:
            conn.execute(f"CREATE TABLE {table(n)} (x int)")  # type: ignore[arg-type]
    return server, server.log_dir / "postgresql.json"


class LiveIngest:
    """Ingests the rotation server's log into the lake on each call and keeps every run's result."""

    def __init__(self, server: EmbeddedServer, lake_root: Path) -> None:
        self.server, self.lake_root = server, lake_root
        self.results: list[IngestResult] = []

    def __call__(self) -> None:
        self.results.append(ingest_auto_explain_logs(self.server.log_dir, "rot", self.lake_root))

    def assert_every_stage_ingested(self) -> None:
        assert all(not r.errors for r in self.results)
        assert ingested_tables(self.lake_root) == {table(n) for n in STAGES}, "all 8 records in the lake"


def copytruncate(log: Path, keep: int, tool: str, work: Path) -> None:
    """Shift X.1 → X.2 …, copy X to X.1 (a new inode: the old content and any line logged since the
    last read), then truncate X in place; the server goes on appending to X from 0 (O_APPEND)."""
    if tool == "logrotate":
        logrotate(log, work, f"    copytruncate\n    rotate {keep}")
        return
    shift_rotated(log, keep)
    shutil.copyfile(log, rotated(log, 1))
    with log.open("r+b") as handle:
        handle.truncate(0)


def create_rotate(server: EmbeddedServer, log: Path, keep: int, tool: str, work: Path) -> None:
    """Rename X → X.1 (the server still writes to it: one stage query lands there), then have the server
    open a new X (``pg_rotate_logfile()``): logrotate's ``create`` mode with a postrotate command."""
    between = f"SELECT count(*) FROM {table(4 if keep == 3 else 7)}"
    if tool == "logrotate":
        psql = f'/usr/bin/psql "{server.dsn}" -qAt -c "{between}" -c "SELECT pg_rotate_logfile()"'
        directives = f"    create 0644 {SERVICE_USER} {SERVICE_USER}\n    rotate {keep}\n"
        logrotate(log, work, f"{directives}    postrotate\n        {psql} >/dev/null\n    endscript")
    else:
        shift_rotated(log, keep)
        log.rename(rotated(log, 1))
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(between)  # type: ignore[arg-type]
            conn.execute("SELECT pg_rotate_logfile()")
    deadline = time.monotonic() + 15
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.exists(), "the server did not open a new log file"


TOOLS = [
    "emulated",
    pytest.param("logrotate", marks=pytest.mark.skipif(not LOGROTATE, reason="no logrotate")),
]


@pytest.mark.parametrize("tool", TOOLS)
def test_copytruncate_rotation_of_a_live_log_loses_no_record(
    fleet_factory: FleetFactory, lake_root: Path, tmp_path: Path, tool: str
) -> None:
    server, log = rotation_server(fleet_factory)
    ingest = LiveIngest(server, lake_root)

    run_stage(server, 1, 2)
    ingest()
    run_stage(server, 3)  # logged after the last read, before the copy: only the copy has it
    inode = log.stat().st_ino
    copytruncate(log, 3, tool, tmp_path / "lr")
    assert log.stat().st_ino == inode and rotated(log, 1).stat().st_ino != inode
    run_stage(server, 4, 5)  # appended to the truncated file, from byte 0
    assert table(3).encode() not in log.read_bytes() and table(4).encode() in log.read_bytes()
    assert log.read_bytes().startswith(b'{"timestamp":'), "the server appends (O_APPEND): no hole at 0"
    ingest()
    run_stage(server, 6)
    copytruncate(log, 3, tool, tmp_path / "lr")  # X.1 → X.2 (same inode, renamed), X → a new X.1
    run_stage(server, 7, 8)
    ingest()
    ingest.assert_every_stage_ingested()
    assert sorted(p.name for p in server.log_dir.glob("*.json")) == [
        "postgresql.1.json",
        "postgresql.2.json",
        "postgresql.json",
    ]


@pytest.mark.parametrize("tool", TOOLS)
def test_create_mode_rotation_of_a_live_log_loses_no_record(
    fleet_factory: FleetFactory, lake_root: Path, tmp_path: Path, tool: str
) -> None:
    server, log = rotation_server(fleet_factory)
    ingest = LiveIngest(server, lake_root)

    run_stage(server, 1, 2)
    ingest()
    run_stage(server, 3)  # after the last read, before the rename
    inode = log.stat().st_ino
    create_rotate(server, log, 3, tool, tmp_path / "lr")  # stage 4 logged between rename and reopen
    wait_for(server.log_dir, table(4).encode())
    assert rotated(log, 1).stat().st_ino == inode and log.stat().st_ino != inode
    run_stage(server, 5)
    ingest()
    run_stage(server, 6)
    # rotate 1: the old X.1 is replaced and its inode freed; on ext4 the server's new X got that inode
    # in the emulated run (inode reuse), not under logrotate 3.21
    create_rotate(server, log, 1, tool, tmp_path / "lr")  # stage 7 between rename and reopen
    wait_for(server.log_dir, table(7).encode())
    run_stage(server, 8)
    ingest()
    ingest.assert_every_stage_ingested()


# ---------------------------------------------------------------------------------------------------------
# Real records, written to files the way a log grows and is rotated (exact counts: nothing lost, nothing
# read twice).


@pytest.fixture(scope="module")
def real_records(fleet_factory: FleetFactory) -> list[bytes]:
    """Eight real auto_explain jsonlog lines (one per stage table) from a PostgreSQL 18 server."""
    server = fleet_factory(["rec"], {"auto_explain.log_min_duration": "0"}).server("rec")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        for n in STAGES:
            conn.execute(f"CREATE TABLE {table(n)} (x int)")  # type: ignore[arg-type]
    run_stage(server, *STAGES)
    lines = [line + b"\n" for p in server.log_dir.glob("*.json") for line in p.read_bytes().splitlines()]
    records = [next(line for line in lines if table(n).encode() in line and b"plan:" in line) for n in STAGES]
    assert all(r.startswith(b'{"timestamp":"') for r in records)
    return records


@pytest.fixture
def log_and_lake(tmp_path: Path) -> tuple[Path, Path]:
    """An empty log folder and a lake root, for the tests that write log files themselves."""
    logs = tmp_path / "log"
    logs.mkdir()
    return logs, tmp_path / "lake"


def plan_records(logs: Path, lake: Path, config: AutoExplainConfig | None = None) -> int:
    result = ingest_auto_explain_logs(logs, "a", lake, config)
    assert not result.errors
    return result.plan_records


def test_inode_reuse_is_detected_by_the_head_and_read_from_the_start(
    real_records: list[bytes], log_and_lake: tuple[Path, Path]
) -> None:
    logs, lake = log_and_lake
    old = logs / "postgresql-1.json"
    old.write_bytes(b"".join(real_records[:3]))
    assert plan_records(logs, lake) == 3
    freed = old.stat().st_ino
    old.unlink()
    new = logs / "postgresql-2.json"  # a new file, given the freed inode (ext4 does at once), and longer
    new.write_bytes(b"".join(real_records[3:]))
    if new.stat().st_ino != freed:
        pytest.skip("this filesystem did not reuse the inode")
    assert plan_records(logs, lake) == 5, "read from 0, not from the deleted file's offset"
    assert ingested_tables(lake) == {table(n) for n in STAGES}
    # The same under the same name: deleted and created again.
    again = logs / "postgresql-2.json"
    freed = again.stat().st_ino
    again.unlink()
    again.write_bytes(b"".join(real_records))
    if again.stat().st_ino != freed:  # another process took the freed inode first (a busy host)
        pytest.skip("the freed inode went to another file this time")
    assert plan_records(logs, lake) == 8


def test_copytruncate_with_a_partial_line_and_a_record_logged_before_the_copy(
    real_records: list[bytes], log_and_lake: tuple[Path, Path], tmp_path: Path
) -> None:
    logs, lake = log_and_lake
    log = logs / "postgresql.json"
    r = real_records
    log.write_bytes(r[0] + r[1] + r[2][:40])  # the server is in the middle of writing record 3
    assert plan_records(logs, lake) == 2
    with log.open("ab") as handle:  # record 3 completed and record 4 logged, then logrotate runs
        handle.write(r[2][40:] + r[3])
    copytruncate(log, 3, "emulated", tmp_path)
    with log.open("ab") as handle:
        handle.write(r[4] + r[5])
    assert plan_records(logs, lake) == 4, "3 and 4 from the copy (from the old offset), 5 and 6 from 0"
    with log.open("ab") as handle:
        handle.write(r[6])
    copytruncate(log, 3, "emulated", tmp_path)
    with log.open("ab") as handle:
        handle.write(r[7])
    assert plan_records(logs, lake) == 2
    assert plan_records(logs, lake) == 0, "nothing new, nothing re-read"
    assert ingested_tables(lake) == {table(n) for n in STAGES}
    state = load_offsets(lake, "a")
    assert set(state) == {"postgresql.json", "postgresql.1.json", "postgresql.2.json"}
    assert all({"device", "inode", "offset", "head_len", "head_sha"} <= set(e) for e in state.values())


def test_a_file_that_shrank_without_a_copy_is_read_from_the_start(
    real_records: list[bytes], log_and_lake: tuple[Path, Path]
) -> None:
    logs, lake = log_and_lake
    log = logs / "postgresql.json"
    log.write_bytes(b"".join(real_records[:4]))
    assert plan_records(logs, lake) == 4
    with log.open("r+b") as handle:  # truncated in place, no copy kept; then two new records
        handle.truncate(0)
    with log.open("ab") as handle:
        handle.write(real_records[4] + real_records[5])
    assert plan_records(logs, lake) == 2
    with log.open("r+b") as handle:  # overwritten in place by longer content (same inode, other head)
        handle.write(real_records[6] + real_records[7] + real_records[0] + real_records[1])
    assert plan_records(logs, lake) == 4
    assert ingested_tables(lake) == {table(n) for n in STAGES}


def test_budget_per_run_and_create_mode_rename_keep_their_offsets(
    real_records: list[bytes], log_and_lake: tuple[Path, Path]
) -> None:
    logs, lake = log_and_lake
    log = logs / "postgresql.json"
    log.write_bytes(b"".join(real_records[:6]))
    budget = AutoExplainConfig(max_bytes_per_run=len(real_records[0]) + len(real_records[1]) + 10)
    assert plan_records(logs, lake, budget) == 2, "two whole lines fit the budget"
    log.rename(rotated(log, 1))  # create-mode: renamed (same inode), a new file under the old name
    log.write_bytes(real_records[6] + real_records[7])
    assert plan_records(logs, lake) == 6, "4 left in the renamed file, 2 in the new one"
    assert ingested_tables(lake) == {table(n) for n in STAGES}


def test_resume_offsets_rules() -> None:
    def found(inode: int, head: bytes, size: int | None = None) -> LogFile:
        return LogFile(Path(f"f{inode}"), 1, inode, len(head) if size is None else size, head)

    head = b'{"timestamp":"2026-12-01 09:00:00.000 UTC","pid":42}\n' * 100
    first = found(7, head[:4096], size=6000)
    known = {"x": first.state(5000)}
    assert resume_offsets([first], known) == [5000], "same inode, same head"
    assert resume_offsets([found(7, b"other" * 1000, 6000)], known) == [0], "inode reused"
    assert resume_offsets([found(7, head[:4096], 4000)], known) == [0], "shrank below the offset"
    copy, truncated = found(8, head[:4096], 6100), found(7, b"", 0)
    assert resume_offsets([truncated, copy], known) == [0, 5000], "copytruncate"
    assert resume_offsets([copy, found(9, head[:4096], 6100)], known) == [5000, 0], "used once"
    legacy = {"x": {"inode": 7, "offset": 5000}}  # an offsets file written before fingerprints
    assert resume_offsets([found(7, b"other" * 1000, 6000)], legacy) == [5000]


def test_offsets_advance_only_after_the_lake_write(
    real_records: list[bytes], log_and_lake: tuple[Path, Path]
) -> None:
    logs, lake = log_and_lake
    lake.mkdir()
    (logs / "postgresql.json").write_bytes(b"".join(real_records[:3]))
    blocker = lake / "plan_snapshots"
    blocker.write_text("a file where the table folder should be: the lake write fails")
    with pytest.raises(Exception, match="plan_snapshots"):
        ingest_auto_explain_logs(logs, "a", lake)
    assert load_offsets(lake, "a") == {}, "no offsets saved for plans not stored"
    blocker.unlink()
    assert plan_records(logs, lake) == 3, "read again after the failed write: nothing lost"
    assert len(ingested_tables(lake)) == 3
