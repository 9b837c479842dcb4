"""The symnmf step of ``torchhpc demo``: SymNMF vs SpectralClustering on scikit-learn's digits graph."""

from __future__ import annotations

import numpy as np
import torch

from .config import SolverOptions, SymnmfTour


def demo(tour: SymnmfTour, run, device: torch.device, seed: int) -> dict:
    """Cluster the symmetrised 10-NN graph of sklearn's digits with each of ``tour.algos``.

    With the job's default options (the normalised similarity, the spectral start).  Checks itself
    twice: each reported residual equals ``||A - H H^T||_F / ||A||_F`` formed densely (``A`` the
    matrix factorised), and each ARI is at least ``tour.min_ari``; SpectralClustering on the same
    graph is the anchor.

    Returns:
        ``ok``, per solver ARI / NMI / residual / iterations / seconds, the anchor's ARI / NMI, and
        the convergence plot's path (``symnmf.png`` in the demo's run folder).
    """
    import time

    from sklearn.cluster import SpectralClustering

    from torchhpc.ext.core.runs import _pyplot

    from .clustering import cluster, clustering_scores
    from .config import GraphOptions
    from .graphs import digits_graph, normalize_similarity

    g = digits_graph(10)
    normalize = GraphOptions().normalize              # the job's default: what `symnmf run` factorises
    dense = normalize_similarity(g.A, normalize).toarray()
    out: dict = {"graph": f"digits, {g.n} nodes, symmetrised 10-NN", "k": tour.k, "normalize": normalize}
    ok = True
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for algo in tour.algos:
        t0 = time.perf_counter()
        res = cluster(g.A, SolverOptions(k=tour.k, algo=algo, seed=seed, max_iter=tour.max_iter), device=device,
                      normalize=normalize)
        secs = time.perf_counter() - t0
        H = res.result.H.double().cpu().numpy()
        formed = float(np.linalg.norm(dense - H @ H.T) / np.linalg.norm(dense))
        scores = clustering_scores(g.labels, res.labels)
        check = abs(formed - res.result.residual) < 1e-6 and scores["ari"] >= tour.min_ari
        ok &= check
        out[algo] = {**scores, "residual": res.result.residual, "iterations": res.result.iterations,
                     "seconds": secs, "ok": check}
        hist = res.result.history
        ax.plot([h["time_s"] for h in hist], [h["residual"] for h in hist], label=f"{algo} (ARI {scores['ari']:.3f})")
    t0 = time.perf_counter()
    lab = SpectralClustering(n_clusters=tour.k, affinity="precomputed", random_state=seed).fit_predict(g.A)
    out["spectral_clustering"] = {**clustering_scores(g.labels, lab), "seconds": time.perf_counter() - t0}
    ax.set_xlabel("seconds")
    ax.set_ylabel("||A - HH^T|| / ||A||")
    ax.set_title(f"SymNMF on digits (SpectralClustering ARI {out['spectral_clustering']['ari']:.3f})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = run.dir / "symnmf.png"
    fig.savefig(path)
    plt.close(fig)
    out["plot"] = str(path)
    out["ok"] = bool(ok)
    return out
