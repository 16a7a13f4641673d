"""The demo's own check (jobs.local.demo._verdict): a failure names every finding on one line at the end,
and a finding's text from the fleet reaches the terminal as text."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

import polars as pl
from rich.console import Console

from jobs.local.demo import _verdict

ONSET = datetime(2026, 12, 7, 11, 42, 5, tzinfo=UTC)


def finding(instance: str, analysis: str, query: str, **over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "instance": instance,
        "analysis": analysis,
        "kind": "plan_or_work",
        "status": "open",
        "onset": ONSET,
        "before_mean_ms": 0.045,
        "after_mean_ms": 29.0,
        "p_value": 2.2e-6,
        "deploy_version": "v2.0",
        "query": query,
        "plan_diff_summary": "Plan changed: Bitmap Heap Scan on demo_orders → Seq Scan on demo_orders.",
    }
    return {**row, **over}


def verdict_of(rows: list[dict[str, object]]) -> tuple[int, list[str]]:
    out = io.StringIO()
    verdict = _verdict(pl.DataFrame(rows), Console(file=out, width=180, force_terminal=True))
    return verdict, out.getvalue().splitlines()


ORDERS = "SELECT count(*), sum(amount) FROM demo_orders WHERE customer_id = $1"


def test_the_expected_finding_passes_and_prints_one_line() -> None:
    verdict, lines = verdict_of([finding("alpha", "deploy", ORDERS)])
    assert verdict == 0 and len(lines) == 1


def test_a_failure_names_each_finding_last_and_hostile_text_stays_text() -> None:
    hostile = "select 1 /* \x1b[2J[red]boom[/red]\nsecond line */"
    verdict, lines = verdict_of(
        [
            finding("alpha", "deploy", ORDERS),
            finding("alpha", "unannounced", ORDERS, after_mean_ms=15.3, deploy_version=None),
            finding("beta", "unannounced", hostile, kind="work", before_mean_ms=None, p_value=None),
        ]
    )
    assert verdict == 1
    header = re.sub(r"\x1b\[[0-9;]*m", "", lines[-4])  # the check's own line is styled (a terminal)
    assert "alpha hits 2" in header and "beta hits 1" in header
    assert "alpha unannounced plan_or_work open onset 11:42:05 0.045 → 15.3 ms" in lines[-2]
    assert "deploy -:" in lines[-2]
    beta = lines[-1]
    assert beta.startswith("  beta unannounced work open onset 11:42:05 - → 29 ms, p -, deploy v2.0:")
    assert "\x1b[2J" not in beta and "\\x1b" in beta  # the escape is shown, not obeyed
    assert "[red]boom[/red]" in beta  # printed as written, not read as markup
    assert "second line" in beta  # one line
