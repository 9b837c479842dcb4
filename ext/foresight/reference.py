"""Slow references, written straight from the definitions, for the tests (small inputs only).

* :func:`lorenzo_residual_loops` — SZ's 3D Lorenzo predictor (Tao et al., IPDPS'17, eq. 4) applied
  element by element to the pre-quantised codes, in Python loops.
* :func:`power_spectrum_full_grid` — ``P(k)`` from the full complex ``numpy.fft.fftn`` grid (no rfft
  half-plane weights), shell by shell.
* :func:`fof_brute_force` — friends of friends from all ``N^2`` periodic distances and a union-find.
"""

from __future__ import annotations

import math

import numpy as np


def lorenzo_residual_loops(x: np.ndarray, eb: float) -> tuple[np.ndarray, np.ndarray]:
    """``(q, d)`` for a 3D ``x``: ``q = floor(x / 2e + 1/2)`` and the 7-neighbour Lorenzo residual of ``q``."""
    q = np.floor(x.astype(np.float64) * (1.0 / (2.0 * eb)) + 0.5).astype(np.int64)
    n0, n1, n2 = q.shape
    d = np.zeros_like(q)

    def at(i: int, j: int, k: int) -> int:
        return int(q[i, j, k]) if i >= 0 and j >= 0 and k >= 0 else 0

    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                pred = (at(i - 1, j, k) + at(i, j - 1, k) + at(i, j, k - 1) - at(i - 1, j - 1, k)
                        - at(i - 1, j, k - 1) - at(i, j - 1, k - 1) + at(i - 1, j - 1, k - 1))
                d[i, j, k] = q[i, j, k] - pred
    return q, d


def power_spectrum_full_grid(field: np.ndarray, box: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(k, P)`` per shell ``m = 1 .. n/2`` from every mode of the full FFT grid (``field - mean``)."""
    f = field.astype(np.float64) - field.mean()
    n = f.size
    dk = np.fft.fftn(f) / n
    freqs = [np.fft.fftfreq(s, d=1.0 / s) for s in f.shape]
    mx, my, mz = np.meshgrid(*freqs, indexing="ij")
    m = np.sqrt(mx**2 + my**2 + mz**2)
    shell = np.rint(m).astype(int)
    ks, ps = [], []
    for s in range(1, min(f.shape) // 2 + 1):
        sel = shell == s
        ks.append(m[sel].mean() * 2 * math.pi / box)
        ps.append(box**3 * (np.abs(dk[sel]) ** 2).mean())
    return np.array(ks), np.array(ps)


def fof_brute_force(pos: np.ndarray, box: float, link: float) -> np.ndarray:
    """Component label (smallest member index) of every particle, from all pairwise periodic distances."""
    n = pos.shape[0]
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(n):
        d = pos[a + 1:] - pos[a]
        d -= box * np.round(d / box)
        for b in np.nonzero((d * d).sum(1) <= link * link)[0] + a + 1:
            ra, rb = find(a), find(int(b))
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([find(a) for a in range(n)])
    # the smallest member index of each component
    smallest = {}
    for a, r in enumerate(roots):
        smallest.setdefault(r, a)
    return np.array([smallest[r] for r in roots])


__all__ = ["fof_brute_force", "lorenzo_residual_loops", "power_spectrum_full_grid"]
