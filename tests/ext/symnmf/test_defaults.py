"""SymNMF's defaults: the spectral (NNDSVD) start, restarts that keep the lowest residual, the normalisation,
the run summary naming them, and the defaults at or above SpectralClustering on a real kNN graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from torchhpc.ext.core.config import RunOptions
from torchhpc.ext.symnmf import SolverOptions, cluster, symnmf
from torchhpc.ext.symnmf.config import GraphOptions, SymnmfJob
from torchhpc.ext.symnmf.graphs import normalize_similarity
from torchhpc.ext.symnmf.ops import LocalSimilarity
from torchhpc.ext.symnmf.reference import nndsvd_reference
from torchhpc.ext.symnmf.solvers import eigengap_k, initial_factor, restart_options
from torchhpc.ext.symnmf.spectral import EIG_TOL, FILL, nndsvd_factor


def _planted(n, k, seed, noise):
    """A = H* H*^T + symmetric nonnegative noise, with the last node isolated (zero row and column)."""
    rng = np.random.default_rng(seed)
    Hs = rng.random((n, k)) * (rng.random((n, k)) < 0.5)
    E = rng.random((n, n)) * noise
    A = Hs @ Hs.T + 0.5 * (E + E.T)
    A[-1, :] = 0.0
    A[:, -1] = 0.0
    return A


def test_nndsvd_start_equals_the_dense_reference_and_is_deterministic():
    """The Krylov-based NNDSVD start equals NNDSVD from numpy's full eigh (to the eigensolver's tolerance),
    is nonnegative, keeps isolated rows 0, repeats bit for bit and does not depend on the solver's seed."""
    A = _planted(200, 3, seed=4, noise=0.2)             # 200 > 6 blocks x 13 columns: the restarts run
    op = LocalSimilarity(torch.as_tensor(A))
    H = nndsvd_factor(op, 3)
    lam, U = np.linalg.eigh(A)
    lam, U = lam[::-1], U[:, ::-1]
    # each column keeps u+ or u- by comparing their norms: that choice must be far from a tie
    margins = [abs(np.sum(np.maximum(U[:, j], 0) ** 2) - np.sum(np.maximum(-U[:, j], 0) ** 2)) for j in range(3)]
    assert min(margins) > 1e-2, margins
    # a Ritz residual <= EIG_TOL |lambda_1| moves an eigenvector by at most that over the gap to its neighbours
    gap = min(lam[j] - lam[j + 1] for j in range(3))
    tol = 10 * EIG_TOL * abs(lam[0]) / gap * np.sqrt(lam[0])
    fill = FILL * np.sqrt(A.sum() / 200 ** 2 / 3)
    ref = nndsvd_reference(A, 3, fill)
    np.testing.assert_allclose(H.numpy(), ref, atol=tol, rtol=0)
    assert (H >= 0).all() and (H[:-1] > 0).all() and (H[-1] == 0).all()
    assert torch.equal(H, nndsvd_factor(op, 3))
    assert torch.equal(initial_factor(op, 3, SolverOptions(k=3, seed=0)),
                       initial_factor(op, 3, SolverOptions(k=3, seed=5)))


SEED = 5
"""A seed whose five starts end with the lowest residual at start 2 (margin 2e-3 over the next)."""


def test_restarts_keep_the_lowest_residual_not_the_first_or_the_last():
    """With 5 starts the kept one is the argmin of the five single runs (here start 2), bit for bit."""
    A = torch.as_tensor(_planted(40, 3, seed=9, noise=0.6))
    op = LocalSimilarity(A)
    opts = SolverOptions(k=3, algo="hals", init="random", seed=SEED, restarts=5, max_iter=15, tol=0.0)
    singles = [symnmf(op, restart_options(opts, r)) for r in range(5)]
    residuals = [s.residual for s in singles]
    best = int(np.argmin(residuals))
    assert best not in (0, 4), residuals                 # so keeping the first or the last start fails
    assert sorted(residuals)[1] - residuals[best] > 1e-4  # a clear winner: the argmin is far from float noise
    res = symnmf(op, opts)
    assert res.restart == best and res.restart_residuals == residuals
    assert res.residual == residuals[best] and torch.equal(res.H, singles[best].H)
    assert len(res.history) == sum(len(s.history) for s in singles)


def test_sym_normalisation_isolates_nodes_that_only_have_a_self_loop():
    """Under sym a self-loop-only node is made isolated (one warning, row 0); none leaves A as it is."""
    A = sp.csr_matrix(np.array([[0.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]]))
    with pytest.warns(UserWarning, match="1 node"):
        N = normalize_similarity(A, "sym").toarray()
    np.testing.assert_allclose(N, [[0.0, 2.0 / np.sqrt(2 * 3), 0.0], [2.0 / np.sqrt(2 * 3), 1.0 / 3, 0.0],
                                   [0.0, 0.0, 0.0]], rtol=1e-15)
    assert (normalize_similarity(A, "none") != A).nnz == 0


def _cliques(tmp_path):
    """Three 5-cliques joined by single edges, with a labels file."""
    edges = [(c + i, c + j) for c in (0, 5, 10) for i in range(5) for j in range(i + 1, 5)] + [(4, 5), (9, 10)]
    (tmp_path / "g.txt").write_text("".join(f"{u} {v}\n" for u, v in edges))
    (tmp_path / "y.txt").write_text("0\n" * 5 + "1\n" * 5 + "2\n" * 5)
    return str(tmp_path / "g.txt"), str(tmp_path / "y.txt")


def test_run_summary_and_line_name_k_normalisation_init_and_restarts(tmp_path, capsys):
    """`symnmf run` writes k, the eigengap hint, normalize, init, restarts and the kept start into the summary
    and its printed line; the old options asked for explicitly show up the same way."""
    from torchhpc.ext.symnmf.commands import run

    graph, labels = _cliques(tmp_path)

    def job(name, **solver):
        return SymnmfJob(graph=GraphOptions(path=graph, labels=labels, **solver.pop("graph", {})),
                         solver=SolverOptions(k=3, **solver), output=str(tmp_path / name), plot=False,
                         save_h=False, run=RunOptions(progress=False))

    assert run(job("a")) == 0
    line = capsys.readouterr().out
    assert "k=3 (largest eigengap at 3), normalize sym, init nndsvd, restarts 1:" in line, line
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert (s["k"], s["eigengap_k"], s["normalize"], s["init"], s["restarts"], s["kept_start"]) == \
        (3, 3, "sym", "nndsvd", 1, 0)
    assert len(s["start_residuals"]) == 1 and s["ari"] == 1.0
    assert run(job("b", graph={"normalize": "none"}, init="random", restarts=3, max_iter=20)) == 0
    line = capsys.readouterr().out
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (s["normalize"], s["init"], s["restarts"], s["eigengap_k"]) == ("none", "random", 3, None)
    assert s["kept_start"] == int(np.argmin(s["start_residuals"])) and len(s["start_residuals"]) == 3
    assert f"normalize none, init random, restarts 3, kept start {s['kept_start']}:" in line, line
    assert eigengap_k([1.0, 0.9, 0.2, 0.1]) == 2 and eigengap_k(None) is None


def test_defaults_at_or_above_spectral_clustering_on_the_digits_graph():
    """On sklearn digits' symmetrised 10-NN graph the default ANLS run's ARI beats SpectralClustering's mean
    over seeds 0-4 by more than 0.03 (measured 0.816 vs 0.756: half the gap is slack for another CPU's
    rounding ending in a nearby minimum; the labels are argmaxes of floats)."""
    from sklearn.cluster import SpectralClustering

    from torchhpc.ext.symnmf import digits_graph
    from torchhpc.ext.symnmf.clustering import clustering_scores

    g = digits_graph(10)
    ours = cluster(g.A, SolverOptions(k=10, algo="anls"), device="cpu")  # the default start ignores the seed
    ours_ari = clustering_scores(g.labels, ours.labels)["ari"]
    spectral = np.mean([clustering_scores(g.labels, SpectralClustering(n_clusters=10, affinity="precomputed",
                                                                       random_state=s).fit_predict(g.A))["ari"]
                        for s in range(5)])
    assert ours.normalize == "sym" and ours.result.restart_residuals and len(ours.result.restart_residuals) == 1
    assert ours_ari > spectral + 0.03, (ours_ari, spectral)
