"""The Slack message of an alert (pure): an incoming-webhook body with ``text`` and Block Kit ``blocks``.

Slack answers 400 ``no_text`` to a body without ``text`` (the notification's fallback) and 400
``invalid_blocks`` to a block over its limits, so every piece is cut to fit: a header's plain text at most
150 characters, a section's text 3,000, a field 2,000, 10 fields a section. Query texts and every other
value from the lake are escaped for mrkdwn (``&``, ``<``, ``>``, so a query holding ``<!channel>`` or
``<https://x|y>`` can neither ping anyone nor make a link), ``@channel``/``@here``/``@everyone`` get a
zero-width space after the ``@``, and text objects are ``verbatim`` (Slack links nothing by itself).

An open finding is one message: header, the query in a code block, fields instance, before → after,
onset, deploy, confidence, added load, and "Plan Diff" (the finding's plan_diff_summary, or "no plans
captured"), then a context line naming the finding. A recovered or superseded update is one short section.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from jobs.detect.evidence import EvidenceCutoffs, evidence_words
from jobs.escaping import escape_mrkdwn
from jobs.readable import ratio_number, slowdown_ratio

HEADER_MAX = 150
SECTION_TEXT_MAX = 3000
FIELD_MAX = 2000
FALLBACK_TEXT_MAX = 3000  # Slack truncates `text` past 40,000; a notification shows far less
QUERY_IN_TEXT_MAX = 120
ELLIPSIS = "…"
_ZWSP = "\u200b"


def fit(text: str, limit: int, *, escape: bool = True, suffix: str = ELLIPSIS) -> str:
    """``text`` escaped (when ``escape``) and cut so the result is at most ``limit`` characters: cut before
    escaping, so an entity (``&amp;``) or a defused ``@channel`` is never split."""
    render = escape_mrkdwn if escape else (lambda s: s)
    whole = render(text)
    if len(whole) <= limit:
        return whole
    keep = max(0, limit - len(suffix))
    while keep > 0:
        cut = render(text[:keep]) + suffix
        if len(cut) <= limit:
            return cut
        keep -= max(1, len(cut) - limit)
    return suffix[:limit]


def code_block(text: str, limit: int) -> str:
    """``text`` in a mrkdwn code block of at most ``limit`` characters; a ``` inside cannot end it."""
    fence = "```"
    body = text.replace(fence, f"`{_ZWSP}`{_ZWSP}`")
    return fence + fit(body, limit - 2 * len(fence)) + fence


def format_ms(ms: float) -> str:
    """A latency in plain words: ``0.042 ms``, ``12.1 ms``, ``980 ms``, ``1.23 s``, ``2.5 min``."""
    if ms is None or not math.isfinite(ms):
        return "unknown"
    if ms >= 120_000:
        return f"{ms / 60_000:.3g} min"
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 100:
        return f"{ms:.0f} ms"
    return f"{ms:.3g} ms"


def format_ratio(before_ms: float, after_ms: float) -> str:
    """``81× slower`` / ``2.5× slower`` / ``1.2× faster``; empty when a level is zero or unknown. The
    finding's one ratio (jobs.readable.slowdown_ratio), with the digits of the console and the report."""
    if not before_ms or not after_ms or before_ms <= 0 or after_ms <= 0:
        return ""
    ratio = slowdown_ratio(before_ms, after_ms)
    if ratio is None:
        return ""
    word = "slower" if ratio >= 1 else "faster"
    return f"{ratio_number(ratio if ratio >= 1 else 1 / ratio)}× {word}"


def before_after(before_ms: float, after_ms: float) -> str:
    """``12.1 ms → 980 ms (81× slower)``."""
    ratio = format_ratio(before_ms, after_ms)
    return f"{format_ms(before_ms)} → {format_ms(after_ms)}" + (f" ({ratio})" if ratio else "")


def confidence(p_value: float, analysis: str, cutoffs: EvidenceCutoffs = EvidenceCutoffs()) -> str:
    """The p-value in ``jobs.detect.evidence``'s words (the weekly report's too): how unlikely the step is as
    chance (the adjusted p for unannounced)."""
    shown = "p < 0.001" if p_value < 0.001 else f"p = {p_value:.2g}"
    adjusted = ", adjusted for the series searched" if analysis == "unannounced" else ""
    return f"{evidence_words(p_value, cutoffs)} ({shown}{adjusted})"


def format_time(iso: str | None) -> str:
    """``2026-11-02 10:30 UTC`` from an ISO-8601 time (the payload's form)."""
    if not iso:
        return "unknown"
    moment = datetime.fromisoformat(iso)
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def deploy_words(payload: dict[str, Any]) -> str:
    """The deploy blamed (its version), or ``unannounced``; the other candidate deploys near the change,
    then the deploys after it (a restore, say: never a cause)."""
    version = payload.get("deploy_version")
    words = f"{version}" if version and payload.get("analysis") == "deploy" else "unannounced"
    if payload.get("other_deploys"):
        words += f" (also near: {payload['other_deploys']})"
    if payload.get("deploys_after"):
        words += f" (deployed after: {payload['deploys_after']})"
    return words


def _short_query(payload: dict[str, Any]) -> str:
    query = " ".join((payload.get("query") or "").split()) or f"queryid {payload['queryid']}"
    return query


def _field(label: str, value: str) -> dict[str, Any]:
    head = f"*{label}*\n"
    return {"type": "mrkdwn", "text": head + fit(value, FIELD_MAX - len(head)), "verbatim": True}


def _section(text_mrkdwn: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text_mrkdwn, "verbatim": True}}


def slack_message(payload: dict[str, Any], cutoffs: EvidenceCutoffs = EvidenceCutoffs()) -> dict[str, Any]:
    """The incoming-webhook body for one alert payload (the contract's object: a regression finding, or
    BLOCK per-execution drift when ``kind`` is ``execution_drift``)."""
    if payload.get("kind") == "execution_drift":
        return _drift_message(payload)
    if payload.get("kind") == "pileup":
        return _pileup_message(payload)
    if payload["state"] == "open":
        return _open_message(payload, cutoffs)
    return _update_message(payload)


def _open_message(payload: dict[str, Any], cutoffs: EvidenceCutoffs) -> dict[str, Any]:
    instance = payload["instance"]
    change = before_after(payload["before_mean_ms"], payload["after_mean_ms"])
    query = _short_query(payload)
    work = payload.get("work") or {}
    title = "Work regression" if payload.get("kind") == "work_regression" else "Query regression"
    what = work.get("summary") or change if title == "Work regression" else change
    text = fit(
        f"{title} on {instance}: {fit(query, QUERY_IN_TEXT_MAX, escape=False)} — {what}, "
        f"since {format_time(payload['onset'])} (deploy {deploy_words(payload)})",
        FALLBACK_TEXT_MAX,
    )
    fields = [
        _field("Instance", instance),
        *([_field("Severity", payload["severity"])] if payload.get("severity") else []),
        _field("Before → after", change),
        *([_field("Work per call", work["summary"])] if work.get("summary") else []),
        _field("Onset", format_time(payload["onset"])),
        _field("Deploy", deploy_words(payload)),
        _field("Confidence", confidence(payload["p_value"], payload["analysis"], cutoffs)),
    ]
    if payload.get("added_load_ms_per_s") is not None:
        load = payload["added_load_ms_per_s"]
        fields.append(_field("Added load", f"{format_ms(load)} of database time per second"))
    plan = payload.get("plan_diff_summary") or "no plans captured"
    pin = payload.get("pin")
    fields.append(_field("Plan Diff", f"{plan}\nPlan pin: {pin}" if pin else plan))
    flags = payload.get("drift_flags")
    if flags and any(flags.values()):
        fields.append(_field("Drift", " · ".join(f"{m} {f or '–'}" for m, f in flags.items())))
    header = fit(f"{title} on {instance}", HEADER_MAX, escape=False)
    context = (
        f"finding {payload['finding_id']} · queryid {payload['queryid']} · {payload['analysis']} analysis "
        f"· alert {payload['alert_id']}"
    )
    return _alert_message(text, header, query, fields[:10], context)


def _alert_message(
    text: str, header: str, query: str, fields: list[dict[str, Any]], context: str
) -> dict[str, Any]:
    """The layout every alert shares: header, the query as a code block, the fields, one context line."""
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": False}},
        _section(code_block(query, SECTION_TEXT_MAX)),
        {"type": "section", "fields": fields},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": fit(context, FIELD_MAX), "verbatim": True}],
        },
    ]
    return {"text": text, "blocks": blocks}


def _update_message(payload: dict[str, Any]) -> dict[str, Any]:
    instance = payload["instance"]
    query = fit(_short_query(payload), QUERY_IN_TEXT_MAX, escape=False)
    if payload["state"] == "recovered":
        summary = (
            f"Recovered on {instance}: {query} is back (it was {format_ms(payload['after_mean_ms'])}, "
            f"{format_ms(payload['before_mean_ms'])} before) since {format_time(payload['recovered_at'])}"
        )
    else:
        summary = (
            f"Superseded on {instance}: the regression of {query} since {format_time(payload['onset'])} "
            f"is now followed as finding {payload.get('superseded_by') or 'unknown'}"
        )
    pin = f"; plan pin {payload['pin']}" if payload.get("pin") else ""
    line = f"{summary}{pin} (finding {payload['finding_id']})"
    return {"text": fit(line, FALLBACK_TEXT_MAX), "blocks": [_section(fit(line, SECTION_TEXT_MAX))]}


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def drift_scores(payload: dict[str, Any]) -> str:
    """``JS 0.412 · PSI 1.200``."""
    return f"JS {_score(payload.get('js'))} · PSI {_score(payload.get('psi'))}"


def _drift_message(payload: dict[str, Any]) -> dict[str, Any]:
    """BLOCK drift of one (instance, query, metric) against its baseline: query, metric, JS/PSI, baseline
    version; or the one line saying it cleared."""
    instance, metric = payload["instance"], payload["metric"]
    query = _short_query(payload)
    short = fit(query, QUERY_IN_TEXT_MAX, escape=False)
    baseline = payload["baseline_version"]
    if payload["state"] != "open":
        line = (
            f"Drift cleared on {instance}: {metric} of {short} is {payload['flag']} again against baseline "
            f"{baseline} ({drift_scores(payload)}) since {format_time(payload.get('cleared_at'))}; "
            f"BLOCK since {format_time(payload['blocked_since'])} (drift {payload['finding_id']})"
        )
        return {"text": fit(line, FALLBACK_TEXT_MAX), "blocks": [_section(fit(line, SECTION_TEXT_MAX))]}
    text = fit(
        f"BLOCK drift on {instance}: {metric} of {short} — {drift_scores(payload)} against baseline "
        f"{baseline}, since {format_time(payload['blocked_since'])}",
        FALLBACK_TEXT_MAX,
    )
    fields = [
        _field("Instance", instance),
        _field("Metric", metric),
        _field(
            "JS / PSI", drift_scores(payload) + (f" ({payload['reason']})" if payload.get("reason") else "")
        ),
        _field("Baseline version", baseline),
        _field("Samples", f"{payload['n_baseline']:,} baseline · {payload['n_candidate']:,} candidate"),
        _field("BLOCK since", format_time(payload["blocked_since"])),
    ]
    header = fit(f"Distribution drift (BLOCK) on {instance}: {metric}", HEADER_MAX, escape=False)
    queryid = f"queryid {payload['queryid']} · " if payload.get("queryid") else ""
    context = (
        f"drift {payload['finding_id']} · {queryid}query_hash {payload['query_hash'][:16]}… · "
        f"{payload.get('profile') or 'calibrated'} profile · alert {payload['alert_id']}"
    )
    return _alert_message(text, header, query, fields, context)


def _seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s"


def _pileup_what(payload: dict[str, Any]) -> str:
    """'4 backends waiting on Lock:relation for up to 25 s, behind pid 42 (idle in transaction, its
    transaction open 31 s)' or '5 backends running it for up to 40 s (usually 2.1 ms)'."""
    count = f"{payload['backends']} backend{'s' if payload['backends'] != 1 else ''}"
    if payload["cause"] == "lock_queue":
        wait = payload.get("wait_event") or "a lock"
        what = f"{count} waiting on {wait} for up to {_seconds(payload['longest_s'])}"
        if payload.get("blocker_pid") is not None:
            state = payload.get("blocker_state") or "unknown state"
            age = payload.get("blocker_xact_s")
            opened = f", its transaction open {_seconds(age)}" if age is not None else ""
            what += f", behind pid {payload['blocker_pid']} ({state}{opened})"
        return what
    usual = f" (usually {format_ms(payload['usual_ms'])})" if payload.get("usual_ms") is not None else ""
    return f"{count} running it for up to {_seconds(payload['longest_s'])}{usual}"


def _pileup_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A pile-up happening now (open): the query, how many, how long, what they wait on and behind whom;
    or the one line saying it is over (recovered), naming the regression finding it became, if any."""
    instance = payload["instance"]
    short = fit(_short_query(payload), QUERY_IN_TEXT_MAX, escape=False)
    if payload["state"] != "open":
        related = payload.get("related_finding_id")
        line = (
            f"Pile-up over on {instance}: {short} (at most {payload['max_backends']} backends, up to "
            f"{_seconds(payload['longest_s'])}), since {format_time(payload['first_seen'])}, gone at "
            f"{format_time(payload.get('resolved_at'))}"
            + (f"; regression finding {related}" if related else "")
        )
        return {"text": fit(line, FALLBACK_TEXT_MAX), "blocks": [_section(fit(line, SECTION_TEXT_MAX))]}
    what = _pileup_what(payload)
    text = fit(f"Pile-up on {instance} now: {short} — {what}", FALLBACK_TEXT_MAX)
    fields = [
        _field("Instance", instance),
        _field("Now", what),
        _field("Seen since", format_time(payload["first_seen"])),
        _field("Blocker's statement", payload.get("blocker_query") or "-"),
    ]
    header = fit(f"Pile-up now on {instance}", HEADER_MAX, escape=False)
    context = f"pile-up {payload['finding_id']} · queryid {payload['queryid']} · alert {payload['alert_id']}"
    return _alert_message(text, header, _short_query(payload), fields, context)
