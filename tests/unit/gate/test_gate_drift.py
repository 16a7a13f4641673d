"""The gate's per-execution timings through the drift scorer: an informational flag per query."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import query_hash
from jobs.gate.config import PASS
from jobs.gate.drift_flags import gate_drift, gate_query_hash
from jobs.query.identity import fingerprint_text

SQL = "SELECT * FROM gate_orders WHERE customer_id = $1"


def lognormal(n: int, median_ms: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(median_ms), 0.1, n)


def bimodal(n: int, seed: int) -> np.ndarray:
    """A fifth of the calls 10x slower (lock waits): the shape changed, not just the level."""
    values = lognormal(n, 1.0, seed)
    values[: n // 5] *= 10
    return values


def test_query_hash_is_the_sha256_of_the_lakes_fingerprint_of_the_sql() -> None:
    assert gate_query_hash(SQL) == query_hash(fingerprint_text(SQL)[0])
    assert gate_query_hash(SQL) == gate_query_hash("select *  from gate_orders where customer_id = $1")
    assert gate_query_hash(SQL) != gate_query_hash("SELECT * FROM gate_orders WHERE id = $1")


def test_flags_per_query_unchanged_bimodal_and_too_few() -> None:
    timings = {
        "same": (lognormal(400, 1.0, 1), lognormal(400, 1.0, 2)),
        "tail": (lognormal(400, 1.0, 3), bimodal(400, 4)),
        "short": (lognormal(50, 1.0, 5), lognormal(50, 1.0, 6)),
        "failed": (lognormal(50, 1.0, 7), np.array([])),
    }
    hashes = {name: query_hash(f"fp-{name}") for name in timings}
    flags = gate_drift(timings, hashes)
    assert set(flags) == {"same", "tail", "short"}, "no candidate timing: no flag, not an error"
    assert flags["same"].flag == PASS
    assert flags["tail"].flag == "BLOCK" and flags["tail"].psi is not None and flags["tail"].psi > 0.25
    assert (flags["short"].flag, flags["short"].reason) == ("WARN", "insufficient_samples")
    assert (flags["tail"].n_baseline, flags["tail"].n_candidate) == (400, 400)
    assert flags["tail"].query_hash == hashes["tail"]
    design = gate_drift(timings, hashes, DriftScoreConfig(profile="design"))
    assert design["tail"].profile == "design" and design["tail"].flag == "BLOCK"


def test_two_names_of_one_statement_keep_their_own_samples() -> None:
    timings = {
        "a": (lognormal(400, 1.0, 1), lognormal(400, 1.0, 2)),
        "b": (lognormal(400, 1.0, 3), bimodal(400, 4)),
    }
    flags = gate_drift(timings, {"a": gate_query_hash(SQL), "b": gate_query_hash(SQL)})
    assert (flags["a"].flag, flags["b"].flag) == (PASS, "BLOCK")


def test_the_suite_report_carries_the_flag_and_the_verdict_stays() -> None:
    """Drift is informational: a BLOCK flag of a scenario's per-execution times leaves its verdict alone, and
    the JSON report (its contract), the table and the rows carry it."""
    from dataclasses import replace

    from jobs.gate.suite_report import gate_suite_contract, render_suite_report, suite_report_dict
    from tests.support.gate_reports import CONFIG, noisy_cycles, suite_report

    report = suite_report(noisy_cycles(CONFIG, 0.02, 1.0), CONFIG)
    flags = gate_drift(
        {"lookup": (lognormal(400, 1.0, 3), bimodal(400, 4))}, {"lookup": gate_query_hash(SQL)}
    )
    (scenario,) = report.scenarios
    report = replace(report, scenarios=(replace(scenario, drift=flags["lookup"]),))
    payload = json.loads(json.dumps(suite_report_dict(report)))
    jsonschema.validate(payload, gate_suite_contract())
    drift = payload["scenarios"][0]["drift"]
    assert drift["flag"] == "BLOCK" and drift["js"] == pytest.approx(flags["lookup"].js)
    assert payload["verdict"] == PASS and report.exit_code == 0, "drift is informational"
    assert "lookup" in render_suite_report(report)
