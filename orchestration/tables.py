"""Small rendering helpers for Dagster metadata."""

import polars as pl


def markdown_table(frame: pl.DataFrame, max_rows: int = 50) -> str:
    if frame.is_empty():
        return "_(no rows)_"
    with pl.Config(
        tbl_formatting="MARKDOWN",
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
        tbl_rows=max_rows,
        fmt_str_lengths=120,
    ):
        return str(frame.head(max_rows))
