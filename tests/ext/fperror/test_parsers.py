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
    assert ba == pytest.approx(bb, rel=1e-9, abs=0)


def test_fpcore_straight_line_matches_satire():
    """doppler1 written as FPCore gives the satire file's bound."""
    core = """(FPCore (u v T) :name "doppler1" :pre (and (<= -100 u 100) (<= 20 v 20000) (<= -30 T 50))
      (let ([t1 (+ 331.4 (* 0.6 T))]) (/ (* (- t1) v) (* (+ t1 u) (+ t1 u)))))"""
    a = analyze(parse_fpcore(core), bb_iters=10).outputs[0].abs_bound
    sat = """INPUTS { u fl64: (-100, 100); v fl64: (20, 20000); T fl64: (-30, 50); } OUTPUTS { d; }
      EXPRS { t1 rnd64 = (331.4 + (0.6 * T)); d rnd64 = ((-t1 * v) / ((t1 + u) * (t1 + u))); }"""
    b = analyze(parse(sat), bb_iters=10).outputs[0].abs_bound
    assert a == pytest.approx(b, rel=1e-9, abs=0)


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


# ----------------------------------------------------------------------------- the corpora's constructs
# Each snippet below is written for these tests; each exhibits one construct of the Satire or FPTaylor
# benchmark files (tools/fperror_corpus.py runs the real files; docs/fperror/results.md has the table).

U32, U64 = 2.0 ** -24, 2.0 ** -53


def _fpt(body: str, inputs: str = "rounded"):
    return parse(body, "f.txt", "fptaylor", inputs)


def _bound_fpt(body: str, inputs: str = "rounded") -> float:
    return analyze(_fpt(body, inputs), bb_iters=20, time_budget_s=1e6).outputs[0].abs_bound


@pytest.mark.parametrize("decl, rnd, inputs, units", [
    ("real x", "rnd32", "rounded", 5 * U32),        # rnd32(rnd32(x) + 1): x rounded (<= 2u), the sum (<= 3u)
    ("real x", "rnd32", "exact", 3 * U32),          # inputs exact: only the sum
    ("float32 x", "rnd32", "rounded", 3 * U32),     # a binary32 variable is not rounded to 32 bits
    ("x", "rnd32", "rounded", 5 * U32),             # untyped = binary64 (FPTaylor's default): rounded to 32
    ("x", "rnd64", "rounded", 3 * U64),             # ... but not to 64
    ("real x", "rnd64", "rounded", 5 * U64),
    ("real x", "rnd[32, ne, 1.5]", "rounded", 7.5 * U32),   # a scaled rounding: 1.5 u
    ("real x", "rnd32_up", "rounded", 10 * U32),    # directed: 2u
    ("real x", "rnd[32, down]", "rounded", 10 * U32),
])
def test_rounding_annotation_rounds_as_fptaylor_defines(decl, rnd, inputs, units):
    """``t rnd= x + 1`` over x in [1, 2]: the bound is the rounding model's u times 2 (x) and 3 (x + 1)."""
    b = _bound_fpt(f"Variables {decl} in [1, 2]; Expressions t {rnd}= x + 1;", inputs)
    assert b == pytest.approx(units, rel=1e-6, abs=0)


def test_plain_definition_is_exact_and_rnd_call_rounds_only_its_result():
    """``=`` is real arithmetic; ``rnd64(x * y + 1)`` rounds the sum only; ``t rnd64= d`` rounds d's top op."""
    d = _fpt("Variables x in [1, 2], y in [1, 2];\nDefinitions d = x * y;\n"
             "Expressions exact = d + 1, once = rnd64(x * y + 1), top rnd64= d;")
    from torchhpc.ext.fperror.dag import ADD, MUL
    ops = {(int(d.op[i]), float(d.urnd[i])) for i in range(d.num_nodes)}
    assert (MUL, 0.0) in ops and (ADD, 0.0) in ops and (ADD, U64) in ops and (MUL, U64) in ops
    res = analyze(d, bb_iters=10)
    exact, once, top = (o.abs_bound for o in res.outputs)
    assert exact < 1e-300 and once == pytest.approx(5 * U64, rel=1e-6, abs=0) and top == pytest.approx(4 * U64, rel=1e-6, abs=0)


def test_scaled_and_explicit_roundings_set_u_and_eta():
    """``rnd[64, ne, 1.5](sin(x))`` errs by 1.5u; ``rnd[32, ne, 1, -20, -140]`` by 2^-20 relative, 2^-140 absolute."""
    from torchhpc.ext.fperror.dag import MUL, SIN
    d = _fpt("Variables x in [1, 2];\nDefinitions s = rnd[64, ne, 1.5](sin(x)), p = rnd[32, ne, 1, -20, -140](x * x);\n"
             "Expressions s; p;")
    sin = [i for i in range(d.num_nodes) if int(d.op[i]) == SIN]
    mul = [i for i in range(d.num_nodes) if int(d.op[i]) == MUL]
    assert [float(d.urnd[i]) for i in sin] == [1.5 * U64]
    assert [(float(d.urnd[i]), float(d.eta[i])) for i in mul] == [(2.0 ** -20, 2.0 ** -140)]
    assert d.outputs == ["s", "p"]  # an unnamed expression that is one name is named after it


def test_constants_and_literal_expressions_are_evaluated_as_floating_point_does():
    """``rnd64= k * 3 * x`` with k = 0.1: k * 3 is fl(fl(0.1) * 3), a known constant, not 0.3 rounded once."""
    from fractions import Fraction
    d = _fpt("Constants k = 0.1;\nVariables float64 x in [1, 2];\nExpressions r rnd64= k * 3 * x;")
    assert list(d.const_float.values()) == [Fraction(0.1 * 3)]  # Python's 0.1 * 3 is that binary64 product
    i = next(iter(d.const_float))
    assert d.const_values[i] == Fraction(3, 10)
    rel = abs(Fraction(0.1 * 3) - Fraction(3, 10)) / Fraction(3, 10)  # its known relative error
    assert float(d.urnd[i]) == pytest.approx(float(rel), rel=1e-12, abs=0)


def test_no_rnd_keeps_its_argument_exact_inside_a_rounded_definition():
    """``r rnd64= no_rnd(x + y) * z``: the sum is exact, the product rounded."""
    from torchhpc.ext.fperror.dag import ADD, MUL
    d = _fpt("Variables x in [1, 2]; y in [1, 2]; z in [1, 2];\nExpressions r rnd64= no_rnd(x + y) * z;")
    urnd = {int(d.op[i]): float(d.urnd[i]) for i in range(d.num_nodes) if int(d.op[i]) in (ADD, MUL)}
    assert urnd == {ADD: 0.0, MUL: U64}


def test_mixed_precisions_round_each_use_of_one_input():
    """``t rnd32= x + 1; r rnd64= x / t`` (real x): one input x, rounded to 32 bits in t and to 64 in r
    (t, already binary32, not again): x / t errs by about 2 u32, not by the 500 u32 of two independent
    x's; the sampled error stays below the bound."""
    from torchhpc.ext.fperror.reference import sampled_errors
    d = _fpt("Variables real x in [1, 999];\nDefinitions t rnd32= x + 1; r rnd64= x / t;\nExpressions f = r;")
    assert d.input_names == ["x"] and d.num_ops == 4  # rnd32(x), +, rnd64(x), /
    res = analyze(d, bb_iters=10)
    assert res.outputs[0].abs_bound < 2.5 * U32
    err = sampled_errors(d, 40, seed=0, extra=[res.outputs[0].worst_point])[0]
    assert 0 < err <= res.outputs[0].abs_bound


def test_tasks_sections_and_separators():
    """``{ task } { task }``, lower-case section names, ``,`` separators, unnamed expressions, ``IN``."""
    d = _fpt("{ variables real x IN [1, 2], real y in [0, 1]; expressions x + y, x * y }\n"
             "{ Variables float32 x in [-1, 1]; Definitions t rnd32= x * x; Expressions t }")
    assert d.outputs == ["Expression 1", "Expression 2", "t"]
    assert d.input_names == ["x", "y", "x#2"]


def test_constraints_and_uncertainties_are_notes_not_errors():
    """Constraints and ``+/-`` are read but not used: the bound is the one over the box, with one note each."""
    plain = "Variables x in [0, 2], y in [0, 2];\nExpressions r rnd64= x + y;"
    full = ("Variables x in [0, 2] +/- 1e-3, y in [0, 2];\nConstraints c1: x + y <= 2, c2 rnd64: (x - y >= 0);\n"
            "Expressions r rnd64= x + y;")
    d = _fpt(full)
    assert len(d.notes) == 2 and "f.txt:2: Constraints are not used" in d.notes[1] and "+/-" in d.notes[0]
    assert analyze(d, bb_iters=5).outputs[0].abs_bound == analyze(_fpt(plain), bb_iters=5).outputs[0].abs_bound


def test_functions_and_literal_forms():
    """min, max, abs, inv, fma (one rounding), x^n, hex and suffixed literals parse."""
    from fractions import Fraction

    from torchhpc.ext.fperror.dag import ADD, MUL, round_to_bits
    d = _fpt("Variables x in [1, 2], y in [1, 2];\n"
             "Expressions a rnd64= min(x, y) + max(x, y) + abs(x) + inv(y) + x^3, f rnd64= fma(x, y, 0x1.8p1 + 0.1f);")
    assert Fraction(3) + round_to_bits(Fraction("0.1"), 32) in d.const_values.values()
    fma = d.output_nodes[1].item()
    assert int(d.op[fma]) == ADD and float(d.urnd[fma]) == U64
    prods = [int(k) for k in (d.lhs[fma], d.rhs[fma]) if int(d.op[int(k)]) == MUL]
    assert len(prods) == 1 and float(d.urnd[prods[0]]) == 0.0  # x * y exact, the sum rounded once


@pytest.mark.parametrize("body, words", [
    ("Variables x in [0, 1]; Expressions r rnd64= acos(x);", "f.txt:1:45: unsupported operation acos"),
    ("Variables x in [1, 2]; Expressions r rnd64= x^(-2);", "f.txt:1:47: negative powers"),
    ("Variables x in [1, 2]; Expressions r rnd[64, odd]= x * x;", "f.txt:1:38: rnd[64, odd]: rounding type 'odd'"),
    ("Variables x in [1, 2]; Expressions r rnd[48, ne]= x * x;", "rnd[48, ne]: rounding to 48 bits"),
    ("Variables x in [1, 2]; Expressions r = %e^x;", "f.txt:1:40: the constant %e"),
    ("Variables x in [1, 2];\nConstants c = x + 1;", "f.txt:2:15: 'x' in a constant expression"),
    ("Variables x in [1, 2]; Definitions x = 1; Expressions x;", "f.txt:1:36: 'x' is already defined on line 1"),
    ("Variables x in [2, 1]; Expressions x;", "f.txt:1:11: empty input range for 'x'"),
    ("Variables x in [1, 2]; Expressions r rnd64= x y;", "f.txt:1:47: expected ',' or ';' after the item, found 'y'"),
])
def test_fptaylor_refusals_are_one_line_naming_the_construct(body, words):
    """An unsupported construct is refused with one line: ``file:line:column: what``."""
    with pytest.raises(InputError) as exc:
        _fpt(body)
    assert "\n" not in str(exc.value) and words in str(exc.value)


def test_satire_empty_statements_and_separators():
    """Lone ``;`` statements, items without ``;``, outputs separated by blanks and a repeated identical
    input declaration read as the plain file does."""
    loose = ("INPUTS { a fl64 : (0, 1) ; b fl64 : (0, 1) c fl64 : (0, 1) ; a fl64 : (0, 1) ; }\n"
             "OUTPUTS { s ; ; t }\nEXPRS {\n ;\n s rnd64 = a + b ;\n ;\n t rnd64 = s * c\n}")
    plain = ("INPUTS { a fl64 : (0, 1); b fl64 : (0, 1); c fl64 : (0, 1); }\nOUTPUTS { s; t; }\n"
             "EXPRS { s rnd64 = a + b; t rnd64 = s * c; }")
    x, y = parse(loose, "s.txt"), parse(plain, "s.txt")
    assert x.input_names == y.input_names and x.outputs == y.outputs and x.num_ops == y.num_ops == 2
    assert analyze(x, bb_iters=0).max_abs_bound == analyze(y, bb_iters=0).max_abs_bound


@pytest.mark.parametrize("body, words", [
    ("INPUTS { a fl64 : (0, 1); } OUTPUTS { s; }\nEXPRS { s rnd64 = a; s rnd64 = a * a; }",
     "s.txt:2:22: 's' is already defined on line 2"),
    ("INPUTS { a fl64 : (0, 1);\n a fl64 : (0, 2); } OUTPUTS { a; } EXPRS { }", "s.txt:2:2: input 'a' is declared again"),
    ("INPUTS { a : (0, 1); } OUTPUTS { a; } EXPRS { }", "s.txt:1:12: expected a type fl16/fl32/fl64"),
    ("INPUTS { a fl64 : (0, 1); } OUTPUTS { s; }\nEXPRS { s rnd64 = cot(a); }", "s.txt:2:19: unsupported operation cot"),
])
def test_satire_refusals_are_one_line(body, words):
    """A reassignment, a conflicting redeclaration, a missing type, an unsupported operation: one line each."""
    with pytest.raises(InputError) as exc:
        parse(body, "s.txt", "satire")
    assert "\n" not in str(exc.value) and words in str(exc.value)


def test_lower_case_fptaylor_sections_are_detected():
    """A file with ``variables``/``expressions`` (FPTaylor accepts either case) is detected as FPTaylor."""
    from torchhpc.ext.fperror.parsers import detect_format
    assert detect_format("variables x in [0, 1]; expressions x;") == "fptaylor"


def test_analyze_warns_one_line_per_note(tmp_path, capsys):
    """``fperror analyze`` of a file with Constraints: exit 0, the bound, and one warning line saying so."""
    from torchhpc.trainers.fperror import main
    f = tmp_path / "floudas.txt"
    f.write_text("Variables x in [0, 2], y in [0, 2];\nConstraints c: x + y <= 2;\nExpressions r rnd64= x * y;\n")
    assert main(["analyze", str(f), "--bb-iters", "0"]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("torchhpc: warning: ") and "floudas.txt:2: Constraints are not used" in err[0]


def test_a_binary_file_is_one_line(tmp_path):
    """Bytes that are not UTF-8 (an image, a gzip file given by mistake): one InputError naming the file."""
    f = tmp_path / "garb.txt"
    f.write_bytes(b"\x00\xff\xfe\x89PNG")
    with pytest.raises(InputError, match="garb.txt: not a text file"):
        load(f)


def test_an_empty_fpcore_range_names_the_file(tmp_path):
    """A :pre whose range is empty is found past the parser: the line still names the file, then line:column."""
    f = tmp_path / "e.fpcore"
    f.write_text("(FPCore (x) :pre (<= 3 x 1) (+ x 1))\n")
    with pytest.raises(InputError, match=r"e\.fpcore:1:1: empty input range for 'x'"):
        load(f)
