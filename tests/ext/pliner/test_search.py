"""The guided search: known culprits found, minimal, counted; the statuses; the module fall-back; the recipe."""

from __future__ import annotations

import math

import pytest
import torch

from torchhpc.ext.pliner import Oracle, Region, SearchOptions, bisect, ddmin, find
from torchhpc.ext.pliner.config import parse_precision
from torchhpc.ext.pliner.examples import cancelling_mlp, tiny_transformer
from torchhpc.ext.pliner.oracle import divergence, precision_context, run_config
from torchhpc.ext.pliner.reference import exhaustive_minimum, is_one_minimal
from torchhpc.ext.pliner.search import build_program


def _set_oracle(culprits: set[int]) -> Oracle:
    """A pure oracle: the divergence is 0 when the enhanced set contains every culprit, else 1."""
    return Oracle(lambda s: torch.tensor([float(not culprits <= s)]), torch.tensor([0.0]), tol=0.5,
                  metric=lambda r, o: float(o[0]))


@pytest.mark.parametrize("culprits", [{11}, {3, 12}, {0, 1, 31}])
@pytest.mark.parametrize("isolate", [bisect, ddmin])
def test_isolate_finds_exactly_the_interacting_culprits(culprits, isolate):
    """Bisection and ddmin return exactly the culprits among 32 candidates; one culprit costs <= 2 log2(32) runs."""
    oracle = _set_oracle(culprits)
    regions = [Region("op", str(i), frozenset([i])) for i in range(32)]
    kept = isolate(oracle, regions)
    assert {next(iter(r.atoms)) for r in kept} == culprits
    if len(culprits) == 1 and isolate is bisect:
        assert oracle.runs <= 2 * math.log2(32)


def test_tf32_cancellation_culprit_is_the_smallest_fixing_set():
    """On the cancelling MLP under TF32 the returned set equals the exhaustive smallest fixing set, 1-minimal."""
    model, inputs = cancelling_mlp()
    res = find(model, inputs, problem="tf32", options=SearchOptions(tol=1e-3))
    assert res.status == "found" and res.minimal and res.error_after <= 1e-3 < res.error_before
    prog = build_program(model, inputs, parse_precision("tf32"))
    check = Oracle(prog.run, run_config(model, inputs, parse_precision("fp32")), 1e-3)
    k, sets = exhaustive_minimum(check, sorted(prog.ops, key=prog.sort_key), max_size=2)
    assert frozenset(res.atoms) in sets and is_one_minimal(check, frozenset(res.atoms))
    assert {c["module"] for c in res.culprits} == {"l2"}  # the matmul whose operand carries the offset
    assert res.runs <= 2 * math.log2(res.n_candidates) + 2 + len(res.atoms)


def test_search_options_as_keywords_are_the_options():
    """``find(..., tol=..., metric="max_abs")`` runs the search ``options=SearchOptions(...)`` runs; an unknown key or a
    value out of range is one ConfigError."""
    from torchhpc.ext.core.errors import ConfigError

    model, inputs = cancelling_mlp()
    by_keywords = find(model, inputs, problem="tf32", tol=1e-3, metric="max_abs", search="ddmin")
    by_options = find(model, inputs, problem="tf32", options=SearchOptions(tol=1e-3, metric="max_abs", search="ddmin"))
    assert by_keywords.status == by_options.status == "found" and by_keywords.metric == "max_abs"
    assert by_keywords.atoms == by_options.atoms and by_keywords.tol == 1e-3
    with pytest.raises(ConfigError, match="unknown search option.*tolerance"):
        find(model, inputs, tolerance=1e-3)
    with pytest.raises(ConfigError, match="tol.*out of range"):
        find(model, inputs, tol=-1.0)
    for wrong in ({"check_minimal": "no"}, {"max_runs": 10.5}, {"levels": ["module", "line"]}):  # typed as the CLI
        with pytest.raises(ConfigError, match=f"find\\(\\): key '{next(iter(wrong))}' must be"):
            find(model, inputs, **wrong)


def test_transformer_bf16_drift_is_the_rotary_angles_and_recipe_repairs_it():
    """bf16 autocast drift of the RoPE transformer: the rotary-angle ops; the line recipe brings it under tol."""
    model, inputs = tiny_transformer()
    res = find(model, inputs, problem="autocast-bf16", options=SearchOptions(tol=1e-2))
    assert res.status == "found" and res.minimal
    ops = {c["op"] for c in res.culprits}
    assert {c["module"] for c in res.culprits} == {"rotary"} and "aten.matmul.default" in ops
    ref = run_config(model, inputs, parse_precision("fp32"))
    with torch.no_grad(), res.recipe.applied(model), precision_context(parse_precision("autocast-bf16")):
        fixed = model(*inputs)
    assert divergence(ref, fixed) <= 1e-2 < res.error_before


def test_statuses_no_divergence_not_fixable_spread():
    """Agreeing configurations, a tolerance below the reference's own error, and a spread-out divergence."""
    model, inputs = cancelling_mlp()
    assert find(model, inputs, problem="fp32").status == "no_divergence"
    res = find(model, inputs, problem="tf32", options=SearchOptions(tol=1e-12))
    assert res.status == "not_fixable" and res.error_all > 1e-12 and res.runs == 2

    class Wide(torch.nn.Module):  # eight bf16 matmuls summed: each one's rounding alone breaks a tight tol
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lins = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(8))

        def forward(self, x):
            return sum(lin(x) for lin in self.lins).float()  # a float32 output: no final bf16 rounding

    res = find(Wide().eval(), (torch.randn(4, 16),), problem="autocast-bf16",
               options=SearchOptions(tol=1e-5, spread=4))
    assert res.status == "spread" and len(res.atoms) > 4 and "spread over many" in res.message
    assert sum(c["op"] == "aten.linear.default" for c in res.culprits) == 8


def test_running_out_of_runs_is_its_own_status_and_a_float64_failure_is_one_error():
    """--max-runs 1 leaves no run for the search: status out_of_runs, nothing listed (it was a
    RunBudgetExceeded traceback); a budget that ends mid-search says so and lists what it kept as candidates
    (it said spread).  A model that fails once part of it runs in float64 (a float32 tensor held as a plain
    attribute, in the module-level search) is one InputError naming it (it was a traceback from inside the
    search)."""
    from torchhpc.ext.core.errors import InputError

    model, inputs = tiny_transformer()
    res = find(model, inputs, problem="autocast-bf16", options=SearchOptions(tol=1e-2, max_runs=1))
    assert res.status == "out_of_runs" and "nothing was searched" in res.message and not res.culprits
    res = find(model, inputs, problem="autocast-bf16", options=SearchOptions(tol=1e-2, max_runs=5))
    assert res.status == "out_of_runs" and res.runs == 5 and res.culprits
    assert "candidates (not isolated" in res.report()

    class Held(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(8, 8)
            self.W = torch.randn(8, 8)  # not a buffer: module.double() leaves it float32

        def forward(self, x):
            y = self.lin(x)
            if y.sum() > 0:  # data-dependent: FX cannot capture it, the search runs module by module
                y = y * 2
            return y @ self.W

    with pytest.raises(InputError, match="the model fails with .* run in float64: RuntimeError.*register it as a buffer"):
        find(Held().eval(), (torch.randn(4, 8),), problem="autocast-bf16", options=SearchOptions(tol=1e-4))


def test_not_fixable_says_when_the_outputs_themselves_are_low_precision():
    """A Linear under bf16 autocast hands back bfloat16 values: their rounding alone exceeds tol 1e-3, whatever
    runs in float64; the not_fixable line says so (it said the divergence was not a precision loss)."""
    torch.manual_seed(0)
    res = find(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),), options=SearchOptions(tol=1e-3))
    assert res.status == "not_fixable" and "outputs are bfloat16 under autocast-bf16" in res.message


def test_a_model_that_does_not_repeat_itself_is_refused():
    """Dropout in train mode: two reference runs differ by far more than the tolerance, so no divergence can be
    attributed to precision (it was reported as not_fixable); one InputError saying to call .eval()."""
    from torchhpc.ext.core.errors import InputError

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 8))
    with pytest.raises(InputError, match=r"two runs of the reference configuration fp32 differ .*train mode with "
                                         r"dropout \(1\): return model.eval\(\)"):
        find(model, (torch.randn(4, 8),), options=SearchOptions(tol=1e-2))
    assert find(model.eval(), (torch.randn(4, 8),), options=SearchOptions(tol=1e-2)).status != ""


def test_untraceable_model_falls_back_to_module_search():
    """A model with data-dependent control flow: FX capture fails, the module search still finds blocks.1.a."""

    class Block(torch.nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.a, self.shift = torch.nn.Linear(16, 16), shift

        def forward(self, x):
            return torch.tanh(self.a(x + self.shift) - self.a(torch.full_like(x, self.shift)))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.blocks = torch.nn.ModuleList([Block(0.0), Block(3000.0), Block(0.0)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x * 2 if x.sum() > 0 else x  # data-dependent: export cannot capture it

    res = find(Net().eval(), (torch.randn(8, 16),), problem="tf32", options=SearchOptions(tol=1e-3))
    assert res.engine == "module" and "FX could not capture" in res.message
    assert res.status == "found" and [c["module"] for c in res.culprits] == ["blocks.1.a"]


def test_enhancement_survives_torch_compile():
    """The rewritten graph compiled (aot_eager) gives the eager enhanced result: the casts are real graph ops."""
    model, inputs = cancelling_mlp()
    prog = build_program(model, inputs, parse_precision("compile:aot_eager"))
    atoms = frozenset(n for n, o in prog.ops.items() if o.module == "l2")
    eager = run_config(prog.enhanced_module(atoms), prog.flat_inputs, parse_precision("fp32"))
    torch.testing.assert_close(prog.run(atoms), eager, rtol=0, atol=0)
