"""The one configuration model, above the domains: each domain owns its settings class; this package
aggregates them into the config file (every threshold) with the fleet file (``jobs.collect.fleet``).

- ``sections``: one dataclass per table of ``data/radar.toml`` (the domains' classes, extended).
- ``loader``: defaults < file < environment < flags, strict, with provenance.
- ``flags``: the design's command-line flags as overrides.
- ``reference``: the configuration reference (a docs site page) and the example file, from the classes.
"""
