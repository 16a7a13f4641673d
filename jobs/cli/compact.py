"""`radar compact`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, escaped, lake_config, lake_root


def cmd_compact(args: argparse.Namespace) -> int:
    from jobs.lake.compaction import ExpiredPartition, compact_lake

    expired: list[ExpiredPartition] = []
    done = compact_lake(
        lake_root(args), min_age_days=args.min_age_days, config=lake_config(args), expired=expired
    )
    for gone in expired:
        where = f"{gone.table}/{escaped(gone.partition)}"
        console.print(f"{where}: expired ({gone.files} files past the analysis retention)")
    for part in done:
        where = f"{part.table}/{escaped(part.partition)}"
        console.print(f"{where}: {part.files_before} files → 1 ({part.rows} rows)")
    console.print(f"{len(done)} partitions compacted")
    return 0
