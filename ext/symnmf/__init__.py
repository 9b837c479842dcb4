"""symnmf: symmetric nonnegative matrix factorisation min ||A - H H^T||_F^2, H >= 0, for graph clustering.

After Eswar, Hayashi, Ballard, Kannan, Vuduc & Park, "Distributed-Memory Parallel Symmetric Nonnegative
Matrix Factorization" (SC20) and its PLANC library: ANLS with block principal pivoting, HALS, projected
Gauss-Newton and multiplicative updates, on one process or a 1D / 2D torch.distributed process grid.

    from torchhpc.ext.symnmf import SolverOptions, cluster, digits_graph
    g = digits_graph()
    out = cluster(g.A, SolverOptions(k=10, algo="anls"))      # out.labels, out.result.residual
    out = cluster(g.A, SolverOptions(k=10), device="cuda")    # where A and H live (default: auto)

The defaults factorise the normalised similarity ``D^-1/2 A D^-1/2`` from the spectral (NNDSVD) start
of :mod:`.spectral`, one start, and label by argmax or k-means, whichever fits better
(:func:`~.clustering.assign_clusters`); ``cluster(A, SolverOptions(k, init="random", assign="argmax"),
normalize="none")`` is the unnormalised problem from a seeded random start, as before those defaults.

The command ``torchhpc symnmf run/segment`` is :mod:`.commands`; its options are :mod:`.config`.
"""

from torchhpc.ext.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "ClusterResult": "clustering", "cluster": "clustering", "clustering_scores": "clustering",
    "ALGOS": "config", "GraphOptions": "config", "SolverOptions": "config", "SymnmfJob": "config",
    "Graph": "graphs", "check_similarity": "graphs", "digits_graph": "graphs", "knn_similarity": "graphs",
    "read_graph": "graphs", "stochastic_block_model": "graphs", "normalize_similarity": "graphs",
    "nnls_bpp": "nnls", "SymNMFResult": "solvers", "symnmf": "solvers", "leading_eigenpairs": "spectral",
    "nndsvd_factor": "spectral",
})
