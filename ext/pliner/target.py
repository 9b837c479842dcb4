"""Load the user's ``MODULE:build_fn`` / ``FILE.py:build_fn`` and check what it returns.

The import and the call go through the shared guard :func:`torchhpc.ext.core.usercode.load_function`
(the same one ``torchhpc fperror trace`` uses): a syntax error, an exception, a build function that
needs arguments or returns something else than ``(model, inputs)`` is one InputError line naming it.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

from torchhpc.ext.core.usercode import UserFunction, load_function


def load_build_fn(spec: str) -> UserFunction:
    """The callable named by ``MODULE:build_fn`` or ``path/FILE.py:build_fn``, guarded.

    Raises:
        InputError: the module or file cannot be imported, or has no such function.
    """
    return load_function(spec, "--model")


def build_target(spec: str) -> tuple[torch.nn.Module, tuple]:
    """Call the build function: ``(model, inputs)``, inputs as a tuple of positional arguments.

    Raises:
        InputError: the function needs arguments, fails, or returns something else than
            ``(nn.Module, inputs)``.
    """
    fn = load_build_fn(spec)
    fn.check_call()
    out = fn()
    if not (isinstance(out, tuple) and len(out) == 2):
        raise fn.result_error("(model, inputs)", out)
    model, inputs = out
    if not isinstance(model, torch.nn.Module):
        raise fn.result_error("(model, inputs) with a torch.nn.Module as model", f"a {type(model).__name__} as model")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs) if isinstance(inputs, (list, tuple)) \
        else None
    if inputs is None or not any(isinstance(t, torch.Tensor) for t in tree_flatten(inputs)[0]):
        raise fn.result_error("inputs as a tensor or a tuple of tensors", "no tensor among the inputs")
    return model, inputs


__all__ = ["build_target", "load_build_fn"]
