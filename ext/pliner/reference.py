"""Slow references for the search: exhaustive ground truth, and a first-divergence report.

* :func:`exhaustive_minimum` — every subset of the candidate ops in order of size: the smallest
  sets whose enhancement fixes the divergence (the benchmark's ground truth, small programs only).
* :func:`is_one_minimal` — the definition of minimality the search promises, checked from scratch:
  the set fixes, and removing any one element breaks the fix.
* :func:`first_divergence` — what PyTorch's repro ``analyze`` mode reports: the first node, in
  graph order, whose value differs between the two configurations by more than the tolerance —
  the anchor the benchmark compares against.
"""

from __future__ import annotations

import itertools

import torch

from .config import Precision
from .oracle import Oracle
from .program import GraphProgram


def exhaustive_minimum(oracle: Oracle, candidates: list[str], max_size: int = 3) -> tuple[int | None, list[frozenset]]:
    """``(k, sets)``: the smallest size ``k <= max_size`` of a fixing set, and all fixing sets of that size.

    ``(None, [])`` when no set of at most ``max_size`` candidates fixes the divergence.
    """
    for k in range(0, max_size + 1):
        sets = [frozenset(c) for c in itertools.combinations(candidates, k) if oracle.fixes(frozenset(c))]
        if sets:
            return k, sets
    return None, []


def is_one_minimal(oracle: Oracle, atoms: frozenset) -> bool:
    """True when ``atoms`` fixes the divergence and no ``atoms - {a}`` does."""
    return oracle.fixes(atoms) and not any(oracle.fixes(atoms - {a}) for a in atoms)


def _rel(a, b) -> float:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or not a.is_floating_point():
        return 0.0
    if a.shape != b.shape:
        return float("inf")
    a, b = a.double().cpu(), b.double().cpu()  # the reference and the problem may have run on two devices
    den = float(torch.linalg.vector_norm(a))
    num = float(torch.linalg.vector_norm(a - b))
    return num / den if den > 0 else num


def first_divergence(program: GraphProgram, reference: Precision, tol: float) -> str | None:
    """The first candidate op whose output differs from the reference run by more than ``tol`` (relative L2)."""
    ref = program.trace_values(reference)
    got = program.trace_values(program.problem)
    for name in program.ops:  # graph order
        if _rel(ref[name], got[name]) > tol:
            return name
    return None


__all__ = ["exhaustive_minimum", "first_divergence", "is_one_minimal"]
