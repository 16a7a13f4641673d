"""`radar views` and `radar sql`: DuckDB over the lake."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import TABLE_MAX_ROWS, console, lake_root


def cmd_views(args: argparse.Namespace) -> int:
    from jobs.lake.views import search_path_sql, view_statements

    # The views' file globs are relative to the lake root: this first line says where that is (edit it
    # when the lake is elsewhere; the view definitions stay the same).
    print(search_path_sql(lake_root(args)) + ";\n")
    for statement in view_statements(lake_root(args)):
        print(statement.rstrip(";") + ";\n")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """DuckDB's own Python values, not a polars frame: every DuckDB type prints (polars cannot take an
    INTERVAL through arrow). A table cuts each cell at --max-width and folds to vertical records when the
    result is wider than the terminal."""
    from jobs.lake.views import query_rows
    from jobs.publish.output import plain_rows, write_rows

    result = query_rows(lake_root(args), args.query)
    max_rows = args.max_rows
    if args.format == "table" and max_rows is None:
        max_rows = TABLE_MAX_ROWS
    rows = plain_rows((dict(zip(result.columns, row, strict=True)) for row in result.rows), result.columns)
    write_rows(
        result.columns,
        rows,
        args.format,
        stdout=sys.stdout,
        stderr=sys.stderr,
        max_rows=max_rows,
        console=console,
        cell_width=args.max_width,
    )
    return 0
