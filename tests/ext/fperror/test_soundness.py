"""The bound is never below the error actually observed (working precision against 200-bit mpmath)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchhpc.ext.core.data import shared_data_dir
from torchhpc.ext.fperror import BoundOptions, analyze_file, load
from torchhpc.ext.fperror.reference import sampled_errors

DATA = shared_data_dir() / "fperror"
SATIRE = sorted((DATA / "satire_fpbench_style").glob("*.txt"))
FPTAYLOR = sorted((DATA / "fptaylor_format").glob("*.txt"))
# work is bounded by the iteration counts, never by the clock: results do not depend on the machine's load
FAST = BoundOptions(bb_iters=6, bb_batch=128, time_budget_s=1e6)


def _check(path: Path, inputs: str) -> None:
    opts = BoundOptions(inputs=inputs, bb_iters=FAST.bb_iters, bb_batch=FAST.bb_batch, time_budget_s=FAST.time_budget_s)
    res = analyze_file(path, options=opts)
    if any(o.abs_bound == float("inf") for o in res.outputs):  # a pole near the box: refine further
        res = analyze_file(path, options=BoundOptions(inputs=inputs, bb_iters=40, time_budget_s=1e6))
    dag = load(path, inputs=inputs)
    errs = sampled_errors(dag, 30, seed=1, extra=[o.worst_point for o in res.outputs],
                          rounded_inputs=inputs == "rounded")
    for o, e in zip(res.outputs, errs, strict=True):
        assert e <= o.abs_bound, f"{path.name}/{o.name}: observed {e:.3e} > bound {o.abs_bound:.3e}"
        assert o.abs_bound < float("inf")


@pytest.mark.parametrize("path", SATIRE, ids=lambda p: p.stem)
def test_satire_benchmark_bound_is_sound(shared_data, path):
    """Each Satire-format FPBench benchmark (exact inputs): observed error <= bound at random, corner and worst points."""
    _check(path, "exact")


@pytest.mark.parametrize("path", FPTAYLOR, ids=lambda p: p.stem)
def test_fptaylor_benchmark_bound_is_sound_with_rounded_inputs(shared_data, path):
    """Each FPTaylor-format benchmark under FPTaylor's convention (rounded inputs): observed error <= bound."""
    _check(path, "rounded")


def test_sampler_detects_an_unsound_bound():
    """The check can fail: x - y's bound with exact inputs is beaten once the inputs are rounded reals."""
    from torchhpc.ext.fperror import analyze, parse_satire
    src = "INPUTS { x fl64 : (1, 2); y fl64 : (1, 2); } OUTPUTS { d; } EXPRS { d rnd64 = x - y; }"
    exact = analyze(parse_satire(src, inputs="exact"), bb_iters=20).outputs[0].abs_bound
    err = sampled_errors(parse_satire(src, inputs="rounded"), 400, seed=2, rounded_inputs=True)[0]
    assert err > exact


FPCORE = sorted((DATA / "fpcore").glob("*.fpcore"))[::4]


@pytest.mark.parametrize("path", FPCORE, ids=lambda p: p.stem[:40])
def test_fpcore_benchmark_bound_is_sound_or_refused(shared_data, path):
    """FPCore cores: observed error <= bound, or one clear refusal (constraints beyond a box, e.g. triangles)."""
    from torchhpc.ext.core.errors import InputError
    try:
        _check(path, "exact")
    except InputError as exc:
        assert "range" in str(exc) or "unsupported" in str(exc)


POWER2 = ["exp1x_32", "hypot32", "test01_sum3", "test06_sums4_sum1", "x_by_xy", "i4", "delta4", "logexp", "sphere"]


@pytest.mark.parametrize("stem", POWER2)
def test_power2_rounding_model_is_sound(shared_data, stem):
    """rounding="power2" (binary32 and binary64 files, transcendental ops): observed error <= bound <= the u|x| bound."""
    path = DATA / "fptaylor_format" / f"{stem}.txt"
    opts = dict(inputs="rounded", bb_iters=FAST.bb_iters, bb_batch=FAST.bb_batch, time_budget_s=FAST.time_budget_s)
    res = analyze_file(path, options=BoundOptions(rounding="power2", **opts))
    std = analyze_file(path, options=BoundOptions(**opts))
    dag = load(path, inputs="rounded")
    errs = sampled_errors(dag, 30, seed=5, extra=[o.worst_point for o in res.outputs], rounded_inputs=True)
    for o, s, e in zip(res.outputs, std.outputs, errs, strict=True):
        assert e <= o.abs_bound <= s.abs_bound, (o.name, e, o.abs_bound, s.abs_bound)


@pytest.mark.parametrize("text, words", [
    ("INPUTS {\n x fl16 : (0, 300);\n}\nOUTPUTS {\n y;\n}\nEXPRS {\n y rnd16 = x*x;\n}\n",
     ["* @ 8:", "exceeds binary16's largest finite number (65504)"]),
    ("INPUTS {\n x fl32 : (0, 100);\n}\nOUTPUTS {\n y;\n}\nEXPRS {\n y rnd32 = exp(x);\n}\n",
     ["exp @ 8:", "exceeds binary32's largest finite number (3.4028235e+38)"]),
    ("INPUTS {\n x fl16 : (0, 200);\n z fl16 : (0, 100000);\n}\nOUTPUTS {\n y;\n}\nEXPRS {\n y rnd16 = x*z;\n}\n",
     ["input z", "[0, 100000] does not fit binary16"]),
])
def test_a_value_that_overflows_its_format_is_refused_not_bounded(tmp_path, text, words):
    """x*x in binary16 over [0, 300] reaches 90,000 > 65,504, exp in binary32 over [0, 100] reaches 2.7e43:
    computed in that format the result is inf, so no finite bound is sound; an input declared beyond its
    format is refused too.  One InputError naming the operation (or input); [0, 200] for x*x (40,000) is
    bounded."""
    from torchhpc.ext.core.errors import InputError

    path = tmp_path / "k.txt"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        analyze_file(path, options=FAST)
    for w in words:
        assert w in str(err.value), str(err.value)
    path.write_text(text.replace("(0, 300)", "(0, 200)"))
    if "(0, 300)" in text:
        assert analyze_file(path, options=FAST).outputs[0].abs_bound < float("inf")
