"""Where the pg_store_plans tier's PostgreSQL lives and why the tier may be unavailable.

``install.sh`` (next to this file, run by ``make test-store-plans``) installs Debian's PostgreSQL 15
with its PGXS headers and builds pg_store_plans 1.9 into it; when it cannot, it writes
``SKIP: <reason>`` to the status file that ``unavailable_reason`` reports.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.tiers import pg_config

REPO_ROOT = Path(__file__).resolve().parents[3]
PG_MAJOR = int(os.environ.get("PG_MAJOR", "15"))
PG_BIN_DIR = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
STATE_DIR = Path(os.environ.get("STORE_PLANS_STATE", str(REPO_ROOT / "build" / "store_plans")))
STATUS_FILE = STATE_DIR / "status"
INSTALLER = Path(__file__).resolve().parent / "install.sh"
EXTENSION_VERSION = "1.9"


def unavailable_reason(bin_dir: Path = PG_BIN_DIR, status_file: Path = STATUS_FILE) -> str | None:
    """None when the PostgreSQL in bin_dir has pg_store_plans installed; else why not (for pytest.skip)."""
    libdir, sharedir = pg_config(bin_dir, "--pkglibdir"), pg_config(bin_dir, "--sharedir")
    installed = (
        (bin_dir / "postgres").is_file()
        and libdir is not None
        and sharedir is not None
        and (libdir / "pg_store_plans.so").is_file()
        and (sharedir / "extension" / f"pg_store_plans--{EXTENSION_VERSION}.sql").is_file()
    )
    if installed:
        return None
    if status_file.is_file():
        status = status_file.read_text().strip()
        if status.startswith("SKIP:"):
            return f"pg_store_plans tier: {status.removeprefix('SKIP:').strip()}"
    return (
        f"pg_store_plans tier: pg_store_plans {EXTENSION_VERSION} is not installed for the PostgreSQL "
        f"in {bin_dir} (run `make test-store-plans`, as root, to install it)"
    )
