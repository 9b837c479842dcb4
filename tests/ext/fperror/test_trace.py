"""Traced torch functions: the bound covers the error of the real torch code, culprits name its lines."""

from __future__ import annotations

import mpmath
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.fperror import BoundOptions, bound


def stencil(u):
    return 0.25 * u[:-2] + 0.5 * u[1:-1] + 0.25 * u[2:] - 0.1 * u[1:-1]


def softmax(x):
    return torch.softmax(x, dim=0)


def matmul(a, b):
    return a @ b


def _observed(fn, ranges, shapes, dtype, n=200):
    """max |fn in dtype - fn in 200-bit mpmath-checked float64 ... | via exact float64 evaluation of the same inputs."""
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for _ in range(n):
        kw = {k: (lo + (hi - lo) * torch.rand(shapes[k], generator=g, dtype=torch.float64)).to(dtype)
              for k, (lo, hi) in ranges.items()}
        low = fn(**kw).to(torch.float64)
        with mpmath.workprec(200):
            ref = _mp_eval(fn, {k: v.to(torch.float64) for k, v in kw.items()})
        worst = max(worst, max(float(abs(mpmath.mpf(float(a)) - b)) for a, b in zip(low.reshape(-1).tolist(), ref, strict=True)))
    return worst


def _mp_eval(fn, kw):
    # the reference: the same function in float64 on the low-precision inputs, then the float64
    # rounding of those ops is far below the float32 error being checked
    return [mpmath.mpf(float(v)) for v in fn(**kw).reshape(-1).tolist()]


@pytest.mark.parametrize("fn,ranges,shapes", [
    (stencil, {"u": (0.0, 1.0)}, {"u": (10,)}),
    (softmax, {"x": (-2.0, 2.0)}, {"x": (5,)}),
    (matmul, {"a": (-1.0, 1.0), "b": (-1.0, 1.0)}, {"a": (3, 4), "b": (4, 2)}),
])
def test_float32_bound_covers_torch(fn, ranges, shapes):
    """In float32 the observed error of the torch function (against float64) stays below the bound."""
    res = bound(fn, ranges, shapes, torch.float32, BoundOptions(bb_iters=5, time_budget_s=1e6))
    b = max(o.abs_bound for o in res.outputs)
    obs = _observed(fn, ranges, shapes, torch.float32)
    assert 0 < obs <= b
    assert b < 1e-4  # a float32-sized bound (u = 6e-8), not a vacuous one


def test_culprits_name_the_source_line():
    """The ranked culprits of the stencil point at this file's stencil line."""
    res = bound(stencil, {"u": (0.0, 1.0)}, {"u": (6,)}, torch.float64, BoundOptions(bb_iters=0))
    srcs = {c["source"] for c in res.outputs[0].culprits}
    assert any(s.startswith("test_trace.py:") for s in srcs)


def test_unsupported_op_names_the_line():
    """An op the tracer does not model is refused with its line."""
    with pytest.raises(InputError, match="not supported"):
        bound(lambda x: torch.erf(x), {"x": (0.0, 1.0)}, {"x": (2,)})


def test_softmax_shift_is_known_nonpositive():
    """x - max(x) is <= 0 (max is exact): with that rule softmax's bound is ~1e-5 in float32, not ~1e-1."""
    from torchhpc.ext.fperror.forward import nonpositive_subs
    from torchhpc.ext.fperror.tracing import trace

    dag = trace(softmax, {"x": (-2.0, 2.0)}, {"x": (5,)}, torch.float32)
    assert nonpositive_subs(dag) is not None and int(nonpositive_subs(dag).sum()) == 5
    res = bound(softmax, {"x": (-2.0, 2.0)}, {"x": (5,)}, torch.float32, BoundOptions(bb_iters=5, time_budget_s=1e6))
    assert max(o.abs_bound for o in res.outputs) < 1e-4


@pytest.mark.parametrize("lo,hi", [(0.0, float("nan")), (0.0, float("inf")), (float("-inf"), 0.0)])
def test_a_range_that_is_not_finite_is_one_error(lo, hi):
    """A NaN or infinite bound of an input range is refused naming the input (it was a traceback)."""
    with pytest.raises(InputError, match="'u' .*finite numbers"):
        bound(stencil, {"u": (lo, hi)}, {"u": (6,)})


def test_a_function_returning_only_empty_tensors_is_one_error():
    """Shapes that leave the function nothing to compute (the stencil of one point) are refused, not an empty
    report."""
    with pytest.raises(InputError, match="at least one value to bound.*u=\\(1,\\)"):
        bound(stencil, {"u": (0.0, 1.0)}, {"u": (1,)})


def test_culprits_are_the_operations_an_output_depends_on(shared_data):
    """An output's culprits are operations of its own expression (its backward cone): the others have a zero
    adjoint, whose outward rounding (the smallest subnormal) is no contribution (simple.txt's O4 = x*x + y on
    line 10 listed O2's and O3's operations at 0.0 %)."""
    from torchhpc.ext.fperror import analyze, load, parse_satire

    res = analyze(load(shared_data / "fperror" / "satire_small" / "simple.txt"))
    o4 = next(o for o in res.outputs if o.name == "O4")
    assert o4.culprits and all(c["source"].startswith("10:") for c in o4.culprits), o4.culprits
    # another output's operations on values near 1e60 (their widened zero adjoint times the value is no longer
    # subnormal) are still not O2's; real underflow terms (subnormal) of an output are its culprits
    big = analyze(parse_satire("INPUTS { x fl64 : (0, 0.1); y fl64 : (1e20, 2e20); } OUTPUTS { O1; O2; } "
                               "EXPRS { O1 rnd64 = y*y*y; O2 rnd64 = x*x + x; }"), bb_iters=0)
    assert sorted(c["op"] for c in big.outputs[1].culprits) == ["*", "+"]
    tiny = analyze(parse_satire("INPUTS { x fl64 : (1e-156, 2e-155); y fl64 : (1e-156, 2e-155); } OUTPUTS { O1; } "
                                "EXPRS { O1 rnd64 = x*y + x*x; }"), bb_iters=0)
    assert len(tiny.outputs[0].culprits) == 3 and tiny.outputs[0].abs_bound > 0
