"""`radar detect`'s human output: the findings first, the series not reported as counts per reason (each
row, naming the work metric, only with --all), so a fleet of hundreds of series still fits on a screen."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
from rich.console import Console

from jobs.publish.console import not_reported_lines

T0 = datetime(2026, 12, 6, 8, 4, 58, tzinfo=UTC)


class _Outcome:
    """The three analyses' frames of a DetectionOutcome, as not_reported_lines reads them."""

    def __init__(self, series: int) -> None:
        def rows(reasons: list[str], metric: str | None = None) -> pl.DataFrame:
            return pl.DataFrame(
                {
                    "instance": ["alpha"] * series,
                    "series": [f"s{i}" for i in range(series)],
                    "query": [f"SELECT {i}" for i in range(series)],
                    "status": ["no_regression"] * series,
                    "reason": [reasons[i % len(reasons)] for i in range(series)],
                    "metric": [metric] * series,
                    "deploy_version": ["v2.0"] * series,
                }
            )

        self.regressions = rows(["below_latency_change_threshold", "too_few_samples"])
        self.unannounced = rows(["no_significant_change_point"])
        self.resource_regressions = rows(["below_ratio_threshold", "no_step_above_gates"], "shared_blocks")


def test_not_reported_series_are_counts_by_default_and_rows_with_all() -> None:
    outcome = _Outcome(series=300)
    lines = not_reported_lines(outcome)  # type: ignore[arg-type]
    assert len(lines) == 3  # one line per analysis, whatever the number of series
    assert (
        lines[0]
        == "  at deploys: 300 series not reported: 150 below_latency_change_threshold, 150 too_few_samples"
    )
    every = not_reported_lines(outcome, show_all=True)  # type: ignore[arg-type]
    assert len(every) == 3 + 3 * 300
    assert "alpha: SELECT 0 [shared blocks per call, deploy v2.0] → below_ratio_threshold" in "\n".join(every)
    console = Console(record=True, width=120)
    for line in lines:
        console.print(line, markup=False)
    assert len(console.export_text().splitlines()) <= 6
