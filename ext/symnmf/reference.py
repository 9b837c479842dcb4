"""Slow references straight from the papers (NumPy + scipy.optimize.nnls, one row at a time).

* :func:`anls_reference` — the penalty ANLS of Kuang, Yun & Park (2015), eq. (20)-(21): each row of
  ``W`` solves the stacked least-squares problem

      min_{w >= 0} || [H; sqrt(alpha) I] w - [a_i; sqrt(alpha) h_i] ||_2

  with scipy's active-set NNLS (Lawson & Hanson), then the same for ``H`` given ``W``.
* :func:`objective` — ``||A - H H^T||_F`` formed explicitly.
* :func:`nndsvd_reference` — the NNDSVD start of Boutsidis & Gallopoulos (2008) for a symmetric
  ``A``, from every eigenpair of ``numpy.linalg.eigh``: the dense check of :mod:`.spectral`.

Used by the tests as the independent checks of the batched block-principal-pivoting solver and of the
Krylov-based spectral start.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls


def objective(A: np.ndarray, H: np.ndarray) -> float:
    """``||A - H H^T||_F`` with ``H H^T`` formed (``O(n^2 k)``)."""
    return float(np.linalg.norm(A - H @ H.T))


def _nnls_rows(F: np.ndarray, A: np.ndarray, P: np.ndarray, alpha: float) -> np.ndarray:
    """Rows ``x_i = argmin_{x >= 0} ||[F; sqrt(a) I] x - [A[:, i]; sqrt(a) P[i]]||`` (eq. (21))."""
    k = F.shape[1]
    C = np.vstack([F, np.sqrt(alpha) * np.eye(k)])
    out = np.empty((A.shape[0], k))
    for i in range(A.shape[0]):
        b = np.concatenate([A[:, i], np.sqrt(alpha) * P[i]])
        out[i] = nnls(C, b, maxiter=50 * k)[0]
    return out


def anls_reference(A: np.ndarray, H0: np.ndarray, alpha: float, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """``iterations`` rounds of penalty ANLS from ``W = H = H0``; returns ``(W, H)``."""
    H = H0.copy()
    W = H0.copy()
    for _ in range(iterations):
        W = _nnls_rows(H, A, H, alpha)
        H = _nnls_rows(W, A, W, alpha)
    return W, H


def nndsvd_reference(A: np.ndarray, k: int, fill: float) -> np.ndarray:
    """NNDSVD of a symmetric ``A`` ``(n, n)`` from its ``k`` largest eigenpairs (dense ``eigh``).

    For each pair ``(lambda, u)`` with ``lambda > 0``: ``u+ = max(u, 0)``, ``u- = max(-u, 0)``; the part
    with the larger norm ``p`` gives the column ``sqrt(lambda * ||p||^2) p / ||p||`` (the symmetric
    case of their ``sqrt(sigma m) x / ||x||``).  Zero entries (and the columns of non-positive
    eigenvalues) become ``fill``; rows of isolated nodes (all-zero rows of ``A``) stay 0.
    """
    lam, U = np.linalg.eigh(A)
    order = np.argsort(lam)[::-1][:k]
    H = np.zeros((A.shape[0], k))
    for j, i in enumerate(order):
        if lam[i] <= 0:
            continue
        pos, neg = np.maximum(U[:, i], 0.0), np.maximum(-U[:, i], 0.0)
        p = pos if pos @ pos >= neg @ neg else neg
        H[:, j] = np.sqrt(lam[i] * (p @ p)) * p / np.linalg.norm(p)
    H[H <= 0] = fill
    H[~A.any(axis=1)] = 0.0
    return H
