"""The block codec's bit-plane (un)packing on the CPU, compiled (numba): the bytes of the Triton kernels.

:func:`torchhpc.triton_kernels.foresight.pack_planes` (NumPy's ``unpackbits``/``packbits`` on all 32 planes of
every block) is the reference; here each block's planes are built only up to its width, blocks in parallel
over the cores: per block of 32 codes of width ``w``, ``32 w`` bit moves instead of a 32 x 32 bit matrix
through byte arrays.  Without numba the reference runs (same bytes, ~10x slower).
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.dispatch import numba_available

if numba_available():
    from numba import njit, prange

    @njit(cache=True, parallel=True)
    def _widths(u):
        """Bits of each block's widest code: ``(blocks, 32)`` uint32 -> uint8."""
        width = np.zeros(u.shape[0], np.uint8)
        for b in prange(u.shape[0]):
            top = u[b, 0]
            for lane in range(1, 32):
                top = max(top, u[b, lane])
            w = 0
            while w < 32 and (top >> np.uint32(w)) != 0:
                w += 1
            width[b] = w
        return width

    @njit(cache=True, parallel=True)
    def _pack(u, width, start, words):
        """Word ``start[b] + p`` = bit ``p`` of block ``b``'s 32 codes (bit ``l`` = lane ``l``), ``p < width[b]``."""
        for b in prange(u.shape[0]):
            for p in range(width[b]):
                word = np.uint32(0)
                for lane in range(32):
                    word |= ((u[b, lane] >> np.uint32(p)) & np.uint32(1)) << np.uint32(lane)
                words[start[b] + p] = word

    @njit(cache=True, parallel=True)
    def _unpack(width, start, words, u):
        """Inverse of :func:`_pack` into the zeroed ``(blocks, 32)`` uint32 ``u``."""
        for b in prange(u.shape[0]):
            for p in range(width[b]):
                word = words[start[b] + p]
                for lane in range(32):
                    u[b, lane] |= ((word >> np.uint32(lane)) & np.uint32(1)) << np.uint32(p)


def pack_planes(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(width uint8, words int32)`` of ``(blocks, 32)`` codes below 2^32 (the reference's result)."""
    if not numba_available():
        from torchhpc.triton_kernels.foresight import pack_planes as reference

        return reference(u)
    u32 = np.ascontiguousarray(u.numpy().astype(np.uint32))
    width = _widths(u32)
    ends = np.cumsum(width, dtype=np.int64)
    words = np.empty(int(ends[-1]) if ends.size else 0, np.uint32)
    _pack(u32, width, ends - width, words)
    return torch.from_numpy(width), torch.from_numpy(words.view(np.int32))


def unpack_planes(width: torch.Tensor, words: torch.Tensor, total: int) -> torch.Tensor:
    """Inverse of :func:`pack_planes` and the zigzag: the first ``total`` int64 residuals."""
    if not numba_available():
        from torchhpc.triton_kernels.foresight import unpack_planes as reference

        return reference(width, words, total)
    w = width.numpy()
    ends = np.cumsum(w, dtype=np.int64)
    u = np.zeros((len(w), 32), np.uint32)
    _unpack(w, ends - w, words.numpy().view(np.uint32), u)
    r = torch.from_numpy(u.reshape(-1)[:total].astype(np.int64))
    return (r >> 1) ^ -(r & 1)


__all__ = ["pack_planes", "unpack_planes"]
