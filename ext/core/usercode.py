"""User code: the ``MODULE:function`` / ``FILE.py:function`` a command imports and calls, through one guard.

:func:`load_function` imports the module (or runs the file as a module) and returns the function as
a :class:`UserFunction`; :meth:`UserFunction.check_call` compares the arguments a command is about to
pass with the function's signature; calling the :class:`UserFunction` runs it.  Whatever goes wrong
in the user's code -- a syntax error, an import that fails, a missing function, a wrong signature,
an exception the function raises, a result of the wrong kind (:meth:`UserFunction.result_error`) --
becomes one :class:`~torchhpc.ext.core.errors.InputError` line that names the function and the cause,
with the ``file:line`` in the user's code where an exception was raised; the CLI prints that line
and exits 1.  A :class:`~torchhpc.ext.core.errors.TorchHPCError` raised during the call (one of our
own one-line errors, e.g. from a tracer the call runs under) passes through unchanged.  The original
exception is kept as the error's ``__cause__``: ``TORCHHPC_DEBUG=1`` shows its traceback.

    fn = load_function("kernels.py:step", "target")      # InputError: no file, SyntaxError, no function
    fn.check_call(kwargs=["u"], flag="--ranges")          # InputError: step(x) takes no argument 'u'
    out = fn(u=t)                                          # InputError: kernels.py:step() failed: ...
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from .errors import InputError, TorchHPCError

# our own folders and the interpreter's: frames there are not "where the user's code failed"
_REPO = Path(__file__).resolve().parents[2]
_OURS = tuple(str(_REPO / d) + "/" for d in ("ext", "trainers", "envs", "triton_kernels"))
_LIBS = tuple({str(Path(p).resolve()) + "/" for k in ("stdlib", "platstdlib", "purelib", "platlib")
               if (p := sysconfig.get_paths().get(k))})


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = str(Path(filename).resolve())
    return not path.startswith(_OURS) and not path.startswith(_LIBS)


def user_frame(tb: TracebackType | None) -> str | None:
    """``file.py:line`` of the innermost frame of ``tb`` in the user's code (not ours, not a library's)."""
    where = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if _is_user_file(code.co_filename):
            where = f"{Path(code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def describe_exception(exc: BaseException) -> str:
    """``Type: first line of the message (at file.py:line)`` -- an exception in one line."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    where = user_frame(exc.__traceback__)
    return type(exc).__name__ + (f": {first}" if first else "") + (f" (at {where})" if where else "")


class UserFunction:
    """A user's function loaded by :func:`load_function`; calling it runs it through the guard.

    Args:
        fn: the function.
        spec: how the user named it (``kernels.py:step``), used in every message.
        what: the option or argument that named it (``--model``, ``target``).
    """

    def __init__(self, fn: Callable, spec: str, what: str) -> None:
        self.fn, self.spec, self.what = fn, spec, what
        self.name = getattr(fn, "__name__", spec.rpartition(":")[2])

    def __repr__(self) -> str:
        return f"UserFunction({self.spec!r})"

    def error(self, cause: str) -> InputError:
        """``InputError("<what>: <spec>() <cause>")``."""
        return InputError(f"{self.what}: {self.spec}() {cause}")

    def result_error(self, expected: str, got: Any) -> InputError:
        """The function returned ``got`` where ``expected`` (words) was due."""
        kind = got if isinstance(got, str) else type(got).__name__
        return self.error(f"must return {expected}, got {kind}")

    def signature(self) -> inspect.Signature | None:
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):  # a builtin without a signature: nothing to check
            return None

    def check_call(self, n_args: int = 0, kwargs: Iterable[str] = (), flag: str = "") -> None:
        """Raise :class:`InputError` unless the function takes ``n_args`` positional arguments and the
        keyword arguments ``kwargs`` (named by the option ``flag``, e.g. ``--ranges``) and needs no other."""
        sig = self.signature()
        if sig is None:
            return
        names = list(kwargs)
        params = list(sig.parameters.values())
        shown = f"{self.name}{sig}"
        P = inspect.Parameter
        positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
        by_position = positional[:n_args]
        if n_args > len(positional) and not any(p.kind == P.VAR_POSITIONAL for p in params):
            raise self.error(f"is called with {n_args} argument{'s' if n_args != 1 else ''}, but {shown} "
                             f"takes {len(positional)}")
        keywords = {p.name for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)} - \
            {p.name for p in by_position}
        if not any(p.kind == P.VAR_KEYWORD for p in params):
            unknown = [n for n in names if n not in keywords]
            if unknown:
                raise self.error(f"takes no argument {', '.join(map(repr, unknown))}: {flag or 'the call'} names "
                                 f"{'it' if len(unknown) == 1 else 'them'}, but the signature is {shown}")
        missing = [p.name for p in params if p.default is P.empty and p not in by_position
                   and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and p.name not in names]
        if missing:
            how = f"give {flag} for {', '.join(map(repr, missing))}" if flag else \
                f"it is called with {n_args or 'no'} argument{'s' if n_args != 1 else ''}"
            raise self.error(f"needs {', '.join(map(repr, missing))} ({shown}): {how}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; any exception but a TorchHPCError becomes one InputError line."""
        try:
            return self.fn(*args, **kwargs)
        except TorchHPCError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code failing is bad input
            raise self.error(f"failed: {describe_exception(exc)}") from exc


def split_spec(spec: str, what: str) -> tuple[str, str]:
    """``MODULE:function`` / ``FILE.py:function`` as ``(module or file, function)``; a ``.py`` file must be
    readable.  Nothing is imported (the command line calls this before torch loads: a mistyped path fails
    at once).

    Raises:
        InputError: a malformed ``spec``, or a ``.py`` file that is missing or unreadable -- naming ``what``.
    """
    mod_name, sep, fn_name = spec.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise InputError(f"{what}: expected MODULE:function or FILE.py:function, got {spec!r}")
    if mod_name.endswith(".py"):
        from .paths import check_input

        check_input(mod_name, what=what)
    return mod_name, fn_name


def load_function(spec: str, what: str) -> UserFunction:
    """The function named by ``MODULE:function`` or ``path/FILE.py:function``.

    A ``.py`` path is run as a fresh module each time (registered in ``sys.modules`` under
    ``torchhpc_user_<stem>``, as the pickling and tracing of its classes need), its folder on the
    import path (its sibling modules import); a module name is imported, from the current directory
    too (as ``python -m`` would find it).

    Raises:
        InputError: a malformed ``spec``, no such file, a syntax error (``file:line:column``), an
            exception while importing, or no such function -- naming ``what`` (``--model``, ``target``).
    """
    mod_name, fn_name = split_spec(spec, what)
    name = mod_name
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            name = f"torchhpc_user_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
            mspec = importlib.util.spec_from_file_location(name, path)
            if mspec is None or mspec.loader is None:
                raise InputError(f"{what}: cannot import {mod_name}")
            folder = str(path.resolve().parent)
            if folder not in sys.path:  # its sibling modules import as `python FILE.py` would find them
                sys.path.append(folder)  # last: a file there never shadows an installed package
            mod = importlib.util.module_from_spec(mspec)
            sys.modules[name] = mod
            try:
                mspec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        else:
            here = os.getcwd()
            if here not in sys.path and "" not in sys.path:  # an entry-point script does not look there
                sys.path.append(here)  # last: a file here never shadows an installed package
            mod = importlib.import_module(mod_name)
    except TorchHPCError:
        raise
    except SyntaxError as exc:
        at = f"{Path(exc.filename).name if exc.filename else mod_name}:{exc.lineno}" + \
            (f":{exc.offset}" if exc.offset else "")
        raise InputError(f"{what}: cannot import {mod_name}: {at}: {type(exc).__name__}: {exc.msg}") from exc
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - an import failure of user code is bad input
        missing = getattr(exc, "name", None) or ""
        if isinstance(exc, ModuleNotFoundError) and f"{mod_name}.".startswith(f"{missing}.") and Path(mod_name).is_file():
            raise InputError(f"{what}: {mod_name} is a file but not a Python file; name FILE.py:function or "
                             "MODULE:function") from exc
        raise InputError(f"{what}: importing {mod_name} failed: {describe_exception(exc)}") from exc
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise InputError(f"{what}: {mod_name} has no function {fn_name!r}")
    if not callable(fn):
        raise InputError(f"{what}: {mod_name}:{fn_name} is not callable (its type is {type(fn).__name__})")
    return UserFunction(fn, spec, what)


__all__ = ["UserFunction", "describe_exception", "load_function", "split_spec", "user_frame"]
