"""Data and scoring for the change point benchmark: labeled synthetic series and the real TCPD series.

Synthetic series come from the standard library's RNG (not numpy) so that every peer, whatever its numpy,
gets the same numbers through a file; a SHA-256 of the generated values is checked on every run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TCPD_ROOT = Path(__file__).resolve().parents[3] / "shared" / "data" / "tcpd"
LENGTHS: tuple[int, ...] = (60, 240, 1000)


@dataclass(frozen=True)
class LabeledSeries:
    """One synthetic series and its truth: the first index of the new regime, or None."""

    values: np.ndarray
    change: int | None
    relative_step: float
    has_outliers: bool


def generate_labeled(count: int = 1000, seed: int = 20261129) -> list[LabeledSeries]:
    """Lengths cycle over LENGTHS; every other series has a multiplicative step of +10..100%.

    Noise is lognormal with sigma in [0.1, 0.4] (latency-like); a third of the series get 2% spikes of
    3-20x. The change lies in the middle 80% of the series.
    """
    rng = random.Random(seed)
    out: list[LabeledSeries] = []
    for number in range(count):
        n = LENGTHS[number % len(LENGTHS)]
        changed = (number // len(LENGTHS)) % 2 == 1
        sigma = rng.uniform(0.1, 0.4)
        level = rng.uniform(1.0, 100.0)
        step = rng.uniform(0.10, 1.00) if changed else 0.0
        edge = max(5, n // 10)
        change = rng.randint(edge, n - edge) if changed else None
        spiky = rng.random() < 1 / 3
        values = []
        for t in range(n):
            base = level * (1.0 + step) if change is not None and t >= change else level
            value = base * rng.lognormvariate(0.0, sigma)
            if spiky and rng.random() < 0.02:
                value *= rng.uniform(3.0, 20.0)
            values.append(value)
        out.append(LabeledSeries(np.array(values), change, step, spiky))
    return out


@dataclass(frozen=True)
class MultiStepSeries:
    """One synthetic series with several steps: the first index of each new regime."""

    values: np.ndarray
    changes: tuple[int, ...]
    pattern: str


MULTI_STEP_PATTERNS: dict[str, tuple[float, ...]] = {
    "up-up": (1.0, 1.6, 2.6),
    "up-down": (1.0, 2.0, 1.0),
    "up-down-up": (1.0, 2.0, 1.0, 2.0),
    "down-up-down": (2.0, 1.0, 2.0, 1.0),
    "up-down-up x1.5": (1.0, 1.5, 1.0, 1.5),
}


def generate_multi_step(count: int = 600, seed: int = 20261201) -> list[MultiStepSeries]:
    """Series of n in (60, 120, 240) with 2 or 3 steps (patterns above, cycled), lognormal noise with sigma
    in [0.05, 0.3], 2% spikes of 3-20x in a third; regimes at least max(10, n / 8) points long."""
    rng = random.Random(seed)
    names = list(MULTI_STEP_PATTERNS)
    out: list[MultiStepSeries] = []
    for number in range(count):
        n = (60, 120, 240)[number % 3]
        pattern = names[(number // 3) % len(names)]
        levels = MULTI_STEP_PATTERNS[pattern]
        shortest = max(10, n // 8)
        while True:
            cuts = sorted(rng.randint(shortest, n - shortest) for _ in range(len(levels) - 1))
            if all(b - a >= shortest for a, b in itertools.pairwise(cuts)):
                break
        sigma = rng.uniform(0.05, 0.3)
        base = rng.uniform(1.0, 100.0)
        spiky = rng.random() < 1 / 3
        values = []
        for t in range(n):
            level = levels[sum(t >= c for c in cuts)]
            value = base * level * rng.lognormvariate(0.0, sigma)
            if spiky and rng.random() < 0.02:
                value *= rng.uniform(3.0, 20.0)
            values.append(value)
        out.append(MultiStepSeries(np.array(values), tuple(cuts), pattern))
    return out


def score_steps(
    truth: list[tuple[int, ...]], lengths: list[int], predicted: list[list[int]]
) -> dict[str, float]:
    """Step-level scores: a true step is found when a predicted point lies within the margin (each point
    used once); recall over all steps, precision over all points, and the share of series with every
    step found."""
    steps = sum(len(t) for t in truth)
    points = sum(len(p) for p in predicted)
    found = complete = 0
    for changes, n, cuts in zip(truth, lengths, predicted, strict=True):
        matched = _matched(set(changes), set(cuts), margin_for(n))
        found += matched
        complete += matched == len(changes)
    return {
        "step_recall": found / steps if steps else 1.0,
        "point_precision": found / points if points else 1.0,
        "all_steps_found": complete / len(truth) if truth else 1.0,
        "points": float(points),
    }


def values_hash(series: list[np.ndarray]) -> str:
    """SHA-256 over the exact float64 bits of every value, in order."""
    digest = hashlib.sha256()
    for values in series:
        digest.update(struct.pack("<q", len(values)))
        digest.update(np.asarray(values, dtype="<f8").tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Scores:
    """Series-level detection scores (a detection is a series flagged with a change)."""

    precision: float
    recall: float
    false_positive_rate: float
    f1: float
    detections: int


def margin_for(n: int) -> int:
    """A located change is right when within max(5, 5% of n) points of the truth."""
    return max(5, math.ceil(0.05 * n))


def score_single(truth: list[int | None], lengths: list[int], predicted: list[list[int]]) -> Scores:
    """Precision, recall, FPR: a flagged series is a true positive when it has a change and the predicted
    point nearest to it lies within the margin; flags on unchanged series or far away are false positives."""
    true_positive = false_positive = flagged_null = 0
    changed = sum(t is not None for t in truth)
    unchanged = len(truth) - changed
    for change, n, points in zip(truth, lengths, predicted, strict=True):
        if not points:
            continue
        if change is None:
            false_positive += 1
            flagged_null += 1
        elif min(abs(p - change) for p in points) <= margin_for(n):
            true_positive += 1
        else:
            false_positive += 1
    detections = true_positive + false_positive
    precision = true_positive / detections if detections else 1.0
    recall = true_positive / changed if changed else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, flagged_null / unchanged if unchanged else 0.0, f1, detections)


# ----------------------------------------------------------------------------------------------------------
# TCPD
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnnotatedSeries:
    """A real series and each annotator's change points."""

    name: str
    values: np.ndarray
    annotations: dict[str, list[int]]


def load_tcpd(root: Path = TCPD_ROOT) -> tuple[list[AnnotatedSeries], list[str]]:
    """The univariate TCPD series (missing values carried forward); returns (series, skipped names)."""
    annotations = json.loads((root / "annotations.json").read_text())
    loaded: list[AnnotatedSeries] = []
    skipped: list[str] = []
    for path in sorted(root.glob("*.json")):
        if path.name == "annotations.json":
            continue
        document = json.loads(path.read_text())
        name = document["name"]
        if document["n_dim"] != 1 or name not in annotations:
            skipped.append(name)
            continue
        raw = document["series"][0]["raw"]
        first = next(v for v in raw if v is not None)
        filled: list[float] = []
        for value in raw:
            filled.append(float(value) if value is not None else (filled[-1] if filled else float(first)))
        loaded.append(AnnotatedSeries(name, np.array(filled), annotations[name]))
    return loaded, skipped


def _matched(truth: set[int], predicted: set[int], margin: int) -> int:
    """How many true points match a prediction within the margin, each prediction used at most once."""
    available = set(predicted)
    matched = 0
    for point in sorted(truth):
        candidates = sorted((abs(point - p), p) for p in available if abs(point - p) <= margin)
        if candidates:
            available.discard(candidates[0][1])
            matched += 1
    return matched


def tcpd_f1(annotations: dict[str, list[int]], predicted: list[int], margin: int = 5) -> float:
    """F1 as TCPD defines it: index 0 counts in truth and prediction, precision against the union of the
    annotators, recall the mean over annotators."""
    prediction = {0, *predicted}
    per_annotator = [{0, *points} for points in annotations.values()]
    union = set().union(*per_annotator)
    precision = _matched(union, prediction, margin) / len(prediction)
    recall = float(np.mean([_matched(points, prediction, margin) / len(points) for points in per_annotator]))
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0
