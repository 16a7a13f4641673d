-- Template for one lake table's view (filled in by jobs/lake/views.py from jobs/schemas/analysed.py):
-- hive partitions pruned by folder, files of different versions merged by column name. The files are a quoted
-- glob, or a list of the good files when a bad one could not be moved to the quarantine.
CREATE OR REPLACE VIEW {table} AS
SELECT {columns}
FROM read_parquet({files}, hive_partitioning = true, union_by_name = true, hive_types = {hive_types})
