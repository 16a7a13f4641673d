"""The lake's storage layer: ObjectPath on a real local S3 server (moto), and the backend-neutral helpers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import create_exclusive, duckdb_filesystem, lake_path, write_atomically


def test_lake_path_reads_paths_file_uris_and_object_uris(tmp_path: Path) -> None:
    assert lake_path("data/lake") == Path("data/lake")
    assert lake_path(f"file://{tmp_path}") == tmp_path
    assert lake_path("s3://bucket/some/lake") == ObjectPath("s3://bucket/some/lake")
    assert isinstance(lake_path("gs://b/x"), ObjectPath)
    with pytest.raises(ValueError, match="unsupported lake location 'ftp://host/x'"):
        lake_path("ftp://host/x")


def test_object_path_is_a_pure_path() -> None:
    path = ObjectPath("s3://bucket/lake") / "statement_snapshots" / "instance=a" / "x.parquet"
    assert str(path) == "s3://bucket/lake/statement_snapshots/instance=a/x.parquet"
    assert (path.name, path.stem, path.suffix) == ("x.parquet", "x", ".parquet")
    assert path.parent == ObjectPath("s3://bucket/lake/statement_snapshots/instance=a")
    assert str(path.relative_to(ObjectPath("s3://bucket/lake"))) == "statement_snapshots/instance=a/x.parquet"
    with pytest.raises(ValueError):
        path.relative_to(ObjectPath("s3://other/lake"))
    assert sorted([ObjectPath("s3://b/z"), ObjectPath("s3://b/a")])[0] == ObjectPath("s3://b/a")


def test_object_path_reads_writes_lists_and_globs(s3_lake: ObjectPath) -> None:
    for key in [
        "t/instance=a/date=2026-01-01/1.parquet",
        "t/instance=a/date=2026-01-02/2.parquet",
        "t/instance=b/date=2026-01-01/3.parquet",
        "t/instance=b/date=2026-01-01/.tmp-x.partial",
    ]:
        (s3_lake / key).write_bytes(key.encode())
    table = s3_lake / "t"
    assert table.exists() and table.is_dir() and not table.is_file()
    assert [p.name for p in table.glob("instance=*")] == ["instance=a", "instance=b"]
    assert [str(p.relative_to(table)) for p in table.glob("*/*/*.parquet")] == [
        "instance=a/date=2026-01-01/1.parquet",
        "instance=a/date=2026-01-02/2.parquet",
        "instance=b/date=2026-01-01/3.parquet",
    ]
    assert [str(p.relative_to(table)) for p in table.glob("**/date=*")] == [
        "instance=a/date=2026-01-01",
        "instance=a/date=2026-01-02",
        "instance=b/date=2026-01-01",
    ]
    assert len(list(s3_lake.rglob("*.partial"))) == 1
    one = table / "instance=a/date=2026-01-01/1.parquet"
    assert one.read_bytes() == b"t/instance=a/date=2026-01-01/1.parquet"
    assert one.stat().st_size == len(one.read_bytes()) and one.stat().st_mtime_ns > 0
    one.unlink()
    assert not one.exists()
    with pytest.raises(FileNotFoundError):
        one.read_bytes()
    one.unlink(missing_ok=True)
    moved = (table / "instance=b/date=2026-01-01/3.parquet").rename(s3_lake / "_quarantine/3.parquet")
    assert moved.read_bytes().endswith(b"3.parquet")
    with pytest.raises(FileExistsError):
        (table / "instance=a/date=2026-01-02/2.parquet").rename(moved)


def test_a_failed_write_through_open_leaves_nothing(s3_lake: ObjectPath) -> None:
    target = s3_lake / "half.bin"
    with pytest.raises(RuntimeError), target.open("wb") as handle:
        handle.write(b"half")
        raise RuntimeError("writer died")
    assert not target.exists()
    with target.open("wb") as handle:
        handle.write(b"whole")
    assert target.read_bytes() == b"whole"


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_create_exclusive_lets_exactly_one_of_many_writers_win(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path if backend == "local" else request.getfixturevalue("s3_lake")
    target = root / "lock"
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        if create_exclusive(target, str(i).encode()):
            wins.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1
    assert target.read_bytes() == str(wins[0]).encode()


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_write_atomically_replaces_whole(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path if backend == "local" else request.getfixturevalue("s3_lake")
    target = root / "state.json"
    write_atomically(target, b"one")
    write_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in root.glob("*")] == ["state.json"]


def test_duckdb_reads_the_bucket_through_the_adapter(s3_lake: ObjectPath) -> None:
    import io

    import duckdb
    import polars as pl

    for inst in ("a", "b"):
        buf = io.BytesIO()
        pl.DataFrame({"v": [1, 2]}).write_parquet(buf)
        (s3_lake / f"t/instance={inst}/f.parquet").write_bytes(buf.getvalue())
    conn = duckdb.connect()
    conn.register_filesystem(duckdb_filesystem(s3_lake))
    rows = conn.sql(
        f"select instance, sum(v) from read_parquet('{s3_lake}/t/*/*.parquet', hive_partitioning=true) "
        "group by 1 order by 1"
    ).fetchall()
    assert rows == [("a", 3), ("b", 3)]
    assert duckdb_filesystem(Path("x")) is None
