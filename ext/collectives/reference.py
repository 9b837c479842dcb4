"""Slow, single-process references: what a neighbourhood all-to-all must deliver, and a hop-by-hop walk of a plan.

* :func:`deliver_direct`: every message straight to its destination (the definition of
  ``MPI_Neighbor_alltoallv``): rank ``d`` receives, from each source ``s``, the bytes ``s`` sent to ``d``.
* :func:`walk_plan`: moves each piece of each message along its route ``[s, a, b, d]`` phase by
  phase, checking that a rank only forwards what it holds, and reassembles the messages at their
  destinations; used by the demo and the tests to check a plan without launching processes.
"""

from __future__ import annotations

import numpy as np

from .plan import NPHASES, Plan


def deliver_direct(src: np.ndarray, dst: np.ndarray, messages: list[bytes]) -> dict[tuple[int, int], bytes]:
    """``{(s, d): bytes}`` as received."""
    return {(int(s), int(d)): m for s, d, m in zip(src, dst, messages, strict=True)}


def walk_plan(plan: Plan, src: np.ndarray, dst: np.ndarray, messages: list[bytes]) -> dict[tuple[int, int], bytes]:
    """Deliver ``messages`` by following ``plan``; ``{(s, d): bytes}`` as reassembled at ``d``.

    Raises:
        AssertionError: a rank forwards a piece it does not hold, or a piece ends elsewhere than at ``d``.
    """
    holder = plan.route[:, 0].copy()
    data = [messages[int(e)][int(o):int(o) + int(n)] for e, o, n in zip(plan.edge, plan.offset, plan.nbytes,
                                                                         strict=True)]
    for p in range(NPHASES):
        for k in range(len(holder)):
            x, y = plan.route[k, p], plan.route[k, p + 1]
            if x != y:
                assert holder[k] == x, f"piece {k}: rank {x} forwards it in phase {p} but rank {holder[k]} holds it"
                holder[k] = y
    out = {}
    for e, (s, d) in enumerate(zip(src, dst, strict=True)):
        ids = plan.pieces_of(e)
        assert (holder[ids] == d).all(), f"edge {s}->{d}: a piece ended at another rank"
        out[(int(s), int(d))] = b"".join(data[k] for k in ids)
    return out


__all__ = ["deliver_direct", "walk_plan"]
