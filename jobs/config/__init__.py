"""The one configuration model: the fleet file (which instances) and the config file (every threshold).

- ``jobs.config.fleet``: the fleet TOML (instances, DSNs from the environment) and CollectorConfig.
- ``jobs.config.sections``: one dataclass per table of ``data/radar.toml``.
- ``jobs.config.loader``: defaults < file < environment < flags, strict, with provenance.
- ``jobs.config.flags``: the design's command-line flags as overrides.
- ``jobs.config.reference``: the README's configuration reference, generated from the classes.
"""

from jobs.config.fleet import (
    COLLECTOR_RANGES,
    INSTANCE_KEYS,
    NAME_PATTERN,
    TOP_LEVEL_TABLES,
    CollectorConfig,
    ConfigError,
    FleetConfig,
    InstanceConfig,
    closest,
    redact_dsn,
)
from jobs.config.loader import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    LoadedSettings,
    Override,
    build_section,
    format_duration,
    load_settings,
    parse_duration,
    section_to_plain,
)
from jobs.config.sections import (
    AlertsConfig,
    DeploysSettings,
    DetectorSettings,
    LakeSettings,
    PlansSettings,
    RadarSettings,
    ReportSettings,
)

__all__ = [
    "COLLECTOR_RANGES",
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "INSTANCE_KEYS",
    "NAME_PATTERN",
    "TOP_LEVEL_TABLES",
    "AlertsConfig",
    "CollectorConfig",
    "ConfigError",
    "DeploysSettings",
    "DetectorSettings",
    "FleetConfig",
    "InstanceConfig",
    "LakeSettings",
    "LoadedSettings",
    "Override",
    "PlansSettings",
    "RadarSettings",
    "ReportSettings",
    "build_section",
    "closest",
    "format_duration",
    "load_settings",
    "parse_duration",
    "redact_dsn",
    "section_to_plain",
]
