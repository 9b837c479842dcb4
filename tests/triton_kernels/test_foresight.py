"""The dual-quantisation Lorenzo kernel (interpreted on the CPU) against its torch twin and a loop reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.foresight.reference import lorenzo_residual_loops
from torchhpc.triton_kernels.foresight import QUANT_LIMIT, lorenzo_quantize_torch, lorenzo_quantize_triton


@pytest.mark.parametrize("shape", [(5, 6, 7), (1, 1, 13), (3, 1, 9), (2, 17, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_equals_torch_twin_and_loop_reference(kernel_device, shape, dtype):
    """q and the Lorenzo residual d are bit-identical across the kernel, the twin and SZ's loop formula."""
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 10).cumsum(2).to(dtype)
    eb = 0.037
    qk, dk = lorenzo_quantize_triton(x.to(kernel_device), eb, block=64)
    qt, dt = lorenzo_quantize_torch(x, eb)
    qr, dr = lorenzo_residual_loops(x.numpy(), eb)
    assert torch.equal(qk.cpu(), qt) and torch.equal(dk.cpu(), dt)
    assert np.array_equal(qt.numpy(), qr) and np.array_equal(dt.numpy(), dr)
    # the quantisation error is the whole error: |x - 2 e q| <= e
    assert float((x.double() - 2 * eb * qt.double()).abs().max()) <= eb * (1 + 1e-12)


def test_kernel_maps_nonfinite_and_huge_values_to_zero_codes(kernel_device):
    """NaN, inf and |x / 2e| >= 2^40 get q = 0 (the caller keeps them exactly as outliers), same as the twin."""
    x = torch.tensor([[[1.0, float("nan"), float("inf"), -float("inf"), 3e12, -0.5, 0.26]]], dtype=torch.float64)
    eb = 0.25
    qk, dk = lorenzo_quantize_triton(x.to(kernel_device), eb, block=16)
    qt, dt = lorenzo_quantize_torch(x, eb)
    assert torch.equal(qk.cpu(), qt) and torch.equal(dk.cpu(), dt)
    assert qt.reshape(-1).tolist() == [2, 0, 0, 0, 0, -1, 1]
    assert 3e12 / (2 * eb) >= QUANT_LIMIT


def test_kernel_rejects_bad_input():
    """A non-3D input or a bound <= 0 is a ValueError naming the problem."""
    with pytest.raises(ValueError, match="3D"):
        lorenzo_quantize_torch(torch.zeros(4, 4), 0.1)
    with pytest.raises(ValueError, match="bound"):
        lorenzo_quantize_torch(torch.zeros(2, 2, 2), 0.0)
