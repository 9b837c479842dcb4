"""Precision enhancement: float64 inside the region, casts at its borders, the rest untouched."""

from __future__ import annotations

import inspect

import pytest
import torch

from torchhpc.ext.pliner import GraphProgram, parse_precision, run_config
from torchhpc.ext.pliner.recipe import HighPrecision, Recipe, keep_high_precision


class Chain(torch.nn.Module):
    """``lin(x) + 300`` then ``* 1.5`` then ``- 450``: under bf16 autocast the offset value is stored in bf16."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        y = h + 300.0
        z = y * 1.5
        return z - 450.0


def _line(text: str) -> str:
    """``file:line`` of the statement of Chain.forward containing ``text``."""
    src, first = inspect.getsourcelines(Chain.forward)
    return f"{__file__}:{first + next(i for i, ln in enumerate(src) if text in ln)}"


@pytest.fixture(scope="module")
def chain():
    m = Chain().eval()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    return m, x, GraphProgram(m, (x,), parse_precision("autocast-bf16"))


def test_enhancing_nothing_is_the_problem_run(chain):
    """The rewritten graph with no region enhanced reproduces the plain bf16 autocast run bit for bit."""
    m, x, prog = chain
    plain = run_config(m, (x,), parse_precision("autocast-bf16"))
    assert torch.equal(prog.run(frozenset()), plain) and plain.dtype == torch.bfloat16


def test_enhancing_everything_is_a_float64_run(chain):
    """All ops enhanced: the float64 model's result, cast back to the plain run's output dtype (bf16)."""
    m, x, prog = chain
    want = Chain().double().eval()(x.double()).to(torch.bfloat16)
    got = prog.run(frozenset(prog.ops))
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_enhanced_region_keeps_float64_inside_and_casts_at_borders(chain):
    """{add, mul} enhanced: bf16 linear output cast up, float64 through add and mul, bf16 into the plain sub."""
    m, x, prog = chain
    names = {o.op.split(".")[1]: n for n, o in prog.ops.items()}
    h = torch.nn.functional.linear(x.bfloat16(), m.lin.weight.bfloat16(), m.lin.bias.bfloat16())
    z = ((h.double() + 300.0) * 1.5).to(torch.bfloat16)  # leaves the region in mul's plain dtype
    want = z - 450.0
    got = prog.run(frozenset([names["add"], names["mul"]]))
    assert torch.equal(got, want)
    # and the enhancement matters: bf16 storage of y = h + 300 loses h's low bits
    assert not torch.equal(got, prog.run(frozenset()))


def test_nodes_carry_module_and_source_line(chain):
    """Each candidate op knows its aten op, module path and the user's file:line."""
    _m, _x, prog = chain
    lin = next(o for o in prog.ops.values() if o.op == "aten.linear.default")
    assert lin.module == "lin" and lin.line == _line("self.lin(x)")
    add = next(o for o in prog.ops.values() if o.op == "aten.add.Tensor")
    assert add.module == "" and add.code == "y = h + 300.0"


def test_high_precision_wrapper_and_context_manager():
    """HighPrecision runs the module in float64 under autocast (parameters shared); the block restores it."""
    m = Chain().eval()
    x = torch.randn(4, 8)
    want = Chain().double().eval()(x.double()).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = HighPrecision(m)(x)
        with keep_high_precision(m, ["lin"]):
            assert isinstance(m.lin, HighPrecision)
    assert torch.equal(got, want) and isinstance(m.lin, torch.nn.Linear)
    assert HighPrecision(m).module.lin.weight is m.lin.weight


def test_line_recipe_runs_those_lines_in_float64():
    """Recipe(lines) = the lines' torch calls in float64 with float64 flowing between them."""
    m = Chain().eval()
    x = torch.randn(4, 8)
    rec = Recipe(lines=[_line("h + 300.0"), _line("y * 1.5"), _line("z - 450.0")])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), rec.applied(m):
        got = m(x)
    h = torch.nn.functional.linear(x.bfloat16(), m.lin.weight.bfloat16(), m.lin.bias.bfloat16())
    want = ((h.double() + 300.0) * 1.5 - 450.0).to(torch.bfloat16)
    assert torch.equal(got, want)


class Causal(torch.nn.Module):
    """Scores masked by a causal mask the forward builds on its input's device (a factory op in the graph)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        return (self.lin(x) @ x.transpose(1, 2)).masked_fill(~mask, -1e4).softmax(-1)


def _devices(gm: torch.fx.GraphModule) -> set:
    found = set()
    for n in gm.graph.nodes:
        torch.fx.node.map_aggregate((n.args, n.kwargs), lambda a: found.add(a) if isinstance(a, torch.device) else a)
    return found


def test_a_graph_for_another_device_builds_its_tensors_there():
    """Captured on the CPU, the graph's factory ops say ``device=cpu``; the enhanced graph of a CUDA problem says
    cuda, and the graph moved to another device runs there (``meta`` stands in for a GPU; without the rewrite the
    mask stays on the CPU: "Tensor on device meta is not on the expected device cpu")."""
    m, x = Causal().eval(), torch.randn(2, 8, 16)
    on_cpu = GraphProgram(m, (x,), parse_precision("tf32"))
    assert _devices(on_cpu.enhanced_module(on_cpu.root().atoms)) == {torch.device("cpu")}
    on_gpu = GraphProgram(m, (x,), parse_precision("cuda+tf32"))
    assert _devices(on_gpu.gm) == {torch.device("cpu")}
    on_gpu._dtypes = on_cpu.plain_dtypes()  # (recorded on the GPU in a real run; none here)
    assert _devices(on_gpu.enhanced_module(on_gpu.root().atoms)) == {torch.device("cuda")}
    gm, inputs = on_gpu.on_device("meta")
    assert gm(*inputs).device.type == "meta"
    assert _devices(on_gpu.gm) == {torch.device("cpu")}  # the captured graph itself is left as it was


def test_the_plain_dtypes_come_from_a_run_on_the_problems_device(monkeypatch):
    """The cast-back dtypes are recorded under the problem's own autocast: CUDA's keeps log_softmax in float32
    where the CPU's runs it in bf16, so a trace under CPU autocast would cast the enhanced output back to bf16."""
    import contextlib
    import dataclasses

    from torchhpc.ext.pliner import program as P

    seen = []
    real = P.precision_context

    @contextlib.contextmanager
    def recording(cfg):
        seen.append((cfg.device, cfg.autocast))
        with real(dataclasses.replace(cfg, device="cpu")):
            yield

    moved = []
    monkeypatch.setattr(P, "precision_context", recording)
    monkeypatch.setattr(P.GraphProgram, "on_device", lambda self, d: moved.append(d) or (self.gm, self.flat_inputs))
    m = torch.nn.Sequential(torch.nn.Linear(16, 10), torch.nn.LogSoftmax(-1)).eval()
    gp = GraphProgram(m, (torch.randn(8, 16),), parse_precision("cuda+autocast-bf16"))
    assert gp.plain_dtypes()
    assert seen == [("cuda", "bfloat16")] and moved == ["cuda"]


def test_a_model_is_moved_to_the_configurations_device_whichever_way():
    """A model built on another device (``meta`` standing in for the GPU) counts as elsewhere for a CPU run, so
    ``prepare`` copies it over (a CPU model runs as it is); a CPU model is elsewhere for a CUDA run and not for a
    CPU one."""
    from torchhpc.ext.pliner.oracle import elsewhere, prepare

    cpu = torch.nn.Linear(3, 3)
    assert not elsewhere(cpu, "cpu") and elsewhere(cpu, "cuda")
    assert elsewhere(torch.nn.Linear(3, 3, device="meta"), "cpu")
    assert not elsewhere(torch.nn.ReLU(), "cuda")  # nothing to move
    assert prepare(cpu, parse_precision("fp32")) is cpu
    with pytest.raises(NotImplementedError, match="meta"):  # copied over: a meta tensor has nothing to copy
        prepare(torch.nn.Linear(3, 3, device="meta"), parse_precision("fp32"))
