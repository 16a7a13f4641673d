"""The weekly report: built from real lake files, published atomically, with a plot per regression."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from jobs.cli.main import main
from jobs.pipeline.detection import run_detection
from jobs.publish.weekly import write_weekly_report
from jobs.publish.weekly_summary import iso_week, week_bounds
from orchestration.assets.report import weekly_regression_report
from orchestration.resources import LakeResource, ReportResource
from orchestration.schedules import weekly_report_schedule
from tests.support.lakes import write_step_change_lake


def test_week_bounds_and_bad_weeks() -> None:
    assert week_bounds("2026-W45") == (datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 9, tzinfo=UTC))
    assert iso_week(datetime(2026, 11, 8, 23, 59, tzinfo=UTC)) == "2026-W45"
    with pytest.raises(ValueError, match="expected ISO form YYYY-Www"):
        week_bounds("November")


def test_report_lists_the_regression_once_with_plot_and_is_replaced_atomically(
    lake_root: Path, tmp_path: Path
) -> None:
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    run_detection(lake_root)  # a second analysis run must not duplicate the regression in the report
    out = tmp_path / "reports"
    path = write_weekly_report(lake_root, "2026-W45", out).markdown
    text = path.read_text()
    assert text.count("### ") == 1, text
    assert "select * from orders where customer_id" in text
    assert "9.9× slower, since Mon 02 Nov 10:30 UTC, at deploy v9" in text
    image = path.parent / "regression-1.png"
    assert image.read_bytes()[:4] == b"\x89PNG"
    again = write_weekly_report(lake_root, "2026-W45", out).markdown
    assert again == path and again.read_text() == text
    assert sorted(p.name for p in out.iterdir()) == ["2026-W45"], "no temp or retired folders left behind"
    empty = write_weekly_report(lake_root, "2026-W46", out).markdown.read_text()
    assert "None detected." in empty


def test_weekly_asset_schedule_and_cli(lake_root: Path, tmp_path: Path) -> None:
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    resources = {
        "lake": LakeResource(root=str(lake_root)),
        "reports": ReportResource(root=str(tmp_path / "r")),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [weekly_regression_report], partition_key="2026-11-02", resources=resources, instance=instance
        )
    assert result.success
    assert (tmp_path / "r" / "2026-W45" / "report.md").exists()
    assert "at deploy v9" in (tmp_path / "r" / "2026-W45" / "report.html").read_text(), (
        "the asset writes the HTML"
    )
    tick = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 9, 6, 0, tzinfo=UTC))
    request = weekly_report_schedule(tick)
    assert isinstance(request, dg.RunRequest) and request.partition_key == "2026-11-02"
    cli_out = tmp_path / "cli"
    assert main(["--lake", str(lake_root), "report", "--week", "2026-W45", "--out", str(cli_out)]) == 0
    assert (cli_out / "2026-W45" / "report.md").exists()
    assert main(["--lake", str(lake_root), "report", "--week", "bogus", "--out", str(cli_out)]) == 2


def test_report_lists_drifted_queries(tmp_path: Path) -> None:
    from datetime import timedelta

    from jobs.drift.interval import anchor_baseline, run_drift
    from tests.support.incident_lakes import NOW, write_incident_lake

    root = tmp_path / "lake"
    write_incident_lake(root)
    anchor_baseline(root, start=NOW - timedelta(days=20), end=NOW - timedelta(days=12), label="good weeks")
    assert run_drift(root)["status"].to_list() == ["drift"]
    report = write_weekly_report(root, iso_week(NOW), tmp_path / "reports").markdown.read_text()
    section = report.split("## Latency drift")[1].split("## Per-execution drift")[0]
    assert "select * from orders where customer_id" in section
    assert "good weeks" in section
    assert (
        "No query's latency distribution drifted"
        in write_weekly_report(root, "2026-W40", tmp_path / "reports").markdown.read_text()
    )
