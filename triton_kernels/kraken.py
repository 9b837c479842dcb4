"""Triton kernels for kraken: jagged embedding-bag pooling, forward and backward.

The op pools rows of an embedding table over variable-length bags, the layout of
a torchrec ``KeyedJaggedTensor`` (one key)::

    bags        [ 0 ]   [ 1 ]  [   2    ]      offsets  = [0, 2, 2, 5]
    indices     [7, 3]  [ ]    [1, 7, 9]       indices  = [7, 3, 1, 7, 9]
    psw         [.5 1]  [ ]    [1, 2, 1]       (optional per-sample weights)

    out[b, :] = sum_{e in bag b} psw[e] * weight[indices[e], :]      (mode "sum")
    out[b, :] = that sum / max(len(bag b), 1)                          (mode "mean")

Empty bags give zeros, as ``torch.nn.functional.embedding_bag`` does.

Kernels (one file, top to bottom, as in Triton's tutorials):

* ``_bag_forward_kernel`` — one program per (bag, block of columns); the bag's rows
  are gathered ``BLOCK_N`` at a time and reduced in fp32 (fp64 for fp64 tables).
* ``_bag_backward_rows_kernel`` — one program per (block of entries, block of
  columns): each entry's gradient row ``grad_out[bag] * psw / len`` is either
  atomically added into the dense table gradient (``ATOMIC``) or stored as one row
  of a row-sparse gradient.
* ``_bag_backward_psw_kernel`` — d out / d psw: the dot product of each entry's
  row with its bag's output gradient.
* ``_sparse_row_update_kernel`` — the fused sparse optimizer step: one program per
  touched row reads its gradient once, updates the row-wise (or element-wise)
  state and writes the row (SGD, row-wise AdaGrad, row-wise Adam, Adam).

The launchers check shapes and dtypes; the autograd wrapper and the dispatch
(Triton on CUDA, the torch twin elsewhere) live in ``torchhpc.ext.kraken.ops``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# ----------------------------------------------------------------------------- kernels


@triton.jit
def _bag_forward_kernel(
    weight_ptr,  # (N, D) table
    indices_ptr,  # (nnz,) int64 row ids
    offsets_ptr,  # (B + 1,) int64 bag boundaries
    psw_ptr,  # (nnz,) per-sample weights (read only when HAS_PSW)
    out_ptr,  # (B, D) pooled output
    D,
    stride_w,
    stride_o,
    HAS_PSW: tl.constexpr,
    MEAN: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # 1. program id -> (bag, column block)
    bag = tl.program_id(0).to(tl.int64)  # 64-bit: bag * stride_o passes 2^31 for large batches
    dblk = tl.program_id(1)
    start = tl.load(offsets_ptr + bag)
    end = tl.load(offsets_ptr + bag + 1)
    cols = dblk * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    if ACC_FP64:
        acc = tl.zeros((BLOCK_D,), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    # 2. walk the bag BLOCK_N entries at a time: gather rows, weight them, reduce
    for j in range(start, end, BLOCK_N):
        ent = j + tl.arange(0, BLOCK_N)
        emask = ent < end
        rows = tl.load(indices_ptr + ent, mask=emask, other=0)
        tile = tl.load(
            weight_ptr + rows[:, None] * stride_w + cols[None, :],
            mask=emask[:, None] & cmask[None, :],
            other=0.0,
        ).to(acc.dtype)
        if HAS_PSW:
            w = tl.load(psw_ptr + ent, mask=emask, other=0.0).to(acc.dtype)
            tile = tile * w[:, None]
        acc += tl.sum(tile, axis=0)
    # 3. mean pooling divides by the bag length (empty bags stay zero)
    if MEAN:
        n = tl.maximum(end - start, 1)
        acc = acc / n.to(acc.dtype)
    tl.store(out_ptr + bag * stride_o + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit(do_not_specialize=["nnz"])  # nnz changes with every batch: one compiled kernel for all
def _bag_backward_rows_kernel(
    grad_out_ptr,  # (B, D)
    indices_ptr,  # (nnz,) int64
    segments_ptr,  # (nnz,) int64 bag id of each entry
    offsets_ptr,  # (B + 1,) int64 (for bag lengths when MEAN)
    psw_ptr,  # (nnz,)
    dst_ptr,  # (N, D) dense table grad when ATOMIC, else (nnz, D) per-entry rows
    nnz,
    D,
    stride_g,
    stride_dst,
    HAS_PSW: tl.constexpr,
    MEAN: tl.constexpr,
    ATOMIC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # 1. program id -> (entry block, column block)
    pid_n = tl.program_id(0).to(tl.int64)  # 64-bit: ent * stride_dst passes 2^31 for large batches
    pid_d = tl.program_id(1)
    ent = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    emask = ent < nnz
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    mask = emask[:, None] & cmask[None, :]
    # 2. each entry's gradient row is its bag's output gradient, scaled
    seg = tl.load(segments_ptr + ent, mask=emask, other=0)
    g = tl.load(grad_out_ptr + seg[:, None] * stride_g + cols[None, :], mask=mask, other=0.0)
    if HAS_PSW:
        w = tl.load(psw_ptr + ent, mask=emask, other=0.0)
        g = g * w[:, None].to(g.dtype)
    if MEAN:
        n = tl.load(offsets_ptr + seg + 1, mask=emask, other=1) - tl.load(offsets_ptr + seg, mask=emask, other=0)
        g = g / tl.maximum(n, 1)[:, None].to(g.dtype)
    # 3. scatter into the table gradient (atomics: rows repeat) or store per entry
    if ATOMIC:
        rows = tl.load(indices_ptr + ent, mask=emask, other=0)
        tl.atomic_add(dst_ptr + rows[:, None] * stride_dst + cols[None, :], g.to(dst_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(dst_ptr + ent[:, None] * stride_dst + cols[None, :], g.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["nnz"])
def _bag_backward_psw_kernel(
    grad_out_ptr,  # (B, D)
    weight_ptr,  # (N, D)
    indices_ptr,  # (nnz,)
    segments_ptr,  # (nnz,)
    offsets_ptr,  # (B + 1,)
    grad_psw_ptr,  # (nnz,)
    nnz,
    D,
    stride_g,
    stride_w,
    MEAN: tl.constexpr,
    ACC_FP64: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # d out[b, :] / d psw[e] = weight[indices[e], :] (/ len(b)), so grad_psw[e] = <grad_out[b], row>
    pid = tl.program_id(0).to(tl.int64)
    ent = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    emask = ent < nnz
    seg = tl.load(segments_ptr + ent, mask=emask, other=0)
    rows = tl.load(indices_ptr + ent, mask=emask, other=0)
    if ACC_FP64:
        acc = tl.zeros((BLOCK_N,), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        mask = emask[:, None] & (cols < D)[None, :]
        g = tl.load(grad_out_ptr + seg[:, None] * stride_g + cols[None, :], mask=mask, other=0.0).to(acc.dtype)
        w = tl.load(weight_ptr + rows[:, None] * stride_w + cols[None, :], mask=mask, other=0.0).to(acc.dtype)
        acc += tl.sum(g * w, axis=1)
    if MEAN:
        n = tl.load(offsets_ptr + seg + 1, mask=emask, other=1) - tl.load(offsets_ptr + seg, mask=emask, other=0)
        acc = acc / tl.maximum(n, 1).to(acc.dtype)
    tl.store(grad_psw_ptr + ent, acc.to(grad_psw_ptr.dtype.element_ty), mask=emask)


# kinds of the fused sparse row optimizer (shared with torchhpc.ext.kraken.optim)
OPT_SGD, OPT_ROWWISE_ADAGRAD, OPT_ROWWISE_ADAM, OPT_ADAM = 0, 1, 2, 3


@triton.jit
def _sparse_row_update_kernel(
    weight_ptr,  # (N, D) table, updated in place
    rows_ptr,  # (U,) int64 unique touched rows
    grad_ptr,  # (U, D) gradient of each touched row
    m_ptr,  # (N, D) first moment (ROWWISE_ADAM, ADAM)
    v_ptr,  # (N,) row-wise second moment / AdaGrad sum, or (N, D) for ADAM
    D,
    stride_w,
    stride_g,
    lr,
    eps,
    beta1,
    beta2,
    bc1,  # 1 - beta1**step
    bc2,  # 1 - beta2**step
    KIND: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # one program per touched row; row-wise kinds make two passes over the columns
    pid = tl.program_id(0).to(tl.int64)  # 64-bit: pid * stride_g passes 2^31 for many touched rows
    row = tl.load(rows_ptr + pid)
    if KIND == 1 or KIND == 2:
        # 1. mean squared gradient of the row
        ss = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            cols = d0 + tl.arange(0, BLOCK_D)
            g = tl.load(grad_ptr + pid * stride_g + cols, mask=cols < D, other=0.0).to(tl.float32)
            ss += g * g
        msq = tl.sum(ss, axis=0) / D
        v = tl.load(v_ptr + row).to(tl.float32)
        if KIND == 1:
            v = v + msq
            scale = lr / (tl.sqrt(v) + eps)
        else:
            v = beta2 * v + (1.0 - beta2) * msq
            scale = lr / (tl.sqrt(v / bc2) + eps)
        tl.store(v_ptr + row, v.to(v_ptr.dtype.element_ty))
    # 2. update the row
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        cmask = cols < D
        g = tl.load(grad_ptr + pid * stride_g + cols, mask=cmask, other=0.0).to(tl.float32)
        w = tl.load(weight_ptr + row * stride_w + cols, mask=cmask, other=0.0).to(tl.float32)
        if KIND == 0:
            w = w - lr * g
        elif KIND == 1:
            w = w - scale * g
        elif KIND == 2:
            m = tl.load(m_ptr + row * stride_w + cols, mask=cmask, other=0.0).to(tl.float32)
            m = beta1 * m + (1.0 - beta1) * g
            tl.store(m_ptr + row * stride_w + cols, m.to(m_ptr.dtype.element_ty), mask=cmask)
            w = w - scale * (m / bc1)
        else:
            m = tl.load(m_ptr + row * stride_w + cols, mask=cmask, other=0.0).to(tl.float32)
            vv = tl.load(v_ptr + row * stride_w + cols, mask=cmask, other=0.0).to(tl.float32)
            m = beta1 * m + (1.0 - beta1) * g
            vv = beta2 * vv + (1.0 - beta2) * g * g
            tl.store(m_ptr + row * stride_w + cols, m.to(m_ptr.dtype.element_ty), mask=cmask)
            tl.store(v_ptr + row * stride_w + cols, vv.to(v_ptr.dtype.element_ty), mask=cmask)
            w = w - lr * (m / bc1) / (tl.sqrt(vv / bc2) + eps)
        tl.store(weight_ptr + row * stride_w + cols, w.to(weight_ptr.dtype.element_ty), mask=cmask)


# ----------------------------------------------------------------------------- launchers


def _block_d(D: int) -> int:
    return min(128, triton.next_power_of_2(max(D, 1)))


def _check(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, psw: torch.Tensor | None) -> None:
    if weight.dim() != 2:
        raise ValueError(f"weight must be (N, D), got shape {tuple(weight.shape)}")
    if weight.stride(1) != 1:
        raise ValueError("weight rows must be contiguous (stride 1 along D)")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise ValueError("indices and offsets must be 1-D")
    if indices.dtype != torch.int64 or offsets.dtype != torch.int64:
        raise ValueError("indices and offsets must be int64 (the launchers do not cast)")
    if not (weight.device == indices.device == offsets.device):
        raise ValueError("weight, indices and offsets must be on one device")
    if psw is not None and psw.shape != indices.shape:
        raise ValueError(f"per_sample_weights must have the shape of indices {tuple(indices.shape)}")


def bag_forward(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mean: bool,
    per_sample_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pooled bags ``(B, D)`` from a table ``(N, D)``, ``indices (nnz,)``, ``offsets (B+1,)``."""
    _check(weight, indices, offsets, per_sample_weights)
    B = offsets.numel() - 1
    D = weight.shape[1]
    out = torch.empty((B, D), dtype=weight.dtype, device=weight.device)
    if B == 0 or D == 0:
        return out
    BLOCK_D = _block_d(D)
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else indices  # dummy pointer
    grid = (B, triton.cdiv(D, BLOCK_D))
    _bag_forward_kernel[grid](
        weight, indices.contiguous(), offsets.contiguous(), psw, out,
        D, weight.stride(0), out.stride(0),
        HAS_PSW=per_sample_weights is not None, MEAN=mean, ACC_FP64=weight.dtype == torch.float64,
        BLOCK_N=16, BLOCK_D=BLOCK_D,
    )
    return out


def bag_backward_rows(
    grad_out: torch.Tensor,
    indices: torch.Tensor,
    segments: torch.Tensor,
    offsets: torch.Tensor,
    mean: bool,
    per_sample_weights: torch.Tensor | None,
    num_rows: int | None,
) -> torch.Tensor:
    """Table gradient: dense ``(num_rows, D)`` when ``num_rows`` is given, else per-entry rows ``(nnz, D)``."""
    grad_out = grad_out.contiguous()
    nnz = indices.numel()
    D = grad_out.shape[1]
    acc_dtype = torch.float64 if grad_out.dtype == torch.float64 else torch.float32
    if num_rows is not None:
        dst = torch.zeros((num_rows, D), dtype=acc_dtype, device=grad_out.device)
    else:
        dst = torch.empty((nnz, D), dtype=grad_out.dtype, device=grad_out.device)
    if nnz == 0 or D == 0:
        return dst.to(grad_out.dtype)
    BLOCK_N, BLOCK_D = 32, _block_d(D)
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else grad_out
    grid = (triton.cdiv(nnz, BLOCK_N), triton.cdiv(D, BLOCK_D))
    _bag_backward_rows_kernel[grid](
        grad_out, indices, segments, offsets, psw, dst,
        nnz, D, grad_out.stride(0), dst.stride(0),
        HAS_PSW=per_sample_weights is not None, MEAN=mean, ATOMIC=num_rows is not None,
        BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
    )
    return dst.to(grad_out.dtype)


def bag_backward_psw(
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    indices: torch.Tensor,
    segments: torch.Tensor,
    offsets: torch.Tensor,
    mean: bool,
    psw_dtype: torch.dtype,
) -> torch.Tensor:
    """Gradient of the per-sample weights ``(nnz,)``."""
    grad_out = grad_out.contiguous()
    nnz = indices.numel()
    D = grad_out.shape[1]
    out = torch.empty((nnz,), dtype=psw_dtype, device=grad_out.device)
    if nnz == 0:
        return out
    BLOCK_N, BLOCK_D = 32, _block_d(D)
    _bag_backward_psw_kernel[(triton.cdiv(nnz, BLOCK_N),)](
        grad_out, weight, indices, segments, offsets, out,
        nnz, D, grad_out.stride(0), weight.stride(0),
        MEAN=mean, ACC_FP64=weight.dtype == torch.float64, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
    )
    return out


def sparse_row_update(
    kind: int,
    weight: torch.Tensor,
    rows: torch.Tensor,
    grads: torch.Tensor,
    m: torch.Tensor | None,
    v: torch.Tensor | None,
    lr: float,
    eps: float = 1e-8,
    beta1: float = 0.9,
    beta2: float = 0.999,
    step: int = 1,
) -> None:
    """Fused in-place optimizer update of the touched ``rows`` (unique) of ``weight`` with ``grads (U, D)``."""
    if weight.dim() != 2 or not weight.is_contiguous():
        raise ValueError("weight must be a contiguous (N, D) table")
    for name, t in (("m", m), ("v", v)):  # the kernel addresses state rows with the weight's row stride
        if t is not None and (not t.is_contiguous() or t.shape[0] != weight.shape[0]):
            raise ValueError(f"optimizer state {name} must be contiguous with one entry per table row")
    if rows.dtype != torch.int64 or rows.dim() != 1 or grads.shape != (rows.numel(), weight.shape[1]):
        raise ValueError(f"rows must be int64 (U,) and grads (U, D); got {tuple(rows.shape)}, {tuple(grads.shape)}")
    U, D = grads.shape
    if U == 0:
        return
    grads = grads.contiguous()
    dummy = weight
    _sparse_row_update_kernel[(U,)](
        weight, rows, grads, m if m is not None else dummy, v if v is not None else dummy,
        D, weight.stride(0), grads.stride(0),
        float(lr), float(eps), float(beta1), float(beta2),
        float(1.0 - beta1**step), float(1.0 - beta2**step),
        KIND=kind, BLOCK_D=_block_d(D),
    )


# ----------------------------------------------------------------------------- table-batched (TBE) kernels
#
# The tables of a kraken collection live side by side in one store (``RowStore``: weight ``(R, D)``,
# row-wise state ``v (R,)``), and a batch's values carry the store row of their ID (``-1``: no row, which
# reads zeros).  So every feature of every table is pooled by ONE launch, and the backward of all of
# them fused with the row-wise AdaGrad update of every touched row is ONE more launch:
#
#     rows      [r7, r3 | -1 | r1, r7, r9 | ...]      store row of every value (all features)
#     offsets   [0,     2,   3,           6, ...]     bags of feature 0, then feature 1, ... (K*B + 1)
#
#     forward:  out[b] = sum_{e in bag b, rows[e] >= 0} psw[e] * weight[rows[e]]   (/ len for mean)
#     backward: g[r]   = sum_{e: rows[e] = r} psw[e] * grad_out[bag(e)] (/ len)      (one program per row r)
#               v[r] += mean(g[r]**2);  weight[r] -= lr * g[r] / (sqrt(v[r]) + eps)


@triton.jit
def _tbe_pool_kernel(
    weight_ptr,  # (R, D) every table's rows
    rows_ptr,  # (nnz,) int64 store row of each value, -1: no row (reads zeros)
    offsets_ptr,  # (K*B + 1,) int64 bag boundaries, feature after feature
    psw_ptr,  # (nnz,) per-sample weights (read only when HAS_PSW)
    out_ptr,  # (K*B, D) pooled bags
    D,
    stride_w,
    stride_o,
    HAS_PSW: tl.constexpr,
    MEAN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # 1. program id -> (bag of any feature, column block)
    bag = tl.program_id(0).to(tl.int64)  # 64-bit: bag * stride_o passes 2^31 for K*B*D >= 2^31
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(offsets_ptr + bag)
    end = tl.load(offsets_ptr + bag + 1)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    # 2. gather BLOCK_N rows at a time straight from the store (no copy of the touched rows), masked for -1
    for j in range(start, end, BLOCK_N):
        ent = j + tl.arange(0, BLOCK_N)
        rows = tl.load(rows_ptr + ent, mask=ent < end, other=-1)
        live = rows >= 0
        tile = tl.load(weight_ptr + tl.maximum(rows, 0)[:, None] * stride_w + cols[None, :],
                       mask=live[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        if HAS_PSW:
            tile = tile * tl.load(psw_ptr + ent, mask=live, other=0.0).to(tl.float32)[:, None]
        acc += tl.sum(tile, axis=0)
    # 3. mean pooling divides by the bag length (empty bags stay zero)
    if MEAN:
        acc = acc / tl.maximum(end - start, 1).to(tl.float32)
    tl.store(out_ptr + bag * stride_o + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _tbe_backward_rowwise_adagrad_kernel(
    grad_out_ptr,  # (K*B, D) gradient of the pooled bags
    weight_ptr,  # (R, D) updated in place
    v_ptr,  # (R,) row-wise AdaGrad state, updated in place
    urows_ptr,  # (U,) int64 the touched store rows, one program each
    occ_ptr,  # (U + 1,) int64: row u's values are order[occ[u]:occ[u+1]]
    order_ptr,  # (n,) int64 value positions grouped by row
    bag_ptr,  # (nnz,) int64 bag of each value
    offsets_ptr,  # (K*B + 1,) bag boundaries (for the mean's lengths)
    psw_ptr,  # (nnz,) per-sample weights (read only when HAS_PSW)
    D,
    stride_g,
    stride_w,
    lr,
    eps,
    HAS_PSW: tl.constexpr,
    MEAN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # 1. program id -> one touched row and the positions of its values
    u = tl.program_id(0).to(tl.int64)
    row = tl.load(urows_ptr + u)
    lo = tl.load(occ_ptr + u)
    hi = tl.load(occ_ptr + u + 1)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    g = tl.zeros((BLOCK_D,), dtype=tl.float32)
    # 2. the row's gradient: its bags' output gradients, weighted (and / len for mean), summed in fp32
    for j in range(lo, hi, BLOCK_N):
        k = j + tl.arange(0, BLOCK_N)
        kmask = k < hi
        pos = tl.load(order_ptr + k, mask=kmask, other=0)
        bag = tl.load(bag_ptr + pos, mask=kmask, other=0)
        scale = tl.where(kmask, 1.0, 0.0)
        if HAS_PSW:
            scale = scale * tl.load(psw_ptr + pos, mask=kmask, other=0.0).to(tl.float32)
        if MEAN:
            n = tl.load(offsets_ptr + bag + 1, mask=kmask, other=1) - tl.load(offsets_ptr + bag, mask=kmask, other=0)
            scale = scale / tl.maximum(n, 1).to(tl.float32)
        tile = tl.load(grad_out_ptr + bag[:, None] * stride_g + cols[None, :],
                       mask=kmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        g += tl.sum(tile * scale[:, None], axis=0)
    # 3. row-wise AdaGrad: one state scalar per row, the mean of g**2, then the row moves once
    v = tl.load(v_ptr + row) + tl.sum(g * g, axis=0) / D
    tl.store(v_ptr + row, v)
    w = tl.load(weight_ptr + row * stride_w + cols, mask=cmask, other=0.0).to(tl.float32)
    w = w - (lr / (tl.sqrt(v) + eps)) * g
    tl.store(weight_ptr + row * stride_w + cols, w.to(weight_ptr.dtype.element_ty), mask=cmask)


def tbe_pool(weight: torch.Tensor, rows: torch.Tensor, offsets: torch.Tensor, mean: bool = False,
             per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Every bag of every feature in one launch: ``(K*B, D)`` from the store ``weight (R, D)``, the store
    row of each value ``rows (nnz,)`` (``-1`` reads zeros) and ``offsets (K*B + 1,)``."""
    if weight.dim() != 2 or weight.stride(1) != 1:
        raise ValueError(f"weight must be (R, D) with contiguous rows, got shape {tuple(weight.shape)}")
    if rows.dtype != torch.int64 or offsets.dtype != torch.int64:
        raise ValueError("rows and offsets must be int64")
    nb, D = offsets.numel() - 1, weight.shape[1]
    out = torch.empty((nb, D), dtype=weight.dtype, device=weight.device)
    if nb == 0 or D == 0:
        return out
    BLOCK_D = _block_d(D)
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else rows
    _tbe_pool_kernel[(nb, triton.cdiv(D, BLOCK_D))](
        weight, rows.contiguous(), offsets.contiguous(), psw, out, D, weight.stride(0), out.stride(0),
        HAS_PSW=per_sample_weights is not None, MEAN=mean, BLOCK_N=16, BLOCK_D=BLOCK_D,
    )
    return out


def tbe_backward_rowwise_adagrad(grad_out: torch.Tensor, weight: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
                                 offsets: torch.Tensor, lr: float, eps: float, mean: bool = False,
                                 per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
    """The backward of :func:`tbe_pool` fused with the row-wise AdaGrad step of every touched row: one launch.

    ``grad_out (K*B, D)``; ``weight (R, D)`` and ``v (R,)`` are updated in place.  Returns the touched rows
    (ascending).  The grouping of values by row (one sort) is done by torch before the launch.
    """
    D = weight.shape[1]
    if D > 1024:
        raise ValueError(f"the fused row-wise update holds a row in one block: D <= 1024, got {D}")
    nnz = rows.numel()
    bag = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=rows.device), offsets.diff(),
                                  output_size=nnz)
    live = torch.nonzero(rows >= 0).squeeze(1)
    urows, order_in_live, counts = torch.unique(rows[live], return_inverse=True, return_counts=True)
    order = live[torch.argsort(order_in_live, stable=True)]
    occ = torch.zeros(urows.numel() + 1, dtype=torch.int64, device=rows.device)
    occ[1:] = counts.cumsum(0)
    if urows.numel() == 0:
        return urows
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else rows
    grad_out = grad_out.contiguous()
    _tbe_backward_rowwise_adagrad_kernel[(urows.numel(),)](
        grad_out, weight, v, urows, occ, order, bag, offsets.contiguous(), psw,
        D, grad_out.stride(0), weight.stride(0), lr, eps,
        HAS_PSW=per_sample_weights is not None, MEAN=mean, BLOCK_N=16, BLOCK_D=triton.next_power_of_2(max(D, 1)),
    )
    return urows
