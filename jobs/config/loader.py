"""Load the configuration: defaults < the file < the environment < flags (or Dagster run config).

Every layer is checked on its own, so an error names where the bad value came from (the file and its
key, the environment variable, the flag) and, for an unknown key, the closest valid one. A layer's values
are converted to the field's type (durations are strings with a unit: "30m", "90s", "2h", "7d", "250ms");
then each section is built by its config class, whose own checks (ranges, relations between keys) run too.
``LoadedSettings.sources`` says for every key where its value came from (``radar config show``)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, Literal

from jobs.collect.fleet import CollectorConfig, FleetConfig, closest, read_toml
from jobs.config.flags import Override
from jobs.config.sections import SECRET_KEYS, RadarSettings
from jobs.durations import format_duration, parse_duration
from jobs.errors import ConfigError

DEFAULT_CONFIG_FILE = Path("data/radar.toml")
CONFIG_ENV = "RADAR_CONFIG"
ENV_PREFIX = "RADAR_"
ENV_SEPARATOR = "__"
DEFAULT = "default"

Key = tuple[str, ...]

PROBABILITY_KEYS = re.compile(r"p_value|fdr_q$|confidence$|quantile$|_share$")
"""Keys matching are probabilities or fractions: in (0, 1]. Every other number must be >= 0 and finite
(no threshold of the radar is negative); the sections' own checks add the tighter ranges."""


@dataclass(frozen=True)
class Leaf:
    key: Key
    type: Any
    default: object


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and is_dataclass(tp)


def section_keys(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.init]


def leaves(cls: type = RadarSettings, prefix: Key = (), base: object | None = None) -> list[Leaf]:
    """Every key of the configuration, in declaration order (tables depth first), with its default: the
    value in the parent's default (``[detector.changepoint]`` defaults are the detector's, not the
    change point module's)."""
    instance = cls() if base is None else base
    out: list[Leaf] = []
    hints = _hints(cls)
    for item in fields(cls):
        if not item.init:
            continue
        tp = hints[item.name]
        if _is_section(tp):
            out.extend(leaves(tp, (*prefix, item.name), getattr(instance, item.name)))
        else:
            out.append(Leaf((*prefix, item.name), tp, getattr(instance, item.name)))
    return out


def dotted(key: Key) -> str:
    return ".".join(key)


def where(key: Key) -> str:
    """``[detector.changepoint] max_p_value``: how a key is written in the file."""
    return f"[{dotted(key[:-1])}] {key[-1]}" if len(key) > 1 else key[0]


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if tp is timedelta:
        return 'a duration such as "30m"'
    if typing.get_origin(tp) is tuple:
        return "a list of numbers" if typing.get_args(tp)[0] is float else "a list of strings"
    names = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        datetime: "a date-time",
    }
    return names.get(tp, getattr(tp, "__name__", str(tp)))


INT64_MAX = 2**63 - 1
MAX_DURATION = timedelta(days=100 * 365)
"""Durations are compared with the lake's microsecond timestamps: a century is far beyond any window and
far inside what they hold (2^63 us, about 292,000 years)."""


def convert(tp: Any, value: object, key: Key, label: str) -> object:
    """``value`` (from TOML, the environment or a flag) as the field's type; ConfigError naming the key."""
    name = f"{label}: {where(key)}"
    wrong = ConfigError(f"{name} must be {_type_name(tp)}, not {value!r}")
    if typing.get_origin(tp) is Literal:
        if value not in typing.get_args(tp):
            suggestion = closest(str(value), [str(v) for v in typing.get_args(tp)])
            raise ConfigError(f"{name} must be {_type_name(tp)}, not {value!r}{suggestion}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise wrong
        return value
    if tp is int or tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        if tp is int and not isinstance(value, int):
            if not float(value).is_integer():
                raise wrong
            value = int(value)
        number = float(value)
        if not math.isfinite(number):
            raise ConfigError(f"{name} must be finite, not {value!r}")
        if tp is int and not -INT64_MAX - 1 <= int(value) <= INT64_MAX:
            # Compared with the lake's 64-bit columns: a larger value overflowed there (a min_executions
            # above it made `radar samples --rebuild` drop every sample).
            raise ConfigError(f"{name} must be at most {INT64_MAX:,} (a 64-bit integer), not {value!r}")
        if PROBABILITY_KEYS.search(key[-1]):
            if not 0.0 < number <= 1.0:
                raise ConfigError(f"{name} must be in (0, 1], not {value!r}")
        elif number < 0:
            raise ConfigError(f"{name} must be >= 0, not {value!r}")
        return value if tp is int else float(value)
    if tp is str:
        if not isinstance(value, str):
            raise wrong
        return value
    if tp is timedelta:
        if isinstance(value, timedelta):
            duration = value
        elif isinstance(value, str):
            duration = parse_duration(value, name)
        else:
            raise ConfigError(
                f'{name} must be a duration with a unit (e.g. "30m", "90s"), not {value!r}: '
                "a bare number is ambiguous"
            )
        if duration < timedelta(0):
            raise ConfigError(f"{name} must not be negative")
        if duration > MAX_DURATION:
            raise ConfigError(f"{name} must be at most {MAX_DURATION.days:,} days (the lake's time range)")
        return duration
    if tp is datetime:
        moment = value
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise wrong from None
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise ConfigError(f"{name} must be a date-time with a time zone (e.g. 2000-01-01T00:00:00Z)")
        return moment
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[0] is float:
        if not isinstance(value, list | tuple):
            raise wrong
        return tuple(float(convert(float, v, key, label)) for v in value)  # type: ignore[arg-type]
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise wrong
        return tuple(value)
    raise ConfigError(f"{name}: unsupported type {tp!r}")  # a new field type: teach convert() about it


def plain(value: object) -> object:
    """A typed value as it is written in the file (durations "30m", tuples lists, date-times ISO)."""
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


# ---------------------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------------------


def _typed_layer(
    raw: Mapping[str, object], label: str, cls: type = RadarSettings, prefix: Key = ()
) -> dict[Key, object]:
    """A nested mapping (a TOML document, the environment's tables) as typed leaves; strict."""
    out: dict[Key, object] = {}
    hints = _hints(cls)
    valid = section_keys(cls)
    aliases: Mapping[str, str] = getattr(cls, "CONFIG_ALIASES", {})
    for given, value in raw.items():
        name = aliases.get(given, given)
        key = (*prefix, name)
        if name != given and name in raw:
            raise ConfigError(f"{label}: [{dotted(prefix)}] sets {name} twice ({given} is its other name)")
        if name not in valid:
            table = f"[{dotted(prefix)}]" if prefix else "the top level"
            raise ConfigError(
                f"{label}: unknown key {name!r} in {table}{closest(name, valid)}; valid: {', '.join(valid)}"
            )
        tp = hints[name]
        if _is_section(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{label}: [{dotted(key)}] must be a table, not {value!r}")
            out.update(_typed_layer(value, label, tp, key))
        else:
            out[key] = convert(tp, value, key, label)
    return out


def _leaf_types() -> dict[Key, Any]:
    return {leaf.key: leaf.type for leaf in leaves()}


def canonical_key(key: Key, cls: type = RadarSettings) -> Key:
    """``key`` with a name a section also accepts (its class's ``CONFIG_ALIASES``, e.g. the drift design's
    ``js_block_threshold``) replaced by the field's own name; any other key as it is."""
    out: list[str] = []
    for part in key:
        if cls is None:
            out.append(part)
            continue
        name = getattr(cls, "CONFIG_ALIASES", {}).get(part, part)
        out.append(name)
        hints = _hints(cls) if dataclasses.is_dataclass(cls) else {}
        cls = hints.get(name) if name in hints and _is_section(hints[name]) else None
    return tuple(out)


def _env_layer(env: Mapping[str, str]) -> tuple[dict[Key, object], dict[Key, str]]:
    """``RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD=0.3`` -> detector.latency_change_threshold = 0.3."""
    types = _leaf_types()
    values: dict[Key, object] = {}
    sources: dict[Key, str] = {}
    for variable in sorted(env):
        if not variable.startswith(ENV_PREFIX) or ENV_SEPARATOR not in variable:
            continue
        key = canonical_key(tuple(part.lower() for part in variable[len(ENV_PREFIX) :].split(ENV_SEPARATOR)))
        label = f"environment variable {variable}"
        if key not in types:
            candidates = [ENV_PREFIX + ENV_SEPARATOR.join(k).upper() for k in types]
            raise ConfigError(f"{label}: no such setting{closest(variable, candidates)}")
        values[key] = _value_of_text(types[key], env[variable], key, label)
        sources[key] = label
    return values, sources


def _value_of_text(tp: Any, text: str, key: Key, label: str) -> object:
    """A value given as text (an environment variable, ``--set``) read as a TOML value, then typed."""
    try:
        value: object = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    if tp is str or tp is timedelta:
        value = text  # a string setting is the text as given, quotes or not
    return convert(tp, value, key, label)


def setting_override(assignment: str) -> Override:
    """``--set drift.samples.stale_block_share=0.1``: any key of the configuration, its value read as in a
    ``RADAR_`` environment variable, as an override (it beats the file and the environment)."""
    name, sep, text = assignment.partition("=")
    name = name.strip()
    # The key only: the value is shown (or, for a secret, withheld) in its own column, and an error about a
    # mistyped key must not print a webhook's token into a terminal or a CI log.
    label = f"flag --set {name}"
    if not sep or not name:
        raise ConfigError(
            f"{label}: expected KEY=VALUE with a dotted key, e.g. drift.samples.stale_window=15m"
        )
    types = _leaf_types()
    key = canonical_key(tuple(name.split(".")))
    if key not in types:
        raise ConfigError(f"{label}: no such setting {name!r}{closest(name, [dotted(k) for k in types])}")
    return Override(dotted(key), _value_of_text(types[key], text.strip(), key, label), label)


def _override_layer(overrides: Sequence[Override]) -> tuple[dict[Key, object], dict[Key, str]]:
    types = _leaf_types()
    values: dict[Key, object] = {}
    sources: dict[Key, str] = {}
    for item in overrides:
        key = canonical_key(tuple(item.key.split(".")))
        if key not in types:
            raise ConfigError(
                f"{item.source}: no such setting {item.key!r}{closest(item.key, [dotted(k) for k in types])}"
            )
        values[key] = convert(types[key], item.value, key, item.source)
        sources[key] = item.source
    return values, sources


def _construct(
    cls: type, values: Mapping[Key, object], sources: Mapping[Key, str], prefix: Key = (), base: object = None
) -> Any:
    """``base`` (default: ``cls()``) with the typed leaves under ``prefix`` applied; a nested section starts
    from the parent's value of it. The class's own checks run; their errors name the section."""
    start = cls() if base is None else base
    hints = _hints(cls)
    changes: dict[str, object] = {}
    for item in fields(cls):
        if not item.init:
            continue
        key = (*prefix, item.name)
        if _is_section(hints[item.name]):
            if any(k[: len(key)] == key for k in values):
                changes[item.name] = _construct(
                    hints[item.name], values, sources, key, getattr(start, item.name)
                )
        elif key in values:
            changes[item.name] = values[key]
    if not changes:
        return start
    try:
        return replace(start, **changes)
    except (ConfigError, ValueError, TypeError) as exc:
        origins = sorted({sources[k] for k in values if k[: len(prefix)] == prefix and k in sources})
        text = str(exc)
        if prefix and not text.startswith("["):
            text = f"[{dotted(prefix)}] {text}"
        raise ConfigError(f"{', '.join(origins) or 'defaults'}: {text}") from None


def read_config_file(path: Path) -> dict[str, object]:
    return read_toml(path, "config file")


@dataclass(frozen=True)
class LoadedSettings:
    settings: RadarSettings
    sources: Mapping[str, str]
    """Dotted key -> "default", "file data/radar.toml", "environment variable RADAR_X", "flag --x"..."""
    path: Path | None
    """The config file read, or None (defaults only)."""

    def rows(self) -> list[dict[str, object]]:
        """Every key, its effective value (as written in the file; secrets masked) and its source."""
        out = []
        for leaf in leaves():
            value: object = self.settings
            for part in leaf.key:
                value = getattr(value, part)
            key = dotted(leaf.key)
            shown = ("<set>" if value else "") if key in SECRET_KEYS else plain(value)
            out.append({"key": key, "value": shown, "source": self.sources.get(key, DEFAULT)})
        return out

    def collector_for(self, fleet: FleetConfig) -> CollectorConfig:
        """The collector config of a snapshot: the fleet file's [collector], with every key this
        configuration sets (file, environment, flag) taking precedence."""
        base = fleet.collector
        chosen = {
            f.name: getattr(
                self.settings.collector
                if self.sources.get(f"collector.{f.name}", DEFAULT) != DEFAULT
                else base,
                f.name,
            )
            for f in fields(CollectorConfig)
        }
        return CollectorConfig(**chosen)


def load_settings(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[Override] = (),
    require_file: bool = False,
) -> LoadedSettings:
    """The effective configuration. ``path`` None: $RADAR_CONFIG, else data/radar.toml when it exists,
    else defaults only; a path that is named (argument or $RADAR_CONFIG) must exist."""
    environment = os.environ if env is None else env
    named = path if path is not None else environment.get(CONFIG_ENV) or None
    chosen: Path | None = (
        Path(named) if named else (DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None)
    )
    if chosen is None and require_file:
        raise ConfigError(
            f"no config file: {DEFAULT_CONFIG_FILE} does not exist and ${CONFIG_ENV} is not set"
        )
    values: dict[Key, object] = {}
    sources: dict[Key, str] = {}
    if chosen is not None:
        label = f"config file {chosen}"
        file_values = _typed_layer(read_config_file(chosen), label)
        values.update(file_values)
        sources.update(dict.fromkeys(file_values, f"file {chosen}"))
    for layer_values, layer_sources in (_env_layer(environment), _override_layer(overrides)):
        values.update(layer_values)
        sources.update(layer_sources)
    settings = _construct(RadarSettings, values, sources)
    return LoadedSettings(settings, {dotted(k): v for k, v in sources.items()}, chosen)


def build_section(cls: type, raw: Mapping[str, object], label: str, base: object = None) -> Any:
    """One section from a nested mapping (Dagster run config), with the file's rules; keys not in ``raw``
    keep ``base``'s values (default: the class's defaults)."""
    values = _typed_layer(raw, label, cls)
    return _construct(cls, values, dict.fromkeys(values, label), (), base)


def section_to_plain(instance: object) -> dict[str, object]:
    """A section as the nested mapping its table would hold (durations "30m", tuples lists)."""
    out: dict[str, object] = {}
    hints = _hints(type(instance))
    for item in fields(instance):  # type: ignore[arg-type]
        if not item.init:
            continue
        value = getattr(instance, item.name)
        out[item.name] = section_to_plain(value) if _is_section(hints[item.name]) else plain(value)
    return out
