"""The one configuration model: the fleet file (which instances) and the config file (every threshold).

- ``jobs.config.fleet``: the fleet TOML (instances, DSNs from the environment) and CollectorConfig.
- ``jobs.config.sections``: one dataclass per table of ``data/radar.toml``.
- ``jobs.config.loader``: defaults < file < environment < flags, strict, with provenance.
- ``jobs.config.flags``: the design's command-line flags as overrides.
- ``jobs.config.reference``: the README's configuration reference, generated from the classes.
"""

from __future__ import annotations

from jobs.lazy import lazy_exports

# Loaded on first use (PEP 562): `radar COMMAND --help` imports jobs.config.flags alone, without the
# fleet file's and the lake's modules (pglast, psycopg, polars).
_EXPORTS = {
    **dict.fromkeys(
        (
            "COLLECTOR_RANGES",
            "INSTANCE_KEYS",
            "NAME_PATTERN",
            "TOP_LEVEL_TABLES",
            "CollectorConfig",
            "ConfigError",
            "FleetConfig",
            "InstanceConfig",
            "closest",
            "redact_dsn",
        ),
        "jobs.config.fleet",
    ),
    **dict.fromkeys(
        (
            "CONFIG_ENV",
            "DEFAULT_CONFIG_FILE",
            "LoadedSettings",
            "build_section",
            "format_duration",
            "load_settings",
            "parse_duration",
            "section_to_plain",
        ),
        "jobs.config.loader",
    ),
    "Override": "jobs.config.flags",
    **dict.fromkeys(
        (
            "AlertsConfig",
            "DeploysSettings",
            "DetectorSettings",
            "LakeSettings",
            "PlansSettings",
            "RadarSettings",
            "ReportSettings",
            "ScheduleSettings",
        ),
        "jobs.config.sections",
    ),
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
