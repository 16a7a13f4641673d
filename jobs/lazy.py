"""Package exports loaded on first use (PEP 562): a package re-exports names of its heavy modules without
importing them, so importing one light submodule (a config class) stays cheap."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The package's ``__getattr__``: ``exports`` maps each name to the module that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name]), name)

    return __getattr__
