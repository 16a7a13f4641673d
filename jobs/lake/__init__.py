"""The Parquet lake: storage backends and object paths, I/O, locks, compaction, DuckDB views."""
