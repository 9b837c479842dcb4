"""The numba kernels of seeding (keys, the counting-sort index) against the tensor ops (the reference)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("numba")


@pytest.mark.parametrize("pattern,step", [("1110100110011", 1), ("1101", 1), ("111", 3), ("11011", 2)])
def test_compiled_seed_keys_and_index_equal_tensor_ops(code_pair, pattern, step):
    """The compiled seed keys (masked bases, N and record walls break windows) and counting-sort index
    (sorted keys, word ends, offsets, presence; every step-th window) equal the tensor-op reference."""
    from torchhpc.ext.segalign.seeds import _build_index_torch, _seed_keys_torch, build_index, seed_keys

    t, q, _ = code_pair(4000, 7)
    for codes, (s, e) in ((t, (0, None)), (q, (123, 3456)), (q, (3990, 4000))):
        got = seed_keys(codes, pattern, s, e)
        e_ = codes.numel() if e is None else e
        ref = torch.full((e_ - s,), -1, dtype=torch.int64)
        last = min(e_, codes.numel() - len(pattern) + 1)
        if last > s:
            _seed_keys_torch(codes, pattern, s, last, ref)
        assert torch.equal(got, ref) and int((ref >= 0).sum()) >= (0 if s == 3990 else 1000)
    got, ref = build_index(t, pattern, step), _build_index_torch(seed_keys(t, pattern), pattern, step)
    assert got.offsets is not None and ref.offsets is not None
    assert got.keys is None and got.ends.dtype == got.offsets.dtype == torch.int32  # half of int64's bytes
    assert torch.equal(got.ends.to(torch.int64), ref.ends)
    assert torch.equal(got.offsets.to(torch.int64), ref.offsets)
    assert torch.equal(got.present, ref.present)


@pytest.mark.parametrize("pattern,step,parts", [("1110100110011", 1, 2), ("11011", 2, 3), ("111", 3, 2)])
def test_index_built_in_chunks_equals_one_pass(code_pair, monkeypatch, pattern, step, parts):
    """The target cut into chunks indexed side by side (masked bases, N and record walls straddling the
    cuts) gives the very table of the one-thread pass and of the tensor-op reference: word ends in
    key order, position order within a key."""
    from torchhpc.ext.segalign import index_kernels
    from torchhpc.ext.segalign.seeds import _build_index_torch, seed_keys

    monkeypatch.setattr(index_kernels, "INDEX_CHUNK_MIN_WINDOWS", 500)
    t, _, _ = code_pair(4000, 11)
    chunked = index_kernels.count_index_numba(t, pattern, step, threads=parts)
    calls = []
    monkeypatch.setattr(index_kernels, "_count_index_chunks", lambda *a: calls.append(a))
    one = index_kernels.count_index_numba(t, pattern, step, threads=parts)
    assert len(calls) == 1  # the chunked build is what ran above
    one = index_kernels.count_index_numba(t, pattern, step, threads=1)
    ref = _build_index_torch(seed_keys(t, pattern), pattern, step)
    for got, want, ref_ in zip(chunked, one, (ref.ends, ref.offsets, ref.present), strict=True):
        assert torch.equal(got, want) and torch.equal(got.to(ref_.dtype), ref_)
