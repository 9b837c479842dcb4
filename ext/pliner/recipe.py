"""The repaired configuration: keep chosen regions in float64 inside any autocast / TF32 / compile setting.

Two ways to apply a :class:`Recipe` found by :func:`~torchhpc.ext.pliner.find`:

* modules — :class:`HighPrecision` wraps a module so that it runs in float64 whatever the
  surrounding configuration (autocast off inside, parameters cast on the fly through
  :func:`torch.func.functional_call`, so they stay shared and trainable); outputs come back in the
  input's dtype.  :func:`keep_high_precision` swaps wrappers in for a ``with`` block.
* source lines — :class:`HighPrecisionLines`, a ``TorchFunctionMode`` that runs every torch call made
  from the listed ``file:line`` s in float64 (the culprit ops of the search, as the user wrote them).

    recipe = result.recipe
    with recipe.applied(model), torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_TORCH_DIR = os.path.dirname(torch.__file__)
_HERE = os.path.abspath(__file__)


def _up(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def output_dtypes(out):
    """The dtypes of the floating tensors of an output pytree, in order."""
    return [t.dtype for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _cast_back(out, dtypes):
    leaves, spec = tree_flatten(out)
    it = iter(dtypes)
    res = []
    for t in leaves:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            res.append(t.to(next(it, t.dtype)))
        else:
            res.append(t)
    return spec.unflatten(res)


def _device_type(args) -> str:
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor):
            return t.device.type
    return "cpu"


class HighPrecision(torch.nn.Module):
    """Run ``module`` in float64 (autocast off inside); floating outputs come back as ``out_dtypes``.

    Args:
        module: the module to keep in high precision (not copied: its parameters stay shared).
        out_dtypes: dtypes of the floating outputs, in order; default: the dtype of the first
            floating input (so a float32 model gets float32 back).
    """

    def __init__(self, module: torch.nn.Module, out_dtypes: Sequence[torch.dtype] | None = None):
        super().__init__()
        self.module = module
        self.out_dtypes = list(out_dtypes) if out_dtypes is not None else None

    def forward(self, *args, **kwargs):
        floats = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
        state = {k: _up(v) for k, v in {**dict(self.module.named_parameters()),
                                        **dict(self.module.named_buffers())}.items()}
        with torch.autocast(_device_type((args, kwargs)), enabled=False):
            out = torch.func.functional_call(self.module, state, tree_map(_up, args), tree_map(_up, kwargs))
        dtypes = self.out_dtypes
        if dtypes is None:
            dtypes = [floats[0].dtype if floats else torch.float32] * len(output_dtypes(out))
        return _cast_back(out, dtypes)


@contextlib.contextmanager
def keep_high_precision(model: torch.nn.Module, modules: Sequence[str], out_dtypes: dict | None = None):
    """Within the block, the submodules ``modules`` (dotted paths; ``""`` is the model) run in float64.

    Yields the callable to run: ``model`` itself, or a :class:`HighPrecision` wrapper of it when
    ``""`` is listed.

    Nested paths are merged into their outermost listed ancestor.

    Raises:
        KeyError: a path names no submodule.
    """
    paths = sorted(set(modules), key=lambda p: (p.count(".") if p else -1, p))
    outer = [p for p in paths if not any(q == "" or p.startswith(q + ".") for q in paths if q != p)]
    if "" in outer:  # the whole model: hand back a wrapper (patching model.forward would recurse)
        yield HighPrecision(model, (out_dtypes or {}).get(""))
        return
    swapped = []
    try:
        for p in outer:
            parent_path, _, name = p.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            sub = parent.get_submodule(name)
            setattr(parent, name, HighPrecision(sub, (out_dtypes or {}).get(p)))
            swapped.append((parent, name, sub))
        yield model
    finally:
        for parent, name, sub in reversed(swapped):
            setattr(parent, name, sub)


def _caller_line() -> str | None:
    """``file:line`` of the innermost frame outside torch and this package."""
    f = sys._getframe(2)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_TORCH_DIR) and fn != _HERE:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


_BACK = "_pliner_back_dtype"  # tag on a float64 value made by an enhanced line: the dtype it leaves with


def _leave(t):
    """A value of an enhanced line consumed elsewhere: cast back to the dtype it would have had."""
    if isinstance(t, torch.Tensor) and hasattr(t, _BACK):
        return t.to(getattr(t, _BACK))
    return t


class HighPrecisionLines(TorchFunctionMode):
    """Run every torch call made from the given ``file:line`` s in float64.

    As in the search, values flowing between such calls stay float64; a value leaving them (used
    by any other call, or returned by a model under :meth:`Recipe.applied`) is cast back to the
    promoted dtype of the floating inputs it was computed from, so the rest of the program keeps
    its configuration.
    """

    def __init__(self, lines: Sequence[str]):
        super().__init__()
        self.lines = {_norm_line(ln) for ln in lines}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        line = _caller_line()
        if line is None or _norm_line(line) not in self.lines:
            return func(*tree_map(_leave, args), **tree_map(_leave, kwargs))
        floats = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not floats:
            return func(*args, **kwargs)
        back = None
        for t in floats:
            d = getattr(t, _BACK, t.dtype)
            back = d if back is None else torch.promote_types(back, d)
        with torch.autocast(floats[0].device.type, enabled=False):
            out = func(*tree_map(_up, args), **tree_map(_up, kwargs))
        if back != torch.float64:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                    setattr(t, _BACK, back)
        return out


def _norm_line(line: str) -> str:
    path, _, no = line.rpartition(":")
    return f"{os.path.abspath(path)}:{no}"


@dataclass
class Recipe:
    """Which regions to keep in higher precision: module paths (wrapped) and source lines (``file:line``)."""

    modules: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def applied(self, model: torch.nn.Module):
        """``with recipe.applied(model): model(x)`` — the recipe in force for the block."""
        with contextlib.ExitStack() as stack:
            if self.modules:
                stack.enter_context(keep_high_precision(model, self.modules))
            if self.lines:
                stack.enter_context(HighPrecisionLines(self.lines))
                hook = model.register_forward_hook(lambda _m, _i, out: tree_map(_leave, out))
                stack.callback(hook.remove)
            yield model

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """Wrap the recipe's modules in place, for good (lines need :meth:`applied`); returns ``model``."""
        for p in self.modules:
            parent_path, _, name = p.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            setattr(parent, name, HighPrecision(parent.get_submodule(name)))
        return model

    def as_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return json.dumps(self.as_json())


__all__ = ["HighPrecision", "HighPrecisionLines", "Recipe", "keep_high_precision", "output_dtypes"]
