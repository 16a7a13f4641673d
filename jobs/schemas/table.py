"""What a table shape is: columns with types, partitions, keys; ``SCHEMA_VERSION``.

Types are ``jobs.schemas.dtypes`` (no polars import): the polars forms are built when a frame needs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobs.schemas import dtypes as dt

if TYPE_CHECKING:
    import polars as pl

SCHEMA_VERSION = 1

UTC_TS = dt.Datetime("us", "UTC")


@dataclass(frozen=True)
class Column:
    name: str
    kind: dt.DType
    description: str = ""

    @property
    def dtype(self) -> pl.DataType:
        """The polars type (imports polars)."""
        return self.kind.polars()


@dataclass(frozen=True)
class TableSchema:
    """A lake table: its columns, its hive partition keys, and the columns that identify a row."""

    name: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ("instance", "date")
    primary_key: tuple[str, ...] = ()
    description: str = ""
    partition_dtypes: dict[str, dt.DType] = field(default_factory=dict)

    @property
    def polars_schema(self) -> pl.Schema:
        import polars as pl

        return pl.Schema({c.name: c.dtype for c in self.columns})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def partition_kinds(self) -> dict[str, dt.DType]:
        """The hive partition columns' types (String unless declared)."""
        return {key: self.partition_dtypes.get(key, dt.String()) for key in self.partition_by}

    def scan_kinds(self) -> dict[str, dt.DType]:
        """File columns plus the hive partition columns, as a scan returns them (no polars import)."""
        return {**self.partition_kinds(), **{c.name: c.kind for c in self.columns}}

    def scan_schema(self) -> pl.Schema:
        """File columns plus the hive partition columns, as a scan returns them."""
        import polars as pl

        return pl.Schema({name: kind.polars() for name, kind in self.scan_kinds().items()})

    def columns_of(self, frame: pl.DataFrame) -> list[str]:
        """This table's columns that ``frame`` has, in table order (a step later in the pipeline may fill
        the others; ``conform`` makes them null)."""
        return [c for c in self.column_names if c in frame.columns]

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Cast to the schema: missing columns become null (never zero), unknown columns are an error."""
        import polars as pl

        known = self.polars_schema  # built once: a property that builds a Schema per column was 0.1 s a job
        unknown = [c for c in frame.columns if c not in known and c not in self.partition_by]
        if unknown:
            raise ValueError(f"table {self.name}: unknown columns {unknown}")
        return frame.select(
            [
                (pl.col(c.name) if c.name in frame.columns else pl.lit(None)).cast(c.dtype).alias(c.name)
                for c in self.columns
            ]
        )

    def empty(self) -> pl.DataFrame:
        import polars as pl

        return pl.DataFrame(schema=self.polars_schema)
