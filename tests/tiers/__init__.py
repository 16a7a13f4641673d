"""The test tiers that need an extension built from ../shared/vendor (pg_store_plans, pg_hint_plan)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def pg_config(bin_dir: Path, flag: str) -> Path | None:
    """``pg_config FLAG`` of the PostgreSQL in ``bin_dir`` (a folder it names), or None when it cannot run."""
    try:
        done = subprocess.run(
            [str(bin_dir / "pg_config"), flag], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(done.stdout.strip())
