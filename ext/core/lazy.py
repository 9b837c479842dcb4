"""Packages whose public names load on first use, and modules imported on first use.

A system's package exports its library (which imports torch) and its options (which must not: the
CLI builds every command's flags from the options, and ``torchhpc --help`` stays quick).  Instead
of importing every submodule in ``__init__.py``, a package lists where each name lives::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"find": "search", "FindOptions": "config"})

A module whose NumPy path must run without torch (``torchhpc align`` on the CPU: importing torch costs
about a second, more than aligning a small pair) names it by :func:`lazy_module`: ``torch.zeros`` in a
tensor path imports torch at that call, and a path that touches no ``torch.*`` never imports it.
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


class _LazyModule:
    """A stand-in for module ``name``: the first attribute read imports it (each name read is then kept)."""

    def __init__(self, name: str) -> None:
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self._lazy_name), attr)
        self.__dict__[attr] = value  # the next read finds it without this hook
        return value

    def __repr__(self) -> str:
        return f"<module {self._lazy_name!r}, imported on first use>"


def lazy_module(name: str) -> Any:
    """Module ``name``, imported when one of its attributes is first read (``torch = lazy_module("torch")``)."""
    import sys

    return sys.modules.get(name) or _LazyModule(name)
