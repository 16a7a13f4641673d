"""Typed Dagster resources: where things are (the lake, the fleet, the deploy inbox, the reports folder).

Every threshold is run config (orchestration.run_config), not a resource field. definitions.py builds these
from the config file's [lake] root, [deploys] inbox and [report] out; the class defaults are the built-in
ones. A deployment that takes a location from the environment at run time says so the Dagster way:
``LakeResource(root=dg.EnvVar("RADAR_LAKE_ROOT"))`` in its definitions.
"""

from pathlib import Path

import dagster as dg

from jobs.alerts.config import AlertsConfig
from jobs.collect.fleet import FleetConfig
from jobs.config.sections import DeploysSettings, LakeSettings, ReportSettings
from jobs.errors import ConfigError
from jobs.lake.storage import LakePath, lake_path
from jobs.local.embedded import EmbeddedFleet
from jobs.redaction import install_log_scrubber


class LakeResource(dg.ConfigurableResource):
    """The root of the Parquet lake ([lake] root): a folder or an object-store URI (``s3://bucket/lake``,
    credentials from the store's environment chain, never from run config)."""

    root: str = LakeSettings.root

    @property
    def path(self) -> LakePath:
        return lake_path(self.root)


class FleetResource(dg.ConfigurableResource):
    """The fleet to snapshot: a fleet TOML file, or a running embedded fleet (demo, tests)."""

    fleet_file: str = "data/fleet.toml"
    embedded_root: str = ""

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
    """The folder where deploy tools drop CSV/JSON deploy files ([deploys] inbox); its limits are
    deploy_events' run config."""

    inbox: str = DeploysSettings.inbox

    @property
    def path(self) -> Path:
        return Path(self.inbox)


class ReportResource(dg.ConfigurableResource):
    """Where reports are published ([report] out)."""

    root: str = ReportSettings.out

    @property
    def path(self) -> Path:
        return Path(self.root)


class AlertResource(dg.ConfigurableResource):
    """Where alerts are written ([alerts] file and dead_letter_file); the rest of [alerts] is
    regression_alerts' run config. Webhook URLs are neither: they are read when the asset runs, from the
    config file or the environment variables [alerts] names (run config is stored and shown by Dagster)."""

    file: str = AlertsConfig.file
    dead_letter_file: str = AlertsConfig.dead_letter_file
