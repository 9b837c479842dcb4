"""The batched block-principal-pivoting NNLS against scipy.optimize.nnls and the KKT conditions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.symnmf.nnls import nnls_bpp, nnls_kkt_violation


def _problem(m, k, n, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(m, k, generator=g, dtype=torch.float64)
    B = torch.randn(m, n, generator=g, dtype=torch.float64)
    return C, B, (C.T @ C).to(dtype), (C.T @ B).to(dtype)


@pytest.mark.parametrize("m,k,n,seed", [(5, 1, 7, 0), (12, 5, 40, 1), (40, 13, 120, 2), (60, 31, 25, 3)])
def test_bpp_equals_scipy_nnls(m, k, n, seed):
    """Every column of the batched solve equals scipy's Lawson-Hanson NNLS to 1e-10."""
    C, B, G, R = _problem(m, k, n, seed)
    X = nnls_bpp(G, R)
    ref = np.stack([scipy.optimize.nnls(C.numpy(), B[:, j].numpy())[0] for j in range(n)], axis=1)
    np.testing.assert_allclose(X.numpy(), ref, atol=1e-10)


def test_bpp_satisfies_kkt_and_warm_start_gives_the_same_optimum():
    """x >= 0, G x - r >= 0, complementarity hold; a warm start from a perturbed optimum converges to it."""
    C, B, G, R = _problem(30, 9, 500, 4)
    X = nnls_bpp(G, R)
    assert float(nnls_kkt_violation(G, R, X).max()) < 1e-12
    noisy = (X + 0.3 * torch.rand_like(X)).clamp_min(0)
    X2 = nnls_bpp(G, R, x0=noisy)
    torch.testing.assert_close(X2, X, atol=1e-11, rtol=0)


def test_bpp_float32_is_close_to_float64():
    """The float32 solve agrees with the float64 optimum to float32 accuracy."""
    C, B, G, R = _problem(25, 6, 60, 5)
    X64 = nnls_bpp(G, R)
    X32 = nnls_bpp(G.float(), R.float())
    assert X32.dtype == torch.float32
    torch.testing.assert_close(X32.double(), X64, atol=2e-4, rtol=1e-3)


def test_bpp_bad_input_is_one_clear_error():
    """Mismatched shapes and NaN are InputErrors, not tracebacks from deep inside."""
    G = torch.eye(3, dtype=torch.float64)
    with pytest.raises(InputError, match="R must be"):
        nnls_bpp(G, torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(InputError, match="finite"):
        nnls_bpp(G, torch.full((3, 2), float("nan"), dtype=torch.float64))
