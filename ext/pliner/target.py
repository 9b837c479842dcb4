"""Load the user's ``MODULE:build_fn`` / ``FILE.py:build_fn`` and check what it returns."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten

from torchhpc.ext.core.errors import InputError


def load_build_fn(spec: str):
    """The callable named by ``MODULE:build_fn`` or ``path/FILE.py:build_fn``.

    Raises:
        InputError: the module or file cannot be imported, or has no such function.
    """
    mod_name, _, fn_name = spec.rpartition(":")
    if not mod_name or not fn_name:
        raise InputError(f"--model: expected MODULE:build_fn or FILE.py:build_fn, got {spec!r}")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise InputError(f"--model: no such file {mod_name}")
            name = f"pliner_user_{path.stem}"
            mspec = importlib.util.spec_from_file_location(name, path)
            if mspec is None or mspec.loader is None:
                raise InputError(f"--model: cannot import {mod_name}")
            mod = importlib.util.module_from_spec(mspec)
            sys.modules[name] = mod
            mspec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - an import failure of user code is bad input
        raise InputError(f"--model: importing {mod_name} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"--model: {mod_name} has no function {fn_name!r}")
    return fn


def build_target(spec: str) -> tuple[torch.nn.Module, tuple]:
    """Call the build function: ``(model, inputs)``, inputs as a tuple of positional arguments.

    Raises:
        InputError: the function fails or returns something else than ``(nn.Module, inputs)``.
    """
    fn = load_build_fn(spec)
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - the user's build function failing is bad input
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise InputError(f"--model: {spec}() failed: {type(exc).__name__}: {first}") from None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise InputError(f"--model: {spec}() must return (model, inputs), got {type(out).__name__}")
    model, inputs = out
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"--model: {spec}() returned a {type(model).__name__} as model, expected a torch.nn.Module")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs) if isinstance(inputs, (list, tuple)) \
        else None
    if inputs is None or not any(isinstance(t, torch.Tensor) for t in tree_flatten(inputs)[0]):
        raise InputError(f"--model: {spec}() must return inputs as a tensor or a tuple of tensors")
    return model, inputs


__all__ = ["build_target", "load_build_fn"]
