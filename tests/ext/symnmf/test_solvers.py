"""SymNMF solvers: KKT conditions on random problems, the slow reference, layouts, dtypes, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from harness.tolerance import assert_same_factorisation

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.symnmf import SolverOptions, cluster, symnmf
from torchhpc.ext.symnmf.graphs import to_torch
from torchhpc.ext.symnmf.ops import LocalSimilarity
from torchhpc.ext.symnmf.reference import anls_reference, objective
from torchhpc.ext.symnmf.solvers import initial_factor


def _planted(n=40, k=3, seed=0, noise=0.0):
    """A = H* H*^T (+ symmetric nonnegative noise): a random problem with a known factorisation."""
    rng = np.random.default_rng(seed)
    Hs = rng.random((n, k)) * (rng.random((n, k)) < 0.6)
    A = Hs @ Hs.T
    if noise:
        E = rng.random((n, n)) * noise
        A = A + 0.5 * (E + E.T)
    return A


def _kkt(A, H):
    """Relative KKT residuals of min ||A - HH^T||^2, H >= 0: (min H, ||min(grad, 0)||, |<H, grad>|)."""
    grad = 4 * (H @ (H.T @ H) - A @ H)
    scale = np.linalg.norm(4 * A @ H) + 1e-300
    return H.min(), np.linalg.norm(np.minimum(grad, 0)) / scale, abs((H * grad).sum()) / (scale * np.linalg.norm(H))


@pytest.mark.parametrize("algo,iters,tol", [("anls", 300, 1e-5), ("gn", 200, 1e-8), ("hals", 600, 1e-7),
                                            ("mu", 3000, 2e-3)])
def test_every_solver_reaches_a_kkt_point(algo, iters, tol):
    """On a noisy random problem each solver ends at H >= 0 with grad >= 0 where H = 0 and H * grad = 0."""
    A = _planted(noise=0.05, seed=1)
    op = LocalSimilarity(torch.as_tensor(A))
    res = symnmf(op, SolverOptions(k=3, algo=algo, max_iter=iters, tol=0.0, pgrad_tol=1e-9, seed=2))
    H = res.H.numpy()
    hmin, neg_grad, compl = _kkt(A, H)
    assert hmin >= 0
    assert neg_grad < tol and compl < tol, (neg_grad, compl)
    # the residual the solver reports is the explicitly formed one
    assert abs(res.residual - objective(A, H) / np.linalg.norm(A)) < 1e-9


def test_exact_factorisation_is_recovered_by_gauss_newton():
    """With A = H* H*^T exactly, Gauss-Newton drives the relative residual to ~0 (quadratic convergence)."""
    A = _planted(n=30, k=3, seed=5)
    res = symnmf(LocalSimilarity(torch.as_tensor(A)), SolverOptions(k=3, algo="gn", max_iter=300, tol=0.0,
                                                                    target_residual=1e-8, seed=1))
    assert res.residual < 1e-8 and res.converged == "target_residual"


def test_anls_equals_the_row_by_row_scipy_reference():
    """Five ANLS iterations (batched BPP) equal the per-row scipy.optimize.nnls reference of eq. (21)."""
    A = _planted(n=25, k=4, noise=0.1, seed=3)
    op = LocalSimilarity(torch.as_tensor(A))
    opts = SolverOptions(k=4, algo="anls", max_iter=5, tol=0.0, seed=4)
    res = symnmf(op, opts)
    H0 = initial_factor(op, 4, opts).numpy()
    W_ref, H_ref = anls_reference(A, H0, float(A.max()) ** 2, 5)
    np.testing.assert_allclose(res.H.numpy(), H_ref, atol=1e-9)
    np.testing.assert_allclose(res.W.numpy(), W_ref, atol=1e-9)


@pytest.mark.parametrize("algo", ["anls", "gn", "hals", "mu"])
def test_sparse_csr_equals_dense(algo):
    """The torch sparse CSR path gives the dense path's factorisation H H^T and residual."""
    A = sp.random(50, 50, density=0.15, random_state=0)
    A = (A + A.T).tocsr()
    opts = SolverOptions(k=4, algo=algo, max_iter=10, tol=0.0, seed=3)
    dense = symnmf(LocalSimilarity(to_torch(A, dense=True)), opts)
    sparse = symnmf(LocalSimilarity(to_torch(A, dense=False)), opts)
    assert sparse.iterations == dense.iterations == 10
    assert_same_factorisation(sparse, dense, algo, opts.cg_tol, what=algo)


def test_float32_tracks_float64_and_seeds_are_reproducible():
    """float32 ends near the float64 residual; the same seed repeats exactly, another seed differs (random
    starts on the unnormalised A, asked for explicitly)."""
    A = _planted(n=60, k=4, noise=0.05, seed=7)
    base = dict(k=4, algo="anls", max_iter=30, tol=0.0, init="random", restarts=1)   # seeded random starts
    r64 = cluster(A, SolverOptions(**base, seed=1, dtype="float64"), device="cpu", normalize="none").result
    r32 = cluster(A, SolverOptions(**base, seed=1, dtype="float32"), device="cpu", normalize="none").result
    again = cluster(A, SolverOptions(**base, seed=1), device="cpu", normalize="none").result
    other = cluster(A, SolverOptions(**base, seed=2), device="cpu", normalize="none").result
    assert r32.H.dtype == torch.float32
    assert abs(r32.residual - r64.residual) < 1e-3
    assert torch.equal(again.H, r64.H)
    assert not torch.equal(other.H, r64.H)


def test_restarts_keep_the_lowest_residual():
    """restarts=3 of random starts (the options before the spectral start, asked for explicitly) returns the
    best of the three single runs with seeds seed + 1000003 r."""
    A = _planted(n=40, k=3, noise=0.3, seed=9)
    old = dict(k=3, algo="hals", init="random", max_iter=40)
    singles = [cluster(A, SolverOptions(**old, seed=5 + 1_000_003 * r), device="cpu", normalize="none")
               .result.residual for r in range(3)]
    best = cluster(A, SolverOptions(**old, seed=5, restarts=3), device="cpu", normalize="none").result
    assert best.residual == min(singles)


def test_stopping_rules_and_bad_h0():
    """Each stopping rule reports itself; a wrong-shaped or negative H0 is an InputError."""
    A = torch.as_tensor(_planted(n=20, k=2, noise=0.1))
    op = LocalSimilarity(A)
    assert symnmf(op, SolverOptions(k=2, max_iter=3, tol=0.0)).converged == "max_iter"
    assert symnmf(op, SolverOptions(k=2, max_iter=500, tol=1e-3)).converged == "tol"
    assert symnmf(op, SolverOptions(k=2, algo="gn", max_iter=500, tol=0, pgrad_tol=1e-3)).converged == "pgrad_tol"
    with pytest.raises(InputError, match="H0 must be"):
        symnmf(op, SolverOptions(k=2), H0=torch.ones(5, 2))
    with pytest.raises(InputError, match="nonnegative"):
        symnmf(op, SolverOptions(k=2), H0=-torch.ones(20, 2))
    with pytest.raises(InputError, match="larger than the number of nodes"):
        symnmf(op, SolverOptions(k=21))
