"""DuckDB views over the lake for ad-hoc SQL: one view per table, then the derived views in sql/duckdb/.

Base views come from the same schema catalogue the writers use (jobs/schemas.py); a table with no file
yet gets an empty view of the right types, so derived views and users' queries never fail on a young lake.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from jobs import lake
from jobs.schemas import TABLES, TableSchema
from jobs.sqlfiles import SQL_ROOT, load_sql

BASE_TEMPLATE = "base_table_view"


def duckdb_type(dtype: pl.DataType) -> str:
    """The DuckDB type for a polars type used in the lake schemas."""
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMPTZ" if dtype.time_zone else "TIMESTAMP"
    if isinstance(dtype, pl.List):
        return f"{duckdb_type(dtype.inner)}[]"
    simple = {
        pl.Int64: "BIGINT",
        pl.Int32: "INTEGER",
        pl.Float64: "DOUBLE",
        pl.String: "VARCHAR",
        pl.Boolean: "BOOLEAN",
        pl.Date: "DATE",
    }
    for polars_type, name in simple.items():
        if isinstance(dtype, polars_type):
            return name
    raise TypeError(f"no DuckDB type for polars {dtype}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def base_view_sql(lake_root: Path, table: TableSchema) -> str:
    """The table's view: a glob over its files, after the lake's envelope check moved bad files to the
    quarantine (out of the glob); when a bad file could not be moved, the view lists the good files."""
    scan = table.scan_schema()
    usable = lake.usable_files(lake_root, table)
    if not usable:
        columns = ", ".join(f"CAST(NULL AS {duckdb_type(t)}) AS {_quote(n)}" for n, t in scan.items())
        return f"CREATE OR REPLACE VIEW {table.name} AS SELECT {columns} WHERE false"
    columns = ", ".join(f"CAST({_quote(n)} AS {duckdb_type(t)}) AS {_quote(n)}" for n, t in scan.items())
    if len(usable) == len(lake.table_files(lake_root, table)):
        folders = "/".join(["*"] * len(table.partition_by))
        files = _sql_string(str(Path(lake_root).resolve() / table.name / folders / "*.parquet"))
    else:
        files = "[" + ", ".join(_sql_string(str(p.resolve())) for p in usable) + "]"
    hive_types = "{" + ", ".join(f"'{k}': 'VARCHAR'" for k in table.partition_by) + "}"
    return load_sql(BASE_TEMPLATE, "duckdb").format(
        table=table.name, columns=columns, files=files, hive_types=hive_types
    )


def view_statements(lake_root: Path) -> list[str]:
    """Every statement that defines the views, in order (also what `radar views` prints)."""
    out = [base_view_sql(lake_root, table) for table in TABLES.values()]
    for path in sorted((SQL_ROOT / "duckdb").glob("views_*.sql")):
        text = path.read_text().replace("{lake_root}", str(Path(lake_root).resolve()))
        out += [s.strip() for s in text.split(";\n") if s.strip() and not _only_comments(s)]
    return out


def _only_comments(sql: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in sql.splitlines())


def connect(lake_root: Path, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every lake view defined."""
    conn = duckdb.connect(database)
    for statement in view_statements(lake_root):
        try:
            conn.execute(statement)
        except duckdb.Error as exc:
            raise lake.LakeError(f"DuckDB view failed: {exc}\n{statement[:400]}") from exc
    return conn


# DuckDB errors a bad file can cause (a value that cannot be cast, a corrupt or vanished file).
DATA_ERRORS: tuple[type[Exception], ...] = (
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.IOException,
)


def query(lake_root: Path, sql: str) -> pl.DataFrame:
    """Run one query over the lake views (what `radar sql` does).

    On a data error the lake's files are read one by one, the bad ones quarantined, and the query run once
    more; any other failure (a typo, an unknown column) is a LakeError with DuckDB's message.
    """
    for attempt in range(2):
        conn = connect(lake_root)
        try:
            result = conn.sql(sql)
            return result.pl() if result is not None else pl.DataFrame()
        except DATA_ERRORS as exc:
            mark = lake.incident_mark()
            vanished = (
                0 if attempt else sum(lake.find_unreadable_files(lake_root, t)[1] for t in TABLES.values())
            )
            if attempt or not (vanished or lake.incidents_since(mark)):
                raise lake.LakeError(f"DuckDB query failed: {exc}") from exc
        except duckdb.Error as exc:
            raise lake.LakeError(f"DuckDB query failed: {exc}") from exc
        finally:
            conn.close()
    raise AssertionError("unreachable")
