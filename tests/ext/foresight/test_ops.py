"""Our compressor's stages: interpolation prediction, residual byte planes and the Lorenzo inverse are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.foresight.ops import (
    LOG2_COST_BITS,
    as_volume,
    choose_predictor,
    decode_residuals,
    encode_residuals,
    interp_reconstruct,
    interp_residuals,
    log2_cost,
    lorenzo_quantize,
    lorenzo_reconstruct,
)


@pytest.mark.parametrize("shape", [(1, 1, 7), (5, 6, 7), (1, 33, 17), (9, 9, 9), (2, 3, 1), (16, 16, 16)])
@pytest.mark.parametrize("cubic", [False, True])
def test_interpolation_residuals_invert_exactly(shape, cubic):
    """Residuals have one entry per value and level-by-level reconstruction gives the codes back bit for bit."""
    q = torch.randint(-1000, 1000, shape, generator=torch.Generator().manual_seed(sum(shape)))
    r = interp_residuals(q, cubic)
    assert r.numel() == q.numel()
    assert torch.equal(interp_reconstruct(r, shape, cubic), q)


def test_interpolation_predicts_linear_ramps_exactly():
    """A linear ramp of codes has zero interpolation residual except where a level's last entry has no right
    neighbour (extrapolated from the left): under 2% of the values."""
    i, j, k = torch.meshgrid(torch.arange(17), torch.arange(9), torch.arange(33), indexing="ij")
    q = 2 * i + 3 * j - k
    r = interp_residuals(q, cubic=False)
    head = q[::32, ::32, ::32].numel()
    assert float((r[head:] != 0).float().mean()) < 0.02


def test_lorenzo_residual_inverts_by_prefix_sums():
    """Three cumulative sums undo the Lorenzo residual of the torch path."""
    x = torch.randn(7, 8, 9, dtype=torch.float64).cumsum(1)
    q, d = lorenzo_quantize(x, 0.01, "torch")
    assert torch.equal(lorenzo_reconstruct(d), q)


def test_residual_planes_round_trip_with_huge_values():
    """Small and 2^60-sized residuals of both signs survive the zigzag byte planes."""
    d = torch.tensor([0, -1, 1, 127, -128, 255, 70000, -(2**60), 2**60 - 1, 5], dtype=torch.int64)
    assert torch.equal(decode_residuals(encode_residuals(d), d.numel()), d)
    small = torch.randint(-100, 100, (1000,))
    assert len(encode_residuals(small)) == 2  # header + one plane


def _mitchell_cost(r: torch.Tensor) -> int:
    """The reference of :func:`log2_cost`, element by element in NumPy: ``floor(2**16 * (e - 1 + 2m - 1))``."""
    m, e = np.frexp(1.0 + np.abs(r.numpy().astype(np.float64)))
    return int(np.floor((e - 1 + (2 * m - 1)) * 2.0 ** LOG2_COST_BITS).astype(np.int64).sum())


def test_predictor_choice_and_volume_view():
    """The chosen predictor is the one whose residuals have the smaller Mitchell log-magnitude (whole field
    below the sample size), the same one the float log2 mean picks on these fields; both choices occur;
    shapes view as 3D."""
    i, j, k = torch.meshgrid(*(torch.linspace(0, 6, 40, dtype=torch.float64),) * 3, indexing="ij")
    smooth = torch.sin(i) * torch.cos(j) * torch.sin(k)
    seen = set()
    for eb in (1e-4, 1e-2, 0.2):
        q, d = lorenzo_quantize(smooth, eb, "torch")
        r = {"lorenzo": d, "interp": interp_residuals(q, cubic=False)}
        costs = {name: _mitchell_cost(x) for name, x in r.items()}
        floats = {name: float(torch.log2(1 + x.abs().double()).mean()) for name, x in r.items()}
        assert choose_predictor(q) == min(costs, key=costs.get) == min(floats, key=floats.get)
        seen.add(choose_predictor(q))
    assert seen == {"lorenzo", "interp"}
    assert as_volume((5,)) == (1, 1, 5) and as_volume((2, 3)) == (1, 2, 3) and as_volume((2, 3, 4, 5)) == (6, 4, 5)


def test_the_predictor_cost_is_exact_whatever_the_order():
    """The choice's cost is integer arithmetic: equal to the element-wise reference, the same for the residuals in
    any order (a float sum is not: the choice on a near-tie would depend on the device's reduction), and within
    Mitchell's 0.086 below the true ``sum(log2(1 + |r|))``."""
    g = torch.Generator().manual_seed(5)
    r = (torch.randn(64 ** 3, generator=g, dtype=torch.float64) ** 3 * 300).round().to(torch.int64)
    r[:3] = torch.tensor([0, -(2 ** 40), 2 ** 52])
    cost = log2_cost(r)
    assert cost == _mitchell_cost(r)
    assert log2_cost(r[torch.randperm(r.numel(), generator=g)]) == cost
    assert log2_cost(r.view(64, 64, 64).transpose(0, 2)) == cost
    exact = float(np.log2(1.0 + np.abs(r.numpy().astype(np.float64))).sum()) * 2 ** LOG2_COST_BITS
    assert 0 <= exact - cost <= (0.0861 * 2 ** LOG2_COST_BITS + 1) * r.numel()
    # the integer limits cost 63 and 31 bits (1 + |r| taken in float64, no integer wrap)
    assert log2_cost(torch.tensor([2 ** 63 - 1, -(2 ** 63)])) == 2 * 63 * 2 ** LOG2_COST_BITS
    assert log2_cost(torch.tensor([-(2 ** 31)], dtype=torch.int32)) == 31 * 2 ** LOG2_COST_BITS


def test_the_choice_is_the_integer_cost(monkeypatch):
    """``choose_predictor`` decides by :func:`log2_cost`: the same codes with the cost turned round pick the
    other predictor."""
    from torchhpc.ext.foresight import ops

    i, j, k = torch.meshgrid(*(torch.linspace(0, 6, 40, dtype=torch.float64),) * 3, indexing="ij")
    q, _ = lorenzo_quantize(torch.sin(i) * torch.cos(j) * torch.sin(k), 1e-4, "torch")
    picked = choose_predictor(q)
    monkeypatch.setattr(ops, "log2_cost", lambda r: -log2_cost(r))
    assert choose_predictor(q) == ({"lorenzo", "interp"} - {picked}).pop()


@pytest.mark.parametrize("side", [40, 70])
def test_the_automatic_choice_computes_the_residuals_once_when_it_sampled_the_whole_field(monkeypatch, side):
    """``predictor: auto`` on a field no larger than the choice's sample (64^3 codes; here 40^3) reuses the residuals the
    choice computed: one interpolation pass, not two; on a larger field (70^3) the choice saw a block only,
    and the field's residuals take a pass of their own.  Either way the payload is the one of an explicit
    ``predictor: interp``."""
    from torchhpc.ext.foresight import ops
    from torchhpc.ext.foresight.data import gaussian_random_field

    x = gaussian_random_field(side, lambda kk: kk**-3.0, seed=side)
    eb = 1e-3 * float(x.max() - x.min())
    calls = []
    real = ops.interp_residuals
    monkeypatch.setattr(ops, "interp_residuals", lambda *a, **kw: calls.append(a[0].shape) or real(*a, **kw))
    used, auto = ops.lorenzo_encode(x, eb, backend="torch", predictor="auto")
    assert used == "interp"
    assert len(calls) == (1 if side <= 64 else 2)
    _, explicit = ops.lorenzo_encode(x, eb, backend="torch", predictor="interp")
    assert auto == explicit
