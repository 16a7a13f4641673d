"""Build hook (everything else is in pyproject.toml): a wheel carries the repository's ``sql/`` folder as
``jobs/sql/``, so an installed radar (``pip install .``, ``pipx install .``) finds its SQL files where
``jobs.sqlfiles`` looks first. A checkout and an editable install read ``sql/`` in place."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SQL = Path(__file__).resolve().parent / "sql"


class BuildPyWithSql(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "jobs" / "sql"
        shutil.copytree(SQL, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithSql})
