"""The exactness reference: plain single-process training of the whole model on the global batch.

Pipelined training (any schedule, any number of stages, replicas, repetitions and
data-parallel groups) must give the same gradients and the same loss trajectory as
this, to float tolerance: the same blocks, the same initial weights, the same
global batch (every slice concatenated), mean cross-entropy, one optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def reference_training(blocks: Sequence[nn.Module], data, steps: int, slices_per_step: int, slice_size: int,
                       make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
                       grads_at: int = 0) -> tuple[nn.Sequential, list[float], list[list[torch.Tensor]]]:
    """Train ``nn.Sequential(*blocks)`` for ``steps`` updates of ``slices_per_step * slice_size`` samples.

    Returns:
        The trained model, the loss of each update, and the gradients of update ``grads_at``
        as one list per block (in ``block.parameters()`` order).
    """
    model = nn.Sequential(*blocks)
    opt = make_optimizer(list(model.parameters()))
    losses: list[float] = []
    grads: list[list[torch.Tensor]] = []
    for step in range(steps):
        parts = [data.slice(step, j, slice_size) for j in range(slices_per_step)]
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == grads_at:
            grads = [[p.grad.clone() for p in block.parameters()] for block in model]
        opt.step()
        losses.append(float(loss.detach()))
    return model, losses, grads
