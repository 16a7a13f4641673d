"""The CI payload contract of the drift scorer (jobs/contracts/drift_payload.schema.json): validate without
coercing (the error names the field), then score one candidate against its baseline samples."""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import score_drift

CONTRACT = Path(__file__).resolve().parents[1] / "contracts" / "drift_payload.schema.json"


def score_payload(
    payload: dict[str, Any],
    baseline_samples: list[float] | np.ndarray,
    config: DriftScoreConfig = DriftScoreConfig(),
) -> dict[str, Any]:
    """Score one CI payload (validated first, see ``validate_payload``) against its baseline samples."""
    checked = validate_payload(payload)
    baseline = np.asarray(baseline_samples, dtype=np.float64)
    candidate = np.asarray(checked["candidate_samples"], dtype=np.float64)
    frame = pl.DataFrame(
        {
            "query_hash": [checked["query_hash"]] * (baseline.size + candidate.size),
            "metric": [checked["metric"]] * (baseline.size + candidate.size),
            "side": ["baseline"] * baseline.size + ["candidate"] * candidate.size,
            "value": np.concatenate([baseline, candidate]),
        }
    )
    return score_drift(frame, config).row(0, named=True)


# ---------------------------------------------------------------------------------------------------------
# The CI payload contract


class PayloadError(ValueError):
    """A drift payload that does not meet drift_payload.schema.json; the message names the field."""


@cache
def payload_contract() -> dict[str, Any]:
    """The JSON Schema of a CI drift payload (jobs/contracts/drift_payload.schema.json)."""
    return json.loads(CONTRACT.read_text())


def _reject_constant(name: str) -> float:
    raise PayloadError(f"drift payload: {name} is not a JSON number (NaN and Infinity are rejected)")


def parse_payload(text: str) -> dict[str, Any]:
    """Parse a JSON payload text (NaN / Infinity rejected) and validate it."""
    try:
        payload = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise PayloadError(f"drift payload: not JSON ({error})") from None
    return validate_payload(payload)


def _is_date_time(value: str) -> bool:
    """RFC 3339 date-time: a 'T' (or 't') between date and time and an explicit offset or Z."""
    from datetime import datetime

    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def validate_payload(payload: Any) -> dict[str, Any]:
    """The payload itself when it meets the contract; else PayloadError naming the field. Nothing is
    coerced: a numeric string, a boolean, a NaN or a negative sample is rejected."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(payload_contract())
    errors = sorted(
        validator.iter_errors(payload), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if errors:
        error = errors[0]
        field = "/".join(str(part) for part in error.absolute_path)
        if error.validator == "required":
            field = str(error.message).split("'")[1]
        elif error.validator == "additionalProperties":
            extra = sorted(set(payload) - set(payload_contract()["properties"]))
            field = extra[0] if extra else field
        raise PayloadError(f"drift payload: {field or '(root)'}: {error.message}")
    for i, sample in enumerate(payload["candidate_samples"]):
        if not math.isfinite(sample):
            raise PayloadError(f"drift payload: candidate_samples/{i}: {sample!r} is not a finite number")
    captured_at = payload.get("captured_at")
    if captured_at is not None and not _is_date_time(captured_at):
        raise PayloadError(f"drift payload: captured_at: {captured_at!r} is not an RFC 3339 date-time")
    return payload
