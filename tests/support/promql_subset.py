"""Evaluate the few PromQL forms the radar's rules and dashboard use, between two scrapes (no promtool here).

Grammar: ``expr := cmp ('and' cmp)*``, ``cmp := sum (('>' | '>=' | '<' | '<=') number)?``,
``sum := product (('+' | '-') product)*``, ``product := atom (('/' | '*') atom)*``, ``atom := number |
'(' expr ')' | 'sum' '(' expr ')' | 'increase' '(' selector '[' duration ']' ')'``; a selector is a metric
name with optional ``{label="value",...}`` matchers (``=`` only). ``increase`` is the later scrape's value
minus the earlier one's (no counter reset, no extrapolation): the two scrapes stand for the window's ends.
Vectors are dicts of label sets to values; ``sum`` drops the labels; a comparison keeps what passes; ``and``
keeps the left side when the right one is not empty; x / 0 is NaN (PromQL's), which passes no comparison.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
Samples = dict[str, list[tuple[dict[str, str], float]]]

_TOKEN = re.compile(
    r"\s*(?:(?P<duration>\d+(?:ms|[smhdwy])(?![A-Za-z0-9_]))|(?P<number>\d+(?:\.\d+)?(?:e[-+]?\d+)?)|(?P<op>>=|<=|[<>/*+\-(){}\[\],=])"
    r'|(?P<string>"[^"]*")|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*))'
)


def samples_of(exposition: str) -> Samples:
    """Every sample of a text exposition by sample name (``_total``, ``_bucket`` … as written)."""
    out: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def tokens(expr: str) -> list[str]:
    out, position = [], 0
    while position < len(expr.rstrip()):
        match = _TOKEN.match(expr, position)
        if match is None or match.end() == position:
            raise ValueError(f"unsupported PromQL at {expr[position:]!r}")
        out.append(match.group(match.lastgroup or "").strip())
        position = match.end()
    return out


@dataclass
class Evaluation:
    """One expression evaluated between ``before`` and ``after``; ``names``: the metrics it selected."""

    before: Samples
    after: Samples
    names: set[str] = field(default_factory=set)

    def run(self, expr: str) -> Vector:
        self._tokens, self._at = tokens(expr), 0
        value = self._expr()
        if self._at != len(self._tokens):
            raise ValueError(f"unsupported PromQL: trailing {self._tokens[self._at :]}")
        return value

    def _peek(self) -> str | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self, expected: str | None = None) -> str:
        token = self._tokens[self._at]
        if expected is not None and token != expected:
            raise ValueError(f"expected {expected!r}, found {token!r}")
        self._at += 1
        return token

    def _expr(self) -> Vector:
        left = self._cmp()
        while self._peek() == "and":
            self._take()
            right = self._cmp()
            left = left if right else {}
        return left

    def _cmp(self) -> Vector:
        left = self._sum()
        if self._peek() in (">", ">=", "<", "<="):
            op = self._take()
            bound = float(self._take())
            test = {
                ">": lambda v: v > bound,
                ">=": lambda v: v >= bound,
                "<": lambda v: v < bound,
                "<=": lambda v: v <= bound,
            }[op]
            left = {k: v for k, v in left.items() if not math.isnan(v) and test(v)}
        return left

    def _sum(self) -> Vector:
        left = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()
            right = self._product()
            left = _binary(left, right, (lambda a, b: a + b) if op == "+" else (lambda a, b: a - b))
        return left

    def _product(self) -> Vector:
        left = self._atom()
        while self._peek() in ("/", "*"):
            op = self._take()
            right = self._atom()
            left = _binary(
                left, right, (lambda a, b: a / b if b else math.nan) if op == "/" else (lambda a, b: a * b)
            )
        return left

    def _atom(self) -> Vector:
        token = self._take()
        if token == "(":
            value = self._expr()
            self._take(")")
            return value
        if token == "sum":
            self._take("(")
            inner = self._expr()
            self._take(")")
            return {frozenset(): sum(inner.values())} if inner else {}
        if token == "increase":
            self._take("(")
            name, matchers = self._selector()
            self._take("[")
            self._take()  # the duration: the two scrapes stand for the window
            self._take("]")
            self._take(")")
            return self._increase(name, matchers)
        try:
            return {frozenset(): float(token)}
        except ValueError:
            raise ValueError(f"unsupported PromQL token {token!r}") from None

    def _selector(self) -> tuple[str, dict[str, str]]:
        name = self._take()
        self.names.add(name)
        matchers: dict[str, str] = {}
        if self._peek() == "{":
            self._take()
            while self._peek() != "}":
                label = self._take()
                self._take("=")
                matchers[label] = self._take().strip('"')
                if self._peek() == ",":
                    self._take()
            self._take("}")
        return name, matchers

    def _increase(self, name: str, matchers: dict[str, str]) -> Vector:
        def matching(samples: Samples) -> Vector:
            return {
                frozenset(labels.items()): value
                for labels, value in samples.get(name, [])
                if all(labels.get(k) == v for k, v in matchers.items())
            }

        earlier, later = matching(self.before), matching(self.after)
        return {k: v - earlier.get(k, 0.0) for k, v in later.items()}


def _binary(left: Vector, right: Vector, op: object) -> Vector:
    return {k: op(v, right[k]) for k, v in left.items() if k in right}  # type: ignore[operator]


def evaluate(expr: str, before: str, after: str) -> tuple[Vector, set[str]]:
    """The expression's value between two expositions, and the metric names it selects."""
    run = Evaluation(samples_of(before), samples_of(after))
    return run.run(expr), run.names
