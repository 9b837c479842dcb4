"""The block codec: prediction residuals bit-packed in blocks of 32 (cuSZp's layout), one payload, either device.

Where :func:`.ops.lorenzo_encode` hands its residuals to zstd on the host, this codec finishes the
compression where the data is, so on a GPU the field never leaves the device and only the compressed
payload crosses to the host, once, into pinned memory:

1. **residuals**: Lorenzo is fused into the kernels below (quantise and predict each value from its 8-corner
   stencil); the multilevel interpolation predictor (``interp``/``cubic``, SZ3's) runs as integer tensor ops
   on the device (:func:`.ops.interp_residuals`) and hands its residuals and the value-outlier flags over;
2. **scan** (Triton ``_block_scan_kernel``): per block of 32 residuals its width ``w`` (bits of the widest
   zigzag code), its residuals too wide for 32 bits, and its value outliers (a value the decoder would not
   bring within the bound: NaN, inf, huge ``|x| / e``);
3. **offsets**: inclusive prefix sums of the three counts (one ``torch.cumsum``), and the one host sync of
   the encoder: the payload's size;
4. **pack** (``_block_pack_kernel``): write the block's ``w`` bit planes (word ``p`` = bit ``p`` of its 32
   codes) at its offset, its width byte, and its outliers at theirs.

The payload (every region starts at a multiple of 16 bytes, zero padding between)::

    widths uint8[blocks] | planes int32[sum of widths] | wide residual: position int64[k], value int64[k]
    | value outlier: index int64[m], value dtype[m]

Decoding is the reverse on the device that asks for it: ``_block_unpack_kernel`` rebuilds the residuals,
the wide ones are scattered back, three integer prefix sums (Lorenzo) or the levels of the interpolation
give the codes, one multiply the values, and the value outliers their exact values.  The CPU builds the
same bytes with NumPy's bit (un)packing (``pack_planes``), so a payload written on either device decodes on
the other to the same values (tested bit for bit against the interpreted kernels).

Traffic per float32 value on the GPU (Lorenzo): encode reads ``x`` twice (8 stencil loads each, from cache)
and writes the payload; decode reads the payload and writes 8 bytes (residual) + 8 (codes, three prefix
sums) + 4 (values).  The interpolation adds a few passes over the int64 codes.  No floating-point work
beyond the quantisation: the bound holds by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.hostsync import HostBudget

from .ops import as_volume, interp_reconstruct, interp_residuals, lorenzo_reconstruct

#: Host work of the CUDA path (``count_host_work`` on CPU tensors, ``tests/test_gpu_budgets.py``): per field with
#: Lorenzo; per step of the interpolation (``_interp_plan``: three per halving of the largest side) on top of
#: a fixed part per field with ``interp``/``cubic``.
GPU_BUDGETS = {
    "blocks_encode": HostBudget("field", syncs=2, launches=6,
                                why="the payload's size, then the payload itself, cross to the host once each"),
    "blocks_decode": HostBudget("field", syncs=0, launches=10,
                                why="unpack, three prefix sums and the dequantisation; outliers scattered back"),
    "blocks_encode_interp": HostBudget("interpolation step", syncs=0, launches=7, fixed_syncs=2, fixed_launches=16,
                                       why="each step's prediction is a few integer tensor ops"),
    "blocks_decode_interp": HostBudget("interpolation step", syncs=0, launches=7, fixed_launches=12,
                                       why="each step adds its residuals to its prediction in place"),
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
    """Byte ranges of the payload's regions for ``blocks`` blocks, ``words`` planes, ``wide`` residuals too
    wide for 32 bits and ``values`` kept exactly, of a field of ``itemsize``-byte values."""

    blocks: int
    words: int
    wide: int
    values: int
    itemsize: int

    @property
    def starts(self) -> tuple[int, ...]:
        """Start of each of the six regions, and the total size."""
        sizes = (self.blocks, 4 * self.words, 8 * self.wide, 8 * self.wide, 8 * self.values, self.itemsize * self.values)
        out = [0]
        for size in sizes:
            out.append(out[-1] + _align(size))
        return tuple(out)

    def views(self, buf: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """``(widths uint8, planes int32, wide position int64, wide value int64, value index int64, value
        dtype)`` views of ``buf``."""
        s = self.starts
        return (buf[s[0]:s[0] + self.blocks], buf[s[1]:s[1] + 4 * self.words].view(torch.int32),
                buf[s[2]:s[2] + 8 * self.wide].view(torch.int64), buf[s[3]:s[3] + 8 * self.wide].view(torch.int64),
                buf[s[4]:s[4] + 8 * self.values].view(torch.int64),
                buf[s[5]:s[5] + self.itemsize * self.values].view(dtype))

    @classmethod
    def of(cls, meta: dict, itemsize: int) -> Layout:
        return cls(int(meta["blocks"]), int(meta["words"]), int(meta["wide"]), int(meta["values"]), itemsize)


def _to_host(buf: torch.Tensor) -> bytes:
    """The payload's bytes: on CUDA one copy into pinned memory (torch caches the pinned blocks)."""
    if buf.device.type == "cuda":
        host = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
        host.copy_(buf, non_blocking=True)
        torch.cuda.current_stream(buf.device).synchronize()
        buf = host
    return buf.numpy().tobytes()


BLOCK_PREDICTORS = ("lorenzo", "interp", "cubic")


def blocks_encode(x: torch.Tensor, eb: float, backend: str = "auto", predictor: str = "lorenzo"
                  ) -> tuple[bytes, dict[str, int | str]]:
    """Compress ``x`` (float32/float64, any shape) with absolute bound ``eb``: ``(payload, meta)``.

    Args:
        x: the field.
        eb: the absolute bound ``e > 0``.
        backend: ``auto`` (the Triton kernels on CUDA, NumPy/torch elsewhere), ``triton`` or ``torch``;
            all give the same bytes.
        predictor: ``lorenzo`` (fused into the kernels), ``interp`` or ``cubic`` (SZ3's multilevel
            interpolation, linear or cubic, as tensor ops on ``x``'s device).

    Returns:
        The payload and ``meta`` (``predictor``, ``blocks``, ``words``, ``wide``, ``values``): what decoding
        needs besides the shape, dtype and bound.
    """
    if not eb > 0 or not math.isfinite(eb):
        raise InputError(f"error bound must be a finite number > 0, got {eb}")
    if x.numel() == 0:
        raise InputError(f"the field is empty (shape {tuple(x.shape)})")
    if predictor not in BLOCK_PREDICTORS:
        raise InputError(f"the block codec's predictor must be one of {', '.join(BLOCK_PREDICTORS)}; got {predictor!r}")
    from torchhpc.triton_kernels.foresight import quantize_torch, value_outliers_torch

    vol = x.reshape(as_volume(tuple(x.shape))).contiguous()
    nb = _blocks(vol.numel())
    name = resolve_backend(backend, x.device, choices=("torch", "triton"))
    r = vflag = None
    if predictor != "lorenzo":  # the interpolation's residuals, on x's device
        q = quantize_torch(vol, eb)
        vflag = value_outliers_torch(vol, q, eb)
        r = interp_residuals(q, cubic=predictor == "cubic")
        del q
    if name == "triton":
        from torchhpc.triton_kernels.foresight import block_pack_triton, block_scan_triton

        ends = torch.cumsum(torch.stack(block_scan_triton(vol, eb, r, vflag)), 1, dtype=torch.int64)
        words, wide, values = ends[:, -1].tolist()  # the encoder's one sync: the payload's size
        lay = Layout(nb, words, wide, values, vol.element_size())
        buf = torch.zeros(lay.starts[-1], dtype=torch.uint8, device=x.device)  # zero padding: same bytes
        block_pack_triton(vol, eb, ends, lay.views(buf, vol.dtype), r, vflag)
        payload = _to_host(buf)
    else:
        from torchhpc.triton_kernels.foresight import block_codes_torch, lorenzo_quantize_torch, pack_planes

        cpu = vol.cpu()
        if r is None:
            q, d = lorenzo_quantize_torch(cpu, eb)
            r, vflag = d.reshape(-1), value_outliers_torch(cpu, q, eb)
            del q, d
        r, vflag = r.cpu(), vflag.cpu()
        over, u = block_codes_torch(r)
        width, planes = pack_planes(u)
        ridx, vidx = torch.nonzero(over).reshape(-1), torch.nonzero(vflag).reshape(-1)
        lay = Layout(nb, planes.numel(), ridx.numel(), vidx.numel(), vol.element_size())
        buf = torch.zeros(lay.starts[-1], dtype=torch.uint8)
        parts = (width, planes, ridx, r[ridx], vidx, cpu.reshape(-1)[vidx])
        for view, part in zip(lay.views(buf, vol.dtype), parts, strict=True):
            view.copy_(part)
        payload = buf.numpy().tobytes()
    return payload, {"predictor": predictor, "blocks": lay.blocks, "words": lay.words, "wide": lay.wide,
                     "values": lay.values}


def blocks_decode(payload: bytes, meta: dict, shape: tuple[int, ...], dtype: torch.dtype, eb: float,
                  device: torch.device | str = "cpu", backend: str = "auto") -> torch.Tensor:
    """Inverse of :func:`blocks_encode` on ``device``: the ``shape``/``dtype`` tensor within ``eb``.

    The payload is checked on the host before it is used (widths at most 32 and summing to the planes'
    count, outlier positions inside the field): a corrupt file is an InputError, not a wrong field.
    """
    vol = as_volume(tuple(shape))
    n = int(np.prod(vol))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    try:
        lay = Layout.of(meta, itemsize)
        predictor = meta.get("predictor", "lorenzo")
    except (KeyError, TypeError, ValueError):
        raise InputError("corrupt payload: the block codec's sizes are missing from the header") from None
    if predictor not in BLOCK_PREDICTORS:
        raise InputError(f"corrupt payload: unknown predictor {predictor!r}")
    if lay.blocks != _blocks(n) or min(lay.words, lay.wide, lay.values) < 0 or len(payload) != lay.starts[-1]:
        raise InputError(f"corrupt payload: {len(payload)} bytes do not hold {lay.blocks} blocks of a {n}-value "
                         f"field with {lay.words} planes and {lay.wide + lay.values} outliers")
    raw = np.frombuffer(payload, dtype=np.uint8)
    s = lay.starts
    widths = raw[:lay.blocks]
    positions = [raw[s[i]:s[i] + 8 * k].view("<i8") for i, k in ((2, lay.wide), (4, lay.values))]
    if (widths.size and int(widths.max()) > 32) or int(widths.sum(dtype=np.int64)) != lay.words or any(
            p.size and (int(p.min()) < 0 or int(p.max()) >= n) for p in positions):
        raise InputError("corrupt payload: block widths or outlier positions out of range")
    device = torch.device(device)
    buf = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    if device.type != "cpu":
        buf = buf.to(device)  # the payload crosses once, host to device
    wbyte, words, ridx, rval, vidx, vval = lay.views(buf, dtype)
    name = resolve_backend(backend, device, choices=("torch", "triton"))
    if name == "triton":
        from torchhpc.triton_kernels.foresight import block_unpack_triton

        r = block_unpack_triton(wbyte, torch.cumsum(wbyte, 0, dtype=torch.int64), words, n)
    else:
        from torchhpc.triton_kernels.foresight import unpack_planes

        r = unpack_planes(wbyte.cpu(), words.cpu(), n).to(device)
    if lay.wide:
        r[ridx] = rval
    if predictor == "lorenzo":
        q = lorenzo_reconstruct(r.reshape(vol))
    else:
        q = interp_reconstruct(r, vol, cubic=predictor == "cubic")
    out = q.reshape(-1).to(torch.float64).mul_(2.0 * eb).to(dtype)
    if lay.values:
        out[vidx] = vval
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


__all__ = ["BLOCK_PREDICTORS", "CHUNK", "GPU_BUDGETS", "Layout", "blocks_decode", "blocks_encode", "entropy_decode", "entropy_encode"]
