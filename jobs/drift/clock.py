"""One rule for the drift stage's timestamps: every as-of time and window bound is UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """A timestamp in UTC; a naive one is taken as UTC (as deploy markers are), never as local time."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
