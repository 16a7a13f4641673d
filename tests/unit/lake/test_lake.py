"""The lake: atomic idempotent writes, schema metadata, scans that merge versions, DuckDB views."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake import views as duckdb_views
from jobs.schemas.registry import TABLES
from jobs.schemas.table import SCHEMA_VERSION

WHEN = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
PARTS = {"instance": "db1", "date": "2026-03-01"}


def test_rewriting_the_same_snapshot_replaces_it(lake_root: Path) -> None:
    stem = lake.stem_for(WHEN)
    lake.write_table(
        lake_root, "statement_snapshots", pl.DataFrame({"queryid": [1], "calls": [5]}), PARTS, stem
    )
    path = lake.write_table(
        lake_root, "statement_snapshots", pl.DataFrame({"queryid": [1], "calls": [6]}), PARTS, stem
    )
    frame = lake.scan_table(lake_root, "statement_snapshots").collect()
    assert frame["calls"].to_list() == [6]
    assert frame["instance"].to_list() == ["db1"]
    assert lake.read_file_metadata(path) == {
        "radar.table": "statement_snapshots",
        "radar.schema_version": str(SCHEMA_VERSION),
    }


def test_files_with_different_column_sets_scan_together_with_nulls(lake_root: Path) -> None:
    old = pl.DataFrame({"queryid": [1], "calls": [5]})  # e.g. PG13: no wal_buffers_full
    new = pl.DataFrame({"queryid": [2], "calls": [7], "wal_buffers_full": [3]})
    lake.write_table(lake_root, "statement_snapshots", old, PARTS, "a")
    lake.write_table(lake_root, "statement_snapshots", new, {**PARTS, "instance": "db2"}, "b")
    frame = lake.scan_table(lake_root, "statement_snapshots").sort("queryid").collect()
    assert frame["wal_buffers_full"].to_list() == [None, 3]


def test_unknown_columns_and_unsafe_partitions_are_rejected(lake_root: Path) -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        lake.write_table(lake_root, "statement_snapshots", pl.DataFrame({"bogus": [1]}), PARTS, "x")
    with pytest.raises(locks.LakeError, match="not a safe folder name"):
        lake.write_table(
            lake_root,
            "statement_snapshots",
            pl.DataFrame({"queryid": [1]}),
            {**PARTS, "instance": "../x"},
            "x",
        )


def test_every_table_has_a_duckdb_view_even_when_empty(lake_root: Path) -> None:
    conn = duckdb_views.connect(lake_root)
    for name, table in TABLES.items():
        described = conn.execute(f"DESCRIBE {name}").fetchall()
        assert [row[0] for row in described] == list(table.scan_schema().names())
    lake.write_table(
        lake_root, "statement_snapshots", pl.DataFrame({"queryid": [9], "calls": [2]}), PARTS, "s"
    )
    conn = duckdb_views.connect(lake_root)
    assert conn.execute("select instance, queryid, calls from statement_snapshots").fetchall() == [
        ("db1", 9, 2)
    ]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_the_footer_mark_names_the_table_as_pyarrow_reads_it(lake_root: Path, table: str) -> None:
    """``footer_table`` finds the Thrift key-value bytes instead of parsing the footer: the same answer as
    pyarrow's parse for every table's file, also when a string value (its statistics are in the footer,
    before the key-value metadata) holds the mark's own bytes naming another table."""
    schema = TABLES[table]
    frame = schema.conform(pl.DataFrame({c.name: [None] for c in schema.columns}))
    parts = {k: "x" for k in schema.partition_by}
    text = next((c.name for c in schema.columns if c.dtype == pl.String()), None)
    decoy = frame.with_columns(pl.lit("\x18\x0bradar.table\x18\x05other").alias(text)) if text else frame
    path = lake.write_table(lake_root, schema, decoy, parts, "f")
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    assert lake.footer_table(data[-8 - length : -8]) == table
    assert pq.read_metadata(path).metadata[b"radar.table"].decode() == table
    assert lake.file_problem(path, schema) is None
    unmarked = lake.write_table(lake_root, schema, frame, parts, "g")
    pq.write_table(pq.read_table(unmarked).replace_schema_metadata({}), unmarked)  # same rows, no mark
    assert lake.file_problem(unmarked, schema) == (
        f"not written by the radar (no radar.table in its Parquet metadata), so not {table} data"
    )
