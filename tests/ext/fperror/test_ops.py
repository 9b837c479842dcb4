"""Bounds on hand-derivable cases, exact-op recognition, and the all-order (second-order) part."""

from __future__ import annotations

import math

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.fperror import BoundOptions, analyze, parse_satire

U = 2.0 ** -53


def _bound(src: str, **kw) -> float:
    return analyze(parse_satire(src), **kw).outputs[0].abs_bound


def test_sum_of_two_inputs_is_u_times_max_magnitude():
    """x + y on [1, 2]^2: one rounding of a value <= 4, so the bound is 4u (to a few ulps of the bound)."""
    b = _bound("INPUTS { x fl64 : (1, 2); y fl64 : (1, 2); } OUTPUTS { s; } EXPRS { s rnd64 = x + y; }")
    assert 4 * U <= b <= 4 * U * (1 + 1e-12)


def test_power_of_two_scaling_and_negation_are_exact():
    """2*x, x*0.5 and -x introduce no error: the bound is 0."""
    b = _bound("INPUTS { x fl64 : (1, 3); } OUTPUTS { y; } EXPRS { y rnd64 = -(2 * x) * 0.5; }")
    assert b == 0.0


def test_inexact_literal_is_rounded_and_exact_literal_is_not():
    """0.1 is not binary64 (one rounding, bound = u*0.1*sup|x|... = u/10 * 3); 0.5 is."""
    b1 = _bound("INPUTS { x fl64 : (1, 3); } OUTPUTS { y; } EXPRS { y rnd64 = 0.1 * x; }")
    # two roundings: the literal (|0.1| u, times |x| <= 3) and the product (<= 0.3 u)
    assert 0.6 * U <= b1 <= 0.6 * U * (1 + 1e-9)
    assert _bound("INPUTS { x fl64 : (1, 3); } OUTPUTS { y; } EXPRS { y rnd64 = 0.5 * x; }") == 0.0


def test_second_order_term_covers_a_product_chain():
    """x^4 as ((x*x)*x)*x on [1, 2]: first order is 3*16u; the all-order bound exceeds it by O(u^2)."""
    o = analyze(parse_satire("INPUTS { x fl64 : (1, 2); } OUTPUTS { y; } EXPRS { y rnd64 = ((x*x)*x)*x; }")).outputs[0]
    assert o.first_order == pytest.approx(48 * U, rel=1e-9)
    # exact worst case at x=2: 16((1+u)^3 - 1) = 48u + 48u^2 + 16u^3 must be covered
    assert o.abs_bound >= 16 * ((1 + U) ** 3 - 1)
    assert o.second_order > 0


def test_common_subexpressions_are_shared():
    """(x + y) written twice is one node."""
    d = parse_satire("INPUTS { x fl64 : (1, 2); y fl64 : (1, 2); } OUTPUTS { z; } EXPRS { z rnd64 = (x+y)*(x+y); }")
    assert d.num_ops == 2


def test_branch_and_bound_tightens_the_interval_bound():
    """x*(1-x) on [0,1]: branch and bound is tighter than one interval pass, and still above the point value."""
    src = "INPUTS { x fl64 : (0, 1); } OUTPUTS { y; } EXPRS { y rnd64 = x * (1 - x); }"
    one = _bound(src, bb_iters=0)
    bb = analyze(parse_satire(src), bb_iters=200, time_budget_s=1e6).outputs[0]
    assert bb.abs_bound < one
    assert bb.lower_estimate <= bb.abs_bound


@pytest.mark.parametrize("src,msg", [
    ("INPUTS { x fl64 : (0, 1); } OUTPUTS { y; } EXPRS { y rnd64 = 1 / x; }", "denominator"),
    ("INPUTS { x fl64 : (-1, 1); } OUTPUTS { y; } EXPRS { y rnd64 = log(x); }", "log"),
    ("INPUTS { x fl64 : (2, 1); } OUTPUTS { y; } EXPRS { y rnd64 = x; }", "empty input range"),
    ("INPUTS { x fl64 : (0, 1); } OUTPUTS { y; } EXPRS { y rnd64 = erf(x); }", "unsupported operation"),
    ("INPUTS { x fl64 : (0, 1); }\nOUTPUTS { y; }\nEXPRS { y rnd64 = (x + ; }", "<string>:3:"),
])
def test_bad_input_is_one_clear_message(src, msg):
    """Division by a range containing 0, log outside its domain, empty box, unknown op, syntax error."""
    with pytest.raises(InputError, match=msg):
        analyze(parse_satire(src))


def test_bound_options_reject_bad_values():
    """A negative branch-and-bound budget is refused naming the option."""
    from torchhpc.ext.core.errors import ConfigError
    with pytest.raises(ConfigError, match="bb_iters"):
        BoundOptions(bb_iters=-1)
    assert math.isfinite(BoundOptions().bb_tol)


@pytest.mark.parametrize("name,window", [("jetEngine", (5, 10)), ("sine", (3, 6)), ("kepler2", (4, 8))])
def test_abstraction_is_sound_and_close(shared_data, name, window):
    """Cutting the DAG (Satire's abstraction) keeps the bound above the sampled error and within 2x."""
    from pathlib import Path

    from torchhpc.ext.fperror import load
    from torchhpc.ext.fperror.reference import sampled_errors

    path = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "fperror" / "satire_fpbench_style"
    dag = load(path / f"{name}.txt")
    full = analyze(dag, abstraction="off", bb_max_nodes=0)
    cut = analyze(dag, abstraction=window, bb_max_nodes=0)
    assert cut.cut_level is not None
    err = sampled_errors(dag, 40, seed=3)[0]
    assert err <= cut.outputs[0].abs_bound
    assert full.outputs[0].abs_bound <= cut.outputs[0].abs_bound * (1 + 1e-12) <= 2 * full.outputs[0].abs_bound


def test_abstraction_spec_is_checked():
    """--abstraction accepts off, auto or MIN:MAX only."""
    from torchhpc.ext.core.errors import ConfigError
    assert BoundOptions(abstraction="3:9").abstraction_window() == (3, 9)
    with pytest.raises(ConfigError, match="abstraction"):
        BoundOptions(abstraction="9:3")


_SMALL = sorted((__import__("pathlib").Path(__file__).resolve().parents[3].parent / "shared" / "data" / "fperror"
                 / "satire_fpbench_style").glob("*.txt"))


@pytest.mark.parametrize("path", _SMALL[::3], ids=lambda p: p.stem)
def test_tensor_adjoint_pass_matches_slow_reference(shared_data, path):
    """One interval pass over the box (batched tensors, all nodes at once) equals the node-by-node
    mpmath forward/reverse reference of Satire's first-order bound to 1e-9."""
    from torchhpc.ext.fperror import load
    from torchhpc.ext.fperror.reference import first_order_bound_slow

    dag = load(path)
    slow = first_order_bound_slow(dag)[0]
    fast = analyze(dag, bb_iters=0).outputs[0].first_order
    assert fast == pytest.approx(slow, rel=1e-9)
