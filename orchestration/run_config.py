"""Typed Dagster run config generated from the settings sections (jobs.config): one ``dg.Config`` class per
section an asset reads, its defaults the config file's values, so the launchpad shows and edits them.

The file is read once when the definitions load: ``RADAR_CONFIG`` names it, else ``data/radar.toml`` when
it exists, else the built-in defaults. No setting is taken from the environment here (``RADAR_<SECTION>__
<KEY>`` overrides are the CLI's): a deployment sets values at run time the Dagster way, in run config
(``{env: VAR}`` works for any field) or with ``dg.EnvVar`` on a resource. Durations are strings with a unit
("30m"), as in the file; a run's values go through ``build_section``, so they are checked exactly as the
file's are and a bad one fails the run with the same message, naming the key.
"""

import dataclasses
import functools
import os
import types
import typing
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import dagster as dg
import pydantic

from jobs.config.loader import CONFIG_ENV, LoadedSettings, build_section, load_settings, section_to_plain
from jobs.config.reference import field_docs  # the reference's text of each key
from jobs.config.sections import SECRET_KEYS, RadarSettings
from jobs.errors import ConfigError


@functools.cache
def definitions_settings() -> LoadedSettings:
    """The settings the definitions are built from: the config file (``RADAR_CONFIG``, else
    ``data/radar.toml`` when it exists, else defaults), with no environment overrides."""
    path = os.environ.get(CONFIG_ENV) or None  # where the file is, not a setting
    return load_settings(path, env={})


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "_").split("_"))


def _scalar_type(hint: Any) -> Any:
    """The run config type of one field's annotation (durations and times are strings, as in the file)."""
    origin = typing.get_origin(hint)
    if hint in (timedelta, datetime):
        return str
    if hint in (bool, int, float, str):
        return hint
    if origin is typing.Literal:
        return str  # build_section names the choices when the value is none of them
    if origin in (tuple, list):
        return list[_scalar_type(typing.get_args(hint)[0])]
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(hint) if a is not type(None)]
        return _scalar_type(kept[0]) | None
    raise TypeError(f"no run config type for {hint!r}")


def _model(cls: type, plain: Mapping[str, Any], name: str, exclude: frozenset[str]) -> type[dg.Config]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    fields: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        if item.name in exclude or item.name not in plain:
            continue
        hint, default = hints[item.name], plain[item.name]
        description = docs.get(item.name)
        if dataclasses.is_dataclass(hint):
            nested = _model(hint, default, f"{name}{_pascal(item.name)}", frozenset())
            fields[item.name] = (nested, pydantic.Field(default=nested(), description=description))
        else:
            fields[item.name] = (_scalar_type(hint), pydantic.Field(default=default, description=description))
    return pydantic.create_model(name, __base__=dg.Config, __doc__=cls.__doc__, **fields)


def section_config(
    section: str,
    *,
    exclude: tuple[str, ...] = (),
    extra: Mapping[str, tuple[type, Any]] | None = None,
    settings: RadarSettings | None = None,
) -> type[dg.Config]:
    """The ``dg.Config`` class of one settings section (``"detector"``): a field per section field, nested
    tables as nested classes, defaults from ``settings`` (the definitions' file when None). ``exclude``:
    fields that are not run config (where things are: those are resources; secrets are always left out,
    and keep the file's value); ``extra``: run-only fields
    (``{"full_run": (bool, pydantic.Field(default=False, description=...))}``)."""
    current = getattr(settings or definitions_settings().settings, section)
    cls = typing.get_type_hints(RadarSettings)[section]
    # Secrets never become run config: the launchpad and every run's record would show them.
    secrets = {key.split(".", 1)[1] for key in SECRET_KEYS if key.startswith(f"{section}.")}
    name = f"{_pascal(section)}RunConfig"
    model = _model(cls, section_to_plain(current), name, frozenset(exclude) | secrets)
    if not extra:
        return model
    return pydantic.create_model(model.__name__, __base__=model, __doc__=model.__doc__, **extra)


def _changed(given: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The run's values that differ from the definitions' (nested tables recursively); run-only fields
    (``extra``) are not section keys and are left out."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in current:
            continue
        if isinstance(value, Mapping) and isinstance(current[key], Mapping):
            nested = _changed(value, current[key])
            if nested:
                out[key] = nested
        elif value != current[key]:
            out[key] = value
    return out


def section_from_config(
    section: str,
    config: dg.Config,
    asset: str,
    *,
    base: object | None = None,
    settings: RadarSettings | None = None,
) -> Any:
    """The section a run's config describes: the values the run changed, applied to ``base`` (default: the
    definitions' section) and checked as the file's are (``build_section``). A bad value fails the run
    with a ``dg.Failure`` naming the key; nothing else is changed."""
    current = getattr(settings or definitions_settings().settings, section)
    raw = _changed(config.model_dump(), section_to_plain(current))
    cls = typing.get_type_hints(RadarSettings)[section]
    label = f"run config of {asset} ([{section}])"
    try:
        return build_section(cls, raw, label, current if base is None else base)
    except ConfigError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None


def settings_from_config(
    section: str, config: dg.Config, asset: str, *, settings: RadarSettings | None = None
) -> RadarSettings:
    """The definitions' settings with ``section`` replaced by the run's (for RadarSettings'
    ``detection_config()`` / ``cycle_config()``)."""
    base = settings or definitions_settings().settings
    return dataclasses.replace(base, **{section: section_from_config(section, config, asset, settings=base)})
