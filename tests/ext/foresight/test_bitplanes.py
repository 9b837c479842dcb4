"""The compiled bit-plane (un)packing of the block codec equals NumPy's reference on every width."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.foresight.bitplanes import pack_planes, unpack_planes
from torchhpc.triton_kernels import foresight as reference

pytest.importorskip("numba")


def test_compiled_packing_equals_the_numpy_reference():
    """Blocks of every width 0..32 (all-zero blocks, the widest code 2^32 - 1, random widths), packed and
    unpacked: the same widths and words as NumPy's unpackbits/packbits, and back to the codes."""
    rng = np.random.default_rng(0)
    widths = np.concatenate([np.arange(33), rng.integers(0, 33, 200)])
    top = np.where(widths == 0, 0, (np.uint64(1) << widths.astype(np.uint64)) - np.uint64(1))
    u = (rng.integers(0, 2**32, (len(widths), 32), dtype=np.uint64) & top[:, None]).astype(np.int64)
    u[np.arange(len(widths)), rng.integers(0, 32, len(widths))] = top.astype(np.int64)  # each block at its width
    codes = torch.from_numpy(u)
    width, words = pack_planes(codes)
    ref_width, ref_words = reference.pack_planes(codes)
    assert torch.equal(width, ref_width) and torch.equal(words, ref_words)
    assert width.tolist() == widths.tolist()
    total = codes.numel() - 5  # a field that ends inside its last block
    r = unpack_planes(width, words, total)
    assert torch.equal(r, reference.unpack_planes(width, words, total))
    flat = codes.reshape(-1)[:total]
    assert torch.equal(r, (flat >> 1) ^ -(flat & 1))
