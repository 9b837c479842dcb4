"""Batched nonnegative least squares by block principal pivoting (Kim & Park, SIAM J. Sci. Comput. 2011).

Every SymNMF update of the ANLS framework is ``n`` independent NNLS problems that share one Gram
matrix: row ``i`` of the new factor solves ``min_{x >= 0} ||C x - b_i||`` whose normal equations are
``G x = r_i`` with ``G = C^T C`` (``k x k``) and ``r_i = C^T b_i``.  :func:`nnls_bpp` solves all of
them at once from ``G`` and ``R = [r_1 ... r_n]`` alone, so a distributed caller only needs the
all-reduced ``k x k`` Gram matrix and its own rows of the right-hand side.

Block principal pivoting (Kim & Park 2011, Algorithm 2) keeps, per column, a passive set ``F``
(the variables allowed to be positive) and solves the unconstrained problem on it::

    x_F = G_FF^{-1} r_F,  x_rest = 0,      y = G x - r  (the gradient; y_F = 0)

A variable is infeasible when ``x_j < 0`` (j in F) or ``y_j < 0`` (j not in F).  All infeasible
variables are exchanged at once while their count drops; after ``max_backup`` steps without a drop
only the largest-index one is exchanged (Murty's rule), which cannot cycle.  At the end ``x >= 0``,
``y >= 0`` and ``x_j y_j = 0``: the KKT conditions, hence the exact optimum of a convex problem.

The vectorised form here solves every column's masked system at once: ``M_c = (f_c f_c^T) * G + diag(1 - f_c)`` with right-hand side ``f_c * r_c`` (``f_c`` the
0/1 passive mask of column ``c``) has the solution ``x_F`` on ``F`` and ``0`` elsewhere.
"""

from __future__ import annotations

import warnings

import torch

from torchhpc.ext.core.errors import InputError


def _masked_solve(G: torch.Tensor, R: torch.Tensor, passive: torch.Tensor) -> torch.Tensor:
    """``x`` per column with ``x_F = G_FF^{-1} r_F`` and zeros off ``F``.

    Columns that share a passive set share one factorisation (Kim & Park's column grouping): the
    distinct sets are found with ``unique`` on a bit code and each masked system
    ``M = (f f^T) * G + diag(1 - f)`` is Cholesky-factorised once, in a batch; then either each group
    of columns is one multi-right-hand-side solve (few distinct sets) or every column is solved with
    its set's factor in one batched call.

    Args:
        G: ``(k, k)`` symmetric positive (semi)definite Gram matrix.
        R: ``(k, c)`` right-hand sides.
        passive: ``(k, c)`` bool passive sets.

    Returns:
        ``(k, c)`` solutions.
    """
    k, c = R.shape
    if c == 0:
        return R.clone()
    if k <= 62:
        weights = torch.bitwise_left_shift(torch.ones(k, dtype=torch.long, device=R.device),
                                           torch.arange(k, device=R.device))
        codes = (passive.long() * weights[:, None]).sum(dim=0)
        uniq, inverse = torch.unique(codes, return_inverse=True)
        f = ((uniq[:, None] & weights[None, :]) != 0).to(G.dtype)           # (u, k)
    else:  # bit codes would overflow: one system per column
        f = passive.T.to(G.dtype)
        inverse = torch.arange(c, device=R.device)
    M = f[:, :, None] * f[:, None, :] * G + torch.diag_embed(1.0 - f)       # (u, k, k)
    rhs = R * passive                                                       # zero off F: x = 0 there
    L, info = torch.linalg.cholesky_ex(M)
    if bool((info != 0).any()):  # a singular G_FF (rank-deficient C): least-squares solutions instead
        Minv = torch.linalg.pinv(M, hermitian=True)
        return torch.einsum("cij,jc->ic", Minv[inverse], rhs) * passive
    if L.shape[0] * 8 < c:  # few distinct sets: one multi-right-hand-side solve per group of columns
        X = torch.empty_like(R)
        order = torch.argsort(inverse)
        counts = torch.bincount(inverse, minlength=L.shape[0]).tolist()
        start = 0
        for u, cnt in enumerate(counts):
            if cnt:
                idx = order[start:start + cnt]
                X[:, idx] = torch.cholesky_solve(rhs[:, idx], L[u])
                start += cnt
        return X * passive
    x = torch.cholesky_solve(rhs.T[:, :, None], L[inverse])                # (c, k, 1)
    return x[:, :, 0].T * passive


def nnls_bpp(
    G: torch.Tensor, R: torch.Tensor, *, x0: torch.Tensor | None = None, max_iter: int | None = None,
    max_backup: int = 3,
) -> torch.Tensor:
    """Solve ``min_{x_c >= 0} 1/2 x_c^T G x_c - r_c^T x_c`` for every column ``c`` of ``R``.

    That is ``min ||C x_c - b_c||`` over ``x_c >= 0`` given only ``G = C^T C`` and ``R = C^T B``.

    Args:
        G: ``(k, k)`` symmetric positive definite Gram matrix (float32/float64, any device).
        R: ``(k, n)`` right-hand sides.
        x0: optional ``(k, n)`` warm start; its positive entries seed the passive sets.
        max_iter: cap on pivoting rounds (default ``5 * k + 50``); columns still infeasible then
            are returned as they stand, with a warning.
        max_backup: rounds without progress allowed before the single-exchange rule.

    Returns:
        ``(k, n)`` nonnegative solutions.

    Raises:
        InputError: shapes that do not match, or non-finite entries.
    """
    if G.dim() != 2 or G.shape[0] != G.shape[1]:
        raise InputError(f"nnls_bpp: G must be square (k, k), got {tuple(G.shape)}")
    if R.dim() != 2 or R.shape[0] != G.shape[0]:
        raise InputError(f"nnls_bpp: R must be (k, n) with k = {G.shape[0]}, got {tuple(R.shape)}")
    if not (bool(torch.isfinite(G).all()) and bool(torch.isfinite(R).all())):
        raise InputError("nnls_bpp: G and R must be finite (found NaN or inf)")
    k, n = R.shape
    max_iter = 5 * k + 50 if max_iter is None else max_iter
    G = 0.5 * (G + G.T)
    passive = (x0 > 0) if x0 is not None else torch.zeros_like(R, dtype=torch.bool)
    X = _masked_solve(G, R, passive) if x0 is not None else torch.zeros_like(R)
    Y = G @ X - R
    Y = Y.masked_fill(passive, 0.0)
    # tolerance for "negative": round-off of a solve scales with the problem's magnitude
    eps = torch.finfo(R.dtype).eps
    scale = (R.abs().amax(dim=0, keepdim=True) + (G.diagonal().abs().max() * X.abs().amax(dim=0, keepdim=True)))
    tol = 64 * k * eps * scale.clamp_min(torch.finfo(R.dtype).tiny)
    best = torch.full((n,), k + 1, dtype=torch.long, device=R.device)
    backup = torch.full((n,), max_backup, dtype=torch.long, device=R.device)
    rows = torch.arange(k, device=R.device)[:, None]
    for _ in range(max_iter):
        infeasible = (passive & (X < -tol)) | (~passive & (Y < -tol))   # (k, n)
        count = infeasible.sum(dim=0)
        active_cols = count > 0
        if not bool(active_cols.any()):
            break
        improved = active_cols & (count < best)
        best = torch.where(improved, count, best)
        backup = torch.where(improved, torch.full_like(backup, max_backup), backup)
        full = improved | (active_cols & (backup > 0))
        backup = torch.where(active_cols & ~improved & (backup > 0), backup - 1, backup)
        single = active_cols & ~full
        # full exchange: flip every infeasible variable; single: flip only the largest infeasible index
        last = torch.where(infeasible, rows, -1).amax(dim=0)            # (n,)
        flip = infeasible & full[None, :]
        flip |= (rows == last[None, :]) & single[None, :]
        passive = passive ^ flip
        cols = torch.nonzero(active_cols).flatten()
        Xc = _masked_solve(G, R[:, cols], passive[:, cols])
        Yc = (G @ Xc - R[:, cols]).masked_fill(passive[:, cols], 0.0)
        X[:, cols] = Xc
        Y[:, cols] = Yc
    else:
        left = int(((passive & (X < -tol)) | (~passive & (Y < -tol))).any(dim=0).sum())
        if left:
            warnings.warn(f"nnls_bpp: {left} of {n} columns still infeasible after {max_iter} pivoting rounds; "
                          "returning their current (clipped) solutions", RuntimeWarning, stacklevel=2)
    return X.clamp_min(0.0)


def nnls_kkt_violation(G: torch.Tensor, R: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Largest violation of the NNLS KKT conditions per column, relative to ``|R|``.

    ``x >= 0``, ``y = G x - r >= 0`` and ``x * y = 0``; returns ``(n,)``.
    """
    Y = G @ X - R
    scale = R.abs().amax(dim=0).clamp_min(1e-300) + 1e-300
    v = torch.stack([(-X).clamp_min(0).amax(dim=0), (-Y).clamp_min(0).amax(dim=0) / scale,
                     (X * Y).abs().amax(dim=0) / (scale * X.abs().amax(dim=0).clamp_min(1e-300))])
    return v.amax(dim=0)
