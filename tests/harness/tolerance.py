"""The suite's tolerance policy as code (tests/README.md says why each class is what it is).

Each constant is ``(rel, abs)``:

* :data:`EXACT` for integers, structure and discrete outputs;
* :data:`FLOAT64_FIXED` for float64 arithmetic on a fixed discrete outcome (a schedule's slowdowns, a
  cost model's seconds): only the order of a few sums can differ between CPUs;
* :data:`FLOAT32_OP` for the result of one float32 op that goes through BLAS, oneDNN or an ATen
  reduction (``torch.testing.assert_close``'s float32 defaults);
* :data:`FLOAT32_TRAJECTORY` for float32 values carried through a training run of up to ~100 steps;
* :func:`assert_same_factorisation` for SymNMF results, whose ``H`` is not determined (only ``H H^T``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

EXACT = (0.0, 0.0)
FLOAT64_FIXED = (1e-12, 0.0)
FLOAT32_OP = (1.3e-6, 1e-5)
FLOAT32_TRAJECTORY = (1e-5, 0.0)


def assert_close_tree(got, want, tol: tuple[float, float], *, rules: Mapping[str, tuple[float, float]] | None = None,
                      where: str = "") -> None:
    """Compare nested dicts, lists and tuples: ints, bools, strings and ``None`` exactly, floats within ``tol``.

    Args:
        tol: ``(rel, abs)`` for every float not named in ``rules``.
        rules: ``(rel, abs)`` per dict key (the innermost key above the value), e.g.
            ``{"approx_kl": (0, 1e-7)}`` for a difference of nearly equal numbers.

    Raises:
        AssertionError: naming the path of the first value that differs.
    """
    rules = rules or {}
    if isinstance(want, Mapping):
        assert isinstance(got, Mapping), f"{where or 'value'}: expected a mapping, got {got!r}"
        assert set(got) == set(want), f"{where or 'value'}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_close_tree(got[key], want[key], rules.get(key, tol), rules=rules, where=f"{where}.{key}")
        return
    if isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close_tree(g, w, tol, rules=rules, where=f"{where}[{i}]")
        return
    if isinstance(want, float) and not isinstance(got, bool) and isinstance(got, int | float):
        rel, abs_ = tol
        same = got == want or (math.isnan(got) and math.isnan(want))
        assert same or math.isclose(got, want, rel_tol=rel, abs_tol=abs_), \
            f"{where}: {got!r} != {want!r} (rel {rel:g}, abs {abs_:g})"
        return
    assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r} (compared exactly)"


def assert_same_factorisation(got, ref, algo: str, cg_tol: float = 1e-6, what: str = "") -> None:
    """``got`` and ``ref`` (SymNMF results) approximate A by the same ``H H^T`` with the same residual.

    ``H`` itself is not compared: ``H Q`` gives the same ``H H^T`` for any orthogonal ``Q``, so Gauss-Newton's
    ``J^T J`` is singular and its CG, which stops on a tolerance, lands on other iterates when float sums are
    ordered otherwise (another layout, another CPU).  Gauss-Newton agrees to its CG tolerance (relative to the
    largest entry); the other solvers to float64 rounding amplified over the iterations.
    """
    G, G_ref = got.H @ got.H.T, ref.H @ ref.H.T
    scale = float(G_ref.abs().max())
    rel = cg_tol if algo == "gn" else 1e-10
    torch.testing.assert_close(G, G_ref, atol=rel * scale, rtol=0, msg=lambda m: f"{what} H H^T: {m}")
    assert math.isclose(got.residual, ref.residual, rel_tol=rel, abs_tol=0.0), f"{what} residual"
