"""The block codec: Lorenzo codes bit-packed in blocks of 32 (cuSZp's layout), one payload, either device.

Where :func:`.ops.lorenzo_encode` hands its residuals to zstd on the host, this codec finishes the
compression where the data is, so on a GPU the field never leaves the device and only the compressed
payload crosses to the host, once, into pinned memory:

1. **scan** (Triton ``_block_scan_kernel``): quantise, Lorenzo-predict and zigzag each value; per block of
   32 values its width ``w`` (bits of the widest code) and its outliers (a residual that needs more than
   32 bits, or a value the decoder would not bring within the bound: NaN, inf, huge ``|x| / e``);
2. **offsets**: inclusive prefix sums of the widths and of the outlier counts (``torch.cumsum``), and the
   one host sync of the encoder: the payload's size;
3. **pack** (``_block_pack_kernel``): recompute the codes and write the block's ``w`` bit planes (word
   ``p`` = bit ``p`` of its 32 codes) at its offset, its width byte, and its outliers' (index, residual,
   value) at theirs.

The payload (every region starts at a multiple of 16 bytes, zero padding between)::

    widths  uint8[blocks]  |  planes int32[sum of widths]  |  outlier index int64[k]
    outlier residual int64[k]  |  outlier value dtype[k]

Decoding is the reverse on the device that asks for it: ``_block_unpack_kernel`` rebuilds the residuals,
the outliers' residuals are scattered back, three integer prefix sums give the codes (Lorenzo) and one
multiply the values; outliers get their exact values.  The CPU builds the same bytes with NumPy's bit
(un)packing (``pack_planes``), so a payload written on either device decodes on the other to the same
values (tested bit for bit against the interpreted kernels).

Traffic per float32 value on the GPU: encode reads ``x`` twice (8 stencil loads each, from cache) and
writes the payload; decode reads the payload and writes 8 bytes (residual) + 8 (codes, three prefix sums)
+ 4 (values).  No floating-point work beyond the quantisation: the bound holds by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.hostsync import HostBudget

from .ops import as_volume, lorenzo_reconstruct

#: Host work of the CUDA path per field (``count_host_work`` on CPU tensors, ``tests/test_gpu_budgets.py``).
GPU_BUDGETS = {
    "blocks_encode": HostBudget("field", syncs=2, launches=6,
                                why="the payload's size, then the payload itself, cross to the host once each"),
    "blocks_decode": HostBudget("field", syncs=0, launches=10,
                                why="unpack, three prefix sums and the dequantisation; outliers scattered back"),
}


def _blocks(n: int) -> int:
    """Blocks of a field of ``n`` values (the kernels' module is imported on first use: start-up)."""
    from torchhpc.triton_kernels.foresight import PACK

    return -(-n // PACK)


def _align(n: int) -> int:
    """Regions start at multiples of 16 bytes: the kernels' pointers keep Triton's alignment hint."""
    return (n + 15) & ~15


@dataclass(frozen=True)
class Layout:
    """Byte ranges of the payload's regions for ``blocks`` blocks, ``words`` planes and ``outliers``."""

    blocks: int
    words: int
    outliers: int
    itemsize: int

    @property
    def starts(self) -> tuple[int, int, int, int, int, int]:
        """Start of widths, planes, outlier index, residual and value, and the total size."""
        w = _align(self.blocks)
        i = w + _align(4 * self.words)
        r = i + _align(8 * self.outliers)
        v = r + _align(8 * self.outliers)
        return 0, w, i, r, v, v + _align(self.itemsize * self.outliers)

    def views(self, buf: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """``(widths uint8, planes int32, index int64, residual int64, value dtype)`` views of ``buf``."""
        s = self.starts
        k = self.outliers
        return (buf[s[0]:s[0] + self.blocks], buf[s[1]:s[1] + 4 * self.words].view(torch.int32),
                buf[s[2]:s[2] + 8 * k].view(torch.int64), buf[s[3]:s[3] + 8 * k].view(torch.int64),
                buf[s[4]:s[4] + self.itemsize * k].view(dtype))


def _to_host(buf: torch.Tensor) -> bytes:
    """The payload's bytes: on CUDA one copy into pinned memory (torch caches the pinned blocks)."""
    if buf.device.type == "cuda":
        host = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
        host.copy_(buf, non_blocking=True)
        torch.cuda.current_stream(buf.device).synchronize()
        buf = host
    return buf.numpy().tobytes()


def blocks_encode(x: torch.Tensor, eb: float, backend: str = "auto") -> tuple[bytes, dict[str, int]]:
    """Compress ``x`` (float32/float64, any shape) with absolute bound ``eb``: ``(payload, meta)``.

    ``backend``: ``auto`` (the Triton kernels on CUDA, NumPy/torch elsewhere), ``triton`` or ``torch``;
    all give the same bytes.  ``meta`` (``blocks``, ``words``, ``outliers``) is what decoding needs
    besides the shape, dtype and bound.
    """
    if not eb > 0 or not math.isfinite(eb):
        raise InputError(f"error bound must be a finite number > 0, got {eb}")
    if x.numel() == 0:
        raise InputError(f"the field is empty (shape {tuple(x.shape)})")
    vol = x.reshape(as_volume(tuple(x.shape))).contiguous()
    n = vol.numel()
    nb = _blocks(n)
    name = resolve_backend(backend, x.device, choices=("torch", "triton"))
    if name == "triton":
        from torchhpc.triton_kernels.foresight import block_pack_triton, block_scan_triton

        width, nout = block_scan_triton(vol, eb)
        wend = torch.cumsum(width, 0, dtype=torch.int64)
        oend = torch.cumsum(nout, 0, dtype=torch.int64)
        words, outliers = torch.stack([wend[-1], oend[-1]]).tolist()  # the encoder's one sync: the size
        lay = Layout(nb, words, outliers, vol.element_size())
        buf = torch.zeros(lay.starts[-1], dtype=torch.uint8, device=x.device)  # zero padding: same bytes
        block_pack_triton(vol, eb, wend, oend, *lay.views(buf, vol.dtype))
        payload = _to_host(buf)
    else:
        from torchhpc.triton_kernels.foresight import block_codes_torch, pack_planes

        d, flag, u = block_codes_torch(vol.cpu(), eb)
        width, planes = pack_planes(u)
        idx = torch.nonzero(flag).reshape(-1)
        lay = Layout(nb, planes.numel(), idx.numel(), vol.element_size())
        buf = torch.zeros(lay.starts[-1], dtype=torch.uint8)
        for view, part in zip(lay.views(buf, vol.dtype), (width, planes, idx, d[idx], vol.cpu().reshape(-1)[idx]),
                              strict=True):
            view.copy_(part)
        payload = buf.numpy().tobytes()
    return payload, {"blocks": lay.blocks, "words": lay.words, "outliers": lay.outliers}


def blocks_decode(payload: bytes, meta: dict, shape: tuple[int, ...], dtype: torch.dtype, eb: float,
                  device: torch.device | str = "cpu", backend: str = "auto") -> torch.Tensor:
    """Inverse of :func:`blocks_encode` on ``device``: the ``shape``/``dtype`` tensor within ``eb``.

    The payload is checked on the host before it is used (widths at most 32 and summing to the planes'
    count, outlier indices inside the field): a corrupt file is an InputError, not a wrong field.
    """
    vol = as_volume(tuple(shape))
    n = int(np.prod(vol))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    try:
        lay = Layout(int(meta["blocks"]), int(meta["words"]), int(meta["outliers"]), itemsize)
    except (KeyError, TypeError, ValueError):
        raise InputError("corrupt payload: the block codec's sizes are missing from the header") from None
    if lay.blocks != _blocks(n) or min(lay.words, lay.outliers) < 0 or len(payload) != lay.starts[-1]:
        raise InputError(f"corrupt payload: {len(payload)} bytes do not hold {lay.blocks} blocks of a {n}-value "
                         f"field with {lay.words} planes and {lay.outliers} outliers")
    raw = np.frombuffer(payload, dtype=np.uint8)
    s = lay.starts
    widths = raw[:lay.blocks]
    index = raw[s[2]:s[2] + 8 * lay.outliers].view("<i8")
    if (widths.size and int(widths.max()) > 32) or int(widths.sum(dtype=np.int64)) != lay.words or (
            index.size and (int(index.min()) < 0 or int(index.max()) >= n)):
        raise InputError("corrupt payload: block widths or outlier indices out of range")
    device = torch.device(device)
    buf = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    if device.type != "cpu":
        buf = buf.to(device)  # the payload crosses once, host to device
    wbyte, words, oidx, od, ox = lay.views(buf, dtype)
    name = resolve_backend(backend, device, choices=("torch", "triton"))
    if name == "triton":
        from torchhpc.triton_kernels.foresight import block_unpack_triton

        d = block_unpack_triton(wbyte, torch.cumsum(wbyte, 0, dtype=torch.int64), words, n)
    else:
        from torchhpc.triton_kernels.foresight import unpack_planes

        d = unpack_planes(wbyte.cpu(), words.cpu(), n).to(device)
    if lay.outliers:
        d[oidx] = od
    q = lorenzo_reconstruct(d.reshape(vol))
    out = q.reshape(-1).to(torch.float64).mul_(2.0 * eb).to(dtype)
    if lay.outliers:
        out[oidx] = ox
    return out.reshape(shape)


# ----------------------------------------------------------------------------- the host's entropy stage

CHUNK = 1 << 20
"""Bytes per zstd frame of the entropy stage: frames are (de)compressed in parallel on the host's cores."""


def entropy_encode(payload: bytes, level: int) -> list[bytes]:
    """The packed payload as independent zstd frames of :data:`CHUNK` bytes, compressed on every core.

    Bit planes of low bits are near random, but the widths, the high planes of a wide block and the
    all-zero blocks of smooth regions are not: at level 1 this stage adds 10-90 % to the ratio for a few
    milliseconds per MB.
    """
    import zstandard

    chunks = [payload[i:i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
    out = zstandard.ZstdCompressor(level=level).multi_compress_to_buffer(chunks, threads=-1)
    return [out[i].tobytes() for i in range(len(out))]


def entropy_decode(frames: list[bytes]) -> bytes:
    """Inverse of :func:`entropy_encode`; InputError on a corrupt frame."""
    import zstandard

    try:
        out = zstandard.ZstdDecompressor().multi_decompress_to_buffer(frames, threads=-1)
    except zstandard.ZstdError as exc:
        raise InputError(f"corrupt zstd stream ({exc})") from None
    return b"".join(out[i].tobytes() for i in range(len(out)))


__all__ = ["CHUNK", "GPU_BUDGETS", "Layout", "blocks_decode", "blocks_encode", "entropy_decode", "entropy_encode"]
