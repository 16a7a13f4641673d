"""Load SQL texts from ``sql/``: every statement the project runs lives in a file, not in a string."""

from __future__ import annotations

from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGED_SQL = Path(__file__).resolve().parent / "sql"
"""Where an installed wheel keeps ``sql/`` (setup.py copies it into the package); a checkout has none."""
SQL_ROOT = PACKAGED_SQL if PACKAGED_SQL.is_dir() else REPO_ROOT / "sql"


@cache
def load_sql(name: str, dialect: str = "postgres") -> str:
    """The text of ``sql/<dialect>/<name>.sql``; raises FileNotFoundError naming the file."""
    path = SQL_ROOT / dialect / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"SQL file not found: {path}")
    return path.read_text()
