"""How samples are grouped into series (identity rules' switches): stdlib-only."""

from __future__ import annotations

from dataclasses import dataclass

UTILITY_STATEMENTS: tuple[str, ...] = (
    "BEGIN",
    "START",
    "COMMIT",
    "END",
    "ROLLBACK",
    "ABORT",
    "SAVEPOINT",
    "RELEASE",
    "SET",
    "SHOW",
    "RESET",
    "DISCARD",
    "DEALLOCATE",
    "LISTEN",
    "UNLISTEN",
    "NOTIFY",
    "CHECKPOINT",
)
"""First keywords of the statements that are never a series (``IdentityConfig.utility_statements``):
transaction control, session settings and notifications cost the server next to nothing, their latency
is the client's think time or a lock wait that the statements inside the transaction already show."""


@dataclass(frozen=True)
class IdentityConfig:
    """What makes one series (``RegressionConfig.identity``)."""

    split_users: bool = False
    """Users of one database are one series (the default) or one series each."""
    rotation_overlap_intervals: int = 2
    """Two queryids of one fingerprint whose sample spans overlap by more than this many of the instance's
    intervals run side by side (two series); up to this many, one succeeded the other (one series): the
    interval of a deploy can hold calls of both the old and the new queryid."""
    utility_statements: tuple[str, ...] = UTILITY_STATEMENTS
    """Statements whose first keyword (case-insensitive, after leading comments) is one of these are never
    analysed as series: no finding, no "not reported" line, no share of an instance slowdown. An empty
    list analyses every statement."""

    def __post_init__(self) -> None:
        if self.rotation_overlap_intervals < 0:
            raise ValueError("identity.rotation_overlap_intervals must be >= 0")
        bad = [k for k in self.utility_statements if not k.isascii() or not k.isalpha()]
        if bad:
            raise ValueError(f"identity.utility_statements: {bad[0]!r} is not a SQL keyword (letters only)")
