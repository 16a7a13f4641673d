"""`radar compact`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import console, lake_config, lake_root


def cmd_compact(args: argparse.Namespace) -> int:
    from jobs.lake.compaction import ExpiredPartition, compact_lake

    expired: list[ExpiredPartition] = []
    done = compact_lake(
        lake_root(args), min_age_days=args.min_age_days, config=lake_config(args), expired=expired
    )
    for gone in expired:
        console.print(
            f"{gone.table}/{gone.partition}: expired ({gone.files} files past the analysis retention)"
        )
    for part in done:
        console.print(f"{part.table}/{part.partition}: {part.files_before} files → 1 ({part.rows} rows)")
    console.print(f"{len(done)} partitions compacted")
    return 0
