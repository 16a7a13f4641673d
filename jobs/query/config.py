"""How samples are grouped into series (identity rules' switches): stdlib-only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdentityConfig:
    """What makes one series (``RegressionConfig.identity``)."""

    split_users: bool = False
    """Users of one database are one series (the default) or one series each."""
    rotation_overlap_intervals: int = 2
    """Two queryids of one fingerprint whose sample spans overlap by more than this many of the instance's
    intervals run side by side (two series); up to this many, one succeeded the other (one series): the
    interval of a deploy can hold calls of both the old and the new queryid."""

    def __post_init__(self) -> None:
        if self.rotation_overlap_intervals < 0:
            raise ValueError("identity.rotation_overlap_intervals must be >= 0")
