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
from jobs.drift.scorer import score_drift_arrays

CONTRACT = Path(__file__).resolve().parents[1] / "contracts" / "drift_payload.schema.json"


def score_payload(
    payload: dict[str, Any],
    baseline_samples: list[float] | np.ndarray,
    config: DriftScoreConfig = DriftScoreConfig(),
    *,
    validated: bool = False,
) -> dict[str, Any]:
    """Score one CI payload against its baseline samples, on the batched kernel (one pair, flat arrays:
    no frame of one row per sample). Validated first unless ``validated`` (``parse_payload``'s result:
    validating 5.6 M samples twice once cost two minutes)."""
    checked = payload if validated else validate_payload(payload)
    baseline = np.asarray(baseline_samples, dtype=np.float64)
    candidate = np.asarray(checked["candidate_samples"], dtype=np.float64)
    keys = pl.DataFrame({"query_hash": [checked["query_hash"]], "metric": [checked["metric"]]})
    return score_drift_arrays(
        keys,
        baseline,
        np.array([0, baseline.size]),
        candidate,
        np.array([0, candidate.size]),
        config,
    ).row(0, named=True)


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


class NotADouble:
    """A JSON number no finite double holds (``1`` and 400 zeros, ``1e400``): kept as its text so the
    check that finds it names its field (a float() of it was an OverflowError traceback)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        shown = self.text if len(self.text) <= 24 else f"{self.text[:12]}…({len(self.text)} characters)"
        return f"{shown} (not a finite double)"


def _parse_int(text: str) -> int | NotADouble:
    if len(text.lstrip("-")) > 309:  # beyond 1.8e308 whatever the digits (and int() of 4,300+ refuses)
        return NotADouble(text)
    value = int(text)
    try:
        float(value)
    except OverflowError:
        return NotADouble(text)
    return value


def _parse_float(text: str) -> float | NotADouble:
    value = float(text)
    return value if math.isfinite(value) else NotADouble(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are unique: ``{"metric": "cost", "metric": "latency"}`` took the last value
    without a word; which one the sender meant is not for the radar to guess."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise PayloadError(f"drift payload: {key}: the key is given twice")
        out[key] = value
    return out


def parse_payload(text: str | bytes, max_bytes: int | None = None) -> dict[str, Any]:
    """Parse a JSON payload text and validate it (once). Rejected with the field named: NaN and
    Infinity, numbers no finite double holds, a key given twice, a text over ``max_bytes``."""
    if max_bytes is not None and len(text) > max_bytes:
        raise PayloadError(f"drift payload: larger than {max_bytes:,} bytes ([drift] max_payload_bytes)")
    try:
        payload = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as error:
        raise PayloadError(f"drift payload: not JSON ({error})") from None
    except RecursionError:
        raise PayloadError("drift payload: nested too deeply to be a drift payload") from None
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


def _first_bad_sample(samples: list[Any]) -> str | None:
    """Why the first unusable candidate sample is unusable (``candidate_samples/<i>: …``), or None: checked
    in bulk (a type test per item, then numpy), not one jsonschema check per sample (55 s at 5.6 M)."""

    def number(kind: type) -> bool:
        return issubclass(kind, int | float) and not issubclass(kind, bool)

    if not all(number(kind) for kind in {type(v) for v in samples}):
        for i, v in enumerate(samples):
            if not number(type(v)):
                return f"candidate_samples/{i}: {v!r} is not of type 'number'"
    values = np.asarray(samples, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size == 0:
        return None
    i = int(bad[0])
    if not math.isfinite(values[i]):
        return f"candidate_samples/{i}: {samples[i]!r} is not a finite number"
    return f"candidate_samples/{i}: {samples[i]!r} is less than the minimum of 0"


def validate_payload(payload: Any) -> dict[str, Any]:
    """The payload itself when it meets the contract; else PayloadError naming the field. Nothing is
    coerced: a numeric string, a boolean, a NaN or a negative sample is rejected. The contract is checked
    with jsonschema on the payload with its first sample; the samples in bulk."""
    import jsonschema

    samples = payload.get("candidate_samples") if isinstance(payload, dict) else None
    bulk = isinstance(samples, list) and len(samples) > 1
    shape = {**payload, "candidate_samples": samples[:1]} if bulk else payload
    validator = jsonschema.Draft202012Validator(payload_contract())
    errors = sorted(validator.iter_errors(shape), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problem = _first_bad_sample(samples) if bulk else None
    if problem is not None and not (
        errors and list(map(str, errors[0].absolute_path)) < ["candidate_samples"]
    ):
        raise PayloadError(f"drift payload: {problem}")
    if errors:
        error = errors[0]
        field = "/".join(str(part) for part in error.absolute_path)
        if error.validator == "required":
            field = str(error.message).split("'")[1]
        elif error.validator == "additionalProperties":
            extra = sorted(set(payload) - set(payload_contract()["properties"]))
            field = extra[0] if extra else field
        raise PayloadError(f"drift payload: {field or '(root)'}: {error.message}")
    problem = problem or _first_bad_sample(payload["candidate_samples"])
    if problem is not None:
        raise PayloadError(f"drift payload: {problem}")
    captured_at = payload.get("captured_at")
    if captured_at is not None and not _is_date_time(captured_at):
        raise PayloadError(f"drift payload: captured_at: {captured_at!r} is not an RFC 3339 date-time")
    return payload
