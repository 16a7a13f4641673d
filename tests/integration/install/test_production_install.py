"""The production install (issue 29, item 2): `pip install .` into a fresh virtualenv (not editable: the
wheel built from the repository, runtime dependencies only), then `radar --help`, `radar snapshot` against
an embedded PostgreSQL 18 server and `radar sql` over the lake it wrote, and the Dagster definitions load.
It records the virtualenv's size and the install's wall time (printed, and in
.bench/results/production_install.json).

Without a package index pip can reach, the test skips, saying so. It takes minutes (every runtime wheel is
downloaded unless pip's cache has it), hence the ``slow`` tier."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FleetFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / ".bench" / "results"
BUILD_LEFTOVERS = shutil.ignore_patterns(
    ".git", ".venv", ".bench", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
    ".hypothesis", ".dagster_home", ".tmp_dagster_home_*", ".ipynb_checkpoints",
)  # fmt: skip
NOT_PACKAGED = {"data", "tests", "notebooks"}
"""Top-level folders a wheel does not need (data/ may hold lakes). Copying the rest of the repository keeps
pip's in-tree build (build/, *.egg-info) out of it."""


def not_source(folder: str, names: list[str]) -> set[str]:
    ignored = set(BUILD_LEFTOVERS(folder, names))
    return ignored | (NOT_PACKAGED & set(names) if Path(folder) == ROOT else set())


NETWORK_ERRORS = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Name or service not known"
    r"|Network is unreachable|Connection refused|Read timed out|ConnectTimeout|ProxyError"
    r"|Could not fetch URL|SSLError",
)
CLEAN_ENV = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "RADAR_CONFIG", "DAGSTER_HOME", "PYTHONSTARTUP"}


def index_unreachable() -> str | None:
    """Why pip cannot reach a package index (its own configuration: index, proxies, certificates), or None."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "duckdb"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return "pip could not reach a package index within 120 s"
    if done.returncode != 0 or "duckdb" not in done.stdout:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip cannot reach a package index ({last[:200]})"
    return None


def du_bytes(folder: Path) -> int:
    """Disk usage as `du` counts it (allocated blocks, each hard-linked file once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(base, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def test_pip_install_dot_gives_a_working_radar_and_dagster_definitions(
    fleet_factory: FleetFactory, tmp_path: Path
) -> None:
    if (why := index_unreachable()) is not None:
        pytest.skip(f"no network for pip: {why}; the production install cannot be built here")
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=not_source, symlinks=True)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    python, radar = venv / "bin" / "python", venv / "bin" / "radar"

    started = time.perf_counter()
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(source)], capture_output=True, text=True, env=env
    )
    install_s = time.perf_counter() - started
    if installed.returncode != 0 and NETWORK_ERRORS.search(installed.stderr):
        pytest.skip(f"no network for pip: the install failed on the network: {installed.stderr[-300:]}")
    assert installed.returncode == 0, installed.stderr[-3000:]
    size = du_bytes(venv)
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, env=env
    )
    packages = {p["name"].lower() for p in json.loads(listed.stdout)}
    report = {"install_s": round(install_s, 1), "venv_bytes": size, "packages": len(packages)}
    print(f"\nproduction install: {install_s:.0f} s, {size / 2**20:.0f} MiB, {len(packages)} packages")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "production_install.json").write_text(json.dumps(report, indent=2))

    # Not editable, no dev extras: the code is the wheel's, and no test or notebook tool came with it.
    where = subprocess.run(
        [python, "-c", "import jobs, orchestration; print(jobs.__file__); print(orchestration.__file__)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert all(line.startswith(str(venv)) for line in where.stdout.split()), where.stdout
    assert not packages & {"pytest", "hypothesis", "moto", "jupyterlab", "ruff", "dagster-webserver"}

    work = tmp_path / "work"  # a folder of the user's: no repository files in reach
    work.mkdir()
    helped = subprocess.run([radar, "--help"], capture_output=True, text=True, env=env, cwd=work)
    assert helped.returncode == 0 and "snapshot" in helped.stdout, helped.stderr

    fleet = fleet_factory(["installed"])
    (work / "fleet.toml").write_text(fleet.fleet_config_toml())
    common = [str(radar), "--lake", str(work / "lake"), "--fleet-file", str(work / "fleet.toml")]
    snapped = subprocess.run(
        [*common, "snapshot", "--format", "json"], capture_output=True, text=True, env=env, cwd=work
    )
    assert snapped.returncode == 0, snapped.stdout + snapped.stderr
    rows = json.loads(snapped.stdout)
    assert [(r["instance"], r["status"]) for r in rows] == [("installed", "ok")], rows
    assert list((work / "lake" / "statement_snapshots").rglob("*.parquet"))

    # The SQL files came with the wheel (jobs/sql/): the views over the lake the snapshot wrote.
    counted = subprocess.run(
        [*common, "sql", "select count(*) as runs from snapshot_runs", "--format", "json"],
        capture_output=True, text=True, env=env, cwd=work,
    )  # fmt: skip
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout) == [{"runs": 1}]

    # The Dagster definitions load from the runtime dependencies alone.
    loaded = subprocess.run(
        [python, "-c", "from orchestration.definitions import defs; print(len(defs.resolve_all_job_defs()))"],
        capture_output=True, text=True, env=env, cwd=work,
    )  # fmt: skip
    assert loaded.returncode == 0 and int(loaded.stdout.split()[-1]) > 0, loaded.stderr[-2000:]
