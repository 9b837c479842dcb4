"""Which implementation of an op runs: one resolver for every system.

Each op of the suite has a vectorised torch implementation (the reference and the CPU path) and
may have a Triton kernel (CUDA, or the CPU under ``TRITON_INTERPRET=1``) and a numba kernel (CPU).
:func:`resolve_backend` turns what the user asked for (``auto`` or a name) into what will actually
run on the given device, or raises one clear error; CLIs print its answer, so that what a user is
told is what runs.

    backend = resolve_backend("auto", device, choices=("torch", "triton", "numba"))
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable, Sequence

from .errors import InputError


@functools.cache
def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def triton_available() -> bool:
    """True when the triton package is installed (kernels need CUDA or ``TRITON_INTERPRET=1`` to run)."""
    return _importable("triton")


def numba_available() -> bool:
    """True when numba is installed (the compiled CPU kernels)."""
    return _importable("numba")


def triton_interpreted() -> bool:
    """True when ``TRITON_INTERPRET=1``: Triton kernels run on the CPU (slowly; for tests)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _device_type(device) -> str:
    return getattr(device, "type", None) or str(device).split(":")[0]


def default_auto(device, choices: Sequence[str]) -> str:
    """The usual ``auto``: Triton on CUDA, numba on the CPU where installed, else torch."""
    kind = _device_type(device)
    if kind == "cuda" and "triton" in choices and triton_available():
        return "triton"
    if kind == "cpu" and "numba" in choices and numba_available():
        return "numba"
    return "torch"


def check_backend(name: str, device) -> None:
    """Raise :class:`InputError` when backend ``name`` cannot run on ``device``."""
    kind = _device_type(device)
    if name == "triton" or name.startswith("triton-"):  # a Triton kernel, e.g. ccsdt's triton-mma
        if not triton_available():
            raise InputError(f"backend '{name}' needs the triton package (pip install triton), or use 'torch'")
        if kind != "cuda" and not triton_interpreted():
            raise InputError(f"backend '{name}' needs a CUDA device (--device cuda), or TRITON_INTERPRET=1 "
                             "to interpret it on the CPU")
    elif name == "numba":
        if not numba_available():
            raise InputError("backend 'numba' needs numba (pip install numba), or use 'torch'")
        if kind != "cpu":
            raise InputError(f"backend 'numba' runs on the CPU; the data is on {kind}")


def resolve_backend(
    requested: str, device, *, choices: Sequence[str] = ("torch", "triton"),
    auto: Callable[[object, Sequence[str]], str] | str | None = None, what: str = "backend",
) -> str:
    """What will actually run for ``requested`` on ``device``.

    Args:
        requested: ``auto`` or one of ``choices``.
        device: a ``torch.device`` (or its name) where the data lives.
        choices: the op's implementations (``torch`` always among them).
        auto: the op's own rule for ``auto`` (a name, or ``f(device, choices) -> name``); default
            :func:`default_auto`.
        what: the option's name in messages (e.g. ``--backend``).

    Returns:
        The backend name that runs: never ``auto``.

    Raises:
        InputError: an unknown name, or one that cannot run on ``device`` (says why and what to use).
    """
    if requested != "auto" and requested not in choices:
        raise InputError(f"{what} must be one of auto, {', '.join(choices)}; got {requested!r}")
    if requested == "auto":
        name = auto if isinstance(auto, str) else (auto or default_auto)(device, choices)
        try:
            check_backend(name, device)
        except InputError:
            name = "torch"
        return name
    check_backend(requested, device)
    return requested


__all__ = ["check_backend", "default_auto", "numba_available", "resolve_backend", "triton_available",
           "triton_interpreted"]
