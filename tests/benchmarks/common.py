"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


def fresh_bench_folder(name: str) -> Path:
    """An empty folder for a benchmark's servers and lakes, outside any 0700 parent (the servers run as
    the unprivileged service user and must traverse it)."""
    base = Path(tempfile.gettempdir()) / f"prr-bench-{name}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    base.chmod(0o755)
    return base
