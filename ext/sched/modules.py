"""RLScheduler's policy networks.

The **kernel** policy (the paper's design) applies one small MLP to every job
slot — the same weights for all slots — giving one score per job, and takes a
masked softmax over the queue.  It is permutation-equivariant and does not
depend on how many jobs wait.  Its critic runs a second per-slot MLP and an MLP
over the resulting ``(slots,)`` vector.  The **flat** policy (the baseline the
paper compares with) is an MLP over the flattened observation.

Shapes: ``queue (B, S, F)`` with ``S`` slots of ``F`` features, ``mask (B, S)``
bool → logits ``(B, S)`` (masked slots at a large negative value), values ``(B,)``.
"""

from __future__ import annotations

import torch
from torch import nn

from torchhpc.ext.core.nn import mlp

MASKED_LOGIT = -1e8


class KernelActor(nn.Module):
    """One MLP ``F → 32 → 16 → 8 → 1`` shared by every slot: a score per job.

    Only the valid slots are evaluated (packed), so the cost follows the number of
    waiting jobs, not the number of slots; masked slots get :data:`MASKED_LOGIT`.

    With ``prior_slots = S > 0`` (not in the paper) the last feature is a heuristic's rank of the job,
    ``rank / S`` (see :class:`~torchhpc.ext.sched.observation.QueueObserver`), and the score is
    ``MLP(x) - beta * rank``: a learned correction to the heuristic.  The MLP's last layer starts at
    zero and ``beta`` at ``prior_beta``, so the untrained policy's greedy choice is the heuristic's and
    a sampled choice follows it with probability about ``1 / (1 + e^-beta + e^-2beta + ...)``.
    """

    def __init__(self, features: int = 8, hidden: tuple[int, ...] = (32, 16, 8), prior_slots: int = 0,
                 prior_beta: float = 3.0) -> None:
        super().__init__()
        self.score = mlp([features, *hidden, 1])
        self.prior_slots = prior_slots
        if prior_slots:
            last = self.score[-1]
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
            self.log_beta = nn.Parameter(torch.tensor(float(prior_beta)).log())

    def forward(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        valid = mask.nonzero(as_tuple=True)
        x = queue[valid]
        scores = self.score(x).squeeze(-1)  # (V,) for the V valid slots
        if self.prior_slots:
            scores = scores - self.log_beta.exp() * (x[:, -1] * self.prior_slots)
        logits = queue.new_full(mask.shape, MASKED_LOGIT)
        return logits.index_put(valid, scores)


class KernelCritic(nn.Module):
    """Per-slot MLP ``F → 32 → 16 → 8 → 1``, then ``S → 64 → 32 → 8 → 1`` over the slots.

    Masked slots hold the empty-slot pattern, so their per-slot value is computed once
    from ``empty_slot`` and broadcast; valid slots are evaluated packed.
    """

    def __init__(self, slots: int = 128, features: int = 8, hidden: tuple[int, ...] = (32, 16, 8),
                 empty_slot: torch.Tensor | None = None) -> None:
        super().__init__()
        self.per_job = mlp([features, *hidden, 1])
        self.head = mlp([slots, 64, 32, 8, 1])
        if empty_slot is None:  # the observation's without context columns; a prior's rank column holds 1
            empty_slot = torch.tensor([0, 1, 1, 1, 1, 1, 1, 0] + [1] * max(features - 8, 0), dtype=torch.float32)
        self.register_buffer("empty_slot", empty_slot.float()[:features], persistent=False)

    def forward(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        valid = mask.nonzero(as_tuple=True)
        empty = self.per_job(self.empty_slot.to(queue.dtype)).reshape(())
        per = empty.expand(mask.shape).index_put(valid, self.per_job(queue[valid]).squeeze(-1))
        return self.head(per).squeeze(-1)


class FlatActor(nn.Module):
    """Baseline: an MLP over the flattened ``S × F`` observation, ``S`` logits."""

    def __init__(self, slots: int = 128, features: int = 8, hidden: tuple[int, ...] = (128, 128, 128)) -> None:
        super().__init__()
        self.net = mlp([slots * features, *hidden, slots])

    def forward(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.net(queue.flatten(1)).masked_fill(~mask, MASKED_LOGIT)


class FlatCritic(nn.Module):
    """Baseline critic: an MLP over the flattened observation."""

    def __init__(self, slots: int = 128, features: int = 8, hidden: tuple[int, ...] = (128, 128, 128)) -> None:
        super().__init__()
        self.net = mlp([slots * features, *hidden, 1])

    def forward(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.net(queue.flatten(1)).squeeze(-1)


class SchedulingAgent(nn.Module):
    """Actor and critic together.

    Args:
        kind: ``kernel`` (RLScheduler) or ``flat`` (MLP baseline).
        slots, features: observation size ``(S, F)``.
        prior: the last feature is a heuristic's rank (``env.prior``); the kernel actor corrects it.
        empty_slot: ``(features,)`` the observation's empty slot (``QueueObserver.empty_slot``), for the
            kernel critic; the default is ``[0, 1, 1, 1, 1, 1, 1, 0]`` then ones.
    """

    def __init__(self, kind: str = "kernel", slots: int = 128, features: int = 8, prior: bool = False,
                 empty_slot=None) -> None:
        super().__init__()
        self.kind = kind
        if prior and kind != "kernel":
            raise ValueError("a heuristic prior needs the kernel policy")
        if kind == "kernel":
            self.actor: nn.Module = KernelActor(features, prior_slots=slots if prior else 0)
            if empty_slot is not None:
                empty_slot = torch.as_tensor(empty_slot, dtype=torch.float32)
            self.critic: nn.Module = KernelCritic(slots, features, empty_slot=empty_slot)
        elif kind == "flat":
            self.actor = FlatActor(slots, features)
            self.critic = FlatCritic(slots, features)
        else:
            raise ValueError(f"policy kind must be 'kernel' or 'flat', got {kind!r}")

    def distribution(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.actor(queue, mask))

    def value(self, queue: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.critic(queue, mask)

    @torch.no_grad()
    def act(self, queue: torch.Tensor, mask: torch.Tensor, greedy: bool = False):
        """``(actions (B,), log-probs (B,), values (B,))`` for a batch of observations."""
        dist = self.distribution(queue, mask)
        a = dist.probs.argmax(-1) if greedy else dist.sample()
        return a, dist.log_prob(a), self.value(queue, mask)
