"""Jagged embedding-bag pooling: the torch twin, the Triton path and one dispatch.

``jagged_embedding_bag(weight, indices, offsets, mode, per_sample_weights)`` pools
rows of ``weight (N, D)`` over the bags described by ``offsets (B+1,)`` — the
values/offsets layout of a torchrec ``KeyedJaggedTensor`` — and returns
``(B, D)``.  It equals ``torch.nn.functional.embedding_bag`` (and torchrec's
``EmbeddingBagCollection`` for the same weights), forward and backward.

* On CUDA it runs the fused Triton kernels of :mod:`torchhpc.triton_kernels.kraken`
  (autograd through :class:`_TritonJaggedEmbeddingBag`).
* Elsewhere it runs :func:`jagged_embedding_bag_torch`: torch's fused native
  ``embedding_bag`` where it covers the call, else the reference.
* :func:`jagged_embedding_bag_reference` is the torch twin of the kernels, a
  vectorised gather + ``index_add`` written from the definition; the kernels are
  tested against it (under ``TRITON_INTERPRET=1`` on the CPU).

Mean pooling with per-sample weights is ``sum(psw * row) / len(bag)`` (torch's
``embedding_bag`` refuses that combination; torchrec allows it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError

PoolingMode = Literal["sum", "mean"]


#: Host work of the table-batched CUDA step (pooling + fused backward with row-wise AdaGrad) per training
#: step (``tests/test_gpu_budgets.py``): the backward groups the values by row with ``nonzero`` and
#: ``unique`` on the host's behalf.
GPU_BUDGETS = {
    "tbe_step": HostBudget("step", syncs=2, launches=16, why="nonzero + unique to group values by row"),
}


def check_bags(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: torch.Tensor | None = None,
    mode: str = "sum",
) -> None:
    """Validate a jagged embedding-bag call.

    Raises:
        InputError: wrong dims or dtypes, offsets that do not start at 0, decrease, or do not
            end at ``len(indices)``, indices outside ``[0, N)``, or a per-sample weight tensor
            of another shape.
    """
    if mode not in ("sum", "mean"):
        raise InputError(f"pooling mode must be 'sum' or 'mean', got {mode!r}")
    if weight.dim() != 2:
        raise InputError(f"weight must be 2-D (N, D), got shape {tuple(weight.shape)}")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise InputError(f"indices and offsets must be 1-D, got {tuple(indices.shape)} and {tuple(offsets.shape)}")
    if indices.dtype.is_floating_point or offsets.dtype.is_floating_point:
        raise InputError("indices and offsets must be integer tensors")
    if offsets.numel() < 1:
        raise InputError("offsets must hold B + 1 entries (at least [0])")
    if int(offsets[0]) != 0 or int(offsets[-1]) != indices.numel():
        raise InputError(
            f"offsets must start at 0 and end at len(indices)={indices.numel()}, "
            f"got {int(offsets[0])} ... {int(offsets[-1])}"
        )
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        bad = int(torch.nonzero(offsets[1:] < offsets[:-1])[0, 0])
        raise InputError(f"offsets must not decrease (offsets[{bad + 1}] < offsets[{bad}])")
    if indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= weight.shape[0]:
            raise InputError(f"indices must lie in [0, {weight.shape[0]}), found {lo if lo < 0 else hi}")
    if per_sample_weights is not None and per_sample_weights.shape != indices.shape:
        raise InputError(
            f"per_sample_weights must have the shape of indices {tuple(indices.shape)}, "
            f"got {tuple(per_sample_weights.shape)}"
        )


def bag_segments(offsets: torch.Tensor, nnz: int) -> torch.Tensor:
    """The bag id of every entry, ``(nnz,)`` int64: ``[0, 0, 2, 2, 2]`` for offsets ``[0, 2, 2, 5]``."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(
        torch.arange(lengths.numel(), device=offsets.device), lengths, output_size=nnz
    )


def jagged_embedding_bag_reference(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: PoolingMode = "sum",
    per_sample_weights: torch.Tensor | None = None,
    sparse: bool = False,
) -> torch.Tensor:
    """The torch twin of the kernels: gather the rows, weight them, ``index_add`` them into their bags.

    Shapes: weight ``(N, D)``, indices ``(nnz,)``, offsets ``(B+1,)``, per_sample_weights
    ``(nnz,)`` → ``(B, D)``.  With ``sparse=True`` the table gradient is a sparse COO tensor.
    """
    indices = indices.long()
    offsets = offsets.long()
    B = offsets.numel() - 1
    seg = bag_segments(offsets, indices.numel())
    rows = torch.nn.functional.embedding(indices, weight, sparse=sparse)  # (nnz, D)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1).to(rows.dtype)
    out = rows.new_zeros((B, weight.shape[1])).index_add(0, seg, rows)
    if mode == "mean":
        lengths = (offsets[1:] - offsets[:-1]).clamp(min=1).to(out.dtype)
        out = out / lengths.unsqueeze(1)
    return out


def jagged_embedding_bag_torch(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: PoolingMode = "sum",
    per_sample_weights: torch.Tensor | None = None,
    sparse: bool = False,
) -> torch.Tensor:
    """The CPU path: torch's native fused ``embedding_bag`` (the reference for mean + weights)."""
    if mode == "mean" and per_sample_weights is not None:
        return jagged_embedding_bag_reference(weight, indices, offsets, mode, per_sample_weights, sparse)
    return torch.nn.functional.embedding_bag(
        indices.long(), weight, offsets.long(), mode=mode, per_sample_weights=per_sample_weights,
        include_last_offset=True, sparse=sparse,
    )


class _TritonJaggedEmbeddingBag(torch.autograd.Function):
    """Autograd around the fused Triton forward and backward kernels."""

    @staticmethod
    def forward(ctx, weight, indices, offsets, per_sample_weights, mean: bool, sparse: bool):
        from torchhpc.triton_kernels import kraken as K

        out = K.bag_forward(weight, indices, offsets, mean, per_sample_weights)
        ctx.save_for_backward(weight, indices, offsets, per_sample_weights)
        ctx.mean, ctx.sparse = mean, sparse
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from torchhpc.triton_kernels import kraken as K

        weight, indices, offsets, psw = ctx.saved_tensors
        seg = bag_segments(offsets, indices.numel())
        grad_w = grad_psw = None
        if ctx.needs_input_grad[0]:
            if ctx.sparse:
                rows = K.bag_backward_rows(grad_out, indices, seg, offsets, ctx.mean, psw, None)
                grad_w = torch.sparse_coo_tensor(indices.unsqueeze(0), rows, weight.shape, check_invariants=False)
            else:
                grad_w = K.bag_backward_rows(grad_out, indices, seg, offsets, ctx.mean, psw, weight.shape[0])
        if psw is not None and ctx.needs_input_grad[3]:
            grad_psw = K.bag_backward_psw(grad_out, weight, indices, seg, offsets, ctx.mean, psw.dtype)
        return grad_w, None, None, grad_psw, None, None


def jagged_embedding_bag_triton(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: PoolingMode = "sum",
    per_sample_weights: torch.Tensor | None = None,
    sparse: bool = False,
) -> torch.Tensor:
    """The fused Triton path (CUDA, or the CPU under ``TRITON_INTERPRET=1``); same contract as the twin."""
    return _TritonJaggedEmbeddingBag.apply(
        weight.contiguous(), indices.long().contiguous(), offsets.long().contiguous(),
        per_sample_weights, mode == "mean", sparse,
    )


def jagged_embedding_bag(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: PoolingMode = "sum",
    per_sample_weights: torch.Tensor | None = None,
    *,
    sparse: bool = False,
    backend: Literal["auto", "triton", "torch"] = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Pool embedding rows over jagged bags: the dispatch (Triton on CUDA, torch elsewhere).

    Args:
        weight: ``(N, D)`` table.
        indices: ``(nnz,)`` row ids (int).
        offsets: ``(B+1,)`` bag boundaries, ``offsets[0] = 0``, ``offsets[-1] = nnz``.
        mode: ``"sum"`` or ``"mean"`` (empty bags give zeros).
        per_sample_weights: optional ``(nnz,)`` weights.
        sparse: return a sparse COO gradient for ``weight`` (only touched rows).
        backend: ``auto`` (Triton for CUDA tensors when triton imports, else torch), ``triton`` or
            ``torch``; resolved by :func:`~torchhpc.ext.core.dispatch.resolve_backend`.
        validate: check offsets/index ranges first (a host sync on CUDA).

    Returns:
        ``(B, D)`` pooled embeddings.

    Raises:
        InputError: see :func:`check_bags`; an unknown backend, or ``triton`` where it cannot run.
    """
    if validate:
        check_bags(weight, indices, offsets, per_sample_weights, mode)
    if resolve_backend(backend, weight.device) == "triton":
        return jagged_embedding_bag_triton(weight, indices, offsets, mode, per_sample_weights, sparse)
    return jagged_embedding_bag_torch(weight, indices, offsets, mode, per_sample_weights, sparse)


def pooled_embeddings(
    kjt,
    tables: Mapping[str, torch.Tensor],
    feature_to_table: Mapping[str, str] | None = None,
    mode: PoolingMode = "sum",
    **kwargs,
) -> dict[str, torch.Tensor]:
    """Pool every feature of a torchrec ``KeyedJaggedTensor`` through its table.

    ``kjt`` holds ``K`` keys × ``B`` samples; feature ``f`` is looked up in
    ``tables[feature_to_table.get(f, f)]`` and pooled per sample, with the KJT's
    weights as per-sample weights when it has them.  Returns ``{feature: (B, D)}``,
    equal to ``EmbeddingBagCollection(kjt).to_dict()`` for the same tables.

    Raises:
        InputError: a feature has no table.
    """
    feature_to_table = feature_to_table or {}
    out = {}
    for key, jt in kjt.to_dict().items():
        name = feature_to_table.get(key, key)
        if name not in tables:
            raise InputError(f"feature {key!r} has no embedding table (tables: {', '.join(tables)})")
        # torchrec may leave a split feature's offsets (computed from lengths) on the CPU: follow the table
        dev = tables[name].device
        w = jt.weights_or_none()
        out[key] = jagged_embedding_bag(tables[name], jt.values().to(dev), jt.offsets().to(dev), mode,
                                        w.to(dev) if w is not None else None, **kwargs)
    return out
