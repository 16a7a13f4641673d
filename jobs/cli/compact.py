"""`radar compact`."""

from __future__ import annotations

import argparse

from jobs.cli.common import console, escaped, lake_config, lake_root, show_rows


def cmd_compact(args: argparse.Namespace) -> int:
    import polars as pl

    from jobs.lake.compaction import ExpiredPartition, compact_lake

    expired: list[ExpiredPartition] = []
    done = compact_lake(
        lake_root(args), min_age_days=args.min_age_days, config=lake_config(args), expired=expired
    )
    if args.format != "table":  # one row per partition: what happened to it
        rows = [
            {"table": g.table, "partition": g.partition, "action": "expired", "files": g.files, "rows": None}
            for g in expired
        ]
        rows += [
            {
                "table": p.table,
                "partition": p.partition,
                "action": "compacted",
                "files": p.files_before,
                "rows": p.rows,
            }
            for p in done
        ]
        schema = {
            "table": pl.String,
            "partition": pl.String,
            "action": pl.String,
            "files": pl.Int64,
            "rows": pl.Int64,
        }
        show_rows(args, pl.DataFrame(rows, schema=schema))
        return 0
    for gone in expired:
        where = f"{gone.table}/{escaped(gone.partition)}"
        console.print(f"{where}: expired ({gone.files} files past the analysis retention)")
    for part in done:
        where = f"{part.table}/{escaped(part.partition)}"
        console.print(f"{where}: {part.files_before} files → 1 ({part.rows} rows)")
    console.print(f"{len(done)} partitions compacted")
    return 0
