"""Progressive validation: every batch is scored by the model before it trains on it.

:func:`auc` is the area under the ROC curve as the Mann–Whitney rank statistic
(ties get their average rank), :func:`log_loss` the mean binary cross-entropy.
:class:`ProgressiveValidation` keeps a sliding window of the last predictions
and reports both over it, plus the running totals.
"""

from __future__ import annotations

import math

import torch


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC of ``scores`` for binary ``labels``; ``nan`` when one class is absent."""
    scores, labels = scores.reshape(-1).double(), labels.reshape(-1).bool()
    n_pos = int(labels.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    uniq, inv, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    # average rank (1-based) of each distinct score
    ends = torch.cumsum(counts, 0).double()
    avg_rank = ends - (counts.double() - 1) / 2
    rank_sum = float(avg_rank[inv][labels].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def log_loss(probs: torch.Tensor, labels: torch.Tensor, eps: float = 1e-7) -> float:
    p = probs.reshape(-1).double().clamp(eps, 1 - eps)
    y = labels.reshape(-1).double()
    return float(-(y * p.log() + (1 - y) * (1 - p).log()).mean())


class ProgressiveValidation:
    """Windowed AUC / log-loss of predictions made before training on each batch."""

    def __init__(self, window: int = 50_000):
        self.window = window
        self._p: list[torch.Tensor] = []
        self._y: list[torch.Tensor] = []
        self._n = 0
        self.total = 0
        self.total_loss = 0.0

    def update(self, probs: torch.Tensor, labels: torch.Tensor) -> None:
        p, y = probs.detach().reshape(-1).float().cpu(), labels.detach().reshape(-1).float().cpu()
        self._p.append(p)
        self._y.append(y)
        self._n += p.numel()
        while self._n - self._p[0].numel() >= self.window:
            self._n -= self._p.pop(0).numel()
            self._y.pop(0)
        self.total += p.numel()
        self.total_loss += log_loss(p, y) * p.numel()

    def result(self) -> dict[str, float]:
        if not self._p:
            return {"auc": float("nan"), "logloss": float("nan"), "ctr": float("nan")}
        p, y = torch.cat(self._p), torch.cat(self._y)
        return {"auc": auc(p, y), "logloss": log_loss(p, y), "ctr": float(y.mean()),
                "mean_logloss": self.total_loss / max(self.total, 1)}

    def state_dict(self) -> dict:
        return {"p": list(self._p), "y": list(self._y), "n": self._n, "total": self.total,
                "total_loss": self.total_loss}

    def load_state_dict(self, sd: dict) -> None:
        self._p, self._y, self._n = list(sd["p"]), list(sd["y"]), int(sd["n"])
        self.total, self.total_loss = int(sd["total"]), float(sd["total_loss"])


def is_finite(x: float) -> bool:
    return not (math.isnan(x) or math.isinf(x))


def gathered_result(pv: ProgressiveValidation, ctx=None) -> dict[str, float]:
    """AUC, log-loss and CTR over the windows of all ranks together (gathered, scored once).

    Args:
        pv: this rank's window.
        ctx: the :class:`~torchhpc.ext.core.distributed.DistContext` of a sharded job; every rank calls
            it (:meth:`~torchhpc.ext.core.distributed.DistContext.gather` of each rank's window) and gets
            the same figures.  ``None`` (or one rank): ``pv.result()``.
    """
    if ctx is None or ctx.world_size == 1:
        return pv.result()
    st = pv.state_dict()
    p = torch.cat(st["p"]) if st["p"] else torch.empty(0)
    y = torch.cat(st["y"]) if st["y"] else torch.empty(0)
    gathered = ctx.gather((p, y))
    P = torch.cat([g[0] for g in gathered])
    Y = torch.cat([g[1] for g in gathered])
    return {"auc": auc(P, Y), "logloss": log_loss(P, Y) if P.numel() else float("nan"),
            "ctr": float(Y.mean()) if Y.numel() else float("nan")}
