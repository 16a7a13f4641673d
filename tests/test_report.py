"""The investigation notebook runs as a script on a real lake and draws the regression."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.lakes import write_step_change_lake

REPO = Path(__file__).parent.parent


def test_investigation_notebook_runs_and_plots(lake_root: Path, tmp_path: Path) -> None:
    from jobs.analysis import run_detection

    write_step_change_lake(lake_root)
    run_detection(lake_root)
    out = tmp_path / "regression.png"
    done = subprocess.run(
        [sys.executable, "notebooks/investigate_regression.py", "--lake", str(lake_root), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "select * from orders where customer_id" in done.stdout
    assert out.stat().st_size > 10_000
    assert out.read_bytes()[:4] == b"\x89PNG"
