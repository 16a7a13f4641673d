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


def test_views_show_each_regression_once_across_analysis_runs(lake_root: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from jobs import duckdb_views
    from jobs.analysis import run_detection

    write_step_change_lake(lake_root)
    first = datetime(2026, 11, 3, tzinfo=UTC)
    for i in range(3):  # the scheduled analysis runs every 15 minutes and finds the same regression
        run_detection(lake_root, now=first + timedelta(minutes=15 * i))
    conn = duckdb_views.connect(lake_root)
    rows = conn.execute(
        "select analysis, instance, queryid from regressions_with_plan_diff order by analysis"
    ).fetchall()
    assert rows == [("deploy", "db1", 111), ("unannounced", "db1", 111)]
    # One regression, one finding: the deploy and unannounced analyses of the step are one finding.
    assert conn.execute("select analysis, status from regressions_detected").fetchall() == [
        ("deploy", "open")
    ]
    assert conn.execute("select count(*), count(distinct run_id) from finding_states").fetchone() == (1, 1)
