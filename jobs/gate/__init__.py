"""The gate: measure a SQL workload on a baseline and a candidate database and say PASS / WARN / BLOCK /
INCONCLUSIVE. Its thresholds and levels live in its lowest module, ``config`` (stdlib-only, read by the
config file loader and the CLI without importing the runner and its statistics).
"""
