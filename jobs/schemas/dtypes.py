"""Column types of the lake tables, without importing polars.

The table shapes are read by commands that never touch a frame (`radar sql`, `radar views`, the docs build):
declaring them in polars' own types made every such command pay polars' import (about a tenth of a second,
more than the rest of `radar sql`'s start-up). A ``DType`` names the type once and gives the polars type
(imported when first asked) and the DuckDB type of a view column. The constructors are spelled as polars'
(``String()``, ``Datetime("us", "UTC")``, ``List(Int64())``) so a schema reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

_DUCKDB_SIMPLE = {
    "Int64": "BIGINT",
    "Int32": "INTEGER",
    "Float64": "DOUBLE",
    "String": "VARCHAR",
    "Boolean": "BOOLEAN",
    "Date": "DATE",
}


@dataclass(frozen=True)
class DType:
    """One column type: ``name`` is polars' class name; ``time_unit``/``time_zone`` for Datetime, ``inner``
    for List."""

    name: str
    time_unit: str | None = None
    time_zone: str | None = None
    inner: DType | None = None

    def polars(self) -> pl.DataType:
        return _polars_type(self)

    def duckdb(self) -> str:
        if self.name == "Datetime":
            return "TIMESTAMPTZ" if self.time_zone else "TIMESTAMP"
        if self.name == "List":
            assert self.inner is not None
            return f"{self.inner.duckdb()}[]"
        return _DUCKDB_SIMPLE[self.name]


@cache
def _polars_type(dtype: DType) -> pl.DataType:
    import polars as pl

    if dtype.name == "Datetime":
        return pl.Datetime(dtype.time_unit or "us", dtype.time_zone)  # type: ignore[arg-type]
    if dtype.name == "List":
        assert dtype.inner is not None
        return pl.List(dtype.inner.polars())
    return getattr(pl, dtype.name)()  # type: ignore[no-any-return]


def String() -> DType:
    return DType("String")


def Int64() -> DType:
    return DType("Int64")


def Int32() -> DType:
    return DType("Int32")


def Float64() -> DType:
    return DType("Float64")


def Boolean() -> DType:
    return DType("Boolean")


def Date() -> DType:
    return DType("Date")


def Datetime(time_unit: str = "us", time_zone: str | None = None) -> DType:
    return DType("Datetime", time_unit=time_unit, time_zone=time_zone)


def List(inner: DType) -> DType:
    return DType("List", inner=inner)
