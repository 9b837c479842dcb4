"""sched: RLScheduler (SC20) — batch scheduling with RL, its simulator and heuristics.

``pretrained(name)`` loads a policy shipped with the package (:mod:`torchhpc.ext.sched.zoo`).
"""


def pretrained(name: str, device: str = "cpu"):
    """The shipped policy ``name`` (e.g. ``"lublin1-backfill"``) as a ready ``SchedulingAgent``; see
    :func:`torchhpc.ext.sched.zoo.pretrained` (and ``zoo.available()``, ``zoo.card(name)``)."""
    from .zoo import pretrained as _pretrained

    return _pretrained(name, device)


__all__ = ["pretrained"]
