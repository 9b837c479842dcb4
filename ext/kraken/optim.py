"""Sparsity-aware optimizers for embedding rows: update only the rows a batch touched.

Kraken's point: sparse parameters (embedding rows) and dense parameters (MLPs)
want different optimizers.  Dense parameters use ``torch.optim.Adam``/``AdamW``;
embedding rows use one of these, whose state lives row by row beside the table
(so evicting a row frees its state too):

====================  ======================================  =====================
``kind``              update of a touched row ``w`` with ``g``  state per row
====================  ======================================  =====================
``sgd``               ``w -= lr * g``                           none
``rowwise_adagrad``   ``G += mean(g**2); w -= lr g / (sqrt G + eps)``  1 scalar
``rowwise_adam``      Adam with ``m`` per element, ``v = EMA of mean(g**2)``  D + 1
``adam``              Adam (lazy: only touched rows move)     2 D (the baseline)
====================  ======================================  =====================

``step(weight, state, rows, grads)`` is the dispatch: the fused Triton kernel
(:func:`torchhpc.triton_kernels.kraken.sparse_row_update`) for CUDA tensors, the
vectorised torch twin :func:`sparse_row_update_reference` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import ConfigError

KINDS = ("sgd", "rowwise_adagrad", "rowwise_adam", "adam")
_KIND_ID = {k: i for i, k in enumerate(KINDS)}


@dataclass
class SparseOptimizer:
    """Hyper-parameters of a sparse row optimizer (``kind`` one of :data:`KINDS`)."""

    kind: str = "rowwise_adagrad"
    lr: float = 0.05
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"sparse optimizer must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not self.lr > 0:
            raise ConfigError(f"sparse optimizer lr must be > 0, got {self.lr}")

    def state_shapes(self, dim: int) -> dict[str, tuple[int, ...]]:
        """Per-row shape of each state tensor (``()`` = one scalar per row)."""
        return {
            "sgd": {},
            "rowwise_adagrad": {"v": ()},
            "rowwise_adam": {"m": (dim,), "v": ()},
            "adam": {"m": (dim,), "v": (dim,)},
        }[self.kind]

    def state_bytes_per_row(self, dim: int, dtype: torch.dtype = torch.float32) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        total = 0
        for shape in self.state_shapes(dim).values():
            n = 1
            for s in shape:
                n *= s
            total += n * elem
        return total

    def init_state(self, rows: int, dim: int, device, dtype=torch.float32) -> dict[str, torch.Tensor]:
        return {k: torch.zeros((rows, *shape), device=device, dtype=dtype) for k, shape in self.state_shapes(dim).items()}

    def step(
        self,
        weight: torch.Tensor,
        state: dict[str, torch.Tensor],
        rows: torch.Tensor,
        grads: torch.Tensor,
        step: int,
        backend: str = "auto",
    ) -> None:
        """Update ``weight[rows]`` (``rows`` unique) in place from ``grads (U, D)``; ``step`` counts from 1.

        ``backend`` (``auto``, ``triton`` or ``torch``) is resolved by
        :func:`~torchhpc.ext.core.dispatch.resolve_backend`: ``auto`` is the fused Triton kernel for
        CUDA tensors, the torch twin elsewhere.

        Raises:
            InputError: an unknown backend, or ``triton`` where it cannot run.
        """
        if resolve_backend(backend, weight.device) == "triton":
            from torchhpc.triton_kernels import kraken as K

            K.sparse_row_update(_KIND_ID[self.kind], weight, rows.long(), grads.to(weight.dtype),
                                state.get("m"), state.get("v"), self.lr, self.eps, self.beta1, self.beta2, step)
        else:
            sparse_row_update_reference(self, weight, state, rows, grads, step)


@torch.no_grad()
def sparse_row_update_reference(
    opt: SparseOptimizer,
    weight: torch.Tensor,
    state: dict[str, torch.Tensor],
    rows: torch.Tensor,
    grads: torch.Tensor,
    step: int,
) -> None:
    """The torch twin of the fused kernel (gather, update, scatter), computed in fp32."""
    rows = rows.long()
    if rows.numel() == 0:
        return
    g = grads.float()
    w = weight[rows].float()
    bc1, bc2 = 1.0 - opt.beta1**step, 1.0 - opt.beta2**step
    if opt.kind == "sgd":
        w -= opt.lr * g
    elif opt.kind == "rowwise_adagrad":
        v = state["v"][rows].float() + g.pow(2).mean(1)
        state["v"][rows] = v.to(state["v"].dtype)
        w -= (opt.lr / (v.sqrt() + opt.eps)).unsqueeze(1) * g
    elif opt.kind == "rowwise_adam":
        m = opt.beta1 * state["m"][rows].float() + (1 - opt.beta1) * g
        v = opt.beta2 * state["v"][rows].float() + (1 - opt.beta2) * g.pow(2).mean(1)
        state["m"][rows] = m.to(state["m"].dtype)
        state["v"][rows] = v.to(state["v"].dtype)
        w -= (opt.lr / ((v / bc2).sqrt() + opt.eps)).unsqueeze(1) * (m / bc1)
    else:
        m = opt.beta1 * state["m"][rows].float() + (1 - opt.beta1) * g
        v = opt.beta2 * state["v"][rows].float() + (1 - opt.beta2) * g.pow(2)
        state["m"][rows] = m.to(state["m"].dtype)
        state["v"][rows] = v.to(state["v"].dtype)
        w -= opt.lr * (m / bc1) / ((v / bc2).sqrt() + opt.eps)
    weight[rows] = w.to(weight.dtype)
