"""Packages whose public names load on first use.

A system's package exports its library (which imports torch) and its options (which must not: the
CLI builds every command's flags from the options, and ``torchhpc --help`` stays quick).  Instead
of importing every submodule in ``__init__.py``, a package lists where each name lives::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"find": "search", "FindOptions": "config"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]],
                                                                   list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: name -> submodule, imported on first use."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__, sorted(exports)
