"""``bound`` (a torch function) and ``analyze_file`` (a Satire/FPTaylor/FPCore file): the two calls."""

from __future__ import annotations

from pathlib import Path

import torch

from .config import BoundOptions
from .dag import ExprDAG
from .ops import Analysis, analyze
from .parsers import load
from .trace import trace


def _run(dag: ExprDAG, opts: BoundOptions, progress: bool = False) -> Analysis:
    if opts.device == "cuda" and not torch.cuda.is_available():
        from torchhpc.ext.core.errors import ConfigError
        raise ConfigError("--device cuda: no CUDA device is available")
    res = analyze(dag, device=opts.device, bb_iters=opts.bb_iters, bb_batch=opts.bb_batch, bb_tol=opts.bb_tol,
                  bb_max_nodes=opts.bb_max_nodes, bb_max_inputs=opts.bb_max_inputs, time_budget_s=opts.time_budget,
                  top=opts.top, progress=progress, abstraction=opts.abstraction_window(), auto_depth=opts.abstraction_depth, linear=opts.linear,
                  linear_max_work=opts.linear_max_work, rounding=opts.rounding)
    res.options = {"inputs": opts.inputs, "bb_iters": opts.bb_iters, "bb_batch": opts.bb_batch,
                   "abstraction": opts.abstraction, "linear": opts.linear, "rounding": opts.rounding}
    return res


def analyze_file(path: str | Path, fmt: str = "auto", options: BoundOptions | None = None,
                 progress: bool = False) -> Analysis:
    """Parse a Satire/FPTaylor/FPCore file and bound every output (``options``: :class:`BoundOptions`)."""
    opts = options or BoundOptions()
    return _run(load(path, fmt, opts.inputs, progress), opts, progress)


def bound(fn, ranges: dict[str, tuple[float, float]], shapes: dict[str, tuple[int, ...]] | None = None,
          dtype: torch.dtype = torch.float64, options: BoundOptions | None = None) -> Analysis:
    """Bound the round-off error of the torch function ``fn`` over ``ranges`` (see :func:`.trace.trace`).

    Returns an :class:`~.ops.Analysis`: per output element the absolute/relative bound, the value
    range and the ranked culprit operations with their source lines (``.table()``, ``.as_json()``).
    """
    opts = options or BoundOptions()
    return _run(trace(fn, ranges, shapes, dtype, opts.inputs), opts)


__all__ = ["analyze_file", "bound"]
