"""The gate's per-execution timings through the drift scorer: an informational flag per query."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from jobs.cli.gate import gate_query_rows
from jobs.drift.config import DriftScoreConfig
from jobs.drift.scorer import query_hash
from jobs.gate.config import PASS
from jobs.gate.drift_flags import gate_drift, gate_query_hash
from jobs.gate.runner import per_execution_ms
from jobs.gate.verdict import gate_report_contract, render_gate_report
from jobs.query.identity import fingerprint_text
from tests.support.gate_reports import _report

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


def test_rounds_are_flattened_to_ms() -> None:
    rounds = {"q": {"baseline": [[1_000_000, 2_000_000], [3_000_000]], "candidate": [[4_000_000], []]}}
    assert per_execution_ms(rounds) == {"q": ([1.0, 2.0, 3.0], [4.0])}


def test_report_json_table_and_csv_carry_the_flag_and_the_verdict_stays() -> None:
    flags = gate_drift({"q": (lognormal(400, 1.0, 3), bimodal(400, 4))}, {"q": gate_query_hash("SELECT 1")})
    report = _report(PASS)
    query = report.queries[0]
    from dataclasses import replace

    report = replace(report, queries=(replace(query, drift=flags["q"]),))
    payload = json.loads(report.to_json())
    jsonschema.validate(payload, gate_report_contract())
    drift = payload["queries"][0]["drift"]
    assert (
        drift["flag"] == "BLOCK"
        and drift["metric"] == "latency"
        and drift["js"] == pytest.approx(flags["q"].js)
    )
    assert drift["query_hash"] == gate_query_hash("SELECT 1") and drift["n_candidate"] == 400
    assert payload["verdict"] == PASS and report.exit_code == 0, "drift is informational (issue 12 decides)"
    table = render_gate_report(report)
    assert "drift (informational, not in the verdict): BLOCK" in table and "400 vs 400 calls" in table
    row = gate_query_rows(payload).row(0, named=True)
    assert (row["drift_flag"], row["verdict"]) == ("BLOCK", PASS)
    unscored = json.loads(_report(PASS).to_json())
    assert unscored["queries"][0]["drift"] is None
    bad = json.loads(report.to_json())
    bad["queries"][0]["drift"]["flag"] = "MAYBE"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, gate_report_contract())
