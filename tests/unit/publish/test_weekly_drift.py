"""The weekly report's per-execution drift: WARN and BLOCK pairs listed, too-few-samples pairs counted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl

from jobs.drift.finding_flags import week_drift
from jobs.pipeline.detection import run_detection
from jobs.publish.weekly import write_weekly_report
from jobs.publish.weekly_markdown import render_markdown
from jobs.publish.weekly_summary import iso_week, weekly_summary
from tests.support.drift_frames import SCORED, drift_frame, drift_row, write_drift
from tests.support.lakes import write_step_change_lake

WEEK = "2026-W49"  # SCORED is its Monday


def _rows() -> list[dict]:
    later = SCORED + timedelta(hours=1)
    return [
        drift_row("fp-a", "latency", "BLOCK", js=0.41, psi=1.2, baseline_version="v812"),
        drift_row("fp-a", "latency", "PASS", scored_at=later, baseline_version="v812"),  # cleared since
        drift_row("fp-b", "cardinality", "WARN", js=0.15, psi=0.12, scored_at=later, queryid=222),
        drift_row("fp-c", "latency", "WARN", reason="insufficient_samples", n=40, scored_at=later),
        drift_row("fp-d", "cost", "PASS", scored_at=later),
        drift_row("fp-e", "latency", "BLOCK", scored_at=SCORED - timedelta(days=2)),  # the week before
        drift_row("fp-f", "cost", "WARN", js=0.12),
        drift_row("fp-f", "cost", "BLOCK", js=0.3, scored_at=later),  # worse later: the week's worst is BLOCK
    ]


def _section(text: str) -> str:
    return text.split("## Per-execution drift")[1].split("## Gate runs")[0]


def test_week_drift_lists_warn_and_block_pairs_and_counts_insufficient_samples() -> None:
    start, end = SCORED, SCORED + timedelta(days=7)
    week = week_drift(drift_frame(_rows()), start, end)
    assert week.scored_pairs == 5 and week.insufficient_pairs == 1
    assert week.latest_counts == {"BLOCK": 1, "WARN": 2, "PASS": 2}
    flagged = week.flagged.select("fingerprint", "metric", "flag", "js", "latest_flag", "scorings_flagged")
    assert flagged.rows() == [
        ("fp-a", "latency", "BLOCK", 0.41, "PASS", 1),  # BLOCK first (largest JS first), though cleared
        ("fp-f", "cost", "BLOCK", 0.3, "BLOCK", 2),
        ("fp-b", "cardinality", "WARN", 0.15, "WARN", 1),
    ], "an insufficient_samples WARN is counted, not listed as drift; last week's BLOCK is not this week's"


def test_report_section_names_the_query_metric_scores_and_baseline() -> None:
    empty = pl.DataFrame(schema={"onset": pl.Datetime("us", "UTC"), "status": pl.String(),
                                 "added_load_ms_per_s": pl.Float64(), "finding_id": pl.String()})  # fmt: skip
    runs = pl.DataFrame(schema={"captured_at": pl.Datetime("us", "UTC"), "instance": pl.String(),
                                "status": pl.String(), "error": pl.String(),
                                "insufficient_privilege_rows": pl.Int64()})  # fmt: skip
    deploys = pl.DataFrame(schema={"deployed_at": pl.Datetime("us", "UTC")})
    texts = pl.DataFrame(
        {"instance": ["db1"], "queryid": [222], "query": ["select * from items where sku = $1"],
         "captured_at": [SCORED]}
    )  # fmt: skip
    summary = weekly_summary(WEEK, empty, runs, deploys, None, drift_frame(_rows()), texts)
    section = _section(render_markdown(summary, {}))
    assert "5 (instance, query, metric) pair(s) scored" in section and "1 BLOCK, 2 WARN, 2 PASS" in section
    assert (
        "| BLOCK | db1 | `fp-a` | latency | 0.410 | 1.200 | – | v812 | 1 | 2026-11-30 10:00 UTC | PASS |"
        in section
    )
    assert "| WARN | db1 | `select * from items where sku = $1` | cardinality |" in section
    assert "1 pair(s) had too few samples to be judged" in section and "insufficient_samples" in section
    quiet = weekly_summary("2026-W51", empty, runs, deploys, None, drift_frame(_rows()), texts)
    assert "No per-execution drift scored this week" in _section(render_markdown(quiet, {}))
    none = weekly_summary(WEEK, empty, runs, deploys, None, None)
    assert "No per-execution drift scored this week" in _section(render_markdown(none, {}))


def test_empty_lake_report_says_no_drift_scored_and_regressions_carry_flags(
    lake_root: Path, tmp_path: Path
) -> None:
    text = write_weekly_report(tmp_path / "empty", WEEK, tmp_path / "r0").markdown.read_text()
    assert "No per-execution drift scored this week (no execution_drift rows)." in text
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    before = write_weekly_report(lake_root, "2026-W45", tmp_path / "r1").markdown.read_text()
    assert "per-execution drift:" not in before, "no drift table: the regression lines are as before"
    fingerprint = run_detection(lake_root).findings["fingerprint"][0]
    write_drift(lake_root, [drift_row(fingerprint, "latency", "WARN", scored_at=SCORED - timedelta(days=28))])
    report = write_weekly_report(lake_root, "2026-W45", tmp_path / "r2").markdown.read_text()
    assert "- per-execution drift: cost – · latency WARN · cardinality –" in report
    assert "| WARN | db1 | `select * from orders where customer_id = $1` | latency |" in _section(report)
    # a later scoring (weeks after W45) does not rewrite the W45 report: its flags are as of the week's end
    write_drift(lake_root, [drift_row(fingerprint, "latency", "BLOCK", scored_at=SCORED)])
    again = write_weekly_report(lake_root, "2026-W45", tmp_path / "r3").markdown.read_text()
    assert "- per-execution drift: cost – · latency WARN · cardinality –" in again
    later = write_weekly_report(lake_root, iso_week(SCORED), tmp_path / "r4").markdown.read_text()
    assert "| BLOCK | db1 |" in _section(later)
