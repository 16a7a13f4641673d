"""Slack's rules for an incoming-webhook body, as the fake Slack and the alert tests check them."""

from __future__ import annotations

from typing import Any

from jobs.alerts.slack import (
    FIELD_MAX,
    HEADER_MAX,
    SECTION_TEXT_MAX,
)


def slack_problems(body: Any) -> list[str]:
    """What Slack would refuse in an incoming-webhook body (the rules the emulator applies): no `text`
    -> no_text; blocks over Block Kit's limits -> invalid_blocks."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str) or not body["text"].strip():
        return ["no_text"]
    problems = []
    for block in body.get("blocks", []):
        kind = block.get("type")
        if kind == "header":
            text = block["text"]
            if text["type"] != "plain_text" or not 0 < len(text["text"]) <= HEADER_MAX:
                problems.append(f"invalid_blocks: header {len(text['text'])}")
        elif kind == "section":
            if "text" in block and not 0 < len(block["text"]["text"]) <= SECTION_TEXT_MAX:
                problems.append(f"invalid_blocks: section text {len(block['text']['text'])}")
            fields = block.get("fields", [])
            if len(fields) > 10:
                problems.append("invalid_blocks: more than 10 fields")
            problems += [
                f"invalid_blocks: field {len(f['text'])}" for f in fields if len(f["text"]) > FIELD_MAX
            ]
            if "text" not in block and not fields:
                problems.append("invalid_blocks: empty section")
        elif kind == "context":
            if not 0 < len(block["elements"]) <= 10:
                problems.append("invalid_blocks: context elements")
        else:
            problems.append(f"invalid_blocks: unknown block {kind}")
    return problems
