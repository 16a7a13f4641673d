"""The design's flags for the values people change most; each is an Override of a config file key.

argparse only (cheap): the CLI adds them to the commands that use them, and a flag given beats the file
and the environment (``jobs.config.loader``). A flag not given is None and overrides nothing.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Override:
    """One value from a flag or run config: a dotted key ("detector.window_before"), its value, where from
    ("flag --window-minutes"); ``jobs.config.loader`` applies it over the file and the environment."""

    key: str
    value: object
    source: str


@dataclass(frozen=True)
class DesignFlag:
    flag: str
    keys: tuple[str, ...]
    help: str
    type: type | None  # None: a store_true switch


DESIGN_FLAGS: dict[str, DesignFlag] = {
    "window_minutes": DesignFlag(
        "--window-minutes",
        ("detector.window_before", "detector.window_after"),
        "minutes of samples compared before and after a deploy (each side) [detector] window_before/after",
        float,
    ),
    "min_executions": DesignFlag(
        "--min-executions",
        ("samples.min_executions",),
        "an interval with fewer calls is not a sample [samples] min_executions",
        int,
    ),
    "latency_threshold": DesignFlag(
        "--latency-threshold",
        ("detector.latency_change_threshold",),
        "stage 0: relative change of the mean latency below which a series is not examined further "
        "(0.2 = 20%%) [detector] latency_change_threshold",
        float,
    ),
    "changepoint_tolerance": DesignFlag(
        "--changepoint-tolerance",
        ("detector.changepoint_tolerance",),
        "how far the change point may lie from the deploy, as a fraction of the window "
        "[detector] changepoint_tolerance",
        float,
    ),
    "capture_plans": DesignFlag(
        "--capture-plans",
        ("plans.capture_plans",),
        "also capture the top queries' plans [plans] capture_plans",
        None,
    ),
    "auto_explain": DesignFlag(
        "--auto-explain",
        ("plans.ingest_auto_explain",),
        "also read new auto_explain records from each instance's log_dir [plans] ingest_auto_explain",
        None,
    ),
}


def add_design_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    for name in names:
        flag = DESIGN_FLAGS[name]
        if flag.type is None:
            parser.add_argument(
                flag.flag, dest=name, action="store_const", const=True, default=None, help=flag.help
            )
        else:
            parser.add_argument(flag.flag, dest=name, type=flag.type, default=None, help=flag.help)


def overrides_from_args(args: argparse.Namespace) -> list[Override]:
    """The design flags given on the command line, as overrides of their config keys."""
    out: list[Override] = []
    for name, flag in DESIGN_FLAGS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "window_minutes":
            if value <= 0:
                raise argparse.ArgumentTypeError(f"{flag.flag} must be > 0, not {value}")
            value = timedelta(minutes=value)
        out.extend(Override(key, value, f"flag {flag.flag}") for key in flag.keys)
    return out
