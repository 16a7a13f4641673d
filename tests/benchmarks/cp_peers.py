"""Peers of the change point benchmark, each in its own virtualenv under .bench/ (their pins conflict).

The virtualenvs are created on first use with ``python -m venv`` + pip; series go through JSON files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
VENV_ROOT = ROOT / ".bench" / "venvs"
RUNNER = Path(__file__).with_name("cp_peer_runner.py")


@dataclass(frozen=True)
class Peer:
    """How to install one peer: interpreter and pinned requirements."""

    name: str
    python: str
    requirements: tuple[str, ...]
    label: str


PEERS: tuple[Peer, ...] = (
    Peer("mongodb", "python3.11", ("signal-processing-algorithms==2.1.6",), "MongoDB e_divisive 2.1.6"),
    Peer("otava", "python3", ("apache-otava==0.8.0",), "apache-otava 0.8.0"),
)


def ensure_venv(peer: Peer) -> Path:
    """The peer's interpreter; creates its virtualenv when missing (a stamp marks a finished install)."""
    venv = VENV_ROOT / peer.name
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists() and python.exists():
        return python
    if venv.exists():
        shutil.rmtree(venv)
    interpreter = shutil.which(peer.python) or peer.python
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *peer.requirements],
        check=True,
    )
    stamp.write_text("\n".join(peer.requirements) + "\n")
    return python


def run_peer(
    peer: Peer, series: list[np.ndarray], timeout: float = 900.0
) -> tuple[list[list[int]], list[float]]:
    """Change points (discovery order) and seconds per series from one peer."""
    python = ensure_venv(peer)
    with tempfile.TemporaryDirectory(prefix=f"cp-{peer.name}-") as folder:
        source = Path(folder) / "in.json"
        target = Path(folder) / "out.json"
        source.write_text(json.dumps({"series": [[float(v) for v in s] for s in series]}))
        subprocess.run(
            [str(python), str(RUNNER), peer.name, str(source), str(target)], check=True, timeout=timeout
        )
        answer = json.loads(target.read_text())
    return answer["change_points"], answer["seconds"]


if __name__ == "__main__":
    for item in PEERS:
        print(item.name, ensure_venv(item))
