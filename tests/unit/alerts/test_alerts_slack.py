"""The Slack message (pure): plain words, Block Kit limits, hostile query texts defused."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobs.alerts.slack import (
    FIELD_MAX,
    HEADER_MAX,
    SECTION_TEXT_MAX,
    before_after,
    confidence,
    escape_mrkdwn,
    fit,
    slack_message,
)
from jobs.publish.config import WeeklyReportConfig
from jobs.publish.weekly_words import confidence_words
from tests.support.slack_rules import slack_problems


def texts_of(body: dict[str, Any]) -> list[str]:
    """Every string Slack would render as mrkdwn or plain text."""
    out = [body["text"]]
    for block in body.get("blocks", []):
        if "text" in block:
            out.append(block["text"]["text"])
        out += [f["text"] for f in block.get("fields", [])]
        out += [e["text"] for e in block.get("elements", [])]
    return out


def payload(**change: Any) -> dict[str, Any]:
    base = {
        "alert_id": "00112233445566ff",
        "finding_id": "0123456789abcdef",
        "state": "open",
        "kind": "performance_regression",
        "instance": "db1",
        "queryid": "111",
        "fingerprint": "fp",
        "series": "fp",
        "query": "select * from orders where customer_id = $1",
        "analysis": "deploy",
        "detected_change_at": "2026-11-02T10:30:00+00:00",
        "onset": "2026-11-02T10:30:00+00:00",
        "before_mean_ms": 12.1,
        "after_mean_ms": 980.0,
        "p_value": 1e-9,
        "added_load_ms_per_s": 96.8,
        "deploy_version": "v9",
        "other_deploys": None,
        "plan_diff_summary": "Index Scan on orders → Seq Scan on orders",
        "recovered_at": None,
        "superseded_by": None,
    }
    return {**base, **change}


def fields_of(body: dict[str, Any]) -> dict[str, str]:
    (section,) = [b for b in body["blocks"] if "fields" in b]
    return dict(f["text"].split("\n", 1) for f in section["fields"])


def test_an_open_finding_is_one_message_in_plain_words() -> None:
    body = slack_message(payload())
    assert slack_problems(body) == []
    assert body["text"].startswith("Query regression on db1: select * from orders where customer_id = $1")
    assert "12.1 ms → 980 ms (81× slower)" in body["text"]
    assert body["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Query regression on db1", "emoji": False},
    }
    assert body["blocks"][1]["text"]["text"] == "```select * from orders where customer_id = $1```"
    assert fields_of(body) == {
        "*Instance*": "db1",
        "*Before → after*": "12.1 ms → 980 ms (81× slower)",
        "*Onset*": "2026-11-02 10:30 UTC",
        "*Deploy*": "v9",
        "*Confidence*": "very strong evidence (p &lt; 0.001)",  # Slack shows "p < 0.001"
        "*Added load*": "96.8 ms of database time per second",
        "*Plan Diff*": "Index Scan on orders → Seq Scan on orders",
    }
    unannounced = fields_of(
        slack_message(
            payload(analysis="unannounced", deploy_version=None, plan_diff_summary=None, p_value=0.004)
        )
    )
    assert unannounced["*Deploy*"] == "unannounced"
    assert unannounced["*Plan Diff*"] == "no plans captured"
    # p 0.004 is above [report] strong_evidence_p (0.001): the weekly report calls it weak too
    # (jobs.detect.evidence)
    assert unannounced["*Confidence*"] == "weak evidence (p = 0.004, adjusted for the series searched)"


def test_a_deploy_after_the_change_is_named_apart_from_the_candidates() -> None:
    """Issue 21: a restore deployed after the change is "deployed after", never "also near" (a cause)."""
    body = slack_message(
        payload(
            other_deploys="v8 at 2026-11-02T10:25:00Z", deploys_after="v10-restore at 2026-11-02T10:38:00Z"
        )
    )
    assert slack_problems(body) == []
    assert fields_of(body)["*Deploy*"] == (
        "v9 (also near: v8 at 2026-11-02T10:25:00Z) (deployed after: v10-restore at 2026-11-02T10:38:00Z)"
    )


def test_plain_words_for_levels_and_evidence() -> None:
    assert before_after(12.1, 980) == "12.1 ms → 980 ms (81× slower)"
    assert before_after(0.042, 0.09) == "0.042 ms → 0.09 ms (2.1× slower)"
    assert before_after(800, 2500) == "800 ms → 2.5 s (3.1× slower)"
    assert before_after(0.0, 5.0) == "0 ms → 5 ms"
    assert confidence(0.03, "deploy") == "weak evidence (p = 0.03)"
    assert confidence(0.0012, "deploy") == "weak evidence (p = 0.0012)"
    assert confidence(0.0008, "unannounced") == (
        "strong evidence (p < 0.001, adjusted for the series searched)"
    )
    assert confidence(1e-9, "deploy") == "very strong evidence (p < 0.001)"


@pytest.mark.parametrize("p", [1e-9, 1e-6, 2e-6, 0.0008, 0.001, 0.0012, 0.01, 0.03, 0.2])
@pytest.mark.parametrize("cutoffs", [(1e-6, 1e-3), (1e-4, 0.05)])
def test_slack_and_the_weekly_report_use_the_same_evidence_words(
    p: float, cutoffs: tuple[float, float]
) -> None:
    """Issue 21: Slack called a finding "strong evidence (p = 0.0012)" that the weekly report called "weak
    evidence" (two sets of cut-offs). One function (jobs.detect.evidence) decides both, with [report]'s
    cut-offs."""
    config = WeeklyReportConfig(very_strong_evidence_p=cutoffs[0], strong_evidence_p=cutoffs[1])
    slack_words = confidence(p, "deploy", config.evidence_cutoffs()).split(" (", 1)[0]
    report_words = confidence_words(p, config)
    assert report_words.startswith(slack_words), (slack_words, report_words)
    assert slack_words in ("very strong evidence", "strong evidence", "weak evidence")


def test_updates_are_one_short_message() -> None:
    recovered = slack_message(payload(state="recovered", recovered_at="2026-11-02T12:00:00+00:00"))
    assert slack_problems(recovered) == [] and len(recovered["blocks"]) == 1
    assert recovered["text"].startswith(
        "Recovered on db1: select * from orders where customer_id = $1 is back"
    )
    assert "since 2026-11-02 12:00 UTC" in recovered["text"]
    superseded = slack_message(payload(state="superseded", superseded_by="fedcba9876543210"))
    assert slack_problems(superseded) == [] and len(superseded["blocks"]) == 1
    assert "now followed as finding fedcba9876543210" in superseded["text"]


def test_a_hostile_query_text_can_neither_ping_nor_link() -> None:
    hostile = "select '<!channel> <!here|x> <@U123> <https://evil.example|click> & @everyone @here' ```"
    body = slack_message(payload(query=hostile, plan_diff_summary="<!subteam^S1> Seq Scan & more"))
    assert slack_problems(body) == []
    for text in texts_of(body):
        assert "<!" not in text and "<@" not in text and "<http" not in text, text
        assert not re.search(r"@(channel|here|everyone)", text), text
        assert not re.search(r"&(?!amp;|lt;|gt;)", text), f"an unescaped & in {text!r}"
    code = body["blocks"][1]["text"]["text"]
    assert code.startswith("```select '&lt;!channel&gt;") and code.count("```") == 2, code
    assert "@\u200beveryone" in body["text"]
    mrkdwn = [t for b in body["blocks"] for t in [b.get("text", {}), *b.get("fields", [])] if t]
    assert all(t["verbatim"] for t in mrkdwn if t["type"] == "mrkdwn") and len(mrkdwn) >= 8


def test_long_texts_are_cut_within_slacks_limits_without_splitting_an_entity() -> None:
    long_query = "select " + " & ".join(f"c{i} < 1" for i in range(2000))
    body = slack_message(
        payload(instance="i" * 400, query=long_query, plan_diff_summary="Seq Scan & <x> " * 400)
    )
    assert slack_problems(body) == []
    assert len(body["blocks"][0]["text"]["text"]) == HEADER_MAX
    code = body["blocks"][1]["text"]["text"]
    assert len(code) <= SECTION_TEXT_MAX and code.endswith("…```")
    for text in texts_of(body):
        assert not re.search(r"&(?!amp;|lt;|gt;)", text), "an entity was split"
    plan = fields_of(body)["*Plan Diff*"]
    assert len("*Plan Diff*\n" + plan) <= FIELD_MAX and plan.endswith("…")
    for limit in range(1, 40):
        cut = fit("&<>" * 20, limit)
        assert len(cut) <= limit and not re.search(r"&(?!amp;|lt;|gt;)", cut.rstrip("…"))
    assert escape_mrkdwn("a & <b>") == "a &amp; &lt;b&gt;"


def test_a_work_regression_says_what_work_grew_with_its_lower_severity() -> None:
    import polars as pl

    from jobs.alerts.payloads import alert_payloads
    from jobs.schemas.analysed import FINDING_STATES

    work = {
        "metric": "temp_blocks",
        "ratio": None,
        "summary": "temp blocks per call 0 → 116 at deploy v42, latency +10%",
    }
    body = slack_message(payload(kind="work_regression", severity="warning", work=work, after_mean_ms=13.3))
    assert slack_problems(body) == []
    assert body["blocks"][0]["text"]["text"] == "Work regression on db1"
    assert "temp blocks per call 0 → 116" in body["text"]
    fields = fields_of(body)
    assert fields["*Severity*"] == "warning" and fields["*Work per call*"].startswith(
        "temp blocks per call 0 → 116"
    )
    # From a finding of kind work: the payload's kind, severity (configurable) and work, in the contract.
    row = {c: None for c in FINDING_STATES.column_names} | {
        "finding_id": "0123456789abcdef",
        "status": "open",
        "instance": "db1",
        "series": "fp",
        "fingerprint": "fp",
        "queryid": 111,
        "query": "select 1",
        "analysis": "deploy",
        "onset": pl.datetime(2026, 11, 2, 10, 30, time_zone="UTC"),
        "kind": "work",
        "before_mean_ms": 12.1,
        "after_mean_ms": 13.3,
        "p_value": 1e-6,
        "work_metric": "temp_blocks",
        "work_summary": work["summary"],
    }
    frame = pl.select(**{k: (v if isinstance(v, pl.Expr) else pl.lit(v)) for k, v in row.items()})
    frame = frame.with_columns(pl.col("onset").alias("detected_change_at")).cast(FINDING_STATES.polars_schema)
    (sent,) = alert_payloads(frame, {})
    assert (sent["kind"], sent["severity"], sent["work"]) == (
        "work_regression",
        "warning",
        work | {"ratio": None},
    )
    (louder,) = alert_payloads(frame, {}, work_severity="critical")
    assert louder["severity"] == "critical"
    latency = frame.with_columns(pl.lit("plan_or_work").alias("kind"))
    (regression,) = alert_payloads(latency, {})
    assert (regression["kind"], regression["severity"]) == ("performance_regression", "critical")
