"""A hostile query text and deploy version through every surface a reader sees (issue 28): the terminal's
tables, the weekly report (Markdown and HTML), the Dagster UI's Markdown metadata, Slack and the webhook.
Each output is parsed by its own reader: the values show as text, never as markup, a link, an image, a
script, a mention or a terminal escape sequence."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from jobs.alerts.payloads import alert_payloads
from jobs.alerts.slack import slack_message
from jobs.detect.findings import OPEN
from jobs.escaping import one_line
from jobs.pipeline.detection import DetectionOutcome, run_detection
from jobs.publish.console import print_detection
from jobs.publish.markdown import markdown_table
from jobs.publish.output import write_rows
from jobs.publish.weekly import write_weekly_report
from jobs.publish.weekly_summary import iso_week
from tests.support.html import Elements, parse_html
from tests.support.lakes import write_step_change_lake

QUERY = (
    'select tags[idx], "a`b``c" [/x] <img src=x onerror=alert(1)> [a](http://e.vil) <!channel> @here '
    "\x1b[2J\u202e [link=http://e.vil]l[/link] from t where id = $1"
)
VERSION = "v1[/x]`<script>alert(1)</script>`[a](http://e.vil)<!channel>"
MARKDOWN = MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _assert_no_injected_markup(html: str, where: str) -> Elements:
    parsed = parse_html(html)
    for tag, attrs in parsed.elements:
        assert tag not in ("script", "iframe", "object", "embed"), (where, tag)
        assert not any(name.startswith("on") for name in attrs), (where, tag, attrs)
        assert not any("e.vil" in (value or "") for value in attrs.values()), (where, tag, attrs)
        assert not (tag == "img" and attrs.get("src") == "x"), (where, attrs)
    return parsed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, DetectionOutcome]:
    lake_root = tmp_path_factory.mktemp("hostile") / "lake"
    deploy_at = write_step_change_lake(lake_root, query=QUERY, version=VERSION)
    outcome = run_detection(lake_root)
    found = outcome.findings.filter(pl.col("status") == OPEN)
    assert found.height >= 1 and (found["query"] == QUERY).any(), found  # the premise: it is a finding
    return lake_root, iso_week(deploy_at), outcome


def test_the_terminal_shows_the_text_as_it_is_and_no_escape_sequence(run: tuple) -> None:
    _, _, outcome = run
    out = io.StringIO()
    print_detection(outcome, Console(file=out, force_terminal=False, width=400))
    rows = outcome.findings.select("query", "deploy_version").to_dicts()
    write_rows(["query", "deploy_version"], rows, "table", stdout=out, stderr=io.StringIO(), cell_width=0)
    shown = out.getvalue()
    assert not any(c in shown for c in "\x1b\x9b\u202e"), "a control sequence reached the terminal"
    assert "select tags[idx]" in shown and "[/x]" in shown and "\\x1b[2J" in shown
    assert "v1[/x]" in shown


def test_the_weekly_markdown_shows_the_query_in_one_code_span(run: tuple, tmp_path: Path) -> None:
    lake_root, week, _ = run
    files = write_weekly_report(lake_root, week, tmp_path / "reports")
    markdown = Path(files.markdown).read_text(encoding="utf-8")
    parsed = _assert_no_injected_markup(MARKDOWN.render(markdown), "report.md")
    assert not any(tag == "a" for tag, _ in parsed.elements), "a live link in report.md"
    assert one_line(QUERY)[:60] in "".join(parsed.text), "the query's text is not shown as it is"
    assert "v1[/x]`<script>" in "".join(parsed.text), "the deploy version is not shown as it is"


def test_the_weekly_html_escapes_every_value(run: tuple, tmp_path: Path) -> None:
    lake_root, week, _ = run
    files = write_weekly_report(lake_root, week, tmp_path / "reports")
    parsed = _assert_no_injected_markup(Path(files.html).read_text(encoding="utf-8"), "report.html")
    assert "<img src=x onerror=alert(1)>" in "".join(parsed.text)


def test_the_dagster_metadata_table_is_text(run: tuple) -> None:
    _, _, outcome = run
    table = markdown_table(outcome.findings.select("instance", "query", "deploy_version", "kind"))
    parsed = _assert_no_injected_markup(MARKDOWN.render(table), "metadata")
    assert not any(tag == "a" for tag, _ in parsed.elements)
    assert sum(tag == "td" for tag, _ in parsed.elements) % 4 == 0, "a value split a table cell"


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_slack_and_the_webhook_carry_the_text_and_no_mention_link_or_control(run: tuple) -> None:
    _, _, outcome = run
    payloads = alert_payloads(outcome.findings, {})
    assert payloads
    for payload in payloads:
        assert json.loads(json.dumps(payload))["query"] == payload["query"]  # the webhook: JSON, as it is
        for text in _strings(slack_message(payload)):
            assert "<!channel>" not in text and "<http" not in text and "\x1b" not in text, text
