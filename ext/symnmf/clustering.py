"""One call from a similarity matrix to clusters (check, convert, solve, label), and how good they are.

Labels from ``H`` (:func:`assign_clusters`, ``SolverOptions.assign``): the argmax of each row (Kuang, Ding
& Park's rounding), k-means on the rows of ``D^-1/2 H`` (spectral clustering's rounding of its
embedding), or ``auto``: of those two partitions, the one whose best one-cluster-per-node factor fits
``A`` better.  For a partition into clusters ``C``, the nonnegative ``H`` with one nonzero per row on
that partition is block-diagonal in ``H H^T``, and its least residual is ``||A||^2 - sum_C
lambda_1(A_CC)^2`` (the best rank-one nonnegative fit of a nonnegative block is its Perron pair), so
``auto`` keeps the partition with the larger :func:`hard_fit`: the SymNMF objective itself, restricted
to hard clusterings; no ground truth is involved.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from torchhpc.ext.core.device import pick_device
from torchhpc.ext.core.errors import InputError

from .config import SolverOptions
from .graphs import check_similarity, cluster_labels, normalize_similarity, to_torch
from .ops import LocalSimilarity
from .solvers import DTYPES, SymNMFResult, symnmf


@dataclass
class ClusterResult:
    labels: np.ndarray
    """``(n,)`` each node's cluster (``-1`` for isolated nodes), by :func:`assign_clusters`."""
    result: SymNMFResult
    normalize: str = "sym"
    """The scaling applied to ``A`` before it was factorised (``sym``: ``D^-1/2 A D^-1/2``; ``none``)."""
    assigned_by: str = "argmax"
    """The rounding that gave ``labels``: ``argmax`` or ``kmeans`` (what ``auto`` chose)."""


def choose_layout(A: sp.csr_matrix, layout: str = "auto") -> bool:
    """True for a dense tensor: ``dense``, or ``auto`` with n <= 20000 and more than 5% nonzeros."""
    if layout == "auto":
        n = A.shape[0]
        return n <= 20_000 and A.nnz > 0.05 * n * n
    return layout == "dense"


def cluster(A: sp.spmatrix | np.ndarray | torch.Tensor, opts: SolverOptions, *, device: str | torch.device = "auto",
            symmetrize: bool = False, layout: str = "auto", normalize: str = "sym", callback=None) -> ClusterResult:
    """SymNMF clustering of a similarity matrix on one process.

    Args:
        A: ``(n, n)`` symmetric nonnegative matrix (scipy sparse, numpy or a dense tensor).
        opts: solver options (``k``, ``algo``, ``seed``, ``init``, ``restarts``, ``dtype`` ...).
        normalize: ``sym`` factorises ``D^-1/2 A D^-1/2`` (the default, as the job's ``graph.normalize``;
            Kuang, Ding & Park 2012), ``none`` factorises ``A`` itself.
        device: where ``A`` and ``H`` live: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``
            (the job's ``dist.device``).
        symmetrize: replace an asymmetric ``A`` by ``(A + A^T) / 2`` with a warning instead of failing.
        layout: ``dense``, ``sparse`` (torch CSR) or ``auto``.

    Raises:
        InputError: see :func:`~.graphs.check_similarity`, or an unusable ``device``.
    """
    if isinstance(A, torch.Tensor):
        A = A.to_dense().cpu().double().numpy() if A.layout != torch.strided else A.cpu().double().numpy()
    A, _ = check_similarity(A, opts.k, symmetrize=symmetrize)
    degrees = np.asarray(A.sum(axis=1)).ravel()
    A = normalize_similarity(A, normalize)
    dev = pick_device(device)
    At = to_torch(A, dense=choose_layout(A, layout), dtype=DTYPES[opts.dtype], device=dev)
    res = symnmf(LocalSimilarity(At), opts, callback=callback)
    labels, how = assign_clusters(res.H, A, opts.assign, seed=opts.seed, degrees=degrees if normalize == "sym" else None)
    return ClusterResult(labels, res, normalize, how)


#: relative margin by which k-means' hard fit must beat argmax's for ``auto`` to take it
FIT_TIE = 1e-9

#: blocks up to this many nodes get a dense eigensolver in :func:`hard_fit`, larger ones Lanczos
DENSE_BLOCK_MAX = 600


def hard_fit(A: sp.spmatrix, labels: np.ndarray) -> float:
    """``sum_C lambda_1(A_CC)^2`` over the clusters ``C`` of ``labels`` (``-1``: left out): ``||A||_F^2``
    minus the least ``||A - H H^T||_F^2`` over nonnegative ``H`` with one nonzero per row on this partition."""
    A = sp.csr_matrix(A)
    total = 0.0
    for c in np.unique(labels[labels >= 0]):
        idx = np.flatnonzero(labels == c)
        B = A[idx][:, idx]
        if B.nnz == 0:
            continue
        if idx.size <= DENSE_BLOCK_MAX:
            lam = float(np.linalg.eigvalsh(B.toarray())[-1])
        else:  # the Perron root of a nonnegative block is its largest eigenvalue
            lam = _perron_root(B.astype(np.float64))
        total += max(lam, 0.0) ** 2
    return total


#: Lanczos restarts :func:`hard_fit` allows a large block (a path-like block whose top eigenvalues are nearly
#: equal converges slowly; the estimate it has then is used: a lower bound of the Perron root)
PERRON_MAXITER = 300


def _perron_root(B: sp.spmatrix) -> float:
    """The largest eigenvalue of a nonnegative symmetric block, by Lanczos within :data:`PERRON_MAXITER`."""
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    v0 = np.ones(B.shape[0])
    try:
        # tol bounds the Ritz residual; the eigenvalue's own error is about its square (1e-9 on a 20,000-node
        # path, the slow case); a larger Krylov space than the default converges in far fewer restarts there
        return float(eigsh(B, k=1, which="LA", v0=v0, tol=1e-6, ncv=min(B.shape[0] - 1, 64),
                           maxiter=PERRON_MAXITER, return_eigenvectors=False)[0])
    except ArpackNoConvergence as exc:
        if len(exc.eigenvalues):
            return float(np.max(exc.eigenvalues))
        return float(v0 @ (B @ v0) / (v0 @ v0))  # the Rayleigh quotient of the all-ones start


def kmeans_labels(H: torch.Tensor, k: int, seed: int = 0, degrees: np.ndarray | None = None) -> np.ndarray:
    """k-means (scikit-learn, 10 starts seeded by ``seed``) on the rows of ``D^-1/2 H`` (``degrees``: the
    diagonal of ``D``; ``None``: the rows of ``H``); rows of ``H`` that are all zero get ``-1``."""
    from sklearn.cluster import KMeans

    X = H.detach().cpu().double().numpy()
    live = X.max(axis=1) > 0
    labels = np.full(X.shape[0], -1, dtype=np.int64)
    if degrees is not None:
        X = X / np.sqrt(np.maximum(np.asarray(degrees, dtype=np.float64), np.finfo(np.float64).tiny))[:, None]
    n_live = int(live.sum())
    if n_live == 0:
        return labels
    with warnings.catch_warnings():  # fewer distinct rows than k: scikit-learn warns and still labels them
        warnings.simplefilter("ignore")
        labels[live] = KMeans(n_clusters=min(k, n_live), n_init=10, random_state=seed).fit_predict(X[live])
    return labels


def assign_clusters(H: torch.Tensor, A: sp.spmatrix, how: str = "auto", *, seed: int = 0,
                    degrees: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """Each node's cluster from the factor ``H`` of ``A`` (the matrix that was factorised), and which
    rounding gave it (see the module docstring): ``argmax``, ``kmeans`` (on ``D^-1/2 H`` with ``degrees``,
    the row sums before the ``sym`` scaling; on ``H`` without them) or ``auto`` (the larger
    :func:`hard_fit`; argmax on a tie, within a relative :data:`FIT_TIE`).

    Raises:
        InputError: an unknown ``how``.
    """
    if how not in ("auto", "argmax", "kmeans"):
        raise InputError(f"assign must be auto, argmax or kmeans; got {how!r}")
    by_max = cluster_labels(H)
    if how == "argmax":
        return by_max, "argmax"
    by_means = kmeans_labels(H, H.shape[1], seed, degrees)
    if how == "kmeans":
        return by_means, "kmeans"
    # the same partition numbered otherwise sums its blocks in another order: a tie within rounding
    fit_max = hard_fit(A, by_max)
    if hard_fit(A, by_means) > fit_max * (1 + FIT_TIE):
        return by_means, "kmeans"
    return by_max, "argmax"


def clustering_scores(truth: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ARI and NMI (scikit-learn) over the nodes whose ground truth is known (``>= 0``)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    known = truth >= 0
    return {"ari": float(adjusted_rand_score(truth[known], labels[known])),
            "nmi": float(normalized_mutual_info_score(truth[known], labels[known]))}
