"""Owners and freshness of the collection assets: who answers for them, and when the UI says they are late.

A collection asset is late when its last materialization (a Dagster run or a `radar` CLI run reported as a
runless event) is older than ``[schedules] freshness_periods`` periods of the cron that feeds it: a
``FreshnessPolicy`` on the asset, which the daemon of `dagster dev` evaluates by itself (no sensor to
switch on; the superseded last-update freshness checks are not used).
"""

from datetime import UTC, datetime, timedelta

import dagster as dg
from dagster._utils.schedules import cron_string_iterator  # Dagster's own cron arithmetic (pinned release)

from orchestration.run_config import definitions_settings

COLLECTION_OWNERS = ["team:dba"]
"""Who answers for the collection assets (Dagster owners: an email or ``team:name``)."""
_REFERENCE = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday: the period of a weekly cron is seen whole
_TICKS = 24 * 60 + 1  # a day of minutely ticks, at least a week of daily ones


def cron_period(cron: str) -> timedelta:
    """The longest gap between two consecutive ticks of ``cron`` (UTC) over the following ticks: a cron that
    fires at irregular times (``5-59/15``) is late only after its longest wait."""
    ticks = cron_string_iterator(_REFERENCE.timestamp(), cron, "UTC")
    previous = next(ticks)
    longest = timedelta(0)
    for _, tick in zip(range(_TICKS), ticks, strict=False):
        longest = max(longest, tick - previous)
        previous = tick
        if tick - _REFERENCE > timedelta(days=8):
            break
    return longest


def late_after(cron: str, periods: float | None = None) -> timedelta:
    """How old the last materialization may be before an asset fed by ``cron`` is late."""
    settings = definitions_settings().settings.schedules
    return cron_period(cron) * (settings.freshness_periods if periods is None else periods)


def freshness_policy(cron: str) -> dg.FreshnessPolicy:
    """Late (FAIL) after ``late_after(cron)``; a WARN once one period is missed beyond the next tick."""
    fail = late_after(cron)
    warn = min(fail, cron_period(cron) * 2)
    return dg.FreshnessPolicy.time_window(fail_window=fail, warn_window=warn if warn < fail else None)


SNAPSHOT_CRON = definitions_settings().settings.schedules.snapshot
SAMPLES_CRON = definitions_settings().settings.schedules.samples
SNAPSHOT_FRESHNESS = freshness_policy(SNAPSHOT_CRON)
SAMPLES_FRESHNESS = freshness_policy(SAMPLES_CRON)
