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


# ----------------------------------------------------------------------------- the block codec


def _field(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).cumsum(-1).to(dtype)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 1, 37), (3, 1, 1), (5, 6, 37), (2, 17, 3), (1, 64, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("predictor", ["lorenzo", "interp", "cubic"])
def test_block_kernels_write_the_numpy_twins_payload_byte_for_byte(kernel_device, shape, dtype, predictor):
    """The scan and pack kernels (Lorenzo fused, or packing the interpolation's residuals) give the bytes the
    CPU's NumPy packing gives, and the unpack kernel and the NumPy unpacking decode either payload to the
    same values: the Lorenzo codes' 2 e round(x / 2 e), every one within the bound."""
    from torchhpc.ext.foresight.blocks import blocks_decode, blocks_encode

    x = _field(shape, dtype)
    eb = 0.037
    on_kernel, meta_k = blocks_encode(x.to(kernel_device), eb, backend="triton", predictor=predictor)
    on_cpu, meta_c = blocks_encode(x, eb, backend="torch", predictor=predictor)
    assert on_kernel == on_cpu and meta_k == meta_c
    assert meta_c["blocks"] == -(-x.numel() // 32) and meta_c["wide"] == meta_c["values"] == 0
    y_k = blocks_decode(on_cpu, meta_c, shape, dtype, eb, kernel_device, backend="triton").cpu()
    y_c = blocks_decode(on_kernel, meta_k, shape, dtype, eb, "cpu", backend="torch")
    assert torch.equal(y_k, y_c) and y_c.dtype == dtype and tuple(y_c.shape) == shape
    q, _ = lorenzo_quantize_torch(x.reshape(-1, 1, 1) if len(shape) == 1 else x, eb)
    assert torch.equal(y_c, (q.double() * (2 * eb)).to(dtype).reshape(shape))
    assert float((y_c.double() - x.double()).abs().max()) <= eb


@pytest.mark.parametrize("predictor", ["lorenzo", "interp"])
def test_block_codec_keeps_outliers_and_the_widest_codes(kernel_device, predictor):
    """A residual of -2^31 is the widest code (a block of width 32, not an outlier); +2^31 is kept in the
    wide list; NaN, inf and |x / 2e| >= 2^40 are kept exactly in the value list; kernel and twin agree on
    every byte."""
    from torchhpc.ext.foresight.blocks import Layout, blocks_decode, blocks_encode

    x = torch.zeros(1, 1, 70, dtype=torch.float64)
    x[0, 0, 1] = -(2.0**31)  # 2e = 1: q = x; Lorenzo residuals 0, -2^31 (code 2^32 - 1), +2^31 (too wide)
    x[0, 0, 40:43] = torch.tensor([float("nan"), float("inf"), 3e12])
    eb = 0.5
    payload, meta = blocks_encode(x.to(kernel_device), eb, backend="triton", predictor=predictor)
    assert payload == blocks_encode(x, eb, backend="torch", predictor=predictor)[0]
    lay = Layout.of(meta, 8)
    widths, _, wide_at, wide, value_at, value = lay.views(torch.frombuffer(bytearray(payload), dtype=torch.uint8),
                                                          x.dtype)
    assert value_at.tolist() == [40, 41, 42] and bool(torch.isnan(value[0])) and torch.equal(value[1:], x[0, 0, 41:43])
    if predictor == "lorenzo":
        assert widths.tolist() == [32, 0, 0] and wide_at.tolist() == [2] and wide.tolist() == [2**31]
    for backend in ("triton", "torch"):
        y = blocks_decode(payload, meta, tuple(x.shape), x.dtype, eb, kernel_device if backend == "triton" else "cpu",
                          backend=backend).cpu()
        assert torch.equal(torch.nan_to_num(y, nan=7.0), torch.nan_to_num(x, nan=7.0)) and bool(torch.isnan(y[0, 0, 40]))


@pytest.mark.parametrize("predictor", ["lorenzo", "interp"])
def test_a_batch_of_fields_gives_each_field_its_own_payload(kernel_device, predictor):
    """Fields of different shapes (dimensions of 1, sizes not a multiple of 32) and bounds, with outliers in
    some, encoded in one batch: each field's payload is the bytes of the field encoded alone."""
    from torchhpc.ext.foresight.blocks import blocks_encode, blocks_encode_many

    xs = [_field(shape, torch.float32, seed) for seed, shape in enumerate([(3, 1, 1), (5, 6, 37), (1, 1, 70), (2, 9, 4)])]
    xs[1][2, 3, 4] = float("nan")
    xs[2][0, 0, 5] = 3e30
    ebs = [0.5, 0.037, 0.01, 2.0]
    batch = blocks_encode_many([x.to(kernel_device) for x in xs], ebs, backend="triton", predictor=predictor)
    alone = [blocks_encode(x, eb, backend="torch", predictor=predictor) for x, eb in zip(xs, ebs, strict=True)]
    assert batch == alone
    assert [m["values"] for _, m in batch] == [0, 1, 1, 0]
    kept = blocks_encode_many([x.to(kernel_device) for x in xs], ebs, backend="triton", predictor=predictor,
                              on_device=True)  # for a device entropy stage: the same bytes, left on the device
    assert all(t.device == kernel_device and t.dtype == torch.uint8 for t, _ in kept)
    assert [(t.cpu().numpy().tobytes(), m) for t, m in kept] == alone


def test_block_codec_refuses_a_corrupt_payload():
    """Wrong length, a width above 32, an outlier position outside the field, a missing size: an InputError each."""
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.foresight.blocks import Layout, blocks_decode, blocks_encode

    x = _field((4, 5, 6), torch.float32)
    x[1, 2, 3] = float("inf")
    payload, meta = blocks_encode(x, 0.01, backend="torch")
    with pytest.raises(InputError, match="do not hold"):
        blocks_decode(payload[:-16], meta, (4, 5, 6), torch.float32, 0.01)
    wide = bytearray(payload)
    wide[0] = 33
    with pytest.raises(InputError, match="out of range"):
        blocks_decode(bytes(wide), meta, (4, 5, 6), torch.float32, 0.01)
    start = Layout.of(meta, 4).starts[4]
    far = bytearray(payload)
    far[start:start + 8] = (10**6).to_bytes(8, "little")
    with pytest.raises(InputError, match="out of range"):
        blocks_decode(bytes(far), meta, (4, 5, 6), torch.float32, 0.01)
    with pytest.raises(InputError, match="sizes are missing"):
        blocks_decode(payload, {}, (4, 5, 6), torch.float32, 0.01)
    with pytest.raises(InputError, match="unknown predictor"):
        blocks_decode(payload, {**meta, "predictor": "spline"}, (4, 5, 6), torch.float32, 0.01)
    with pytest.raises(InputError, match="empty"):
        blocks_encode(torch.zeros(0, 3), 0.01)
    with pytest.raises(InputError, match="predictor must be one of"):
        blocks_encode(x, 0.01, predictor="auto")
