"""Errors of bad input that several layers raise (a fleet file, a config file, a duration); the CLI maps
each to its exit code."""

from __future__ import annotations


class ConfigError(ValueError):
    """The fleet file is unusable; the message names the file and the instance."""
