"""Our bound against FPTaylor's published bounds on the small FPBench benchmarks, under FPTaylor's convention.

The reference numbers are FPTaylor's own regression results (``torchhpc.ext.fperror.published``:
github.com/soarlab/FPTaylor@0b115049d382 ``tests/core/_tests-b.yml`` for the standard rounding model
and ``tests/core/_tests.yml`` for its default ``fp-power2-model``), each with its input file.
The bar: sound (never below the error sampled against 200-bit mpmath) and at most 1.1x FPTaylor's
bound in the same rounding model; the goal: tighter than FPTaylor on at least a third.
"""

from __future__ import annotations

import math

import pytest

from torchhpc.ext.fperror.ops import analyze
from torchhpc.ext.fperror.published import FPTAYLOR_BOUNDS, load_input
from torchhpc.ext.fperror.reference import sampled_errors

FACTOR = 1.1
NAMES = sorted(FPTAYLOR_BOUNDS)
# work is bounded by iteration counts, never by the clock: results do not depend on the machine's load;
# bb_tol 1e-2 stops each bound within 1% of a point's first-order error (benchmarks/fperror.py --fptaylor: 1e-3)
BB = dict(bb_iters=60, bb_batch=128, bb_tol=1e-2, time_budget_s=1e6)


@pytest.fixture(scope="module")
def ours(shared_data):
    """name -> {"standard": bound, "power2": bound, "sampled": max observed error} (computed once)."""
    out = {}
    for name in NAMES:
        dag = load_input(name, shared_data / "fperror")
        row, worst = {}, []
        for model in ("standard", "power2"):
            o = analyze(dag, rounding=model, **BB).outputs[0]
            row[model] = o.abs_bound
            worst.append(o.worst_point)
        # rounded real inputs are sampled within half an ulp, as FPTaylor's convention has them
        rounded = bool((dag.urnd[dag.input_nodes] > 0).any())
        row["sampled"] = sampled_errors(dag, 10, seed=3, extra=worst, rounded_inputs=rounded)[0]
        out[name] = row
    return out


@pytest.mark.parametrize("name", NAMES)
def test_standard_model_bound_is_sound_and_within_factor_of_fptaylor(ours, name):
    """u|x| rounding model: sampled error <= our bound <= 1.1 x FPTaylor's (fp-power2-model=false)."""
    r, ref = ours[name], FPTAYLOR_BOUNDS[name][0]
    assert r["sampled"] <= r["standard"] < math.inf
    assert r["standard"] <= FACTOR * ref, f"{name}: ours {r['standard']:.4e} = {r['standard'] / ref:.3f} x FPTaylor"


@pytest.mark.parametrize("name", NAMES)
def test_power2_model_bound_is_sound_and_within_factor_of_fptaylor(ours, name):
    """Half-ulp-of-binade model (FPTaylor's default): sampled error <= our bound <= 1.1 x FPTaylor's."""
    r, ref = ours[name], FPTAYLOR_BOUNDS[name][1]
    assert r["sampled"] <= r["power2"] <= r["standard"]
    assert r["power2"] <= FACTOR * ref, f"{name}: ours {r['power2']:.4e} = {r['power2'] / ref:.3f} x FPTaylor"


def test_tighter_than_fptaylor_on_at_least_a_third(ours):
    """The goal: our bound below FPTaylor's on >= 1/3 of the benchmarks, in each rounding model."""
    for col, model in ((0, "standard"), (1, "power2")):
        # below by more than FPTaylor's 7 printed digits and our 1% stopping gap's noise: 0.05%
        tighter = [n for n in NAMES if ours[n][model] < 0.9995 * FPTAYLOR_BOUNDS[n][col]]
        assert len(tighter) >= len(NAMES) / 3, (model, tighter)


def test_comparison_can_fail(ours):
    """The check discriminates: the u|x| bounds are NOT within 1.1x of FPTaylor's power2 bounds everywhere."""
    loose = [n for n in NAMES if ours[n]["standard"] > FACTOR * FPTAYLOR_BOUNDS[n][1]]
    assert len(loose) >= len(NAMES) // 2, loose
