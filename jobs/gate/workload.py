"""Gate workload files (TOML): named queries, each one SQL statement with a weight and parameter generators.

::

    [[queries]]
    name = "orders_by_customer"
    sql = "SELECT count(*), sum(amount) FROM orders WHERE customer_id = $1"
    weight = 3                                  # optional, default 1: share of calls per round
    params = [{ int_range = [1, 20000] }]       # one generator per $n, in order

Generators: ``int_range = [lo, hi]`` (int4, or int8 when a bound needs it), ``int8_range = [lo, hi]``,
``float_range = [lo, hi]`` (float8), ``choice = [v, ...]`` (all ints, all floats, all strings or all
booleans). Values are sent as typed parameters (psycopg Int4/Int8/Float8), so one query keeps one queryid.
Every problem is reported with the file, the line of the entry's ``[[queries]]`` header and its name.
"""

from __future__ import annotations

import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglast.parser import ParseError, scan
from psycopg.types.numeric import Float8, Int4, Int8

from jobs.plans.generic import classify_statement

INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1
INT8_MIN, INT8_MAX = -(2**63), 2**63 - 1
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
QUERY_KEYS = {"name", "sql", "weight", "params"}
GENERATORS = ("int_range", "int8_range", "float_range", "choice")


class WorkloadError(ValueError):
    """The workload file is unusable; the message names the file, the line and the query."""


@dataclass(frozen=True)
class ParamGenerator:
    """One ``$n``: how its values are drawn (``kind`` is a key of GENERATORS, ``spec`` its TOML value)."""

    kind: str
    spec: tuple[Any, ...]

    def draw(self, rng: random.Random) -> object:
        if self.kind == "int_range":
            lo, hi = self.spec
            value = rng.randint(lo, hi)
            return Int4(value) if lo >= INT4_MIN and hi <= INT4_MAX else Int8(value)
        if self.kind == "int8_range":
            return Int8(rng.randint(*self.spec))
        if self.kind == "float_range":
            return Float8(rng.uniform(*self.spec))
        return _typed(self.spec[rng.randrange(len(self.spec))], self.spec)


def _typed(value: Any, spec: tuple[Any, ...]) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        wide = any(not INT4_MIN <= v <= INT4_MAX for v in spec)
        return Int8(value) if wide else Int4(value)
    if isinstance(value, float):
        return Float8(value)
    return value


@dataclass(frozen=True)
class GateQuery:
    name: str
    sql: str
    weight: float
    params: tuple[ParamGenerator, ...]
    line: int | None = None

    def draw(self, rng: random.Random) -> tuple[object, ...]:
        return tuple(g.draw(rng) for g in self.params)


@dataclass(frozen=True)
class GateWorkload:
    queries: tuple[GateQuery, ...]
    source: str = "<memory>"

    def calls_per_round(self, heaviest: int) -> dict[str, int]:
        """Calls per side per round: the heaviest query gets ``heaviest``, others their weight's share."""
        top = max(q.weight for q in self.queries)
        return {q.name: max(1, round(heaviest * q.weight / top)) for q in self.queries}


def _header_lines(text: str) -> list[int]:
    """1-based line of each ``[[queries]]`` header, in order (tomllib does not report positions)."""
    pattern = re.compile(r"^\s*\[\[\s*queries\s*\]\]")
    return [i for i, line in enumerate(text.splitlines(), start=1) if pattern.match(line)]


def placeholder_numbers(sql: str) -> list[int]:
    """The distinct ``$n`` numbers in the text, from pglast's scanner ('$1' inside a string is no param)."""
    numbers = set()
    for token in scan(sql):
        if token.name == "PARAM":
            numbers.add(int(sql[token.start + 1 : token.end + 1]))
    return sorted(numbers)


def _generator(where: str, index: int, raw: Any) -> ParamGenerator:
    label = f"{where}: params[{index}] (${index + 1})"
    if not isinstance(raw, dict) or len(raw) != 1:
        raise WorkloadError(f"{label}: expected a table with one generator, one of {', '.join(GENERATORS)}")
    (kind, spec), *_ = raw.items()
    if kind not in GENERATORS:
        raise WorkloadError(f"{label}: unknown generator {kind!r} (known: {', '.join(GENERATORS)})")
    if kind == "choice":
        if not isinstance(spec, list) or not spec:
            raise WorkloadError(f"{label}: choice needs a non-empty list of values")
        kinds = {bool if isinstance(v, bool) else type(v) for v in spec}
        if len(kinds) != 1 or kinds.pop() not in (int, float, str, bool):
            raise WorkloadError(
                f"{label}: choice values must all be ints, all floats, all strings or all booleans"
            )
        return ParamGenerator(kind, tuple(spec))
    number = float if kind == "float_range" else int
    ok = (
        isinstance(spec, list)
        and len(spec) == 2
        and all(isinstance(v, number) and not isinstance(v, bool) for v in spec)
        and spec[0] <= spec[1]
    )
    if not ok:
        raise WorkloadError(
            f"{label}: {kind} needs [low, high] {number.__name__}s with low <= high, got {spec!r}"
        )
    if kind != "float_range" and not (spec[0] >= INT8_MIN and spec[1] <= INT8_MAX):
        raise WorkloadError(f"{label}: {kind} bounds exceed the int8 range")
    return ParamGenerator(kind, tuple(spec))


# The parser of one ``params`` entry, for the other gate file formats (jobs.gate.scenario's @option params).
parse_generator = _generator


def _query(where: str, raw: dict[str, Any], line: int | None) -> GateQuery:
    unknown = sorted(set(raw) - QUERY_KEYS)
    if unknown:
        raise WorkloadError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(QUERY_KEYS))})"
        )
    sql = raw.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise WorkloadError(f"{where}: 'sql' must be a non-empty string")
    check = classify_statement(sql)
    if not check.explainable:
        raise WorkloadError(f"{where}: sql refused: {check.reason}")
    weight = raw.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        raise WorkloadError(f"{where}: 'weight' must be a positive number, got {weight!r}")
    raw_params = raw.get("params", [])
    if not isinstance(raw_params, list):
        raise WorkloadError(f"{where}: 'params' must be a list of generators")
    params = tuple(_generator(where, i, p) for i, p in enumerate(raw_params))
    try:
        numbers = placeholder_numbers(sql)
    except ParseError as exc:  # pragma: no cover - classify_statement parsed it already
        raise WorkloadError(f"{where}: sql does not scan: {exc}") from None
    if numbers != list(range(1, len(params) + 1)):
        found = ", ".join(f"${n}" for n in numbers) or "none"
        raise WorkloadError(
            f"{where}: the sql uses placeholders {found} but {len(params)} parameter generator(s) are given "
            f"(need exactly $1..${len(params)})"
        )
    return GateQuery(name=raw["name"], sql=sql.strip(), weight=float(weight), params=params, line=line)


def parse_workload(text: str, source: str = "<memory>") -> GateWorkload:
    """Parse and validate a workload; raises WorkloadError naming ``source``, the line and the query."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{source}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - {"queries"})
    if unknown:
        raise WorkloadError(f"{source}: unknown top-level key(s) {', '.join(unknown)} (expected [[queries]])")
    entries = data.get("queries")
    if not isinstance(entries, list) or not entries:
        raise WorkloadError(f"{source}: no [[queries]] entries")
    lines = _header_lines(text)
    queries: list[GateQuery] = []
    seen: dict[str, str] = {}
    for index, raw in enumerate(entries):
        line = lines[index] if len(lines) == len(entries) else None
        at = f"{source}:{line}" if line is not None else source
        name = raw.get("name") if isinstance(raw, dict) else None
        where = f"{at}: query #{index + 1}" + (f" {name!r}" if isinstance(name, str) else "")
        if not isinstance(raw, dict):
            raise WorkloadError(f"{where}: expected a table")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise WorkloadError(
                f"{where}: 'name' must be 1-64 letters, digits, '_', '-' or '.', got {name!r}"
            )
        if name in seen:
            raise WorkloadError(f"{where}: duplicate name (first defined at {seen[name]})")
        seen[name] = at
        queries.append(_query(where, raw, line))
    return GateWorkload(queries=tuple(queries), source=source)


def load_workload(path: Path | str) -> GateWorkload:
    """Read and validate a workload file; a missing file is a WorkloadError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file: {exc.strerror or exc}") from None
    return parse_workload(text, source=str(path))
