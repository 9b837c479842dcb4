"""Margins of the discrete choices that floats feed: how far a sampled or greedy action was from flipping.

A policy's sampled action is a discrete outcome of float probabilities.  Another CPU computes those
probabilities a few ulps differently (oneDNN and MKL pick kernels by CPU model), so a pinned trajectory
holds on every CPU only if no choice was closer to flipping than that.  :class:`ChoiceMargins` records,
for every draw, the relative margin of the winner over the runner-up; a test asserts the smallest one.

``torch.multinomial(p, 1)`` draws by the exponential-race form of the Gumbel-max trick: with
``q ~ Exp(1)`` from the same generator, the sample is ``argmax(p / q)``.  The recorder draws ``q`` from a
copy of the generator's state, checks that the op returns that argmax (so the margin is the op's own),
then puts the state back, so the run draws exactly what it would draw unrecorded.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _relative_gap(scores: torch.Tensor) -> torch.Tensor:
    """``(r1 - r2) / |r1|`` per row of ``(rows, n)`` scores: the relative change that swaps the top two."""
    if scores.shape[-1] < 2:
        return torch.full(scores.shape[:-1], float("inf"), dtype=torch.float64)
    top = scores.double().topk(2, dim=-1).values
    gap = (top[..., 0] - top[..., 1]) / top[..., 0].abs()
    return torch.where(torch.isfinite(top[..., 1]), gap, torch.full_like(gap, float("inf")))


class ChoiceMargins(TorchDispatchMode):
    """Record the relative margin of every ``multinomial(p, 1)`` draw and of every float ``argmax``.

    Attributes:
        sampled: one margin per drawn row of ``multinomial``.
        greedy: one margin per row of a float ``argmax`` over the last dimension.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sampled: list[float] = []
        self.greedy: list[float] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.multinomial.default and args[1] == 1:
            probs = args[0]
            gen = kwargs.get("generator") or torch.default_generator
            state = gen.get_state()
            q = torch.empty_like(probs).exponential_(1, generator=gen)
            race = probs / q
            gen.set_state(state)
            out = func(*args, **kwargs)
            if not torch.equal(out.squeeze(-1), race.argmax(-1)):
                raise AssertionError("multinomial(p, 1) did not draw argmax(p / Exp(1)): the margin model is wrong")
            self.sampled += _relative_gap(race.reshape(-1, race.shape[-1])).tolist()
            return out
        if func is aten.argmax.default and args[0].is_floating_point() and args[0].dim() >= 1:
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            if dim in (-1, args[0].dim() - 1):
                x = args[0]
                self.greedy += _relative_gap(x.reshape(-1, x.shape[-1])).tolist()
        return func(*args, **kwargs)

    @property
    def smallest(self) -> float:
        """The smallest margin seen (``inf`` when nothing was chosen)."""
        return min([*self.sampled, *self.greedy], default=float("inf"))
