"""A large CI drift payload (`radar drift score --payload`): parse, validate and score it, against the
floor of any Python JSON reader and the old validation (issue 27, item 4).

``RADAR_BENCH_PAYLOAD_SAMPLES`` candidate samples (default 5,600,000: the issue's 50.9 MB payload),
lognormal (seed 20261206), against a 5,000-sample baseline:

- floor: ``json.loads`` of the text alone (what any stdlib reader pays);
- ours: ``parse_payload`` (parse with the number, key and depth checks, the contract checked once:
  jsonschema on all but the samples, the samples in bulk) and ``score_payload(validated=True)`` (the
  batched kernel, one pair);
- the old validation: jsonschema over every sample, on the first ``RADAR_BENCH_PAYLOAD_PEER`` samples
  (default 200,000), scaled to the payload (it ran twice before: parse, then score).

Peak memory: the process's maximum RSS grown during ours (``ru_maxrss``; the text and the generator's
arrays are held before it starts), and the whole-process peak of a fresh interpreter that imports the CLI,
reads the payload file and parses, validates and scores it (the default, calibrated profile), as `radar
drift score --payload` does: the issue's bound is 1 GiB for that.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from jobs.drift.contract import parse_payload, payload_contract, score_payload

RESULTS = Path(".bench/results")
SEED = 20261206


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


WHOLE_PROCESS = """
import resource, sys
import numpy as np
import jobs.cli.main
from jobs.drift.contract import parse_payload, score_payload
with open(sys.argv[1], "rb") as handle:
    text = handle.read()
payload = parse_payload(text, max_bytes=len(text))
score_payload(payload, np.random.default_rng(1).lognormal(1.0, 0.5, 5_000), validated=True)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _whole_process_peak_mib(text: bytes) -> float:
    """Peak RSS of a fresh interpreter that parses and scores ``text`` from a file (imports included)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(text)
        handle.flush()
        out = subprocess.run(
            [sys.executable, "-c", WHOLE_PROCESS, handle.name], check=True, capture_output=True, text=True
        )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import jsonschema

    count = int(os.environ.get("RADAR_BENCH_PAYLOAD_SAMPLES", 5_600_000))
    peer = min(count, int(os.environ.get("RADAR_BENCH_PAYLOAD_PEER", 200_000)))
    rng = np.random.default_rng(SEED)
    payload = {"query_hash": "a" * 64, "metric": "latency", "baseline_version": "v1"}
    samples = rng.lognormal(1.0, 0.5, count).round(6)
    text = json.dumps({**payload, "candidate_samples": samples.tolist()}).encode()
    baseline = rng.lognormal(1.0, 0.5, 5_000)
    del samples

    started = time.perf_counter()
    json.loads(text)
    floor_s = time.perf_counter() - started

    before = _max_rss_mib()
    started = time.perf_counter()
    parsed = parse_payload(text, max_bytes=len(text))
    parse_s = time.perf_counter() - started
    started = time.perf_counter()
    row = score_payload(parsed, baseline, validated=True)
    score_s = time.perf_counter() - started
    grown = _max_rss_mib() - before
    del parsed

    small = {**payload, "candidate_samples": json.loads(text)["candidate_samples"][:peer]}
    started = time.perf_counter()
    jsonschema.Draft202012Validator(payload_contract()).validate(small)
    old_validation_s = (time.perf_counter() - started) * count / peer

    whole_mib = _whole_process_peak_mib(text)

    result = {
        "whole_process_peak_rss_mib": round(whole_mib),
        "samples": count,
        "payload_mb": round(len(text) / 1e6, 1),
        "json_loads_s": round(floor_s, 2),
        "parse_and_validate_s": round(parse_s, 2),
        "score_s": round(score_s, 2),
        "ours_vs_json_loads": round((parse_s + score_s) / floor_s, 2),
        "old_validation_once_s_scaled": round(old_validation_s, 1),
        "max_rss_grown_mib": round(grown),
        "flag": row["flag"],
    }
    print(
        f"{result['payload_mb']} MB, {count:,} samples: json.loads {floor_s:.2f} s; ours parse+validate "
        f"{parse_s:.2f} s + score {score_s:.2f} s = x{result['ours_vs_json_loads']} the floor; the old "
        f"jsonschema validation of every sample ~{old_validation_s:.0f} s (scaled from {peer:,}; it ran "
        f"twice); max RSS grew {grown:.0f} MiB during ours; a fresh process parsing and scoring the "
        f"file peaked at {whole_mib:.0f} MiB"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_payload.json").write_text(json.dumps(result, indent=2) + "\n")
