"""Gate scenario suites: SQL scenario files, TOML workloads and Python scenarios, parsed and validated.

A scenario is a unit of measurement: statements run once per database (``@init``), before every
measurement untimed (``@before``), and the measured ``@benchmark`` section, whose part between the
``@A`` and ``@B`` markers is what the gate times (the whole section when there are no markers).

SQL file format (directives are ``--`` comments alone on their line; everything else is SQL)::

    -- @shared                   (file level, before the first @scenario: once per database)
    CREATE TABLE IF NOT EXISTS gate_orders (id int PRIMARY KEY, customer_id int, amount numeric);
    -- @scenario orders_by_customer
    -- @option params = [{ int_range = [1, 20000] }]
    -- @option prepared = true
    -- @option settings = { work_mem = "64kB" }
    -- @init
    ANALYZE gate_orders;
    -- @before
    -- @benchmark
    BEGIN;
    -- @A
    SELECT count(*) FROM gate_orders WHERE customer_id = $1;
    -- @B
    COMMIT;

``@option KEY = VALUE`` takes any TOML value; the keys, all optional and placed between ``@scenario`` and
the scenario's first section:

- ``params``: one generator per ``$n`` (as in workload files: ``int_range``, ``int8_range``,
  ``float_range``, ``choice``), drawn once per measurement; ``@before`` and ``@benchmark`` statements
  may use ``$1..$N`` (each statement some of them; every generator used somewhere). ``@shared`` and
  ``@init`` statements run without parameters.
- ``prepared`` (false): benchmark statements run as server-side prepared statements.
- ``plan_cache_mode``: ``auto``, ``force_generic_plan`` or ``force_custom_plan`` (a session SET).
- ``settings``: a table of session settings, string or number values (``{ work_mem = "64kB" }``); names
  match ``[a-z_.]+``, a dotted one quoted or as TOML reads it (``{ pg_trgm.similarity_threshold = 0.5 }``
  is a nested table, flattened back to the dotted name). ``plan_cache_mode`` has its own option.
- ``repeat`` (1): executions of the measured part per measurement.
- ``weight`` (1.0): the scenario's weight in the suite's summary.

Sections ``@init``, ``@before`` and ``@benchmark`` appear at most once per scenario, in any order; the
benchmark must hold at least one measured statement. Statements are split by libpg_query's parser
(pglast), so ``;`` inside strings, dollar quotes and comments is no separator; a statement may end at a
directive without a ``;``.

Other forms, all through ``load_scenarios``:

- ``.toml``: a gate workload (``jobs.gate.workload``); each query becomes a scenario of one measured
  statement whose ``repeat`` is its weight's share of ``GateConfig().calls_per_round``.
- ``.py``: a Python module with ``SCENARIOS``, a list of objects (or dicts) with ``name`` and callables
  ``init(conn)`` and ``before(conn, params)`` (both optional) and ``benchmark(conn, params, mark)``, where
  ``mark("A")`` / ``mark("B")`` bound the measured part; optional ``params`` (generator tables as in
  ``@option params``), ``settings``, ``repeat``, ``weight``; and optionally a module-level ``SHARED`` SQL
  text. **Loading a .py file runs its code with the radar's privileges**: it is only ever loaded from a
  path the operator gives, never discovered.

Every problem is a ``ScenarioError`` naming the file, the line and the scenario.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import random
import re
import sys
import tomllib
import uuid
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pglast import parse_sql
from pglast.parser import ParseError, scan, split

from jobs.gate.config import GateConfig
from jobs.gate.workload import (
    NAME_PATTERN,
    GateWorkload,
    ParamGenerator,
    WorkloadError,
    load_workload,
    parse_generator,
    placeholder_numbers,
)
from jobs.plans.generic import WRITE_NODES
from jobs.sqlfiles import SQL_ROOT

BUILTIN_SCENARIOS: tuple[str, ...] = ("point_lookup", "range_scan", "join", "aggregate_sort", "write_burst")
BUILTIN_FILE = SQL_ROOT / "gate" / "builtin_scenarios.sql"

DIRECTIVES = ("shared", "scenario", "option", "init", "before", "benchmark", "A", "B")
SECTIONS = ("init", "before", "benchmark")
OPTION_KEYS = ("params", "prepared", "plan_cache_mode", "settings", "repeat", "weight")
PLAN_CACHE_MODES = ("auto", "force_generic_plan", "force_custom_plan")
SETTING_NAME = re.compile(r"^[a-z_.]+$")
_DIRECTIVE = re.compile(r"^--\s*@(\S*)\s*(.*?)\s*$")
# Statement kinds EXPLAIN accepts (VALUES and TABLE parse as SelectStmt).
_EXPLAINABLE = ("SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt")


class ScenarioError(ValueError):
    """A scenario file or suite is unusable; the message names the file, the line and the scenario."""


@dataclass(frozen=True)
class ScenarioStatement:
    sql: str
    """One statement, stripped, without the trailing ';'."""
    measured: bool
    """Between the @A and @B markers of the benchmark section (every statement when there are no markers)."""
    line: int | None
    """1-based line of the statement's first token in its file."""
    explainable: bool
    """SELECT / INSERT / UPDATE / DELETE / MERGE / VALUES / TABLE: EXPLAIN-able (plans, queryids)."""
    returns_rows: bool
    """SELECT / VALUES / TABLE, or a write with RETURNING. Only a SELECT / VALUES / TABLE can be wrapped in
    DECLARE CURSOR; a RETURNING write cannot (see ``cursor_allowed``)."""

    @cached_property
    def placeholder_count(self) -> int:
        """The highest ``$n`` in the statement (0 without any): bind ``params[:placeholder_count]``, since
        the server refuses a Bind with more values than the statement's parameters. Computed once."""
        return max(placeholder_numbers(self.sql), default=0)

    @cached_property
    def cursor_allowed(self) -> bool:
        """A query DECLARE CURSOR accepts: a row-returning SELECT / VALUES / TABLE without a data-modifying
        WITH (which PostgreSQL allows only at the top level). A RETURNING write is not. Computed once."""
        return self.returns_rows and _declarable(self.sql)


@dataclass(frozen=True)
class PythonScenario:
    """A scenario of the Python form: the operator's callables, with no-ops for the optional ones."""

    init: Callable[[Any], object]
    before: Callable[[Any, tuple[object, ...]], object]
    benchmark: Callable[[Any, tuple[object, ...], Callable[[str], None]], object]
    module: str


@dataclass(frozen=True)
class Scenario:
    name: str
    """1-64 of [A-Za-z0-9_.-]."""
    init: tuple[str, ...] = ()
    """Once per target database before its first measurement."""
    before: tuple[str, ...] = ()
    """Before every measurement, untimed ($n allowed: the same draw as the benchmark)."""
    benchmark: tuple[ScenarioStatement, ...] = ()
    """At least one measured statement (empty for the Python form: see ``python``)."""
    params: tuple[ParamGenerator, ...] = ()
    """One generator per $n, drawn once per measurement."""
    prepared: bool = False
    plan_cache_mode: str | None = None
    settings: tuple[tuple[str, str], ...] = ()
    repeat: int = 1
    weight: float = 1.0
    source: str = "<memory>"
    line: int | None = None
    python: object | None = field(default=None, compare=False)
    """A ``PythonScenario`` for the Python form, else None."""

    def draw(self, rng: random.Random) -> tuple[object, ...]:
        """One value per generator, in ``$n`` order."""
        return tuple(g.draw(rng) for g in self.params)

    @property
    def measured(self) -> tuple[ScenarioStatement, ...]:
        return tuple(s for s in self.benchmark if s.measured)


@dataclass(frozen=True)
class ScenarioSuite:
    scenarios: tuple[Scenario, ...]
    shared: tuple[str, ...] = ()
    """Once per database before any scenario (schema, data)."""
    source: str = "<memory>"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scenarios)


# ---------------------------------------------------------------------------------------------------------
# Statement classification (pglast parse trees, as jobs.plans.generic)


def _parse_one(sql: str) -> Any:
    return parse_sql(sql)[0].stmt


def _declarable(sql: str) -> bool:
    node = _parse_one(sql)
    if type(node).__name__ != "SelectStmt":
        return False
    with_clause = getattr(node, "withClause", None)
    ctes = getattr(with_clause, "ctes", None) or ()
    return not any(type(getattr(cte, "ctequery", None)).__name__ in WRITE_NODES for cte in ctes)


def classify(sql: str) -> tuple[bool, bool]:
    """(explainable, returns_rows) of one statement that parses."""
    node = _parse_one(sql)
    name = type(node).__name__
    if name == "SelectStmt":
        plain = getattr(node, "intoClause", None) is None  # SELECT … INTO creates a table
        return plain, plain
    if name in _EXPLAINABLE:
        returning = getattr(node, "returningClause", None) or getattr(node, "returningList", None)
        return True, bool(returning)
    return False, False


# ---------------------------------------------------------------------------------------------------------
# The SQL form


@dataclass
class _Directive:
    name: str
    argument: str
    line: int
    start: int  # character offsets of the comment in the file
    end: int


@dataclass
class _Draft:
    name: str
    line: int
    options: dict[str, tuple[Any, int]] = field(default_factory=dict)
    sections: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)  # sql, line, marker place
    section_lines: dict[str, int] = field(default_factory=dict)
    markers: dict[str, int] = field(default_factory=dict)


class _Lines:
    def __init__(self, text: str) -> None:
        self.starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def of(self, offset: int) -> int:
        return bisect_right(self.starts, offset)


def _closest(word: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, known, n=1, cutoff=0.5)
    hint = f"; did you mean {match[0]!r}?" if match else ""
    return f"(known: {', '.join(known)}){hint}"


def _directives(text: str, source: str, lines: _Lines) -> list[_Directive]:
    try:
        tokens = scan(text)
    except ParseError as exc:
        at = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else None
        where = f"{source}:{lines.of(at)}" if at is not None else source
        raise ScenarioError(f"{where}: the file does not scan as SQL: {exc.args[0]}") from None
    found = []
    for token in tokens:
        if token.name != "SQL_COMMENT":
            continue
        comment = text[token.start : token.end + 1]
        match = _DIRECTIVE.match(comment)
        if match is None:
            continue
        line = lines.of(token.start)
        line_start = lines.starts[line - 1]
        if text[line_start : token.start].strip():
            raise ScenarioError(f"{source}:{line}: directive {comment.strip()!r} must be alone on its line")
        name, argument = match.group(1), match.group(2)
        if name not in DIRECTIVES:
            raise ScenarioError(f"{source}:{line}: unknown directive '@{name}' {_closest(name, DIRECTIVES)}")
        found.append(_Directive(name, argument, line, token.start, token.end + 1))
    return found


def _statements(
    text: str, start: int, end: int, lines: _Lines, where: Callable[[int], str]
) -> list[tuple[str, int]]:
    """The statements of ``text[start:end]`` with the line of each one's first token (pglast's split)."""
    chunk = text[start:end]
    try:
        slices = split(chunk, with_parser=True, only_slices=True)
    except ParseError as exc:
        at = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
        raise ScenarioError(
            f"{where(lines.of(start + at))}: statement does not parse: {exc.args[0]}"
        ) from None
    return [(chunk[s].strip(), lines.of(start + s.start)) for s in slices]


def _option(where: str, argument: str) -> tuple[str, Any]:
    key = argument.split("=", 1)[0].strip()
    if "=" not in argument or not key:
        raise ScenarioError(f"{where}: @option needs KEY = VALUE (a TOML value), got {argument!r}")
    if key not in OPTION_KEYS:
        raise ScenarioError(f"{where}: unknown option {key!r} {_closest(key, OPTION_KEYS)}")
    try:
        value = tomllib.loads(f"value = {argument.split('=', 1)[1].strip()}")["value"]
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{where}: option {key!r}: the value is not TOML: {exc}") from None
    return key, value


def _flatten(prefix: str, table: Mapping[str, Any]) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        items += _flatten(f"{name}.", value) if isinstance(value, dict) else [(name, value)]
    return items


def _settings(where: str, raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: option 'settings' must be a table, e.g. {{ work_mem = \"64kB\" }}")
    settings = []
    for name, value in _flatten("", raw):
        if not SETTING_NAME.match(name):
            raise ScenarioError(f"{where}: setting name {name!r} must match [a-z_.]+")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            hint = " (write 'on' or 'off' as a string)" if isinstance(value, bool) else ""
            raise ScenarioError(
                f"{where}: setting {name!r} must be a string or a number, got {value!r}{hint}"
            )
        settings.append((name, str(value)))
    return tuple(settings)


def _params(where: str, raw: Any) -> tuple[ParamGenerator, ...]:
    if not isinstance(raw, list | tuple):
        raise ScenarioError(f"{where}: option 'params' must be a list of generators")
    try:
        return tuple(
            g if isinstance(g, ParamGenerator) else parse_generator(where, i, g) for i, g in enumerate(raw)
        )
    except WorkloadError as exc:
        raise ScenarioError(str(exc)) from None


def _checked_options(where: Callable[[str], str], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validated scenario fields from option values; ``where(key)`` names the option's position."""
    out: dict[str, Any] = {}
    if "params" in raw:
        out["params"] = _params(where("params"), raw["params"])
    if "prepared" in raw:
        if not isinstance(raw["prepared"], bool):
            raise ScenarioError(f"{where('prepared')}: option 'prepared' must be true or false")
        out["prepared"] = raw["prepared"]
    if "plan_cache_mode" in raw:
        mode = raw["plan_cache_mode"]
        if mode not in PLAN_CACHE_MODES:
            raise ScenarioError(
                f"{where('plan_cache_mode')}: option 'plan_cache_mode' must be one of "
                f"{', '.join(PLAN_CACHE_MODES)}, got {mode!r}"
            )
        out["plan_cache_mode"] = mode
    if "settings" in raw:
        out["settings"] = _settings(where("settings"), raw["settings"])
        if "plan_cache_mode" in dict(out["settings"]):
            raise ScenarioError(
                f"{where('settings')}: set plan_cache_mode with its own option, not in settings"
            )
    if "repeat" in raw:
        repeat = raw["repeat"]
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ScenarioError(f"{where('repeat')}: option 'repeat' must be an integer >= 1, got {repeat!r}")
        out["repeat"] = repeat
    if "weight" in raw:
        weight = raw["weight"]
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ScenarioError(f"{where('weight')}: option 'weight' must be a number > 0, got {weight!r}")
        out["weight"] = float(weight)
    return out


def _check_placeholders(where: str, sql: str, line: int, section: str, count: int) -> set[int]:
    numbers = placeholder_numbers(sql)
    bad = [n for n in numbers if not 1 <= n <= count]
    if bad:
        allowed = f"$1..${count}" if count else "none (no params)"
        if section in ("shared", "init"):
            allowed = f"none (@{section} runs without parameters)"
        raise ScenarioError(
            f"{where}: line {line}: @{section} statement uses {', '.join(f'${n}' for n in bad)}; "
            f"allowed placeholders: {allowed}"
        )
    return set(numbers)


def _scenario(draft: _Draft, source: str) -> Scenario:
    head = f"{source}:{draft.line}: scenario {draft.name!r}"
    options = _checked_options(
        lambda key: f"{source}:{draft.options[key][1]}: scenario {draft.name!r}",
        {key: value for key, (value, _) in draft.options.items()},
    )
    if "A" in draft.markers and "B" not in draft.markers:
        raise ScenarioError(
            f"{source}:{draft.markers['A']}: scenario {draft.name!r}: @A without a following @B"
        )
    if "benchmark" not in draft.sections:
        raise ScenarioError(f"{head}: no @benchmark section")
    count = len(options.get("params", ()))
    used: set[int] = set()
    for section in SECTIONS:
        for sql, line, _ in draft.sections.get(section, []):
            at = f"{source}:{line}: scenario {draft.name!r}"
            if section == "init":
                _check_placeholders(at, sql, line, section, 0)
            else:
                used |= _check_placeholders(at, sql, line, section, count)
    unused = sorted(set(range(1, count + 1)) - used)
    if unused:
        where = f"{source}:{draft.options['params'][1]}: scenario {draft.name!r}"
        raise ScenarioError(
            f"{where}: params define {', '.join(f'${n}' for n in unused)} but no @before or @benchmark "
            "statement uses it"
        )
    marked = "A" in draft.markers
    benchmark = tuple(
        ScenarioStatement(sql, place == "between" or not marked, line, *classify(sql))
        for sql, line, place in draft.sections["benchmark"]
    )
    if not any(s.measured for s in benchmark):
        line = draft.markers.get("A", draft.section_lines["benchmark"])
        raise ScenarioError(
            f"{source}:{line}: scenario {draft.name!r}: the benchmark has no measured statement"
        )
    return Scenario(
        name=draft.name,
        init=tuple(sql for sql, _, _ in draft.sections.get("init", [])),
        before=tuple(sql for sql, _, _ in draft.sections.get("before", [])),
        benchmark=benchmark,
        source=source,
        line=draft.line,
        **options,
    )


def parse_scenario_sql(text: str, source: str = "<memory>") -> ScenarioSuite:
    """Parse and validate a scenario file's text; raises ScenarioError naming ``source``, line, scenario."""
    lines = _Lines(text)
    directives = _directives(text, source, lines)
    shared: list[str] = []
    shared_line: int | None = None
    drafts: list[_Draft] = []
    seen: dict[str, int] = {}
    section: str | None = None  # "shared", a section name, or None (nothing may be written here)
    position = 0
    for directive in [*directives, None]:
        end = directive.start if directive is not None else len(text)
        draft = drafts[-1] if drafts else None
        label = f" scenario {draft.name!r}" if draft is not None else ""

        def where(line: int, label: str = label) -> str:
            return f"{source}:{line}:{label}" if label else f"{source}:{line}"

        statements = _statements(text, position, end, lines, where)
        if statements:
            first_line = statements[0][1]
            if section is None:
                place = (
                    "after @scenario/@option, before a section" if draft else "before @shared or @scenario"
                )
                raise ScenarioError(
                    f"{where(first_line)}: SQL outside a section ({place}): start it with @init, @before or "
                    "@benchmark" + ("" if draft else " inside a @scenario, or put schema under @shared")
                )
            if section == "shared":
                for sql, line in statements:
                    _check_placeholders(f"{source}:{line}", sql, line, "shared", 0)
                shared += [sql for sql, _ in statements]
            else:
                assert draft is not None
                # Where the statement sits relative to the markers; resolved once the section is complete.
                place = "after" if "B" in draft.markers else "between" if "A" in draft.markers else "before"
                draft.sections[section] += [(sql, line, place) for sql, line in statements]
        if directive is None:
            break
        position = directive.end
        name, argument, line = directive.name, directive.argument, directive.line
        if name not in ("scenario", "option") and argument:
            raise ScenarioError(f"{where(line)}: @{name} takes no argument, got {argument!r}")
        if name == "shared":
            if drafts:
                raise ScenarioError(
                    f"{where(line)}: @shared is file level: it must come before the first @scenario"
                )
            if shared_line is not None:
                raise ScenarioError(f"{where(line)}: a second @shared (the first is at line {shared_line})")
            shared_line, section = line, "shared"
        elif name == "scenario":
            if draft is not None and "A" in draft.markers and "B" not in draft.markers:
                raise ScenarioError(f"{source}:{draft.markers['A']}:{label}: @A without a following @B")
            if not NAME_PATTERN.match(argument):
                raise ScenarioError(
                    f"{source}:{line}: @scenario needs a name of 1-64 letters, digits, '_', '-' or '.', "
                    f"got {argument!r}"
                )
            if argument in seen:
                raise ScenarioError(
                    f"{source}:{line}: scenario {argument!r}: duplicate name "
                    f"(first defined at line {seen[argument]})"
                )
            seen[argument] = line
            drafts.append(_Draft(argument, line))
            section = None
        elif draft is None:
            raise ScenarioError(f"{source}:{line}: @{name} outside a @scenario")
        elif name == "option":
            if draft.sections:
                raise ScenarioError(f"{where(line)}: @option must come before the scenario's first section")
            key, value = _option(where(line), argument)
            if key in draft.options:
                raise ScenarioError(
                    f"{where(line)}: option {key!r} given twice (first at line {draft.options[key][1]})"
                )
            draft.options[key] = (value, line)
        elif name in SECTIONS:
            if name in draft.sections:
                raise ScenarioError(
                    f"{where(line)}: a second @{name} section "
                    f"(the first is at line {draft.section_lines[name]})"
                )
            if section == "benchmark" and "A" in draft.markers and "B" not in draft.markers:
                raise ScenarioError(f"{source}:{draft.markers['A']}:{label}: @A without a following @B")
            draft.sections[name] = []
            draft.section_lines[name] = line
            section = name
        else:  # the markers
            if section != "benchmark":
                raise ScenarioError(f"{where(line)}: @{name} is a marker of the @benchmark section only")
            if name in draft.markers:
                raise ScenarioError(
                    f"{where(line)}: a second @{name} (the first is at line {draft.markers[name]})"
                )
            if name == "B" and "A" not in draft.markers:
                raise ScenarioError(f"{where(line)}: @B before @A")
            draft.markers[name] = line
    if not drafts:
        raise ScenarioError(f"{source}: no @scenario in the file")
    return ScenarioSuite(
        scenarios=tuple(_scenario(d, source) for d in drafts), shared=tuple(shared), source=source
    )


# ---------------------------------------------------------------------------------------------------------
# The TOML workload form, the Python form, the loader and the built-in suite


def scenarios_from_workload(workload: GateWorkload, calls_per_measurement: int) -> ScenarioSuite:
    """Each workload query becomes a scenario of one measured statement; its ``repeat`` is its weight's share
    of ``calls_per_measurement`` (the heaviest query gets ``calls_per_measurement``, every other >= 1)."""
    if calls_per_measurement < 1:
        raise ScenarioError(
            f"{workload.source}: calls_per_measurement must be >= 1, got {calls_per_measurement}"
        )
    repeats = workload.calls_per_round(calls_per_measurement)
    scenarios = tuple(
        Scenario(
            name=query.name,
            benchmark=(ScenarioStatement(query.sql, True, query.line, *classify(query.sql)),),
            params=query.params,
            repeat=repeats[query.name],
            weight=query.weight,
            source=workload.source,
            line=query.line,
        )
        for query in workload.queries
    )
    return ScenarioSuite(scenarios=scenarios, source=workload.source)


def _noop(*_: object) -> None:
    return None


def _member(item: object, key: str, default: object = None) -> Any:
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _check_callable(where: str, item: object, key: str, arity: int, required: bool) -> Callable[..., object]:
    function = _member(item, key)
    if function is None and not required:
        return _noop
    if not callable(function):
        raise ScenarioError(f"{where}: {key} must be a callable taking {arity} argument(s)")
    try:
        inspect.signature(function).bind(*range(arity))
    except TypeError:
        raise ScenarioError(f"{where}: {key} must accept {arity} positional argument(s)") from None
    except ValueError:  # pragma: no cover - a builtin without a signature: trust it
        pass
    return function  # type: ignore[no-any-return]


def _python_suite(path: Path) -> ScenarioSuite:
    source = str(path)
    name = f"radar_gate_scenarios_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ScenarioError(f"{source}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (and pickling) look their module up while the class is made
    try:
        spec.loader.exec_module(module)  # the operator's code runs here
    except Exception as exc:  # any failure of the operator's module is a ScenarioError
        line = getattr(exc, "lineno", None)
        for frame in reversed(inspect.trace()):
            if frame.filename == source:
                line = frame.lineno
                break
        at = f"{source}:{line}" if line else source
        raise ScenarioError(f"{at}: the module failed to load: {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(name, None)
    items = getattr(module, "SCENARIOS", None)
    if not isinstance(items, list | tuple) or not items:
        raise ScenarioError(f"{source}: the module needs SCENARIOS, a non-empty list of scenario objects")
    shared_text = getattr(module, "SHARED", "")
    if not isinstance(shared_text, str):
        raise ScenarioError(f"{source}: SHARED must be an SQL text (a string)")
    lines = _Lines(shared_text)
    shared = [
        sql
        for sql, _ in _statements(
            shared_text, 0, len(shared_text), lines, lambda n: f"{source}: SHARED line {n}"
        )
    ]
    scenarios = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        scenario_name = _member(item, "name")
        where = f"{source}: SCENARIOS[{index}]" + (
            f" {scenario_name!r}" if isinstance(scenario_name, str) else ""
        )
        if not isinstance(scenario_name, str) or not NAME_PATTERN.match(scenario_name):
            raise ScenarioError(
                f"{where}: name must be 1-64 letters, digits, '_', '-' or '.', got {scenario_name!r}"
            )
        if scenario_name in seen:
            raise ScenarioError(f"{where}: duplicate name")
        seen.add(scenario_name)
        unknown = sorted(k for k in ("prepared", "plan_cache_mode") if _member(item, k) is not None)
        if unknown:
            raise ScenarioError(
                f"{where}: {', '.join(unknown)} apply to SQL statements only, not to the Python form"
            )
        runner = PythonScenario(
            init=_check_callable(where, item, "init", 1, required=False),
            before=_check_callable(where, item, "before", 2, required=False),
            benchmark=_check_callable(where, item, "benchmark", 3, required=True),
            module=source,
        )
        raw = {
            k: _member(item, k)
            for k in ("params", "settings", "repeat", "weight")
            if _member(item, k) is not None
        }
        options = _checked_options(lambda key, where=where: f"{where}: {key}", raw)
        scenarios.append(Scenario(name=scenario_name, source=source, python=runner, **options))
    return ScenarioSuite(scenarios=tuple(scenarios), shared=tuple(shared), source=source)


def load_scenarios(path: Path | str) -> ScenarioSuite:
    """A scenario suite from a file: ``.sql`` (scenario file), ``.toml`` (gate workload) or ``.py`` (the
    Python form: runs the operator's module). Every problem is a ScenarioError naming the file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".sql", ".toml", ".py"):
        raise ScenarioError(
            f"{path}: unknown scenario file type {suffix or '(none)'!r}: use .sql, .toml or .py"
        )
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    if suffix == ".toml":
        try:
            workload = load_workload(path)
        except WorkloadError as exc:
            raise ScenarioError(str(exc)) from None
        return scenarios_from_workload(workload, GateConfig().calls_per_round)
    if suffix == ".py":
        return _python_suite(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read the scenario file: {exc}") from None
    return parse_scenario_sql(text, source=str(path))


def builtin_suite(names: Sequence[str] | None = None) -> ScenarioSuite:
    """The built-in scenarios (sql/gate/builtin_scenarios.sql), all or the named ones in the given order."""
    wanted = list(dict.fromkeys(names)) if names is not None else list(BUILTIN_SCENARIOS)
    unknown = [n for n in wanted if n not in BUILTIN_SCENARIOS]
    if unknown:
        raise ScenarioError(
            f"unknown built-in scenario {unknown[0]!r} {_closest(unknown[0], BUILTIN_SCENARIOS)}"
        )
    if not wanted:
        raise ScenarioError("no built-in scenario selected")
    suite = parse_scenario_sql(BUILTIN_FILE.read_text(encoding="utf-8"), source=str(BUILTIN_FILE))
    by_name = {s.name: s for s in suite.scenarios}
    return ScenarioSuite(
        scenarios=tuple(by_name[n] for n in wanted), shared=suite.shared, source=suite.source
    )
