"""The three front ends read the same benchmark into the same computation."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.data import shared_data_dir
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.fperror import analyze, load, parse, parse_fpcore

DATA = shared_data_dir() / "fperror"


@pytest.mark.parametrize("name", ["doppler1", "rigidBody2", "turbine1", "sqroot", "jetEngine", "kepler1"])
def test_satire_and_fptaylor_files_agree(shared_data, name):
    """The Satire and FPTaylor translations of one benchmark give the same operation count and bound."""
    a = load(DATA / "satire_fpbench_style" / f"{name}.txt")
    b = load(DATA / "fptaylor_format" / f"{name}.txt")
    assert a.num_ops == b.num_ops
    ba = analyze(a, bb_iters=10).outputs[0].abs_bound
    bb = analyze(b, bb_iters=10).outputs[0].abs_bound
    assert ba == pytest.approx(bb, rel=1e-9)


def test_fpcore_straight_line_matches_satire():
    """doppler1 written as FPCore gives the satire file's bound."""
    core = """(FPCore (u v T) :name "doppler1" :pre (and (<= -100 u 100) (<= 20 v 20000) (<= -30 T 50))
      (let ([t1 (+ 331.4 (* 0.6 T))]) (/ (* (- t1) v) (* (+ t1 u) (+ t1 u)))))"""
    a = analyze(parse_fpcore(core), bb_iters=10).outputs[0].abs_bound
    sat = """INPUTS { u fl64: (-100, 100); v fl64: (20, 20000); T fl64: (-30, 50); } OUTPUTS { d; }
      EXPRS { t1 rnd64 = (331.4 + (0.6 * T)); d rnd64 = ((-t1 * v) / ((t1 + u) * (t1 + u))); }"""
    b = analyze(parse(sat), bb_iters=10).outputs[0].abs_bound
    assert a == pytest.approx(b, rel=1e-9)


def test_fpcore_loops_are_refused():
    """A while loop is outside the straight-line subset: one message naming the operation."""
    with pytest.raises(InputError, match="while"):
        parse_fpcore("(FPCore (x) :pre (<= 0 x 1) (while (< x 1) ([x 0 (+ x 1)]) x))")


def test_literals_are_read_exactly():
    """1657/5 folds to one rounded constant; 0.25 is exact."""
    d = parse("INPUTS { T fl64 : (0, 1); } OUTPUTS { t; } EXPRS { t rnd64 = 1657/5 + 0.25 * T; }")
    consts = {float(v): float(d.urnd[i]) for i, v in d.const_values.items()}
    assert consts[331.4] > 0 and consts[0.25] == 0


def test_auto_format_needs_keywords():
    """A file that is none of the three formats is refused with one line."""
    with pytest.raises(InputError, match="cannot tell the input format"):
        parse("hello world")


def test_paper_scale_file_parses_into_tensors(shared_data):
    """lorentz_20: a 3-output Lorentz integration parses into int8/int64 tensors with shared nodes."""
    d = load(DATA / "satire_large" / "lorentz_20_sat.txt")
    assert d.op.dtype.is_floating_point is False and d.lhs.dtype.itemsize == 8
    assert len(d.outputs) == 3 and d.num_ops >= 300
