"""The regression picture (jobs/publish/plots.py) on a real lake, and the views it reads. The notebooks that
show it inline are executed in tests/integration/publish/test_notebooks.py."""

from __future__ import annotations

import io
from pathlib import Path

from tests.support.lakes import write_step_change_lake


def test_regression_plot_of_a_detected_finding(lake_root: Path) -> None:
    from jobs.lake import io as lake
    from jobs.lake import views as duckdb_views
    from jobs.pipeline.detection import run_detection
    from jobs.publish.plots import plot_regression, regression_series

    write_step_change_lake(lake_root)
    run_detection(lake_root)
    finding = duckdb_views.query(lake_root, "select * from findings").row(0, named=True)
    assert finding["query"] == "select * from orders where customer_id = $1"
    samples = lake.scan_table(lake_root, "query_samples").collect()
    texts = lake.scan_table(lake_root, "query_texts").collect()
    series = regression_series(samples, texts, finding["instance"], finding["series"])
    assert series.height == 60
    png = io.BytesIO()
    plot_regression(series, finding).savefig(png, format="png", dpi=110)
    assert png.getvalue()[:4] == b"\x89PNG" and len(png.getvalue()) > 10_000


def test_views_show_each_regression_once_across_analysis_runs(lake_root: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from jobs.lake import views as duckdb_views
    from jobs.pipeline.detection import run_detection

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
