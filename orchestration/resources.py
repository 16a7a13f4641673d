"""Typed Dagster resources: where the lake is and which fleet to watch."""

import os
from pathlib import Path

import dagster as dg

from jobs.collect.deploys import DeployInboxConfig
from jobs.config import AlertsConfig, ConfigError, FleetConfig
from jobs.fleet import EmbeddedFleet
from jobs.plans.capture import PlanCaptureConfig
from jobs.redaction import install_log_scrubber

DEFAULT_LAKE_ROOT = os.environ.get("RADAR_LAKE_ROOT", "data/lake")
DEFAULT_FLEET_FILE = os.environ.get("RADAR_FLEET_FILE", "data/fleet.toml")
DEFAULT_EMBEDDED_ROOT = os.environ.get("RADAR_EMBEDDED_FLEET", "")


class LakeResource(dg.ConfigurableResource):
    """The root folder of the Parquet lake."""

    root: str = DEFAULT_LAKE_ROOT

    @property
    def path(self) -> Path:
        return Path(self.root)


class FleetResource(dg.ConfigurableResource):
    """The fleet to snapshot: a fleet TOML file, or a running embedded fleet (demo, tests)."""

    fleet_file: str = DEFAULT_FLEET_FILE
    embedded_root: str = DEFAULT_EMBEDDED_ROOT

    def load(self) -> FleetConfig:
        """The fleet; its DSNs' secrets are removed from every log record (and so Dagster's event log)."""
        if self.embedded_root:
            fleet = EmbeddedFleet.load(Path(self.embedded_root))
            if fleet is None:
                raise ConfigError(f"no embedded fleet at {self.embedded_root} (radar fleet up)")
            config = FleetConfig.from_embedded(fleet)
        else:
            config = FleetConfig.load(Path(self.fleet_file))
        install_log_scrubber(*config.dsns())
        return config

    def find(self) -> FleetConfig | None:
        """The fleet, or None when neither the embedded fleet nor the fleet file exists."""
        if self.embedded_root:
            fleet = EmbeddedFleet.load(Path(self.embedded_root))
            return None if fleet is None else FleetConfig.from_embedded(fleet)
        return FleetConfig.load(Path(self.fleet_file)) if Path(self.fleet_file).exists() else None


class DeployInboxResource(dg.ConfigurableResource):
    """The folder where deploy tools drop CSV/JSON deploy files, and whether instance names the fleet
    does not know are recorded anyway."""

    inbox: str = os.environ.get("RADAR_DEPLOY_INBOX", "data/deploys")
    allow_unknown_instance: bool = False
    max_file_bytes: int = DeployInboxConfig.max_file_bytes
    max_events_per_file: int = DeployInboxConfig.max_events_per_file
    max_future_s: float = DeployInboxConfig.max_future_s

    @property
    def config(self) -> DeployInboxConfig:
        return DeployInboxConfig(
            allow_unknown_instance=self.allow_unknown_instance,
            max_file_bytes=self.max_file_bytes,
            max_events_per_file=self.max_events_per_file,
            max_future_s=self.max_future_s,
        )

    @property
    def path(self) -> Path:
        return Path(self.inbox)


class PlanCaptureResource(dg.ConfigurableResource):
    """Whether the snapshot schedule also captures plans (off by default: EXPLAIN costs server time)."""

    capture_plans: bool = os.environ.get("RADAR_CAPTURE_PLANS", "0") == "1"
    top_n: int = PlanCaptureConfig.top_n
    ingest_auto_explain: bool = True
    statement_timeout_ms: int = PlanCaptureConfig.statement_timeout_ms
    lock_timeout_ms: int = PlanCaptureConfig.lock_timeout_ms
    explain_mode: str = PlanCaptureConfig.explain_mode
    explain_helper: str = PlanCaptureConfig.explain_helper
    unsafe_allow_privileged_explain: bool = False

    @property
    def config(self) -> PlanCaptureConfig:
        return PlanCaptureConfig(
            top_n=self.top_n,
            statement_timeout_ms=self.statement_timeout_ms,
            lock_timeout_ms=self.lock_timeout_ms,
            explain_mode=self.explain_mode,
            explain_helper=self.explain_helper,
            unsafe_allow_privileged_explain=self.unsafe_allow_privileged_explain,
        )


class ReportResource(dg.ConfigurableResource):
    """Where reports are published."""

    root: str = os.environ.get("RADAR_REPORT_ROOT", "data/reports")

    @property
    def path(self) -> Path:
        return Path(self.root)


class AlertResource(dg.ConfigurableResource):
    """Alert settings: the [alerts] section of the radar config file (``config_file``, or $RADAR_CONFIG /
    data/radar.toml when empty), read when the asset runs; ``file`` and ``dead_letter_file`` override the
    file's paths when set. Webhook URLs are never resource config (run config is stored and shown by
    Dagster): they come from the config file or the environment variables it names, at run time."""

    config_file: str = ""
    file: str = ""
    dead_letter_file: str = ""

    def settings(self) -> "AlertsConfig":
        from dataclasses import replace

        from jobs.config import load_settings

        alerts = load_settings(self.config_file or None).settings.alerts
        changes = {"file": self.file, "dead_letter_file": self.dead_letter_file}
        return replace(alerts, **{k: v for k, v in changes.items() if v})
