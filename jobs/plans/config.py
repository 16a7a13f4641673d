"""Plan capture, auto_explain ingest and plan diff thresholds: stdlib-only, so the config file loader and
the CLI import them without psycopg or polars. Re-exported by jobs.plans.capture, jobs.plans.auto_explain
and jobs.plans.diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

EXPLAIN_MODE_HELPER = "helper"
EXPLAIN_MODE_SESSION = "session"
EXPLAIN_MODES = (EXPLAIN_MODE_HELPER, EXPLAIN_MODE_SESSION)


@dataclass(frozen=True)
class PlanCaptureConfig:
    """Thresholds of the plan capture; defaults are the issue's."""

    top_n: int = 500
    """Plans are captured for each instance's top this-many queries by total execution time."""
    statement_timeout_ms: int = 2000
    """Each EXPLAIN (and each read of pg_store_plans) is cancelled by the server after this long."""
    lock_timeout_ms: int = 100
    """A migration's ACCESS EXCLUSIVE lock costs each EXPLAIN one short wait, never a queue behind it."""
    idle_in_transaction_timeout_ms: int = 10000
    """A capture session left idle in a transaction is ended by the server after this long."""
    watchdog_grace_ms: int = 2000
    """An EXPLAIN still running this long after its statement_timeout has its backend terminated."""
    connect_timeout_s: int = 10
    """libpq connect_timeout of the capture's connections."""
    store_plans_min_version: str = "1.6"
    """Oldest pg_store_plans extension version read (older ones lack the columns used)."""
    store_plans_min_server_version_num: int = 140000
    """pg_store_plans is read only on servers at least this new."""
    generic_plan_min_server_version_num: int = 160000
    """EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16 (160000) or newer."""
    store_plans_relation: str = "pg_store_plans"
    """The relation pg_store_plans' plans are read from."""
    # Skip the gate and trust store_plans_relation: only for a fixture view standing in for the extension.
    store_plans_assume_trusted: bool = False
    use_store_plans: bool = True
    """Read plans from pg_store_plans where it is installed and trusted."""
    use_generic_explain: bool = True
    """EXPLAIN (GENERIC_PLAN) the top queries' normalized texts (PostgreSQL 16+)."""
    max_shapes_per_query: int = 5
    """Distinct plan shapes kept per query (older shapes beyond this are dropped from the history)."""
    cost_change_ratio: float = 2.0
    """A plan of the same shape is stored again (and diffed) when its estimated total cost moved by this
    factor or more either way since the last stored one (stale statistics, a grown table); 0 stores a
    plan only when its shape changes."""
    application_name: str = "pg-regression-radar plan capture"
    """application_name of the capture's sessions."""
    query_text: str = "normalized"
    """Plan JSON keeps no literal value either way; "withheld" also replaces every expression string."""
    explain_mode: str = EXPLAIN_MODE_HELPER
    """helper: through the SECURITY DEFINER helper (radar setup-sql); session: as the session role."""
    explain_helper: str = "radar.explain_generic"
    """schema.function of the SECURITY DEFINER EXPLAIN helper (radar setup-sql installs it)."""
    explain_search_path: str = '"$user", public'
    """search_path a captured text is planned with; $user is the role that ran it (its default path)."""
    unsafe_allow_privileged_explain: bool = False
    """DANGER: EXPLAIN as a superuser / writing role (or without the helper): planned functions run so."""

    def __post_init__(self) -> None:
        if self.explain_mode not in EXPLAIN_MODES:
            raise ValueError(f"explain_mode {self.explain_mode!r} must be one of {', '.join(EXPLAIN_MODES)}")
        if self.cost_change_ratio != 0 and not self.cost_change_ratio > 1:
            raise ValueError(
                f"[plans] cost_change_ratio must be 0 (off) or greater than 1, not {self.cost_change_ratio!r}"
            )
        if self.lock_timeout_ms <= 0 or self.statement_timeout_ms <= 0:
            raise ValueError("lock_timeout_ms and statement_timeout_ms must be positive (0 means no limit)")


@dataclass(frozen=True)
class AutoExplainSamplerConfig:
    """auto_explain run as a sampler of executions: the server settings that make every logged record one
    execution sample (latency, cost, cardinality). ``server_settings()`` gives them as postgresql.conf
    values; the embedded fleet's ``sampler`` mode applies them (replacing the plan-capture threshold)."""

    sample_rate: float = 0.1
    """auto_explain.sample_rate: the share of executions (each statement drawn at random) that is logged."""
    log_min_duration_ms: int = 0
    """auto_explain.log_min_duration: 0 logs every sampled execution whatever its duration (a sampler,
    not a slow-query log)."""
    log_analyze: bool = True
    """auto_explain.log_analyze: actual rows per node; off, samples keep latency and cost and their
    cardinality is null (it needs actual rows)."""
    log_timing: bool = False
    """auto_explain.log_timing: per-node timing costs two clock reads per row; off, the total is kept."""
    log_buffers: bool = False
    """auto_explain.log_buffers: buffer counts per node (not needed by the samples)."""
    log_format: str = "json"
    """auto_explain.log_format: the ingest reads JSON plans only."""

    def __post_init__(self) -> None:
        rate = self.sample_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            raise ValueError(f"[plans.auto_explain.sampler] sample_rate must be in (0, 1], not {rate!r}")
        if self.log_min_duration_ms < 0:
            raise ValueError("[plans.auto_explain.sampler] log_min_duration_ms must be >= 0")
        if self.log_format != "json":
            raise ValueError(
                f"[plans.auto_explain.sampler] log_format must be 'json' (the ingest reads JSON plans), "
                f"not {self.log_format!r}"
            )

    def server_settings(self) -> dict[str, str]:
        """The settings as postgresql.conf values (auto_explain must be in shared_preload_libraries)."""

        def on(value: bool) -> str:
            return "on" if value else "off"

        return {
            "auto_explain.sample_rate": repr(float(self.sample_rate)),
            "auto_explain.log_min_duration": str(self.log_min_duration_ms),
            "auto_explain.log_analyze": on(self.log_analyze),
            "auto_explain.log_timing": on(self.log_timing),
            "auto_explain.log_buffers": on(self.log_buffers),
            "auto_explain.log_format": self.log_format,
        }


@dataclass(frozen=True)
class AutoExplainConfig:
    """Where files are and how much to read per run."""

    file_glob: str = "*.json"
    """Which files of an instance's log_dir are auto_explain JSON logs."""
    max_bytes_per_run: int = 512 * 1024 * 1024
    """At most this many new log bytes are read per instance per run (the rest next run)."""
    read_chunk_bytes: int = 8 * 1024 * 1024
    """Log files are read in chunks of this size (bounded memory: see ``max_line_bytes``)."""
    max_line_bytes: int = 64 * 1024 * 1024
    """A log line longer than this (or than ``max_bytes_per_run``) is skipped and named in the run's
    errors, so a huge record neither holds the file's offset forever nor takes memory beyond this."""
    max_shapes_per_query: int = 5
    """Distinct plan shapes kept per query (older shapes beyond this are dropped from the history)."""
    query_text: str = "normalized"
    """Literal values never reach the lake: "normalized" keeps parameter names and redacted expressions,
    "withheld" keeps no parameter and no expression text (jobs.query.texts)."""
    fingerprint_bytes: int = 4096
    """The first this-many bytes of a log file identify it across rotations."""
    execution_samples: bool = True
    """Also write one execution_samples row (latency, cost, cardinality) per logged execution."""
    sampler: AutoExplainSamplerConfig = field(default_factory=AutoExplainSamplerConfig)
    """The server settings of auto_explain as a sampler (what the servers should run with)."""


@dataclass(frozen=True)
class PlanDiffConfig:
    """Thresholds of the plan diff; defaults are the issue's."""

    cost_change_ratio: float = 2.0
    """A plan node's total cost changed by this factor or more is a changed node."""
    row_error_factor: float = 10.0
    """Estimated vs actual rows off by this factor or more is a misestimate worth reporting."""
    max_row_errors: int = 5
    """At most this many misestimated nodes are listed per plan diff."""
    source_preference: tuple[str, ...] = ("pg_store_plans", "auto_explain", "generic_explain")
    """Which plan source is diffed when several captured the query, best first."""
    # A shape change up to this long before detected_change_at still counts as "after" (change points
    # are located to within a tolerance; the detector's production floor is 2 minutes).
    change_tolerance: timedelta = timedelta(minutes=2)


PIN_MODE_PROPOSE = "propose"
PIN_MODE_APPLY = "apply"


def parse_query_entry(entry: str, key: str) -> tuple[str | None, int]:
    """``"<queryid>"`` (any instance) or ``"<instance>:<queryid>"`` of a [pinning] allow/deny list; ValueError
    naming the key and the entry otherwise (a queryid is a signed 64-bit integer, often negative)."""
    instance, _, queryid = entry.rpartition(":")
    try:
        value = int(queryid.strip())
    except ValueError:
        value = None
    if value is None or not -(2**63) <= value < 2**63 or (entry.count(":") and not instance.strip()):
        raise ValueError(
            f"[pinning] {key} entries are a queryid or instance:queryid (a 64-bit integer), not {entry!r}"
        )
    return (instance.strip() or None), value


@dataclass(frozen=True)
class PinningConfig:
    """[pinning]: plan pins (issue 30). A finding caused by a plan change gets the plan before it proposed as
    a pg_hint_plan pin; nothing is written to any server unless mode is apply and the instance opted in
    (docs/pins.md)."""

    mode: Literal["propose", "apply"] = "propose"
    """propose: record proposals in the lake's plan_pins ledger, write nothing to any server; apply: also
    apply each new proposal (and let `radar pins apply ID` write) on the instances of apply_instances."""
    apply_instances: tuple[str, ...] = ()
    """With mode = apply, the instances pins may be applied on (opt-in per instance); empty: none."""
    allow: tuple[str, ...] = ()
    """Only these queries get pins, each "<queryid>" or "<instance>:<queryid>"; empty: every query."""
    deny: tuple[str, ...] = ()
    """These queries never get pins ("<queryid>" or "<instance>:<queryid>"); beats allow."""
    application_name: str = ""
    """hint_plan.hints.application_name of a pin: "" applies it to every session, a name only to sessions
    with that application_name."""
    verify_within: timedelta = timedelta(minutes=30)
    """An applied pin not verified this long after it was applied (latency significantly below the regressed
    level and back at the level before, by the detector's test) failed: `radar pins check` removes it."""
    ttl: timedelta = timedelta(days=7)
    """A pin in place this long after it was applied is removed by `radar pins check` (plans and data move
    on: a pin is a stop-gap, not a fix)."""
    gone_after: timedelta = timedelta(days=1)
    """A verified pin whose query id has had no samples this long, while the instance's samples went on, is
    removed by `radar pins check` (the query was changed or retired: its pin would only wait for the TTL)."""
    verify_min_samples: int = 5
    """Pinned samples (intervals wholly after the pin) needed before a pin is judged."""
    verify_residual_share: float = 0.2
    """A pin that made the query significantly faster is also back at the level before when what is left of
    the slowdown is at most this share of the regression's, on a log scale (log(pinned / before) <= this x
    log(regressed / before)). A pin has a cost (pg_hint_plan looks its hint table up whenever a statement is
    planned): on the real-server tier a ~8 us query came back at 0.0094 ms against 0.0077 ms before a x280
    regression (+23%, over the detector's 20%), and a pin never verified is removed, bringing the
    regression back. 0: within the detector's ``latency_change_threshold`` of the level before (or not
    significantly slower) only."""
    pin_role: str = "radar_pinner"
    """The NOLOGIN role pins are written as (radar setup-sql --pins creates it: hint_plan.hints only); the
    instance's login SETs ROLE to it."""

    def __post_init__(self) -> None:
        if self.mode not in (PIN_MODE_PROPOSE, PIN_MODE_APPLY):
            raise ValueError(f"[pinning] mode must be 'propose' or 'apply', not {self.mode!r}")
        for key in ("allow", "deny"):
            for entry in getattr(self, key):
                parse_query_entry(entry, key)
        if not 0.0 <= self.verify_residual_share < 1.0:
            raise ValueError("[pinning] verify_residual_share must be in [0, 1)")
        if self.verify_min_samples < 2:
            raise ValueError("[pinning] verify_min_samples must be at least 2 (Welch's test needs two)")
        if self.ttl <= self.verify_within:
            raise ValueError(
                "[pinning] ttl must be longer than verify_within (a pin is judged before it expires)"
            )
        if self.verify_within <= timedelta(0):
            raise ValueError("[pinning] verify_within must be a positive duration")
        if self.gone_after <= timedelta(0):
            raise ValueError("[pinning] gone_after must be a positive duration")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]{0,62}", self.pin_role):
            raise ValueError(f"[pinning] pin_role must be a plain SQL name, not {self.pin_role!r}")
        if "\x00" in self.application_name or len(self.application_name.encode()) > 63:
            raise ValueError(
                "[pinning] application_name must be at most 63 bytes without NUL (PostgreSQL's limit)"
            )

    def query_allowed(self, instance: str, queryid: int) -> str | None:
        """None when pins are allowed for the query; else why not (the deny or allow list)."""

        def listed(entries: tuple[str, ...]) -> bool:
            parsed = [parse_query_entry(e, "") for e in entries]
            return any(q == queryid and (i is None or i == instance) for i, q in parsed)

        if listed(self.deny):
            return "the query is in [pinning] deny"
        if self.allow and not listed(self.allow):
            return "the query is not in [pinning] allow"
        return None

    def applies_on(self, instance: str) -> bool:
        """Whether pins may be written to this instance: mode apply and the instance opted in."""
        return self.mode == PIN_MODE_APPLY and instance in self.apply_instances
