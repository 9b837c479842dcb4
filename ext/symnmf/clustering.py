"""One call from a similarity matrix to clusters (check, convert, solve, label), and how good they are."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from torchhpc.ext.core.device import pick_device

from .config import SolverOptions
from .graphs import check_similarity, cluster_labels, normalize_similarity, to_torch
from .ops import LocalSimilarity
from .solvers import DTYPES, SymNMFResult, symnmf


@dataclass
class ClusterResult:
    labels: np.ndarray
    """``(n,)`` argmax of each row of ``H`` (``-1`` for isolated nodes)."""
    result: SymNMFResult
    normalize: str = "sym"
    """The scaling applied to ``A`` before it was factorised (``sym``: ``D^-1/2 A D^-1/2``; ``none``)."""


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
    A = normalize_similarity(A, normalize)
    dev = pick_device(device)
    At = to_torch(A, dense=choose_layout(A, layout), dtype=DTYPES[opts.dtype], device=dev)
    res = symnmf(LocalSimilarity(At), opts, callback=callback)
    return ClusterResult(cluster_labels(res.H), res, normalize)


def clustering_scores(truth: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ARI and NMI (scikit-learn) over the nodes whose ground truth is known (``>= 0``)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    known = truth >= 0
    return {"ari": float(adjusted_rand_score(truth[known], labels[known])),
            "nmi": float(normalized_mutual_info_score(truth[known], labels[known]))}
