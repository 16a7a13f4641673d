"""DuckDB views over the lake for ad-hoc SQL: one view per table, then the derived views in sql/duckdb/.

Base views come from the same schema catalogue the writers use (jobs/schemas/analysed.py); a table with no
file
yet gets an empty view of the right types, so derived views and users' queries never fail on a young lake.

`radar sql` defines only the views its query names and the views those are built on (``views_needed``):
binding a base view reads its files' footers, so all ~50 views cost about a second on every call. A query
that looks at the catalogue (SHOW, DESCRIBE, information_schema, duckdb_views(), ...) or names something
that is not a view gets every view, so its result is the same as on a fully defined connection.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from jobs.lake import io as lake
from jobs.lake import locks
from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import LakePath, duckdb_filesystem, lake_path
from jobs.schemas.registry import TABLES
from jobs.schemas.table import TableSchema
from jobs.sqlfiles import SQL_ROOT, load_sql

_WORD = re.compile(r"\w+")
BASE_TEMPLATE = "base_table_view"
COLUMNS_TEMPLATE = "base_table_columns"
T = TypeVar("T")

if TYPE_CHECKING:
    import polars as pl


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class TableScan:
    """The read_parquet arguments of one table's view: its files (a quoted glob or a list) and hive types."""

    files: str
    hive_types: str


def table_scan(lake_root: LakePath, table: TableSchema) -> TableScan | None:
    """The table's files after the lake's envelope check moved bad files to the quarantine (out of the
    glob); when a bad file could not be moved, the good files listed. None: the table has no file yet.
    On an object store the paths are full URIs, read through the filesystem ``connect`` registers."""
    usable = lake.usable_files(lake_root, table)
    if not usable:
        return None
    # Paths relative to the lake root (the session's file_search_path, set by connect() and printed first
    # by `radar views`): a view definition names no machine's folder, so a saved database or a pasted
    # script works wherever the lake is.
    root = lake_path(lake_root).resolve()
    prefix = f"{root}/" if isinstance(root, ObjectPath) else ""
    if len(usable) == len(lake.table_files(lake_root, table)):
        folders = "/".join(["*"] * len(table.partition_by))
        files = _sql_string(f"{prefix}{table.name}/{folders}/*.parquet")
    else:
        names = [str(p.resolve().relative_to(root)) for p in usable]  # type: ignore[arg-type]
        files = "[" + ", ".join(_sql_string(f"{prefix}{name}") for name in names) + "]"
    hive_types = "{" + ", ".join(f"'{k}': 'VARCHAR'" for k in table.partition_by) + "}"
    return TableScan(files=files, hive_types=hive_types)


def base_view_sql(
    lake_root: LakePath,
    table: TableSchema,
    scan: TableScan | None = None,
    files_have: Collection[str] | None = None,
) -> str:
    """The table's view over ``scan`` (default: ``table_scan``). ``files_have``: the columns its files have
    between them (None: assume every column); a schema column outside it is selected as a typed NULL."""
    scan = scan or table_scan(lake_root, table)
    schema = table.scan_kinds()
    if scan is None:
        columns = ", ".join(f"CAST(NULL AS {t.duckdb()}) AS {_quote(n)}" for n, t in schema.items())
        return f"CREATE OR REPLACE VIEW {table.name} AS SELECT {columns} WHERE false"
    columns = ", ".join(
        f"CAST({_quote(n) if files_have is None or n in files_have else 'NULL'} AS {t.duckdb()}) "
        f"AS {_quote(n)}"
        for n, t in schema.items()
    )
    return load_sql(BASE_TEMPLATE, "duckdb").format(
        table=table.name, columns=columns, files=scan.files, hive_types=scan.hive_types
    )


def files_columns(conn: duckdb.DuckDBPyConnection, scan: TableScan) -> set[str]:
    """The columns a table's files have between them (hive partition columns included): one DESCRIBE of
    the union_by_name scan, which reads every file's footer."""
    sql = load_sql(COLUMNS_TEMPLATE, "duckdb").format(files=scan.files, hive_types=scan.hive_types)
    return {str(row[0]) for row in conn.execute(sql).fetchall()}


def define_base_view(conn: duckdb.DuckDBPyConnection, lake_root: LakePath, table: TableSchema) -> str:
    """Create the table's view on ``conn`` and return the statement that did.

    The view over every schema column is tried first (no extra read: DuckDB reads the footers to bind it
    anyway). Only when it names a column no file has (a lake written by an older radar: DuckDB's binder
    rejects it) are the files' columns asked for, and the view made again with that column a typed NULL.
    """
    scan = table_scan(lake_root, table)
    statement = base_view_sql(lake_root, table, scan)
    try:
        conn.execute(statement)
        return statement
    except duckdb.BinderException as exc:
        if scan is None:
            raise _view_error(table, exc) from exc
        try:
            have = files_columns(conn, scan)
        except duckdb.Error as describe_exc:
            raise _view_error(table, describe_exc) from describe_exc
        if set(table.scan_kinds()) <= have:  # not a missing column: DuckDB's own message
            raise _view_error(table, exc) from exc
    except duckdb.Error as exc:
        raise locks.LakeError(f"DuckDB view failed: {exc}\n{statement[:400]}") from exc
    statement = base_view_sql(lake_root, table, scan, have)
    _execute_view(conn, statement)
    return statement


def _view_error(table: TableSchema, exc: duckdb.Error) -> locks.LakeError:
    return locks.LakeError(f"DuckDB view {table.name} failed: {one_line(exc)}")


def _execute_view(conn: duckdb.DuckDBPyConnection, statement: str) -> None:
    try:
        conn.execute(statement)
    except duckdb.Error as exc:
        raise locks.LakeError(f"DuckDB view failed: {exc}\n{statement[:400]}") from exc


def search_path_sql(lake_root: LakePath, *also: LakePath) -> str:
    """The statement that makes the views' relative paths resolve to ``lake_root`` (session-level: it is
    not stored in the views, so the same definitions serve any copy of the lake); ``also``: more folders
    searched after it (a comma-separated list in DuckDB: a folder whose name has a comma is left out)."""
    folders = [str(lake_root), *(str(p) for p in also if "," not in str(p))]
    return f"SET file_search_path = {_sql_string(','.join(folders))}"


def derived_view_statements() -> list[str]:
    """The statements of the views built on the base views (sql/duckdb/views_*.sql), in order."""
    return list(_derived_views())


_VIEW_NAME = re.compile(r"CREATE\s+OR\s+REPLACE\s+VIEW\s+(\w+)", re.IGNORECASE)


@cache
def _derived_views() -> dict[str, str]:
    """Each derived view's statement by its name, in order (a view's dependencies come before it)."""
    out: dict[str, str] = {}
    for path in sorted((SQL_ROOT / "duckdb").glob("views_*.sql")):
        text = path.read_text()
        for statement in (s.strip() for s in text.split(";\n") if s.strip() and not _only_comments(s)):
            match = _VIEW_NAME.search(statement)
            if match is None:
                raise ValueError(f"{path.name}: a statement that creates no view: {statement[:80]}")
            out[match.group(1).lower()] = statement
    return out


def view_names() -> list[str]:
    """Every view ``connect`` defines: the base views (one per lake table), then the derived ones."""
    return [*TABLES, *_derived_views()]


@cache
def _view_dependencies() -> dict[str, frozenset[str]]:
    """The views each derived view's statement names (every view name appearing in it as a word: a name
    in a comment or a string counts too, which only defines a view more)."""
    names = frozenset(name.lower() for name in view_names())
    assert all(_WORD.fullmatch(name) for name in names)  # a name is one word: a word of the text or none
    return {
        view: frozenset(set(_WORD.findall(statement.lower())) & names - {view})
        for view, statement in _derived_views().items()
    }


# Table functions that read files or make rows, never the catalogue: a query calling any other (duckdb_views,
# query_table, pragma_table_info, ...) gets every view.
_PLAIN_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_text",
        "read_blob",
        "glob",
    }
)
_THIS_CATALOGUE = ("", "memory")
_THIS_SCHEMA = ("", "main")


def views_needed(conn: duckdb.DuckDBPyConnection, sql: str) -> frozenset[str] | None:
    """The views ``sql`` reads: those it names and those they are built on; None: define every view.

    DuckDB's own parser names the tables (``json_serialize_sql``); every view is needed when it cannot
    serialize the statements (not SELECTs: SHOW TABLES, PRAGMA, CREATE, COPY; or a syntax error, whose
    message must stay DuckDB's), a statement reads the catalogue (SHOW/DESCRIBE/SUMMARIZE, a table function
    other than a file reader, information_schema or pg_catalog), or names a table that is not a view or a
    CTE of the query (a typo: DuckDB's "did you mean" lists the catalogue)."""
    try:
        rows = conn.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()  # all: the result is done
        tree = json.loads(rows[0][0]) if rows else {"error": True}
    except (duckdb.Error, ValueError, TypeError):
        return None
    if not isinstance(tree, dict) or tree.get("error") is not False:
        return None
    known = set(view_names())
    ctes = {str(key).lower() for key in _cte_names(tree)}
    named: set[str] = set()
    for ref in _table_refs(tree):
        kind = ref.get("type")
        if kind == "BASE_TABLE":
            name = str(ref.get("table_name", "")).lower()
            schema, catalogue = str(ref.get("schema_name", "")), str(ref.get("catalog_name", ""))
            if schema.lower() not in _THIS_SCHEMA or catalogue.lower() not in _THIS_CATALOGUE:
                return None
            if name in known:
                named.add(name)
            elif name not in ctes or schema or catalogue:
                return None
        elif kind == "TABLE_FUNCTION":
            function = ref.get("function")
            if not isinstance(function, dict):
                return None
            if function.get("schema") or function.get("catalog"):
                return None
            if str(function.get("function_name", "")).lower() not in _PLAIN_TABLE_FUNCTIONS:
                return None
        elif kind == "SHOW_REF":
            return None
    return _with_dependencies(named)


def _with_dependencies(names: Collection[str]) -> frozenset[str]:
    depends = _view_dependencies()
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo += depends.get(name, ())
    return frozenset(out)


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack += item.values()
        elif isinstance(item, list):
            stack += item


def _table_refs(tree: Any) -> Iterator[dict[str, Any]]:
    """The table references of a serialized statement (expressions have a ``class``, table refs do not)."""
    for node in _nodes(tree):
        if "class" not in node and node.get("type") in ("BASE_TABLE", "TABLE_FUNCTION", "SHOW_REF"):
            yield node


def _cte_names(tree: Any) -> Iterator[str]:
    for node in _nodes(tree):
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map") or ():
                if isinstance(entry, dict) and "key" in entry:
                    yield entry["key"]


def view_statements(lake_root: LakePath) -> list[str]:
    """Every statement that defines the views, in order, as ``connect`` runs them on this lake (also what
    `radar views` prints after the ``SET file_search_path`` line). No statement holds an absolute path:
    file globs are relative to the lake root."""
    conn, statements = _connect(lake_root, ":memory:")
    conn.close()
    return statements


def _only_comments(sql: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in sql.splitlines())


def connect(
    lake_root: LakePath, database: str = ":memory:", *, for_query: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every lake view defined (an object-store lake read through obstore's
    fsspec adapter, registered with the connection: the installed DuckDB has no object-store extension
    and none is downloaded). ``for_query``: only the views that query needs (``views_needed``)."""
    return _connect(lake_root, database, for_query)[0]


def _connect(
    lake_root: LakePath, database: str, for_query: str | None = None
) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """``connect``, and the statements that defined its views."""
    conn = duckdb.connect(database)
    try:
        root = lake_path(lake_root).resolve()
        filesystem = duckdb_filesystem(root)
        if filesystem is not None:
            conn.register_filesystem(filesystem)
            conn.execute(search_path_sql(Path.cwd()))
        else:
            # The lake first (the views), then the working directory (a user's own read_csv('x.csv') works).
            conn.execute(search_path_sql(root, Path.cwd()))
        wanted = None if for_query is None else views_needed(conn, for_query)
        statements = [
            define_base_view(conn, lake_root, table)
            for table in TABLES.values()
            if wanted is None or table.name in wanted
        ]
        for name, statement in _derived_views().items():
            if wanted is None or name in wanted:
                _execute_view(conn, statement)
                statements.append(statement)
    except BaseException:
        conn.close()
        raise
    return conn, statements


# DuckDB errors a bad file can cause (a value that cannot be cast, a corrupt or vanished file).
DATA_ERRORS: tuple[type[Exception], ...] = (
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.IOException,
)


def one_line(exc: BaseException) -> str:
    """DuckDB's message on one line: its caret line (``^^^^^``) dropped, the rest joined with " | "."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return " | ".join(line for line in lines if line and set(line) != {"^"})


@dataclass(frozen=True)
class QueryRows:
    """A query's result as DuckDB's own Python values (every type has one: INTERVAL is a timedelta,
    DECIMAL a Decimal, UUID a UUID, BLOB bytes, LIST a list, STRUCT and MAP dicts, HUGEINT an int)."""

    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]


def _run(lake_root: LakePath, sql: str, fetch: Callable[[duckdb.DuckDBPyRelation | None], T]) -> T:
    """Run one query over the lake views and ``fetch`` its result.

    Only the views the query needs are defined (``views_needed``); a catalogue error on them (a name they
    missed) runs the query again with every view, so its result or message is the one of a full catalogue.
    On a data error the lake's files are read one by one, the bad ones quarantined, and the query run once
    more; any other failure (a typo, an unknown column) is a LakeError with DuckDB's message on one line.
    """
    every_view, recovered = False, False
    while True:
        conn, statements = _connect(lake_root, ":memory:", None if every_view else sql)
        try:
            return fetch(conn.sql(sql))
        except duckdb.CatalogException as exc:
            if every_view or len(statements) == len(view_names()):
                raise locks.LakeError(f"DuckDB query failed: {one_line(exc)}") from exc
            every_view = True
        except DATA_ERRORS as exc:
            mark = lake.incident_mark()
            vanished = (
                0 if recovered else sum(lake.find_unreadable_files(lake_root, t)[1] for t in TABLES.values())
            )
            if recovered or not (vanished or lake.incidents_since(mark)):
                raise locks.LakeError(f"DuckDB query failed: {one_line(exc)}") from exc
            recovered = True
        except duckdb.Error as exc:
            raise locks.LakeError(f"DuckDB query failed: {one_line(exc)}") from exc
        finally:
            conn.close()


def query(lake_root: LakePath, sql: str) -> pl.DataFrame:
    """One query over the lake views as a polars frame (for lake types; `radar sql` uses query_rows, which
    prints any DuckDB type: polars cannot take an INTERVAL through arrow)."""
    import polars as pl

    return _run(lake_root, sql, lambda result: result.pl() if result is not None else pl.DataFrame())


def query_rows(lake_root: LakePath, sql: str) -> QueryRows:
    """One query over the lake views as DuckDB's Python values (what `radar sql` prints); a statement with
    no result (``SET``, ``CREATE VIEW``) gives no columns."""

    def fetch(result: duckdb.DuckDBPyRelation | None) -> QueryRows:
        if result is None:
            return QueryRows([], [], [])
        return QueryRows(list(result.columns), [str(t) for t in result.types], result.fetchall())

    return _run(lake_root, sql, fetch)
