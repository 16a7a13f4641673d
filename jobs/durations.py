"""Durations in config files and messages (``90s``, ``15m``, ``2h``): one parser, one formatter."""

from __future__ import annotations

import re
from datetime import timedelta

from jobs.errors import ConfigError

# ---------------------------------------------------------------------------------------------------------
# Durations and values
# ---------------------------------------------------------------------------------------------------------

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h|d)")


def parse_duration(text: str, label: str) -> timedelta:
    """ "30m", "1h30m", "90s", "250ms", "7d" -> timedelta; anything else is a ConfigError naming ``label``."""
    compact = text.strip().lower()
    if not compact or _DURATION.sub("", compact).strip():
        raise ConfigError(
            f'{label}: {text!r} is not a duration (write e.g. "30m", "90s", "2h", "7d", "250ms")'
        )
    seconds = sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION.findall(compact))
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigError(f"{label}: {text!r} is longer than any duration can be") from None


def format_duration(value: timedelta) -> str:
    """The shortest exact unit form: 1800 s -> "30m", 7 days -> "7d", 0.25 s -> "250ms"."""
    total_ms = round(value.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    for unit, scale in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if total_ms % scale == 0:
            return f"{total_ms // scale}{unit}"
    return f"{total_ms}ms"
