"""`make demo` fits on one screen, the finding first (issue 29): the real demo (two embedded servers, the
workload, the index drop) run as `radar demo` runs it, its output captured at the width of a CI log."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from jobs.local.demo import DemoConfig, run_demo
from tests.conftest import CLUSTER_BASE

SCREEN_LINES = 60


@pytest.mark.slow
def test_the_demo_output_fits_on_one_screen_with_the_finding_first(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=180, force_terminal=False)  # what `make demo` gets in a pipe
    # The demo's servers outside pytest's tmp_path (its 0700 parents: tests/conftest.py CLUSTER_BASE).
    fleet_root = CLUSTER_BASE / f"demo-{uuid.uuid4().hex[:10]}"
    fleet_root.parent.mkdir(parents=True, exist_ok=True)
    CLUSTER_BASE.chmod(0o755)
    config = DemoConfig(lake_root=tmp_path / "lake", fleet_root=fleet_root)

    verdict = run_demo(config, console)

    lines = out.getvalue().splitlines()
    assert verdict == 0, "\n".join(lines)
    assert len(lines) <= SCREEN_LINES, f"{len(lines)} lines:\n" + "\n".join(lines)
    text = "\n".join(lines)
    # The finding comes before everything the run analysed and did not report, and before the lake line.
    finding = next(i for i, line in enumerate(lines) if "Findings" in line)
    assert finding < next(i for i, line in enumerate(lines) if line.startswith("Analysed and not reported"))
    assert finding < next(i for i, line in enumerate(lines) if line.startswith("lake "))
    assert "shape: (" not in text  # no raw polars frame
    assert " BEGIN " not in text and " COMMIT " not in text  # utility statements are never series
    assert "UTC" in lines[finding + 4] or "UTC" in lines[finding + 5]  # began at: date and zone
