"""The spectral start of SymNMF: NNDSVD from the leading eigenpairs of ``A``, through the operator alone.

The best rank-``k`` approximation of a symmetric ``A`` without the sign constraint is
``U_k diag(lambda_k) U_k^T`` from its ``k`` largest eigenpairs (Eckart-Young on the positive part of
the spectrum); SymNMF's own minimiser lies near it when the clusters are well separated.  NNDSVD
(Boutsidis & Gallopoulos 2008) turns each rank-one term into a nonnegative one: of ``u = u+ - u-`` it
keeps the part with the larger norm, so for a symmetric ``lambda u u^T`` column ``j`` of the start is::

    h_j = sqrt(lambda_j) * (u+ if ||u+|| >= ||u-|| else u-),        lambda_j > 0
    h_j = 0,                                                           lambda_j <= 0

and the zeros are then lifted to a small positive level (NNDSVDa fills them with the mean; a fraction of
it here, so multiplicative updates can move them and the spectral pattern still dominates).  The result
depends on the eigenvectors only up to their signs, so it is deterministic for a given ``A``.

The eigenpairs come from a block Krylov space ``span{S, A S, ..., A^(q-1) S}`` (Musco & Musco 2015),
restarted from its own Ritz vectors until the ``k`` leading pairs converge, and a Rayleigh-Ritz step,
using only the operator interface of :mod:`.ops` — ``A @ X``, all-reduced ``X^T Y`` and scalar sums —
so the same code runs on one process, a row partition or the 2D grid, on any device.  Every block is
orthonormalised against the earlier ones by block Gram-Schmidt (twice) and SVQB (Stathopoulos & Wu
2002: ``Y V S^{-1/2}`` from ``Y^T Y = V S V^T``, dropping directions with ``S`` below ``eps * max(S)``),
whose only collective is the ``b x b`` Gram matrix.  The first start block ``S`` is Gaussian, drawn on
the CPU in float64 from a fixed seed for all ``n`` rows and sliced, like
:func:`~.solvers.initial_factor`: the spectral start is the same for every ``--seed`` and any number
of processes.  Within a repeated eigenvalue (one per connected component of a normalised graph) the
eigenvectors are not unique and the start block picks them.  :func:`~.reference.nndsvd_reference` is
the dense ``numpy.linalg.eigh`` version the tests compare with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KRYLOV_BLOCKS = 6
"""``q``: blocks of the Krylov space per cycle (``q`` products ``A @ X`` of ``b`` columns each)."""
OVERSAMPLE = 10
"""``b = k + OVERSAMPLE`` columns per block: the extra Ritz pairs speed up the ``k``-th one."""
MAX_CYCLES = 20
"""Restarts of the Krylov space (from the current ``b`` Ritz vectors) at most."""
EIG_TOL = 1e-6
"""Converged when ``||A u_j - lambda_j u_j|| <= EIG_TOL * |lambda_1|`` for the ``k`` leading pairs."""
FILL = 1e-2
"""Zeros of the NNDSVD start become ``FILL * sqrt(mean(A) / k)`` (the random start's mean is
``sqrt(mean(A) / k)``; 1e-3 .. 1 give the same clusters on the benchmark graphs)."""


@dataclass
class Eigenpairs:
    """Leading Ritz pairs of ``A`` (largest eigenvalues first)."""

    values: torch.Tensor
    """``(m,)`` float64 Ritz values, descending (``m <= k + OVERSAMPLE``)."""
    vectors: torch.Tensor
    """``(n_local, m)`` this rank's rows of the Ritz vectors (orthonormal over all ranks)."""


def _orthonormalise(op, Y: torch.Tensor, basis: list[torch.Tensor]) -> torch.Tensor:
    """The part of ``Y`` ``(n_local, b)`` orthogonal to ``basis``, as orthonormal columns (may be fewer)."""
    for _ in range(2):                           # block Gram-Schmidt twice ("twice is enough")
        for Q in basis:
            Y = Y - Q @ op.gram(Q, Y)
    for _ in range(2):                           # SVQB twice: the second pass repairs the first's rounding
        G = op.gram(Y).double()
        s, V = torch.linalg.eigh((G + G.T) / 2)
        keep = s > s.max().clamp_min(0) * (1e3 * torch.finfo(Y.dtype).eps)
        if not bool(keep.any()):
            return Y[:, :0]
        V = V[:, keep] / s[keep].sqrt()
        Y = Y @ V.to(Y.dtype)
    return Y


def _krylov_ritz(op, start: torch.Tensor, blocks: int, b: int):
    """Rayleigh-Ritz on ``span{S, A S, ..., A^(blocks-1) S}``: the ``b`` largest Ritz values ``(b,)``,
    their vectors ``U`` and ``A U`` (both ``(n_local, b)``)."""
    basis = [_orthonormalise(op, start, [])]
    products = []
    for j in range(blocks):
        products.append(op.matmul(basis[-1]))
        if j == blocks - 1 or sum(Q.shape[1] for Q in basis) >= op.n:
            break
        nxt = _orthonormalise(op, products[-1], basis)
        if nxt.shape[1] == 0:                    # an invariant subspace: the Krylov space is complete
            break
        basis.append(nxt)
    Q = torch.cat(basis, dim=1)
    AQ = torch.cat(products, dim=1)
    T = op.gram(Q, AQ).double()
    values, Y = torch.linalg.eigh((T + T.T) / 2)  # T = Q^T A Q
    order = torch.argsort(values, descending=True)[: min(b, values.numel())]
    Y = Y[:, order].to(Q.dtype)
    return values[order], Q @ Y, AQ @ Y


def leading_eigenpairs(op, k: int, *, seed: int = 0, blocks: int = KRYLOV_BLOCKS, oversample: int = OVERSAMPLE,
                       max_cycles: int = MAX_CYCLES, tol: float = EIG_TOL) -> Eigenpairs:
    """The ``k + oversample`` largest eigenpairs of ``A`` by restarted block Krylov and Rayleigh-Ritz.

    Each cycle builds ``blocks`` Krylov blocks from its start (cycle 0: a seeded Gaussian block; then
    the current Ritz vectors) and stops once the ``k`` leading Ritz pairs have residuals
    ``||A u - lambda u|| <= tol |lambda_1|`` (``tol`` at least ``100 eps`` of the dtype), or after
    ``max_cycles`` cycles.  Memory: ``blocks * b``
    columns of ``n_local`` rows, ``b = k + oversample``.

    Args:
        op: a similarity operator (:class:`~.ops.LocalSimilarity` or a distributed one).
        k: pairs wanted; ``oversample`` more are computed (fewer when ``n`` is small).
        seed: seed of the Gaussian start block (the same block on any number of processes).

    Returns:
        :class:`Eigenpairs` with at most ``min(n, k + oversample)`` pairs.
    """
    b = min(k + oversample, op.n)
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(op.n, b, generator=g, dtype=torch.float64)[op.owned_rows()].to(dtype=op.dtype,
                                                                                         device=op.device)
    tol = max(tol, 100 * torch.finfo(op.dtype).eps)         # float32: what its rounding allows
    for _ in range(max_cycles):
        values, U, AU = _krylov_ritz(op, start, blocks, b)
        m = min(k, U.shape[1])
        R = AU[:, :m] - U[:, :m] * values[:m].to(U.dtype)
        worst = float(op.allsum((R.double() ** 2).sum(dim=0)).max().sqrt())
        if worst <= tol * max(abs(float(values[0])), 1e-300):
            break
        start = U
    return Eigenpairs(values, U)


def nndsvd_factor(op, k: int, *, seed: int = 0, pairs: Eigenpairs | None = None) -> torch.Tensor:
    """The NNDSVD start ``(n_local, k)`` of SymNMF from the ``k`` leading eigenpairs of ``A``.

    Columns whose eigenvalue is not positive, and every zero entry, get the fill level
    ``FILL * sqrt(mean(A) / k)``; rows of isolated nodes stay 0.

    Args:
        op: a similarity operator.
        k: columns of the start.
        seed: seed of the start block of :func:`leading_eigenpairs` (its result does not depend on it
            once converged, except within a repeated eigenvalue).
        pairs: eigenpairs already computed (default: :func:`leading_eigenpairs`).
    """
    if pairs is None:
        pairs = leading_eigenpairs(op, k, seed=seed)
    U = pairs.vectors
    H = U.new_zeros((op.n_local, k))
    for j in range(min(k, U.shape[1])):
        lam = float(pairs.values[j])
        if lam <= 0:
            continue
        u = U[:, j]
        pos, neg = u.clamp_min(0), (-u).clamp_min(0)
        norms = op.allsum(torch.stack([(pos * pos).sum(), (neg * neg).sum()]).double()).cpu()
        part = pos if float(norms[0]) >= float(norms[1]) else neg       # the dominant sign
        H[:, j] = math.sqrt(lam) * part
    fill = FILL * math.sqrt(max(op.total, 0.0) / float(op.n) ** 2 / k)
    H = torch.where(H > 0, H, torch.full_like(H, fill))
    return H.masked_fill(op.isolated[:, None].to(H.device), 0.0)
