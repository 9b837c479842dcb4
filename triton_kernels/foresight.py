"""Triton kernel for foresight: the prediction + quantisation stage of our error-bounded compressor.

The compressor quantises first and predicts second ("dual quantisation", as cuSZ does), so that every
element is independent and the stage is one parallel pass::

    q[i, j, k] = round(x[i, j, k] / (2 e))                        (linear quantisation, |x - 2 e q| <= e)
    d[i, j, k] = sum_{a, b, c in {0, 1}} (-1)^(a + b + c) q[i - a, j - b, k - c]   (3D Lorenzo residual)

with ``q`` outside the grid taken as 0.  ``d`` is the mixed finite difference of ``q`` along the three
axes, so the decoder recovers ``q`` exactly with three integer prefix sums (``torch.cumsum``) and the
whole error is the quantisation error ``|x - 2 e q| <= e``.  A value whose ``|x / 2e|`` is not below
2^40 (or that is NaN/inf) gets ``q = 0``; the caller stores it losslessly as an outlier.

Kernel (top to bottom, as in Triton's tutorials):

* ``_lorenzo_quantize_kernel`` — one program per ``BLOCK`` flat elements of the ``(N0, N1, N2)`` volume:
  offsets → (i, j, k) → for each of the 8 Lorenzo corners: load ``x``, quantise in fp64, add with its
  sign → store ``q`` and ``d`` (int64).

``lorenzo_quantize_torch`` is the torch twin (the CPU path and the test reference); the dispatch lives
in ``torchhpc.ext.foresight.ops``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

QUANT_LIMIT = float(2**40)
"""``|x / 2e|`` at or above this is not quantised (the value becomes a lossless outlier)."""

EXACT = {"enable_fp_fusion": False}
"""Launch options of every kernel here: the codes and outlier flags must be the torch twin's, bit for bit
(one format on both devices; every value within the bound), so no ``a * b + c`` may be contracted into one
fused multiply-add on the GPU: ``x / 2e + 1/2`` would round once (a value at exactly ``-e`` gets code -1,
not 0) and ``q * 2e - x`` would be checked unrounded (values that decode one ulp off the bound kept as
codes).  The interpreter rounds every step, so only the compiled PTX shows it (``tests/triton_kernels/test_sm90.py``)."""


@triton.jit
def _quantize(x, inv2e, LIMIT: tl.constexpr):
    # fp64 so that q = floor(x / 2e + 1/2) is the same number the torch twin computes (inv2e is fp64)
    xf = x.to(tl.float64) * inv2e
    ok = tl.abs(xf) < LIMIT  # false for NaN and inf
    return tl.where(ok, tl.floor(xf + 0.5), 0.0).to(tl.int64)


@triton.jit
def _lorenzo_residual(x_ptr, offs, mask, inv2e, N1, N2, LIMIT: tl.constexpr):
    """``(q, d)`` at the flat offsets ``offs`` (any shape): the code of each element and its 3D Lorenzo
    residual, from the 8 corners of the stencil, each quantised in fp64 and summed with sign (-1)^(a+b+c)."""
    plane = N1.to(tl.int64) * N2
    i = offs // plane
    j = (offs // N2) % N1
    k = offs % N2
    d = offs * 0
    q0 = offs * 0
    for a in tl.static_range(2):
        for b in tl.static_range(2):
            for c in tl.static_range(2):
                ok = mask & (i >= a) & (j >= b) & (k >= c)
                x = tl.load(x_ptr + offs - a * plane - b * N2 - c, mask=ok, other=0.0)
                q = tl.where(ok, _quantize(x, inv2e, LIMIT), 0)
                if (a + b + c) % 2 == 0:
                    d += q
                else:
                    d -= q
                if a + b + c == 0:
                    q0 = q
    return q0, d


# The sizes are runtime values: a dimension of 1 (every 1-D and 2-D field is viewed as (1, N1, N2)) would
# otherwise become a constexpr, with no .to(); and one compiled kernel serves every shape.
@triton.jit(do_not_specialize=["N0", "N1", "N2"])
def _lorenzo_quantize_kernel(
    x_ptr,  # (N0, N1, N2) contiguous float32/float64 input
    q_ptr,  # (N0, N1, N2) int64 quantisation codes (out)
    d_ptr,  # (N0, N1, N2) int64 Lorenzo residuals (out)
    inv2e_ptr,  # (1,) fp64: 1 / (2 e) (a Python float argument would arrive as fp32)
    N0,
    N1,
    N2,
    LIMIT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # 1. program id -> flat offsets and mask
    pid = tl.program_id(0)
    inv2e = tl.load(inv2e_ptr)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    total = N0.to(tl.int64) * N1 * N2
    mask = offs < total
    # 2. the codes and their Lorenzo residuals
    q0, d = _lorenzo_residual(x_ptr, offs, mask, inv2e, N1, N2, LIMIT)
    # 3. store codes and residuals
    tl.store(q_ptr + offs, q0, mask=mask)
    tl.store(d_ptr + offs, d, mask=mask)


def lorenzo_quantize_triton(x: torch.Tensor, eb: float, block: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise ``x`` with absolute bound ``eb`` and take its 3D Lorenzo residual (the Triton kernel).

    Args:
        x: ``(N0, N1, N2)`` float32 or float64 (any 1-3D tensor is viewed as 3D by the caller).
        eb: the absolute error bound ``e > 0``.
        block: elements per program.

    Returns:
        ``(q, d)``: int64 codes and residuals, both ``(N0, N1, N2)``.

    Raises:
        ValueError: ``x`` not 3D floating point, or ``eb <= 0``.
    """
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"expected a 3D float tensor, got {tuple(x.shape)} {x.dtype}")
    if not eb > 0:
        raise ValueError(f"error bound must be > 0, got {eb}")
    x = x.contiguous()
    q = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    d = torch.empty_like(q)
    n = x.numel()
    if n == 0:
        return q, d
    grid = (triton.cdiv(n, block),)
    inv2e = torch.full((1,), 1.0 / (2.0 * eb), dtype=torch.float64, device=x.device)
    _lorenzo_quantize_kernel[grid](x, q, d, inv2e, x.shape[0], x.shape[1], x.shape[2],
                                   LIMIT=QUANT_LIMIT, BLOCK=block, **EXACT)
    return q, d


# ----------------------------------------------------------------------------- the block codec

PACK = 32
"""Values per packed block: a block of width ``w`` is ``w`` 32-bit words, word ``p`` holding bit ``p`` of
each of its 32 zigzag codes (bit ``l`` of the word = lane ``l``), cuSZp's bit-plane layout."""

CODE_LIMIT = 2**31
"""A Lorenzo residual ``|d|`` at or above this (its zigzag code would not fit 32 bits) is an outlier."""


FIELD_COLUMNS = tl.constexpr(5)
"""Columns of the field table (int64): first block, first value in the concatenated input, values, N1, N2
(a ``tl.constexpr``: compiled kernels read no other globals)."""


@triton.jit
def _block_codes(x_ptr, r_ptr, vflag_ptr, eb_ptr, fields_ptr, rows, F, NB, LIMIT: tl.constexpr,
                 CODE_LIMIT: tl.constexpr, FUSED: tl.constexpr):
    """For the ``(ROWS, 32)`` values of blocks ``rows`` of a batch of ``F`` fields laid end to end (each
    field's blocks and values follow the previous field's; a block never spans two fields): field-local
    offsets, lanes, ``x``, the residual ``r``, its overflow flag (``|r| >= 2^31``), the value-outlier flag
    and the zigzag code ``u`` (0 where ``r`` overflows and past the field's end).  ``FUSED``: quantise and
    Lorenzo-predict ``x`` here; otherwise read the residuals (any predictor's, in its order) and the
    value-outlier flags the caller computed."""
    lanes = tl.arange(0, 32).to(tl.int64)
    fid = rows * 0
    for f in range(1, F):  # the field of each block: how many fields start at or before it
        fid += (rows >= tl.load(fields_ptr + tl.cast(f, tl.int64) * FIELD_COLUMNS)).to(tl.int64)
    ok = rows < NB
    row = fields_ptr + fid * FIELD_COLUMNS
    first = tl.load(row, mask=ok, other=0)
    start = tl.load(row + 1, mask=ok, other=0)[:, None]
    n = tl.load(row + 2, mask=ok, other=0)[:, None]
    offs = (rows - first)[:, None] * 32 + lanes[None, :]
    mask = ok[:, None] & (offs < n)
    x = tl.load(x_ptr + start + offs, mask=mask, other=0.0)
    if FUSED:
        N1 = tl.load(row + 3, mask=ok, other=1)[:, None]
        N2 = tl.load(row + 4, mask=ok, other=1)[:, None]
        inv2e = tl.load(eb_ptr + fid * 3, mask=ok, other=1.0)[:, None]
        twoe = tl.load(eb_ptr + fid * 3 + 1, mask=ok, other=1.0)[:, None]
        e = tl.load(eb_ptr + fid * 3 + 2, mask=ok, other=1.0)[:, None]
        q, r = _lorenzo_residual(x_ptr + start, offs, mask, inv2e, N1, N2, LIMIT)
        # the value the decoder will produce, in the input's dtype; off the bound (NaN included): an outlier
        recon = (q.to(tl.float64) * twoe).to(x.dtype).to(tl.float64)
        vflag = mask & ((tl.abs(recon - x.to(tl.float64)) <= e) == 0)
    else:
        r = tl.load(r_ptr + start + offs, mask=mask, other=0)
        vflag = mask & (tl.load(vflag_ptr + start + offs, mask=mask, other=0) != 0)
    over = mask & ((r >= CODE_LIMIT) | (r < -CODE_LIMIT))
    u = tl.where(over | (mask == 0), 0, (r << 1) ^ (r >> 63))
    return offs, lanes, x, r, over, vflag, u


@triton.jit(do_not_specialize=["F", "NB"])
def _block_scan_kernel(
    x_ptr,  # (values,) the batch's float32/float64 fields, concatenated (C order each)
    r_ptr,  # (values,) int64 residuals (not FUSED; else unused)
    vflag_ptr,  # (values,) uint8 value-outlier flags (not FUSED; else unused)
    eb_ptr,  # (F, 3) fp64: 1 / (2 e), 2 e, e of each field
    fields_ptr,  # (F, FIELD_COLUMNS) int64: the field table
    width_ptr,  # (NB,) int32 out: bits of the block's widest code (0..32)
    nres_ptr,  # (NB,) int32 out: residuals of the block too wide for 32 bits
    nval_ptr,  # (NB,) int32 out: value outliers in the block
    F, NB,
    LIMIT: tl.constexpr,
    CODE_LIMIT: tl.constexpr,
    FUSED: tl.constexpr,
    ROWS: tl.constexpr,
):
    # pass 1 of encoding: per block, its width and its outlier counts (reads x, writes 12 bytes per 32 values)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    offs, lanes, x, r, over, vflag, u = _block_codes(x_ptr, r_ptr, vflag_ptr, eb_ptr, fields_ptr, rows, F, NB, LIMIT,
                                                     CODE_LIMIT, FUSED)
    top = tl.max(u, axis=1)
    width = tl.zeros([ROWS], dtype=tl.int32)
    for p in tl.static_range(32):
        width += ((top >> p) > 0).to(tl.int32)
    rmask = rows < NB
    tl.store(width_ptr + rows, width, mask=rmask)
    tl.store(nres_ptr + rows, tl.sum(over.to(tl.int32), axis=1), mask=rmask)
    tl.store(nval_ptr + rows, tl.sum(vflag.to(tl.int32), axis=1), mask=rmask)


@triton.jit
def _scatter_flagged(flag, end_ptr, rows, rmask, idx_ptr, val_ptr, offs, values):
    # each block's flagged entries go to its slice of the list (from the inclusive prefix sum), in lane order
    start = tl.load(end_ptr + rows - 1, mask=rmask & (rows > 0), other=0)
    fl = flag.to(tl.int64)
    pos = start[:, None] + tl.cumsum(fl, axis=1) - fl
    tl.store(idx_ptr + pos, offs, mask=flag)
    tl.store(val_ptr + pos, values, mask=flag)


@triton.jit(do_not_specialize=["F", "NB"])
def _block_pack_kernel(
    x_ptr,  # (values,) the batch's float32/float64 fields, concatenated
    r_ptr,  # (values,) int64 residuals (not FUSED)
    vflag_ptr,  # (values,) uint8 value-outlier flags (not FUSED)
    eb_ptr,  # (F, 3) fp64: 1 / (2 e), 2 e, e
    fields_ptr,  # (F, FIELD_COLUMNS) int64: the field table
    wend_ptr,  # (NB,) int64: inclusive prefix sum of the widths (words up to the end of each block)
    rend_ptr,  # (NB,) int64: inclusive prefix sum of the wide-residual counts
    vend_ptr,  # (NB,) int64: inclusive prefix sum of the value-outlier counts
    wbyte_ptr,  # (NB,) uint8 out: the widths, in the payload
    words_ptr,  # (sum of widths,) int32 out: the bit planes, in the payload
    ridx_ptr,  # int64 out: field-local position of each wide residual
    rval_ptr,  # int64 out: its value
    vidx_ptr,  # int64 out: field-local index of each value outlier
    vval_ptr,  # x's dtype out: its exact value
    F, NB,
    LIMIT: tl.constexpr,
    CODE_LIMIT: tl.constexpr,
    FUSED: tl.constexpr,
    ROWS: tl.constexpr,
):
    # pass 2: recompute the codes (cheaper than a round trip of 4 bytes per value) and scatter-pack them
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    rmask = rows < NB
    offs, lanes, x, r, over, vflag, u = _block_codes(x_ptr, r_ptr, vflag_ptr, eb_ptr, fields_ptr, rows, F, NB, LIMIT,
                                                     CODE_LIMIT, FUSED)
    wend = tl.load(wend_ptr + rows, mask=rmask, other=0)
    wstart = tl.load(wend_ptr + rows - 1, mask=rmask & (rows > 0), other=0)
    width = wend - wstart
    tl.store(wbyte_ptr + rows, width.to(tl.uint8), mask=rmask)
    for p in tl.static_range(32):
        word = tl.sum(((u >> p) & 1) << lanes[None, :], axis=1)
        tl.store(words_ptr + wstart + p, word.to(tl.int32), mask=rmask & (width > p))
    _scatter_flagged(over, rend_ptr, rows, rmask, ridx_ptr, rval_ptr, offs, r)
    _scatter_flagged(vflag, vend_ptr, rows, rmask, vidx_ptr, vval_ptr, offs, x)


@triton.jit(do_not_specialize=["total", "NB"])
def _block_unpack_kernel(
    wbyte_ptr,  # (NB,) uint8: the widths
    wend_ptr,  # (NB,) int64: inclusive prefix sum of the widths
    words_ptr,  # (sum of widths,) int32: the bit planes
    r_ptr,  # (total,) int64 out: the residuals (wide ones are 0: the caller scatters them)
    total, NB,
    ROWS: tl.constexpr,
):
    # decoding: gather each block's planes back into 32 codes, un-zigzag (reads the payload, writes 8 B/value)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    rmask = rows < NB
    lanes = tl.arange(0, 32).to(tl.int64)
    width = tl.load(wbyte_ptr + rows, mask=rmask, other=0).to(tl.int64)
    wstart = tl.load(wend_ptr + rows, mask=rmask, other=0) - width
    u = rows[:, None] * lanes[None, :] * 0
    for p in tl.static_range(32):
        word = tl.load(words_ptr + wstart + p, mask=rmask & (width > p), other=0).to(tl.uint32).to(tl.int64)
        u |= ((word[:, None] >> lanes[None, :]) & 1) << p
    offs = rows[:, None] * 32 + lanes[None, :]
    tl.store(r_ptr + offs, (u >> 1) ^ -(u & 1), mask=offs < total)


class BlockTable(NamedTuple):
    """A batch of fields for the block kernels: ``fields`` ``(F, FIELD_COLUMNS)`` int64 and ``eb`` ``(F, 3)``
    fp64 on the device, the batch's ``blocks``, and each field's first block and block count (host ints)."""

    fields: torch.Tensor
    eb: torch.Tensor
    blocks: int
    values: int
    first: list[int]
    count: list[int]


def block_table(shapes: list[tuple[int, int, int]], ebs: list[float], device) -> BlockTable:
    """The table of fields of the given 3D ``shapes`` and bounds, laid end to end (one H2D copy each)."""
    if len(shapes) != len(ebs):
        raise ValueError(f"one bound per field: {len(shapes)} shapes, {len(ebs)} bounds")
    rows, first, count = [], [], []
    block = value = 0
    for n0, n1, n2 in shapes:
        n = n0 * n1 * n2
        rows.append([block, value, n, n1, n2])
        first.append(block)
        count.append(-(-n // PACK))
        block += count[-1]
        value += n
    return BlockTable(torch.tensor(rows, dtype=torch.int64, device=device),
                      torch.tensor([[1.0 / (2.0 * eb), 2.0 * eb, eb] for eb in ebs], dtype=torch.float64,
                                   device=device), block, value, first, count)


def _residual_args(x: torch.Tensor, r: torch.Tensor | None, vflag: torch.Tensor | None) -> tuple:
    """``(r, vflag, FUSED)`` kernel arguments: the caller's residuals and flags, or ``x`` twice (unused) when
    the kernel predicts itself."""
    if r is None:
        return x, x, True
    if r.shape != (x.numel(),) or vflag is None or vflag.shape != r.shape:
        raise ValueError("residuals and value-outlier flags must be flat, one per value of x")
    return r, vflag.view(torch.uint8), False


def _check_batch(x: torch.Tensor, table: BlockTable) -> None:
    if not x.is_floating_point() or x.dim() != 1 or x.numel() != table.values:
        raise ValueError(f"expected the batch's fields concatenated into one flat float tensor, got "
                         f"{tuple(x.shape)} {x.dtype}")


def block_scan_triton(x: torch.Tensor, table: BlockTable, r: torch.Tensor | None = None,
                      vflag: torch.Tensor | None = None, rows: int = 32) -> torch.Tensor:
    """Pass 1 of the block codec: ``(3, blocks)`` int32 counts per block of 32 values: width, residuals too
    wide for 32 bits, value outliers.

    ``x``: the batch's fields concatenated flat (:func:`block_table` describes them).  Without ``r``: the
    kernel quantises and Lorenzo-predicts (fused).  With ``r`` (flat int64 residuals of another predictor,
    concatenated the same way) and ``vflag`` (flat bool: values to keep exactly): it packs those.
    """
    _check_batch(x, table)
    counts = torch.empty(3, table.blocks, dtype=torch.int32, device=x.device)
    rr, vf, fused = _residual_args(x, r, vflag)
    _block_scan_kernel[(triton.cdiv(table.blocks, rows),)](
        x, rr, vf, table.eb, table.fields, counts[0], counts[1], counts[2], len(table.count), table.blocks,
        LIMIT=QUANT_LIMIT, CODE_LIMIT=CODE_LIMIT, FUSED=fused, ROWS=rows, **EXACT)
    return counts


def block_pack_triton(x: torch.Tensor, table: BlockTable, ends: torch.Tensor, views: tuple[torch.Tensor, ...],
                      r: torch.Tensor | None = None, vflag: torch.Tensor | None = None, rows: int = 32) -> None:
    """Pass 2: from ``ends`` (``(3, blocks)`` inclusive prefix sums of pass 1's counts), write the widths
    (uint8), the bit planes (int32), the wide residuals (position, value) and the value outliers (index,
    value) into ``views`` (the batch payload's six regions, :class:`torchhpc.ext.foresight.blocks.Layout`)."""
    _check_batch(x, table)
    rr, vf, fused = _residual_args(x, r, vflag)
    _block_pack_kernel[(triton.cdiv(table.blocks, rows),)](
        x, rr, vf, table.eb, table.fields, ends[0], ends[1], ends[2], *views, len(table.count), table.blocks,
        LIMIT=QUANT_LIMIT, CODE_LIMIT=CODE_LIMIT, FUSED=fused, ROWS=rows, **EXACT)


def block_unpack_triton(wbyte: torch.Tensor, wend: torch.Tensor, words: torch.Tensor, total: int,
                        rows: int = 32) -> torch.Tensor:
    """Decoding: the ``total`` int64 residuals from the widths, their inclusive prefix sum and the planes."""
    nb = wbyte.numel()
    r = torch.empty(total, dtype=torch.int64, device=wbyte.device)
    _block_unpack_kernel[(triton.cdiv(nb, rows),)](wbyte, wend, words, r, total, nb, ROWS=rows, **EXACT)
    return r


def value_outliers_torch(x: torch.Tensor, q: torch.Tensor, eb: float) -> torch.Tensor:
    """Flat bool: where the decoder's value ``2 e q`` (in ``x``'s dtype) is off the bound (NaN included)."""
    recon = q.reshape(-1).to(torch.float64).mul_(2.0 * eb).to(x.dtype).to(torch.float64)
    return ~(recon.sub_(x.reshape(-1)).abs_() <= eb)


def block_codes_torch(r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of the kernels' code step: ``(over, u)`` for flat int64 residuals ``r``: the overflow
    flags and the zigzag codes (0 where ``r`` overflows), padded with zeros to whole blocks, ``(blocks, 32)``."""
    over = (r >= CODE_LIMIT) | (r < -CODE_LIMIT)
    u = torch.where(over, 0, (r << 1) ^ (r >> 63))
    u = torch.nn.functional.pad(u, (0, (-u.numel()) % PACK))
    return over, u.reshape(-1, PACK)


def pack_planes(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(width uint8, words int32)`` of ``(blocks, 32)`` codes below 2^32: NumPy's bit (un)packing turns
    each block's 32 codes into its 32 bit planes; the planes above the block's width are dropped."""
    import numpy as np

    u32 = u.to(torch.int64).numpy().astype(np.uint32)
    top = u32.max(axis=1) if u32.size else np.zeros(0, np.uint32)
    width = np.zeros(top.shape, np.uint8)
    for p in range(32):
        width += (top >> np.uint32(p)) > 0
    planes = np.empty_like(u32)
    step = 1 << 15  # blocks per chunk: 32 MiB of unpacked bits
    for s in range(0, len(u32), step):
        bits = np.unpackbits(u32[s:s + step].view(np.uint8).reshape(-1, PACK, 4), axis=2, bitorder="little")
        planes[s:s + step] = np.ascontiguousarray(np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little")).view(np.uint32)[..., 0]
    keep = np.arange(PACK)[None, :] < width[:, None]
    return torch.from_numpy(width), torch.from_numpy(planes[keep].view(np.int32))


def unpack_planes(width: torch.Tensor, words: torch.Tensor, total: int) -> torch.Tensor:
    """Inverse of :func:`pack_planes` and the zigzag: the first ``total`` int64 residuals."""
    import numpy as np

    w = width.numpy()
    planes = np.zeros((len(w), PACK), np.uint32)
    keep = np.arange(PACK)[None, :] < w[:, None]
    planes[keep] = words.numpy().view(np.uint32)
    u = np.empty_like(planes)
    step = 1 << 15
    for s in range(0, len(planes), step):
        bits = np.unpackbits(planes[s:s + step].view(np.uint8).reshape(-1, PACK, 4), axis=2, bitorder="little")
        u[s:s + step] = np.ascontiguousarray(np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little")).view(np.uint32)[..., 0]
    u = torch.from_numpy(u.reshape(-1)[:total].astype(np.int64))
    return (u >> 1) ^ -(u & 1)


def quantize_torch(x: torch.Tensor, eb: float) -> torch.Tensor:
    """``q = floor(x / 2e + 1/2)`` in fp64 (0 where ``|x / 2e| >= 2^40`` or ``x`` is not finite)."""
    xf = x.to(torch.float64, copy=True).mul_(1.0 / (2.0 * eb))  # in place after one copy (never on x)
    bad = ~(xf.abs() < QUANT_LIMIT)
    return xf.add_(0.5).floor_().masked_fill_(bad, 0.0).to(torch.int64)


def lorenzo_quantize_torch(x: torch.Tensor, eb: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of :func:`lorenzo_quantize_triton`: ``(q, d)`` for a 3D float ``x``."""
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"expected a 3D float tensor, got {tuple(x.shape)} {x.dtype}")
    if not eb > 0:
        raise ValueError(f"error bound must be > 0, got {eb}")
    q = quantize_torch(x, eb)
    d = q
    for axis in range(3):  # mixed finite difference = the Lorenzo residual
        d = torch.diff(d, dim=axis, prepend=torch.zeros_like(d.narrow(axis, 0, 1)))
    return q, d


__all__ = ["CODE_LIMIT", "FIELD_COLUMNS", "PACK", "BlockTable", "block_table", "QUANT_LIMIT", "block_codes_torch", "block_pack_triton", "block_scan_triton",
           "block_unpack_triton", "lorenzo_quantize_torch", "lorenzo_quantize_triton", "pack_planes", "quantize_torch",
           "unpack_planes", "value_outliers_torch"]
