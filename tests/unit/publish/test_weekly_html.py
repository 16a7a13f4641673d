"""The HTML weekly report from a demo-like week through the real pipeline (snapshots → samples job →
detection → report): the regression in words, its plan diff, a plot with the deploy, the recovery, the
collection-health numbers of the collection_health table."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs.cli.main import main
from jobs.detect.findings import latest_states
from jobs.lake import io as lake
from jobs.lake import views as duckdb_views
from jobs.pipeline.detection import run_detection
from jobs.publish.plots import regression_series
from jobs.publish.weekly import WeeklyReportFiles, _deploys_in_view, write_weekly_report
from jobs.schemas.analysed import FINDING_STATES
from jobs.schemas.collected import QUERY_SAMPLES, QUERY_TEXTS
from tests.support.lakes import WEEK_QUERY, WEEK_START, WeekLake, write_week_lake

WEEK = "2026-W45"


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WeekLake, WeeklyReportFiles]:
    root = tmp_path_factory.mktemp("week") / "lake"
    root.mkdir()
    moments = write_week_lake(root)
    run_detection(root, now=WEEK_START + timedelta(hours=5, minutes=5))
    return root, moments, write_weekly_report(root, WEEK, root.parent / "reports")


def test_html_report_says_what_regressed_in_words_with_plan_diff_plot_and_recovery(
    week: tuple[Path, WeekLake, WeeklyReportFiles],
) -> None:
    root, moments, files = week
    assert files.html.parent == files.markdown.parent == root.parent / "reports" / WEEK
    html = files.html.read_text()
    assert "10× slower, since Mon 02 Nov 09:00 UTC, at deploy v4" in html
    assert "select * from events where account_id = $1 AND kind &lt; $2" in html, "escaped, shown once"
    assert "(all:" not in html and "queryid 111" in html
    # recovered, shown as recovered
    assert (
        '<article class="finding recovered"' in html
        and '<span class="badge recovered">RECOVERED</span>' in html
    )
    assert "recovered Mon 02 Nov 10:00 UTC" in html
    # confidence in words, p in the tooltip
    assert re.search(r'<span title="p (= [0-9.]+e-\d+|&lt; 1e-10) \(Welch[^"]*">very strong evidence', html)
    # the plan diff: the changed nodes before → after
    table = html.split('<table class="plan-diff">')[1].split("</table>")[0]
    assert '<td class="removed">Index Scan</td><td class="added">Seq Scan</td>' in table
    assert '<td class="removed">events_account_idx</td>' in table
    # the later step of the same series, said and marked
    assert "later in this series: step up ×" in html
    # the plot, inlined: no file or network needed to open the page
    images = re.findall(r'<img class="plot" src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 1 and base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert "http://" not in html and "https://" not in html and "<script" not in html
    # the plot marked the deploy: what the writer passed to plot_regression
    samples, texts = lake.read_table(root, QUERY_SAMPLES), lake.read_table(root, QUERY_TEXTS)
    finding = latest_states(lake.read_table(root, FINDING_STATES)).row(0, named=True)
    series = regression_series(samples, texts, "db1", finding["series"])
    assert _deploys_in_view(lake.read_table(root, "deploy_events"), "db1", series) == [
        (moments.deploy_at, "v4")
    ]
    assert finding["query"] == WEEK_QUERY
    # the markdown beside it says the same, with the PNG as a file
    markdown = files.markdown.read_text()
    assert (
        "10× slower, since Mon 02 Nov 09:00 UTC, at deploy v4" in markdown
        and "recovered Mon 02 Nov" in markdown
    )
    assert (files.markdown.parent / "regression-1.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_and_collection_health_come_from_the_collection_health_table(
    week: tuple[Path, WeekLake, WeeklyReportFiles],
) -> None:
    root, _, files = week
    html = files.html.read_text()
    summary = html.split('<section id="summary">')[1].split("</section>")[0]
    assert "0 open &middot; 1 recovered" in summary
    assert (
        '<tr><td>db1</td><td class="num">1</td><td class="num">0</td>\n      <td class="num">0</td>'
        '<td class="num">0</td><td class="num">1</td></tr>' in summary
    ), "db1: 1 severe, 0 major, 0 minor, 0 open, 1 recovered"
    assert "none recorded (gate_results)" in summary
    daily = duckdb_views.query(root, "select * from collection_health_daily").row(0, named=True)
    # the lake's story: down 12 minutes with one failed attempt (11 missed), one restart, one eviction
    assert (daily["snapshots_failed"], daily["snapshots_missed"], daily["restarts"], daily["evictions"]) == (
        1,
        11,
        1,
        1,
    )
    card = " ".join(summary.split('id="card-health">')[1].split("</small>")[0].split())
    said = "1 failed · 11 missed snapshot(s) · 1 restart(s) · 0 stats reset(s) · 1 eviction(s)"
    assert said in card.replace("&middot;", "·"), card
    health = html.split('<table id="health-table">')[1].split("</table>")[0]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", health)
    assert cells[8] == "connection refused", "the failed snapshot's error"
    assert cells[:8] == [
        "db1",
        str(daily["snapshots_ok"]),
        "1",
        "11",
        "1",
        "0",
        "1",
        str(daily["intervals_dropped"]),
    ]


def test_radar_report_defaults_to_the_current_week_and_prints_both_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    from jobs.publish.weekly_summary import iso_week

    out = tmp_path / "reports"
    (tmp_path / "lake").mkdir()  # an empty lake: a week with nothing in it
    assert main(["--lake", str(tmp_path / "lake"), "report", "--out", str(out)]) == 0
    this_week = iso_week(datetime.now(UTC))
    printed = capsys.readouterr().out
    assert f"weekly report of {this_week}" in printed
    assert str(out / this_week / "report.html") in printed and str(out / this_week / "report.md") in printed
    assert "None detected." in (out / this_week / "report.html").read_text()


def test_gate_runs_of_the_week_are_counted_in_the_summary_and_listed() -> None:
    from datetime import UTC, datetime

    import polars as pl

    from jobs.publish.weekly_html import render_html
    from jobs.publish.weekly_markdown import render_markdown
    from jobs.publish.weekly_summary import weekly_summary
    from jobs.publish.weekly_words import headline
    from jobs.schemas.analysed import FINDING_STATES, GATE_RESULTS
    from jobs.schemas.collected import SNAPSHOT_RUNS

    def gate(at: datetime, run: str, scenario: str, verdict: str) -> dict[str, object]:
        return {"run_started_at": at, "source": "suite.toml", "run_verdict": run, "scenario": scenario,
                "scenario_verdict": verdict, "measurement": "wallclock"}  # fmt: skip

    monday = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    gates = GATE_RESULTS.conform(
        pl.DataFrame(
            [
                gate(monday, "BLOCK", "orders", "BLOCK"),
                gate(monday, "BLOCK", "orders", "BLOCK"),  # a second measurement of one scenario
                gate(monday, "BLOCK", "items", "PASS"),
                gate(monday + timedelta(days=1), "PASS", "orders", "PASS"),
                gate(monday - timedelta(days=1), "WARN", "orders", "WARN"),  # the week before
            ]
        )
    )
    runs = SNAPSHOT_RUNS.empty().with_columns(pl.lit(None, pl.String).alias("instance"))
    deploys = pl.DataFrame(schema={"deployed_at": pl.Datetime("us", "UTC")})
    summary = weekly_summary(WEEK, FINDING_STATES.empty(), runs, deploys, gates=gates)
    top = headline(summary)
    assert (top.gate_runs, top.gate_verdicts) == (2, {"BLOCK": 1, "PASS": 1})
    assert summary.gates.select("run_verdict", "scenarios", "blocked").rows() == [
        ("BLOCK", 2, 1),
        ("PASS", 1, 0),
    ]
    assert "- gate runs: 2 (1 BLOCK, 1 PASS)" in render_markdown(summary, {})
    html = render_html(summary, {})
    assert "1 BLOCK · 1 PASS" in html.split('id="card-gates">')[1].split("</small>")[0]
    assert "<td><b>BLOCK</b></td><td>suite.toml</td>" in html


def test_work_regressions_have_their_own_section_escaped_and_are_not_latency_regressions() -> None:
    from datetime import UTC, datetime

    import polars as pl

    from jobs.publish.weekly_html import render_html
    from jobs.publish.weekly_markdown import render_markdown
    from jobs.publish.weekly_summary import weekly_summary
    from jobs.schemas.collected import SNAPSHOT_RUNS

    onset = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    base = {c: None for c in FINDING_STATES.column_names}
    work = base | {
        "finding_id": "0123456789abcdef",
        "status": "open",
        "instance": "db1",
        "series": "fp",
        "query": "select * from t where note < $1 order by <script>x</script>",
        "onset": onset,
        "detected_change_at": onset,
        "computed_at": onset,
        "kind": "work",
        "deploy_version": "v42",
        "work_metric": "temp_blocks",
        "work_summary": "temp blocks per call 0 → 116 at deploy v42, latency +10%",
    }
    findings = FINDING_STATES.conform(pl.DataFrame([work], infer_schema_length=None))
    runs = SNAPSHOT_RUNS.empty().with_columns(pl.lit(None, pl.String).alias("instance"))
    deploys = pl.DataFrame(schema={"deployed_at": pl.Datetime("us", "UTC")})
    summary = weekly_summary(WEEK, findings, runs, deploys)
    assert summary.regressions.height == 0 and summary.work_regressions.height == 1
    markdown = render_markdown(summary, {})
    section = markdown.split("## Work regressions")[1].split("## ")[0]
    assert "temp blocks per call 0 → 116 at deploy v42" in section and "| v42 |" in section
    html = render_html(summary, {})
    work_html = html.split('id="work-regressions"')[1].split("</section>")[0]
    assert "temp blocks per call 0 → 116" in work_html
    assert "&lt;script&gt;" in work_html and "<script>" not in work_html


def test_a_findings_pin_is_a_line_of_its_report(
    week: tuple[Path, WeekLake, WeeklyReportFiles], tmp_path: Path
) -> None:
    """Issue 30: the latest plan_pins row of a finding is one line under its plan, escaped like all fleet
    text (an alias may hold markup)."""
    from jobs.plans.pin_ledger import write_pins
    from jobs.schemas.analysed import PLAN_PINS

    root, _, _ = week
    finding = latest_states(lake.read_table(root, FINDING_STATES)).row(0, named=True)
    at = WEEK_START + timedelta(hours=6)
    hints = 'IndexScan("<b>e</b>" "events_account_idx")'
    row = {
        "pin_id": "p1", "recorded_at": at, "event": "proposed", "finding_id": finding["finding_id"],
        "instance": finding["instance"], "queryid": finding["queryid"], "hints": hints, "reason": "r",
    }  # fmt: skip
    write_pins(root, PLAN_PINS.conform(pl.DataFrame([row])), at)
    files = write_weekly_report(root, WEEK, tmp_path / "reports")
    markdown = files.markdown.read_text()
    expected = r'- pin: proposed IndexScan("\<b\>e\</b\>" "events\_account\_idx") (radar pins explain p1)'
    assert expected in markdown
    html = files.html.read_text()
    assert (
        '<p class="pin">pin: proposed IndexScan(&#34;&lt;b&gt;e&lt;/b&gt;&#34; &#34;events_account_idx&#34;)'
        in html
    )
