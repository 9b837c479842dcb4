"""Stage partitioning: the balance is optimal, profiles measure what they claim, bad splits are refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import ConfigError, InputError
from torchhpc.ext.gems.modules import build_blocks, count_blocks
from torchhpc.ext.gems.partition import (
    balanced_bounds,
    block_costs,
    bounds_from_balance,
    infer_shapes,
    profile_blocks,
    stage_infos,
    stage_report,
)


def test_balanced_bounds_is_the_brute_force_optimum():
    """The DP split minimises the largest stage cost, checked against every split of small problems."""
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 9))
        P = int(rng.integers(1, n + 1))
        c = rng.random(n)
        bounds = balanced_bounds(c, P)
        assert bounds[0][0] == 0 and bounds[-1][1] == n and all(b > a for a, b in bounds)
        assert all(bounds[i][1] == bounds[i + 1][0] for i in range(P - 1))
        got = max(c[a:b].sum() for a, b in bounds)
        best = min(max(c[a:b].sum() for a, b in zip((0, *cut), (*cut, n), strict=True))
                   for cut in itertools.combinations(range(1, n), P - 1))
        assert got == pytest.approx(best, abs=1e-12)


def test_more_stages_than_blocks_is_a_clear_error():
    """Asking for more stages than blocks fails with a message naming both numbers."""
    with pytest.raises(InputError, match="3 pipeline stages but the model has only 2 blocks"):
        balanced_bounds([1.0, 2.0], 3)


def test_manual_balance_and_its_errors():
    """A manual balance gives the stated ranges; counts that do not cover the model are refused."""
    assert bounds_from_balance([2, 1, 3], 6) == [(0, 2), (2, 3), (3, 6)]
    with pytest.raises(ConfigError, match="covers 5 blocks"):
        bounds_from_balance([2, 3], 6)
    with pytest.raises(ConfigError, match="at least one block"):
        bounds_from_balance([0, 6], 6)


def test_resnet_v2_depths_and_shapes():
    """ResNet-v2 depth 9n+2 has 3n+2 blocks; fake-tensor shape inference matches a real forward."""
    for depth in (11, 110, 1001):
        assert count_blocks("resnet_v2", depth) == 3 * ((depth - 2) // 9) + 2
    with pytest.raises(ConfigError, match="9n \\+ 2"):
        build_blocks("resnet_v2", depth=12, width=4, in_shape=(3, 8, 8), num_classes=3)
    blocks = build_blocks("resnet_v2", depth=20, width=4, in_shape=(3, 12, 12), num_classes=3)
    assert len(blocks) == count_blocks("resnet_v2", 20) == 8
    shapes = infer_shapes(blocks, (2, 3, 12, 12))
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        for b, s in zip(blocks, shapes, strict=True):
            x = b(x)
            assert tuple(x.shape) == s
    assert shapes[-1] == (2, 3) and shapes[0] == (2, 4, 12, 12)
    # blocks already on another device (meta stands in for a GPU; every other block here) take their input there
    assert infer_shapes([b.to("meta") if i % 2 else b for i, b in enumerate(blocks)], (2, 3, 12, 12)) == shapes


def test_profile_and_stage_report():
    """Profiling gives positive times, parameter bytes that match the model, and activation bytes
    at least the size of each block's input (each block normalises or multiplies it); one report row per stage."""
    torch.set_num_threads(1)
    blocks = build_blocks("resnet_v2", depth=11, width=4, in_shape=(3, 16, 16), num_classes=5)
    prof = profile_blocks(blocks, torch.randn(2, 3, 16, 16), repeats=1)
    assert (prof.forward_s > 0).all() and (prof.backward_s > 0).all()
    assert prof.param_bytes.sum() == sum(p.numel() * 4 for b in blocks for p in b.parameters())
    assert (prof.activation_bytes[1:] >= prof.output_bytes[:-1]).all() and prof.input_bytes == 6144
    assert all(p.grad is None for b in blocks for p in b.parameters())
    bounds = balanced_bounds(block_costs(prof, "both"), 3)
    infos = stage_infos(prof, bounds)
    assert sum(i.param_bytes for i in infos) == prof.param_bytes.sum()
    table = stage_report(infos, micro_batches=2)
    assert len(table.splitlines()) == 4 and "peak MiB" in table


def test_profile_times_each_block_of_the_chain(monkeypatch):
    """In one forward and one backward through the chain, the time goes to the block that spent it:
    a block that takes 30 ms in backward (and one that takes 20 ms in forward) is charged for it,
    the other blocks are not.  The clock is a fake one that only the slow blocks advance, so the
    result does not depend on how busy the machine is."""
    import types

    from torchhpc.ext.gems import partition

    clock = [0.0]
    monkeypatch.setattr(partition, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            clock[0] += 0.03
            return g

    class Slow(torch.nn.Module):
        def __init__(self, where: str):
            super().__init__()
            self.lin, self.where = torch.nn.Linear(8, 8), where

        def forward(self, x):
            if self.where == "forward":
                clock[0] += 0.02
            y = self.lin(x)
            return SlowBackward.apply(y) if self.where == "backward" else y

    blocks = [Slow("none"), Slow("backward"), Slow("none"), Slow("forward"), Slow("none")]
    prof = profile_blocks(blocks, torch.randn(4, 8), repeats=2)
    assert prof.backward_s.tolist() == pytest.approx([0, 0.03, 0, 0, 0], abs=1e-12)
    assert prof.forward_s.tolist() == pytest.approx([0, 0, 0, 0.02, 0], abs=1e-12)
    assert all(p.grad is None for b in blocks for p in b.parameters())
