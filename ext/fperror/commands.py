"""``torchhpc fperror analyze|trace``: one function per subcommand.

* :func:`run_analyze` — ``torchhpc fperror analyze FILE``: a Satire, FPTaylor or FPCore file bounded
  (:func:`~torchhpc.ext.fperror.ops.analyze_file`);
* :func:`run_trace` — ``torchhpc fperror trace module:function --ranges x=-1:1``: a torch function bounded
  (:func:`~torchhpc.ext.fperror.ops.bound`).

Each prints a table (or one JSON object with ``--json``) and returns the exit status.  torch is imported
inside the functions, so that the CLI builds its parser (``torchhpc --help``) without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

from torchhpc.ext.core.errors import ConfigError, InputError

from .config import AnalyzeOptions, TraceOptions


def run_analyze(opts: AnalyzeOptions) -> int:
    """``torchhpc fperror analyze FILE``: parse the file, bound every output, print the table (or one JSON
    object, ``--json``); a progress bar on a terminal."""
    from .ops import analyze_file

    res = analyze_file(opts.file, opts.format, opts.bound, progress=not opts.json and sys.stderr.isatty())
    print(json.dumps(res.as_json()) if opts.json else res.table(opts.bound.top))
    return 0


def _pairs(spec: str, what: str) -> dict[str, str]:
    """``"x=1,y=2"`` as ``{"x": "1", "y": "2"}``; ConfigError names the flag ``--<what>``."""
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if "=" not in item:
            raise ConfigError(f"--{what}: expected name=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _load_function(target: str):
    """The function ``module:function`` (or ``path.py:function``); InputError when it cannot be had."""
    mod_name, fn_name = target.rsplit(":", 1)
    try:
        if mod_name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(mod_name).stem, mod_name)
            if spec is None or spec.loader is None:
                raise ImportError(mod_name)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except (ImportError, FileNotFoundError) as exc:
        raise InputError(f"cannot import {mod_name!r}: {exc}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"{mod_name} has no function {fn_name!r}")
    return fn


def run_trace(opts: TraceOptions) -> int:
    """``torchhpc fperror trace module:function --ranges x=lo:hi``: import the function, parse ``--ranges``
    and ``--shapes``, bound it and print the table (or one JSON object, ``--json``)."""
    import torch

    from .ops import bound

    ranges = {}
    for k, v in _pairs(opts.ranges, "ranges").items():
        try:
            lo, hi = (float(x) for x in v.split(":"))
        except ValueError:
            raise ConfigError(f"--ranges: expected {k}=LO:HI, got {k}={v}") from None
        ranges[k] = (lo, hi)
    if not ranges:
        raise ConfigError("--ranges: give a range for every argument, e.g. --ranges x=-1:1")
    shapes = {}
    for k, v in _pairs(opts.shapes, "shapes").items():
        try:
            shapes[k] = tuple(int(x) for x in v.split("x"))
        except ValueError:
            raise ConfigError(f"--shapes: expected {k}=8x8, got {k}={v}") from None
    res = bound(_load_function(opts.target), ranges, shapes, getattr(torch, opts.dtype), opts.bound)
    print(json.dumps(res.as_json()) if opts.json else res.table(opts.bound.top))
    return 0


__all__ = ["run_analyze", "run_trace"]
