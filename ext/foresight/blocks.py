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
same bytes with numba (:mod:`.bitplanes`; NumPy's bit (un)packing without it), so a payload written on
either device decodes on the other to the same values (tested bit for bit against the interpreted kernels).

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

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError

from .ops import as_volume, interp_reconstruct, interp_residuals, lorenzo_reconstruct

#: Host work of the CUDA path (``count_host_work`` on CPU tensors, ``tests/test_gpu_budgets.py``): per field with
#: Lorenzo; per step of the interpolation (``_interp_plan``: three per halving of the largest side) on top of
#: a fixed part per field with ``interp``/``cubic``.
GPU_BUDGETS = {
    "blocks_encode": HostBudget("field", syncs=2, launches=6,
                                why="the payload's size, then the payload itself, cross to the host once each"),
    "blocks_decode": HostBudget("field", syncs=0, launches=10,
                                why="unpack, three prefix sums and the dequantisation; outliers scattered back"),
    "blocks_encode_batch": HostBudget("batch", syncs=2, launches=6,
                                      why="any number of fields: one concatenation, two kernels, one payload"),
    "blocks_encode_on_device": HostBudget("field", syncs=0, launches=7, fixed_syncs=1, fixed_launches=6,
                                          why="only the payloads' size crosses; each field's payload is cut from "
                                              "the batch's where it is (a zeroed buffer, six region copies)"),
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


def payload_layout(meta: dict, dtype: torch.dtype, shape: tuple[int, ...] | None = None) -> Layout:
    """The :class:`Layout` a header describes; InputError where its sizes are missing or not counts, or (with
    the field's ``shape``) are not those of such a field: its blocks, at most 32 planes a block, at most one
    outlier of each kind a value.  Checked before anything the size of the payload is allocated."""
    try:
        lay = Layout.of(meta, torch.empty(0, dtype=dtype).element_size())
    except (KeyError, TypeError, ValueError, OverflowError):
        raise InputError("corrupt payload: the block codec's sizes are missing from the header") from None
    if shape is not None:
        n = math.prod(as_volume(tuple(shape)))
        if (lay.blocks != _blocks(n) or not 0 <= lay.words <= 32 * lay.blocks or not 0 <= lay.wide <= n
                or not 0 <= lay.values <= n):
            raise InputError(f"corrupt payload: {lay.blocks} blocks, {lay.words} planes and {lay.wide + lay.values} "
                             f"outliers are not those of a {n}-value field")
    return lay


def _on(device: torch.device):
    """Launch on ``device`` (Triton launches on the current CUDA device, whatever its arguments' device)."""
    import contextlib

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


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
    return blocks_encode_many([x], [eb], backend, predictor)[0]


def blocks_encode_many(xs: list[torch.Tensor], ebs: list[float], backend: str = "auto", predictor: str = "lorenzo",
                       on_device: bool = False) -> list[tuple[bytes | torch.Tensor, dict[str, int | str]]]:
    """:func:`blocks_encode` of several fields of one dtype on one device, each with its bound, in one batch:
    on the Triton path two kernel launches and one host sync for all of them, the payloads crossing to the
    host together; each field's payload is the one :func:`blocks_encode` writes for it alone.

    ``on_device``: each payload is returned as a uint8 tensor on the fields' CUDA device instead of bytes
    (for an entropy stage on the device, :func:`.entropy.device_frames`); the Triton path only."""
    if not xs or len(xs) != len(ebs):
        raise InputError(f"give one bound per field: {len(xs)} fields, {len(ebs)} bounds")
    for x, eb in zip(xs, ebs, strict=True):
        if not eb > 0 or not math.isfinite(eb):
            raise InputError(f"error bound must be a finite number > 0, got {eb}")
        if x.numel() == 0:
            raise InputError(f"the field is empty (shape {tuple(x.shape)})")
        if x.dtype != xs[0].dtype or x.device != xs[0].device:
            raise InputError(f"a batch holds fields of one dtype on one device: {x.dtype} on {x.device} "
                             f"beside {xs[0].dtype} on {xs[0].device}")
    if predictor not in BLOCK_PREDICTORS:
        raise InputError(f"the block codec's predictor must be one of {', '.join(BLOCK_PREDICTORS)}; got {predictor!r}")
    vols = [x.reshape(as_volume(tuple(x.shape))).contiguous() for x in xs]
    if resolve_backend(backend, xs[0].device, choices=("torch", "triton")) == "torch":
        if on_device:
            raise InputError("payloads stay on the device only on the Triton path (backend triton, a CUDA field)")
        return [_encode_numpy(v.cpu(), eb, predictor) for v, eb in zip(vols, ebs, strict=True)]
    with _on(xs[0].device):
        return _encode_batch(vols, ebs, predictor, on_device)


def _encode_batch(vols: list[torch.Tensor], ebs: list[float], predictor: str, on_device: bool = False
                  ) -> list[tuple[bytes | torch.Tensor, dict[str, int | str]]]:
    """The Triton path of :func:`blocks_encode_many` (``on_device``: the payloads stay where they are)."""
    from torchhpc.triton_kernels.foresight import block_pack_triton, block_scan_triton, block_table

    flat = torch.cat([v.reshape(-1) for v in vols]) if len(vols) > 1 else vols[0].reshape(-1)
    r = vflag = None
    if predictor != "lorenzo":  # the interpolation's residuals, on the fields' device
        parts = [_interp_parts(v, eb, predictor) for v, eb in zip(vols, ebs, strict=True)]
        r, vflag = (torch.cat(p) if len(p) > 1 else p[0] for p in zip(*parts, strict=True))
    table = block_table([tuple(v.shape) for v in vols], ebs, flat.device)
    ends = torch.cumsum(block_scan_triton(flat, table, r, vflag), 1, dtype=torch.int64)
    last = [f + c - 1 for f, c in zip(table.first, table.count, strict=True)]
    # the encoder's one sync: where each field's planes and outliers end
    cuts = ends[:, torch.tensor(last, device=flat.device)].tolist()
    lay = Layout(table.blocks, cuts[0][-1], cuts[1][-1], cuts[2][-1], flat.element_size())
    buf = torch.zeros(lay.starts[-1], dtype=torch.uint8, device=flat.device)  # zero padding: same bytes
    block_pack_triton(flat, table, ends, lay.views(buf, flat.dtype), r, vflag)
    payload = buf if on_device else _to_host(buf)
    if len(vols) == 1:
        return [(payload, _meta(predictor, lay))]
    out = []
    before = (0, 0, 0)
    for f, (first, count) in enumerate(zip(table.first, table.count, strict=True)):
        upto = (cuts[0][f], cuts[1][f], cuts[2][f])
        out.append(_cut(payload, lay, first, count, before, upto, predictor))
        before = upto
    return out


def _interp_parts(vol: torch.Tensor, eb: float, predictor: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The interpolation's residuals of ``vol`` (flat int64, its level order) and its value outliers (flat bool)."""
    from torchhpc.triton_kernels.foresight import quantize_torch, value_outliers_torch

    q = quantize_torch(vol, eb)
    return interp_residuals(q, cubic=predictor == "cubic"), value_outliers_torch(vol, q, eb)


def _meta(predictor: str, lay: Layout) -> dict[str, int | str]:
    return {"predictor": predictor, "blocks": lay.blocks, "words": lay.words, "wide": lay.wide, "values": lay.values}


def _cut(payload: bytes | torch.Tensor, lay: Layout, first: int, count: int, before: tuple[int, int, int],
         upto: tuple[int, int, int], predictor: str) -> tuple[bytes | torch.Tensor, dict[str, int | str]]:
    """One field's payload out of a batch's (bytes, or a uint8 tensor where it stays): its blocks ``first ..
    first + count``, its planes and outliers between the batch's running totals ``before`` and ``upto``
    (words, wide residuals, value outliers)."""
    one = Layout(count, upto[0] - before[0], upto[1] - before[1], upto[2] - before[2], lay.itemsize)
    src, dst = lay.starts, one.starts
    tensor = isinstance(payload, torch.Tensor)
    out = torch.zeros(dst[-1], dtype=torch.uint8, device=payload.device) if tensor else bytearray(dst[-1])
    ranges = ((first, count), (4 * before[0], 4 * one.words), (8 * before[1], 8 * one.wide),
              (8 * before[1], 8 * one.wide), (8 * before[2], 8 * one.values),
              (lay.itemsize * before[2], lay.itemsize * one.values))
    for region, (offset, size) in enumerate(ranges):
        out[dst[region]:dst[region] + size] = payload[src[region] + offset:src[region] + offset + size]
    return (out if tensor else bytes(out)), _meta(predictor, one)


def _encode_numpy(vol: torch.Tensor, eb: float, predictor: str) -> tuple[bytes, dict[str, int | str]]:
    """The CPU's block codec: the kernels' bytes from torch ops and NumPy's bit (un)packing."""
    from torchhpc.triton_kernels.foresight import (
        block_codes_torch,
        lorenzo_quantize_torch,
        value_outliers_torch,
    )

    from .bitplanes import pack_planes

    if predictor == "lorenzo":
        q, d = lorenzo_quantize_torch(vol, eb)
        r, vflag = d.reshape(-1), value_outliers_torch(vol, q, eb)
        del q, d
    else:
        r, vflag = _interp_parts(vol, eb, predictor)
    over, u = block_codes_torch(r)
    width, planes = pack_planes(u)
    ridx, vidx = torch.nonzero(over).reshape(-1), torch.nonzero(vflag).reshape(-1)
    lay = Layout(_blocks(vol.numel()), planes.numel(), ridx.numel(), vidx.numel(), vol.element_size())
    buf = torch.zeros(lay.starts[-1], dtype=torch.uint8)
    parts = (width, planes, ridx, r[ridx], vidx, vol.reshape(-1)[vidx])
    for view, part in zip(lay.views(buf, vol.dtype), parts, strict=True):
        view.copy_(part)
    return buf.numpy().tobytes(), _meta(predictor, lay)


def blocks_decode(payload: bytes | torch.Tensor, meta: dict, shape: tuple[int, ...], dtype: torch.dtype, eb: float,
                  device: torch.device | str = "cpu", backend: str = "auto") -> torch.Tensor:
    """Inverse of :func:`blocks_encode` on ``device``: the ``shape``/``dtype`` tensor within ``eb``.

    ``payload``: its bytes, or a uint8 CPU tensor holding them (pinned, for a CUDA ``device``: it is copied
    to the device as it is, without staging; the tensor is used, not copied, on the CPU).  The payload is
    checked on the host before it is used (widths at most 32 and summing to the planes' count, outlier
    positions inside the field): a corrupt file is an InputError, not a wrong field.
    """
    vol = as_volume(tuple(shape))
    n = int(np.prod(vol))
    if n == 0 or isinstance(eb, bool) or not isinstance(eb, (int, float)) or not (math.isfinite(eb) and eb > 0):
        raise InputError(f"corrupt header: a field of shape {tuple(shape)} with bound {eb!r}")
    eb = float(eb)
    lay = payload_layout(meta, dtype, shape)
    predictor = meta.get("predictor", "lorenzo")
    if predictor not in BLOCK_PREDICTORS:
        raise InputError(f"corrupt payload: unknown predictor {predictor!r}")
    if len(payload) != lay.starts[-1]:
        raise InputError(f"corrupt payload: {len(payload)} bytes do not hold {lay.blocks} blocks of a {n}-value "
                         f"field with {lay.words} planes and {lay.wide + lay.values} outliers")
    raw = payload.numpy() if isinstance(payload, torch.Tensor) else np.frombuffer(payload, dtype=np.uint8)
    s = lay.starts
    widths = raw[:lay.blocks]
    positions = [raw[s[i]:s[i] + 8 * k].view("<i8") for i, k in ((2, lay.wide), (4, lay.values))]
    if (widths.size and int(widths.max()) > 32) or int(widths.sum(dtype=np.int64)) != lay.words or any(
            p.size and (int(p.min()) < 0 or int(p.max()) >= n) for p in positions):
        raise InputError("corrupt payload: block widths or outlier positions out of range")
    device = torch.device(device)
    with _on(device):
        return _decode(payload, lay, predictor, vol, n, shape, dtype, eb, device, backend)


def _decode(payload, lay, predictor, vol, n, shape, dtype, eb, device, backend) -> torch.Tensor:
    buf = payload if isinstance(payload, torch.Tensor) else torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    if device.type != "cpu":  # the payload crosses once, host to device (from pinned memory: asynchronously)
        buf = buf.to(device, non_blocking=buf.is_pinned())
    wbyte, words, ridx, rval, vidx, vval = lay.views(buf, dtype)
    name = resolve_backend(backend, device, choices=("torch", "triton"))
    if name == "triton":
        from torchhpc.triton_kernels.foresight import block_unpack_triton

        r = block_unpack_triton(wbyte, torch.cumsum(wbyte, 0, dtype=torch.int64), words, n)
    else:
        from .bitplanes import unpack_planes

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


__all__ = ["BLOCK_PREDICTORS", "GPU_BUDGETS", "Layout", "blocks_decode", "blocks_encode", "blocks_encode_many",
           "payload_layout"]
