"""``torchhpc fperror analyze|trace``: one function per subcommand.

* :func:`run_analyze` — ``torchhpc fperror analyze FILE``: a Satire, FPTaylor or FPCore file bounded
  (:func:`~torchhpc.ext.fperror.ops.analyze_file`);
* :func:`run_trace` — ``torchhpc fperror trace module:function --ranges x=-1:1``: a torch function bounded
  (:func:`~torchhpc.ext.fperror.ops.bound`).

Each prints a table (or one JSON object with ``--json``) and returns the exit status.  torch is imported
inside the functions, so that the CLI builds its parser (``torchhpc --help``) without it.
"""

from __future__ import annotations

import json
import sys

from torchhpc.ext.core.errors import ConfigError, warn

from .config import AnalyzeOptions, TraceOptions


def run_analyze(opts: AnalyzeOptions) -> int:
    """``torchhpc fperror analyze FILE``: parse the file, bound every output, print the table (or one JSON
    object, ``--json``); a progress bar on a terminal."""
    from .ops import analyze_file

    res = analyze_file(opts.file, opts.format, opts.bound, progress=not opts.json and sys.stderr.isatty())
    for line in res.notes:  # what the file says that the bound does not use (FPTaylor's Constraints, ...)
        warn(line)
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


def _shapes(spec: str, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[int, ...]]:
    """``--shapes x=8x8,y=8`` as ``{"x": (8, 8), "y": (8,)}``; ConfigError names a malformed entry, a
    dimension below 1 or an argument without a range."""
    shapes = {}
    for k, v in _pairs(spec, "shapes").items():
        try:
            shapes[k] = tuple(int(x) for x in v.split("x"))
        except ValueError:
            raise ConfigError(f"--shapes: expected {k}=8x8, got {k}={v}") from None
        if any(d < 1 for d in shapes[k]):
            raise ConfigError(f"--shapes: {k}={v}: every dimension must be at least 1")
        if k not in ranges:
            raise ConfigError(f"--shapes: {k!r} has no range; give it in --ranges ({k}=LO:HI)")
    return shapes


def run_trace(opts: TraceOptions) -> int:
    """``torchhpc fperror trace module:function --ranges x=lo:hi``: import the function, parse ``--ranges``
    and ``--shapes``, bound it and print the table (or one JSON object, ``--json``).

    The function is imported and called through :func:`~torchhpc.ext.core.usercode.load_function`: a
    syntax error, an exception, a signature that does not take the arguments ``--ranges`` names, a
    result that is not tensors are each one :class:`~torchhpc.ext.core.errors.InputError` line naming
    the function.
    """
    from torchhpc.ext.core.usercode import load_function, split_spec

    split_spec(opts.target, "target")  # a mistyped FILE.py fails before torch loads
    import torch

    from .ops import bound

    fn = load_function(opts.target, "target")
    ranges = {}
    for k, v in _pairs(opts.ranges, "ranges").items():
        try:
            lo, hi = (float(x) for x in v.split(":"))
        except ValueError:
            raise ConfigError(f"--ranges: expected {k}=LO:HI, got {k}={v}") from None
        ranges[k] = (lo, hi)
    if not ranges:
        raise ConfigError("--ranges: give a range for every argument, e.g. --ranges x=-1:1")
    shapes = _shapes(opts.shapes, ranges)
    fn.check_call(kwargs=ranges, flag="--ranges")
    res = bound(fn, ranges, shapes, getattr(torch, opts.dtype), opts.bound)
    print(json.dumps(res.as_json()) if opts.json else res.table(opts.bound.top))
    return 0


__all__ = ["run_analyze", "run_trace"]
