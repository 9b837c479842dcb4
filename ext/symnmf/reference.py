"""Slow references straight from the papers (NumPy + scipy.optimize.nnls, one row at a time).

* :func:`anls_reference` — the penalty ANLS of Kuang, Yun & Park (2015), eq. (20)-(21): each row of
  ``W`` solves the stacked least-squares problem

      min_{w >= 0} || [H; sqrt(alpha) I] w - [a_i; sqrt(alpha) h_i] ||_2

  with scipy's active-set NNLS (Lawson & Hanson), then the same for ``H`` given ``W``.
* :func:`objective` — ``||A - H H^T||_F`` formed explicitly.

Used by the tests as the independent check of the batched block-principal-pivoting solver.
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
