"""Bounds on hand-derivable cases, exact-op recognition, and the all-order (second-order) part."""

from __future__ import annotations

import math

import pytest

from torchhpc.ext.core.data import shared_data_dir
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
    """0.1 is not binary64: its exact rounding error |fl(0.1) - 0.1| times sup|x| = 3, plus the product's u*0.3; 0.5 is."""
    from fractions import Fraction
    b1 = _bound("INPUTS { x fl64 : (1, 3); } OUTPUTS { y; } EXPRS { y rnd64 = 0.1 * x; }")
    # two roundings: the literal (its known error, |fl(0.1) - 0.1| < 0.1 u, times |x| <= 3) and the product (<= 0.3 u)
    lit = float(abs(Fraction(0.1) - Fraction(1, 10)))
    assert 3 * lit + 0.3 * U <= b1 <= (3 * lit + 0.3 * U) * (1 + 1e-9)
    assert 3 * lit < 0.3 * U * 0.6  # tighter than the u|0.1| model
    assert _bound("INPUTS { x fl64 : (1, 3); } OUTPUTS { y; } EXPRS { y rnd64 = 0.5 * x; }") == 0.0


def test_second_order_term_covers_a_product_chain():
    """x^4 as ((x*x)*x)*x on [1, 2]: first order is 3*16u; the all-order bound exceeds it by O(u^2)."""
    o = analyze(parse_satire("INPUTS { x fl64 : (1, 2); } OUTPUTS { y; } EXPRS { y rnd64 = ((x*x)*x)*x; }")).outputs[0]
    assert o.first_order == pytest.approx(48 * U, rel=1e-9, abs=0)
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

    from torchhpc.ext.fperror import load
    from torchhpc.ext.fperror.reference import sampled_errors

    path = shared_data_dir() / "fperror" / "satire_fpbench_style"
    dag = load(path / f"{name}.txt")
    full = analyze(dag, abstraction="off", bb_max_nodes=0)
    cut = analyze(dag, abstraction=f"{window[0]}:{window[1]}", bb_max_nodes=0)
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


def test_an_abstraction_window_beyond_the_dag_says_it_made_no_cut():
    """--abstraction 100:200 on a two-level DAG cuts nothing; the analysis says so in a note (it was silent)."""
    dag = parse_satire("INPUTS {\n x fl64 : (1, 2);\n}\nOUTPUTS {\n y;\n}\nEXPRS {\n y rnd64 = x*x + x;\n}\n")
    res = analyze(dag, BoundOptions(abstraction="100:200"))
    assert res.cut_level is None
    assert res.notes == ["--abstraction 100:200 made no cut: the DAG is 2 level(s) deep and no level in 100:200 "
                         "has nodes used above it"]
    assert analyze(dag, BoundOptions(abstraction="off")).notes == []


_SMALL = sorted((shared_data_dir() / "fperror"
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
    assert fast == pytest.approx(slow, rel=1e-9, abs=0)


def test_literal_rounding_is_the_exact_error_of_the_literal():
    """round_to_bits agrees with the hardware conversion (float(), numpy float32) and literal_rounding bounds |fl(c)-c|/|c|."""
    import random
    from fractions import Fraction

    import numpy as np

    from torchhpc.ext.fperror.dag import literal_rounding, round_to_bits
    rng = random.Random(5)
    for _ in range(2000):
        c = Fraction(rng.randint(1, 10 ** 25), rng.randint(1, 10 ** 25)) * rng.choice([1, -1])
        assert round_to_bits(c, 64) == Fraction(float(c))
        r32 = round_to_bits(c, 32)
        assert Fraction(float(np.float32(float(r32)))) == r32 and abs(r32 - c) <= abs(c) * Fraction(1, 2 ** 24)
        rel = literal_rounding(c, 64)
        assert Fraction(rel) >= abs(Fraction(float(c)) - c) / abs(c) and rel <= 2.0 ** -53


def test_power2_rounding_model_by_hand():
    """0.1*x on [2, 3], rounding="power2": 3|fl(0.1)-0.1| (the literal's exact error) + u/4 (product < 0.5)."""
    from fractions import Fraction
    dag = parse_satire("INPUTS { x fl64 : (2, 3); } OUTPUTS { y; } EXPRS { y rnd64 = 0.1 * x; }")
    lit = float(abs(Fraction(0.1) - Fraction(1, 10)))
    b = analyze(dag, rounding="power2").outputs[0].abs_bound
    assert 3 * lit + U / 4 <= b <= (3 * lit + U / 4) * (1 + 1e-9)
    # and never looser than the u|x| model
    assert b <= analyze(dag).outputs[0].abs_bound


def test_below_pow2_matches_a_brute_force():
    """below_pow2(x): the largest power of two strictly below x, for normal, subnormal, 0 and inf."""
    import torch

    from torchhpc.ext.fperror.forward import below_pow2
    xs = [1.0, 1.5, 2.0, 3.0, 0.3, 1e-310, 5e-324, 7.0, 8.0, 1e300]
    got = below_pow2(torch.tensor(xs + [0.0, math.inf], dtype=torch.float64)).tolist()
    for x, g in zip(xs, got, strict=False):
        e = math.floor(math.log2(x)) if x > 1e-300 else math.frexp(x)[1] - 1
        p = 2.0 ** e
        assert g == (p / 2 if p == x else p), (x, g)
    assert got[-2:] == [0.0, math.inf]


def test_cuda_passes_give_the_cpu_bound():
    """device="cuda": the interval passes run on the GPU and give the CPU's bound (skipped without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    dag = parse_satire("INPUTS { x fl64 : (1, 2); y fl64 : (1, 3); } OUTPUTS { s; } EXPRS { s rnd64 = (x*y + x)/y; }")
    for kw in ({"bb_iters": 0}, {"bb_iters": 5, "time_budget_s": 1e6}, {"bb_max_nodes": 0, "linear": "on"}):
        cpu = analyze(dag, **kw).outputs[0]
        gpu = analyze(dag, device="cuda", **kw).outputs[0]
        assert gpu.abs_bound == pytest.approx(cpu.abs_bound, rel=1e-12), kw


@pytest.mark.parametrize("src,msg", [
    # two faulty operations: the one of the earlier group (level 1's division before level 2's overflow)
    ("INPUTS { x fl64 : (0, 1e120); } OUTPUTS { y; z; } EXPRS { a rnd64 = x * x; y rnd64 = a * x; z rnd64 = 1 / x; }",
     r"/ @ 1:\d+: the denominator's range contains 0"),
    # one operation with two faults: its domain before the overflow of its value range
    ("INPUTS { x fl64 : (-1, 1e-300); } OUTPUTS { y; } EXPRS { y rnd64 = 1 / x; }", "denominator's range contains 0"),
    # the overflow of binary64 before the declared format's
    ("INPUTS { x fl32 : (0, 1000); } OUTPUTS { y; } EXPRS { y rnd32 = exp(x); }", "overflows binary64"),
])
def test_the_checked_forward_pass_names_the_first_fault(src, msg):
    """The checks of every group are read once after the pass; the fault reported is the one the group-by-group
    checks met first: the earliest group, and in it the domain, then binary64's range, then the format's."""
    with pytest.raises(InputError, match=msg):
        analyze(parse_satire(src))


def test_the_formats_limits_live_with_the_dags_formats():
    """On CUDA the analysis moves the DAG (its formats too) to the GPU: the table of each format's largest finite
    number is made there, not on the CPU (indexing a CPU table with CUDA indices raises); 'meta' stands in."""
    from torchhpc.ext.fperror.forward import _format_limits

    dag = parse_satire("INPUTS { x fl32 : (0, 1); } OUTPUTS { y; } EXPRS { y rnd32 = x * x; }")
    dag.fmt = dag.fmt.to("meta")
    assert _format_limits(dag).device.type == "meta"
