"""Linear kernels: closed-form (affine) ranges are exact where interval arithmetic is not, and sound."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.data import shared_data_dir
from torchhpc.ext.fperror import analysis, analyze, load, parse_satire
from torchhpc.ext.fperror import interval as iv
from torchhpc.ext.fperror.adjoint import cone_errors, error_terms, partial_derivatives, upward_sum
from torchhpc.ext.fperror.forward import forward, make_groups
from torchhpc.ext.fperror.linear import affine_ranges, dependence, is_linear
from torchhpc.ext.fperror.reference import sampled_errors

DATA = shared_data_dir() / "fperror"


def _ranges(dag):
    g = make_groups(dag)
    box = dag.box[dag.input_nodes]
    fw = forward(dag, g, box[:, :1].clone(), box[:, 1:].clone())
    dep = dependence(dag, g)
    assert is_linear(dag, g, dep)
    return fw, affine_ranges(dag, g, fw, dep)


def test_affine_range_is_exact_where_intervals_overestimate():
    """(x - y) + (x + y) on [0,1]^2 is 2x in [0, 2]: intervals say [-1, 3], the affine form [0, 2]."""
    dag = parse_satire("INPUTS { x fl64 : (0, 1); y fl64 : (0, 1); } OUTPUTS { z; } EXPRS { z rnd64 = (x - y) + (x + y); }")
    fw, (lo, hi) = _ranges(dag)
    o = int(dag.output_nodes[0])
    assert float(fw.vl[o, 0]) == pytest.approx(-1) and float(fw.vh[o, 0]) == pytest.approx(3)
    assert float(lo[o, 0]) == pytest.approx(0, abs=1e-15) and float(hi[o, 0]) == pytest.approx(2, rel=1e-15)
    assert float(lo[o, 0]) <= 0 and float(hi[o, 0]) >= 2


def test_stencil_recurrence_stays_bounded(shared_data):
    """fdtd1d_100_32: interval ranges explode (~1e15), the affine ranges stay O(10), and the bound is finite."""
    dag = load(DATA / "satire_small" / "fdtd1d_100_32.txt")
    fw, (lo, hi) = _ranges(dag)
    assert float(iv.mag(fw.vl, fw.vh).max()) > 1e12
    assert float(iv.mag(lo, hi).max()) < 100
    res = analyze(dag, bb_max_nodes=0, linear="on")
    assert res.linear and res.outputs[0].first_order < 1e-11


@pytest.mark.parametrize("name", ["fft_8pt", "h1_cse_t10", "Scan_8"])
def test_linear_mode_is_sound(shared_data, name):
    """Linear-mode bounds on small linear kernels stay above the sampled error (200-bit mpmath)."""
    dag = load(DATA / "satire_small" / f"{name}.txt")
    res = analyze(dag, bb_max_nodes=0, linear="on")
    assert res.linear
    errs = sampled_errors(dag, 30, seed=4)
    for o, e in zip(res.outputs, errs, strict=True):
        assert e <= o.abs_bound


def test_point_box_uses_high_precision_enclosures(shared_data):
    """CG_Tref (every input a constant): 320-bit enclosures keep the output range tight where binary64
    intervals would not, the first-order bound is small, and the observed error is below the bound."""
    dag = load(DATA / "satire_large" / "CG_Tref_noError_K20_N20_E0.0.txt")
    res = analyze(dag, bb_max_nodes=0, abstraction="off")
    o = res.outputs[0]
    assert o.range[1] - o.range[0] < 1e-12
    assert 0 < o.first_order < 1e-10
    err = sampled_errors(dag, 1, seed=5)[0]
    assert err <= o.abs_bound


def test_affine_range_matches_autograd_coefficients(shared_data):
    """fdtd1d_100_32's output is linear in the inputs: its exact range from torch.autograd's gradient
    (c0 + sum_j c_j [lo_j, hi_j]) is enclosed by the affine range, to 1e-12 relative."""
    import torch

    dag = load(DATA / "satire_small" / "fdtd1d_100_32.txt")
    _, (lo, hi) = _ranges(dag)
    box = dag.box[dag.input_nodes]
    x = ((box[:, 0] + box[:, 1]) / 2).clone().requires_grad_(True)
    op, lhs, rhs = dag.op.tolist(), dag.lhs.tolist(), dag.rhs.tolist()
    inp = {int(k): j for j, k in enumerate(dag.input_nodes.tolist())}
    vals: list = [None] * dag.num_nodes
    for i in range(dag.num_nodes):
        if i in inp:
            vals[i] = x[inp[i]]
        elif i in dag.const_values:
            vals[i] = torch.tensor(float(dag.const_values[i]), dtype=torch.float64)
        else:
            a = vals[lhs[i]]
            b = vals[rhs[i]] if rhs[i] >= 0 else None
            vals[i] = {2: lambda a=a, b=b: a + b, 3: lambda a=a, b=b: a - b, 4: lambda a=a, b=b: a * b,
                       6: lambda a=a: -a}[op[i]]()
    o = int(dag.output_nodes[0])
    y = vals[o]
    y.backward()
    c = x.grad
    c0 = float(y.detach()) - float((c * x.detach()).sum())
    exact_lo = c0 + float(torch.minimum(c * box[:, 0], c * box[:, 1]).sum())
    exact_hi = c0 + float(torch.maximum(c * box[:, 0], c * box[:, 1]).sum())
    assert float(lo[o]) <= exact_lo + 1e-12 and float(hi[o]) >= exact_hi - 1e-12
    assert float(lo[o]) == pytest.approx(exact_lo, rel=1e-12) and float(hi[o]) == pytest.approx(exact_hi, rel=1e-12)


def _leapfrog(steps: int) -> str:
    """u_t = 1.99 u_{t-1} - u_{t-2}: bounded (|roots| = 1) but its absolute path sums grow like 2.99^t."""
    ex = " ".join(f"u{t} rnd64 = 1.99 * u{t - 1} - u{t - 2};" for t in range(2, steps + 1))
    return "INPUTS { u0 fl64 : (0, 1); u1 fl64 : (0, 1); } OUTPUTS { u" + str(steps) + "; } EXPRS { " + ex + " }"


def test_linear_cut_makes_a_leapfrog_bound_tight_and_stays_sound(monkeypatch):
    """60 leapfrog steps: restarting the error propagation at cuts brings the all-order bound within 10x of
    first order (1000x tighter than without cuts); it stays above the error sampled against mpmath."""
    dag = parse_satire(_leapfrog(60))
    res = analyze(dag, linear="on", bb_max_nodes=0)
    o = res.outputs[0]
    assert res.linear_cut is not None and o.rigorous
    assert sampled_errors(dag, 40, seed=4)[0] <= o.abs_bound <= 10 * o.first_order
    monkeypatch.setattr(analysis, "linear_cut", lambda *a, **k: None)
    plain = analyze(dag, linear="on", bb_max_nodes=0).outputs[0].abs_bound
    assert o.abs_bound * 100 < plain


def test_cone_errors_match_the_full_adjoint_pass():
    """cone_errors (rows of the backward cone only) equals error_terms' column sums (all N rows), with and without a cut."""
    import torch
    dag = parse_satire(_leapfrog(30))
    g = make_groups(dag)
    box = dag.box[dag.input_nodes]
    fw = forward(dag, g, box[:, :1].clone(), box[:, 1:].clone())
    cols = torch.tensor([int(dag.output_nodes[0]) - 7, int(dag.output_nodes[0])])
    full = upward_sum(error_terms(dag, g, fw, cols, None, False)[0])
    assert torch.allclose(cone_errors(dag, g, fw, cols, None, None), full, rtol=1e-12, atol=0)
    err = torch.full((dag.num_nodes, 1), 1e-13, dtype=torch.float64)
    full = upward_sum(error_terms(dag, g, fw, cols, None, False, 20, err)[0])
    assert torch.allclose(cone_errors(dag, g, fw, cols, 20, err), full, rtol=1e-12, atol=0)


def test_cut_errors_are_never_below_the_first_order_error_of_their_node():
    """Each cut node's error (signed sums, composed across cuts) >= that node's own first-order bound (independent pass)."""
    from torchhpc.ext.fperror.linear import linear_enclosures
    dag = parse_satire(_leapfrog(60))
    g = make_groups(dag)
    box = dag.box[dag.input_nodes]
    fw = forward(dag, g, box[:, :1].clone(), box[:, 1:].clone())
    dep = dependence(dag, g)
    fw = linear_enclosures(dag, g, fw, dep, partial_derivatives)
    last, _, err = analysis.linear_cut(dag, g, fw, dep)
    nodes = ((dag.level <= last) & (dag.op > 1)).nonzero().flatten()
    first = error_terms(dag, g, fw, nodes, None, True)[1].sum(0)
    assert bool((err[nodes, 0] >= first * (1 - 1e-9)).all())
