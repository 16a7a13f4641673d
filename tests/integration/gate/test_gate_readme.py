"""The documented CI example (docs/gate.md, once the README's), run as printed (the first ``sh`` block of
"The gate" section, by bash, with `radar` on PATH) against a real server: a dropped index prints BLOCK, an
unreachable candidate says the gate could not run, each through the exit code the page documents."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FleetFactory
from tests.support.gate_databases import gate_databases

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[3]


def readme_ci_example() -> str:
    text = (ROOT / "docs" / "gate.md").read_text()
    section = text[text.index("## The gate: PASS / WARN / BLOCK before a change ships") :]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start : section.index("```", start)]


@pytest.fixture(scope="module")
def readme_server(fleet_factory: FleetFactory) -> Any:
    server = fleet_factory(["gatereadme"]).server("gatereadme")
    gate_databases(server, "readme_base", "readme_noindex")
    return server


def run_example(base: str, candidate: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "ci.sh"
    script.write_text(readme_ci_example().replace("gate.json", str(tmp_path / "gate.json")))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "BASE_DSN": base,
        "CANDIDATE_DSN": candidate,
        "RADAR_GATE__MAX_MEASUREMENTS": "20",  # a shorter run; the command is the README's
        "RADAR_GATE__MEMORY_EXECUTIONS": "1",
    }
    return subprocess.run(
        ["bash", str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_readme_ci_example_runs_as_printed(readme_server: Any, tmp_path: Path) -> None:
    assert "radar gate --baseline" in readme_ci_example()
    blocked = run_example(
        readme_server.dsn_for("readme_base"), readme_server.dsn_for("readme_noindex"), tmp_path
    )
    assert blocked.returncode == 1 and blocked.stdout.strip().splitlines()[-1] == "BLOCK", blocked
    assert (tmp_path / "gate.json").is_file()
    unreachable = run_example(
        readme_server.dsn_for("readme_base"), "postgresql://radar@127.0.0.1:1/nowhere", tmp_path
    )
    assert unreachable.returncode == 1, unreachable
    assert unreachable.stdout.strip().splitlines()[-1].startswith("the gate could not run (3)"), unreachable
