-- The columns a lake table's files have between them (filled in like base_table_view.sql). Run only when
-- the base view names a column no file has (a lake written by an older radar): the view then selects that
-- column as a NULL of its type, as polars' reads do (jobs/lake/io.py, missing_columns="insert").
DESCRIBE SELECT * FROM read_parquet({files}, hive_partitioning = true, union_by_name = true, hive_types = {hive_types})
