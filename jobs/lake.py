"""The Parquet lake: hive-partitioned files, atomic writes, one scan helper.

Layout: ``<root>/<table>/instance=<name>/date=<YYYY-MM-DD>/<stem>.parquet`` (the partition keys come from
the table's schema). A file is written to a hidden temp name in the same folder and renamed into place,
so a reader globbing ``*.parquet`` never sees a partial file, and a crash leaves at most a stray temp file
that the next write of the same stem removes. Writing the same (table, partitions, stem) again replaces
the file: snapshots are idempotent per (instance, captured_at).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.schemas import SCHEMA_VERSION, TABLES, TableSchema

DEFAULT_LAKE_ROOT = Path("data/lake")
TEMP_MARK = ".tmp-"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class LakeError(RuntimeError):
    """A lake file could not be written or read; the message names the file."""


def table_schema(table: str | TableSchema) -> TableSchema:
    if isinstance(table, TableSchema):
        return table
    try:
        return TABLES[table]
    except KeyError:
        raise LakeError(f"unknown lake table {table!r}; known: {sorted(TABLES)}") from None


def stem_for(ts: datetime) -> str:
    """A file-name-safe, sortable stem for a timestamp (hourly partition keys contain ':')."""
    return ts.strftime("%Y%m%dT%H%M%S%fZ")


def partition_dir(root: Path, table: str | TableSchema, partitions: Mapping[str, str]) -> Path:
    schema = table_schema(table)
    missing = [k for k in schema.partition_by if k not in partitions]
    if missing:
        raise LakeError(f"table {schema.name}: missing partition values {missing}")
    path = Path(root) / schema.name
    for key in schema.partition_by:
        value = str(partitions[key])
        if not _SAFE_VALUE.match(value):
            raise LakeError(f"table {schema.name}: partition {key}={value!r} is not a safe folder name")
        path = path / f"{key}={value}"
    return path


def write_table(
    root: Path,
    table: str | TableSchema,
    frame: pl.DataFrame,
    partitions: Mapping[str, str],
    stem: str,
) -> Path:
    """Write one file atomically (temp file + fsync + rename) and return its final path."""
    schema = table_schema(table)
    folder = partition_dir(root, schema, partitions)
    folder.mkdir(parents=True, exist_ok=True)
    return write_file(folder / f"{stem}.parquet", schema, frame)


def write_file(final: Path, schema: TableSchema, frame: pl.DataFrame) -> Path:
    """Conform ``frame`` to ``schema`` and write it to ``final`` through a temp file in the same folder."""
    folder, stem = final.parent, final.stem
    arrow = schema.conform(frame).to_arrow()
    metadata = dict(arrow.schema.metadata or {})
    metadata.update(
        {
            b"radar.table": schema.name.encode(),
            b"radar.schema_version": str(SCHEMA_VERSION).encode(),
        }
    )
    arrow = arrow.replace_schema_metadata(metadata)
    for stale in folder.glob(f"{TEMP_MARK}{stem}.*"):
        stale.unlink(missing_ok=True)
    tmp = folder / f"{TEMP_MARK}{stem}.{uuid.uuid4().hex}.partial"
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(arrow, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, Exception):
            raise LakeError(f"could not write {final}: {exc}") from exc
        raise
    return final


def table_files(root: Path, table: str | TableSchema) -> list[Path]:
    schema = table_schema(table)
    base = Path(root) / schema.name
    if not base.exists():
        return []
    return sorted(base.glob("/".join(["*"] * len(schema.partition_by) + ["*.parquet"])))


def scan_table(root: Path, table: str | TableSchema) -> pl.LazyFrame:
    """The one way to read a lake table with polars: hive columns included, schema enforced."""
    schema = table_schema(table)
    files = table_files(root, schema)
    if not files:
        return pl.LazyFrame(schema=schema.scan_schema())
    try:
        frame = pl.scan_parquet(
            files,
            schema=schema.polars_schema,
            hive_partitioning=True,
            hive_schema=pl.Schema(
                {k: schema.partition_dtypes.get(k, pl.String()) for k in schema.partition_by}
            ),
            missing_columns="insert",
            extra_columns="ignore",
        )
    except Exception as exc:  # polars raises several types for unreadable files
        raise LakeError(f"cannot scan lake table {schema.name} under {root}: {exc}") from exc
    return frame.select(list(schema.scan_schema().names()))


def read_file_metadata(path: Path) -> dict[str, str]:
    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"radar.")}


def arrow_schema(table: str | TableSchema) -> pa.Schema:
    return table_schema(table).empty().to_arrow().schema
