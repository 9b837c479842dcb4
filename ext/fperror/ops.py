"""The fast path's entry points: the round-off bound of a DAG, a file or a torch function, and why it holds.

* :func:`analyze` — the bound of an :class:`~.dag.ExprDAG` (:mod:`.analysis`);
* :func:`analyze_file` — of a Satire, FPTaylor or FPCore file (:func:`~.parsers.load`, then ``analyze``);
* :func:`bound` — of a torch function over input ranges (:func:`~.tracing.trace`, then ``analyze``);

each taking one :class:`~.config.BoundOptions` (and/or its fields as keyword overrides) and returning an
:class:`~.analysis.Analysis`.  The pieces: :mod:`.forward` (the interval forward pass), :mod:`.adjoint`
(the adjoint pass and the error terms), :mod:`.analysis` (branch and bound, abstraction, the result),
:mod:`.linear` (closed forms for linear kernels), all on tensors; :mod:`.reference` is the slow version.

Error model (Satire/FPTaylor): every rounded node k computes ``w_k (1 + d_k) + e_k`` where ``w_k`` is
the exact operation on its (computed) operands, ``|d_k| <= u_k`` and ``|e_k| <= eta_k`` (underflow;
0 for + and -, whose subnormal results are exact).  Elementary functions are assumed correctly
rounded, as in both anchors.

Bound.  Round the nodes one at a time (k = 1..N): the output changes by ``G_k(w_k (1+d_k) + e_k) -
G_k(w_k)`` where ``G_k`` is the rest of the computation done exactly.  By the mean-value theorem
that is ``G_k'(xi) (w_k d_k + e_k)``, and every state met on the way lies in the enclosure ``W`` of
"computed or exact" values (``W_k = op(W operands)`` widened by ``(1 +- u_k) +- eta_k``).  Hence,
for all orders in u::

    |f~(x) - f(x)| <= sum_k (u_k sup|w_k| + eta_k) sup|dG/dv_k over W|          (rigorous)

and the first-order part is the same sum over the exact-value enclosures ``V`` (Satire's
``u max sum |df/dv_k v_k|``).  ``second_order`` in the result is the difference: it bounds every
term of order u^2 and higher.  Both sums come from one forward and one reverse pass over the DAG
(all operations at once), in interval arithmetic rounded outward; branch-and-bound over sub-boxes
(evaluated as one batch of columns) tightens the maximum over the input box.

Tensors: forward values are ``(N, B)`` for B boxes (:mod:`.forward`); adjoints are ``(N, C)`` for C
columns, each column one (box, output) pair (:mod:`.adjoint`).  Nodes are processed in groups of one
(level, op): each group is a handful of gathers, interval operations and an ``index_add_``, so a pass
costs O(N) work in O(depth x ops) tensor calls.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .analysis import Analysis, OutputBound, analyze
from .config import BoundOptions
from .parsers import load
from .tracing import trace


def analyze_file(path: str | Path, fmt: str = "auto", options: BoundOptions | None = None,
                 progress: bool = False, **overrides) -> Analysis:
    """Parse a Satire/FPTaylor/FPCore file and bound every output.

    Args:
        path: the file; ``fmt``: ``auto`` (from its keywords), ``satire``, ``fptaylor`` or ``fpcore``.
        options: how the bound is computed (:class:`~.config.BoundOptions`; ``inputs`` also applies to
            the parse: exact, or rounded to their declared precision).
        progress: tqdm bars over the parse and the outputs.
        **overrides: :class:`~.config.BoundOptions` fields applied to ``options`` (see :func:`analyze`).

    Raises:
        InputError: a parse error (``file:line:column``), or a bound that cannot hold (see :func:`analyze`).
    """
    opts = (options if options is not None else BoundOptions()).updated(**overrides)
    return analyze(load(path, fmt, opts.inputs, progress), opts, progress=progress)


def bound(fn, ranges: dict[str, tuple[float, float]], shapes: dict[str, tuple[int, ...]] | None = None,
          dtype: torch.dtype = torch.float64, options: BoundOptions | None = None, **overrides) -> Analysis:
    """Bound the round-off error of the torch function ``fn`` over ``ranges`` (see :func:`.tracing.trace`).

    ``options`` and ``**overrides`` as for :func:`analyze`.  Returns an :class:`~.analysis.Analysis`: per
    output element the absolute/relative bound, the value range and the ranked culprit operations with
    their source lines (``.table()``, ``.as_json()``).
    """
    opts = (options if options is not None else BoundOptions()).updated(**overrides)
    return analyze(trace(fn, ranges, shapes, dtype, opts.inputs), opts)


__all__ = ["Analysis", "OutputBound", "analyze", "analyze_file", "bound"]
