"""Metrics against Foresight's published rows, numpy and a brute-force SSIM."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.foresight.cinema import read_cinema
from torchhpc.ext.foresight.metrics import (
    error_histogram,
    field_metrics,
    max_abs_error,
    max_rel_error,
    mse,
    psnr,
    psnr_peak,
    ssim,
)


def test_psnr_is_foresights_definition(shared_data):
    """Foresight's published psnr column equals 20 log10(minmax) - 10 log10(mse) on every row of its NYX sweeps
    (so its PSNR is the value-range one), and ours computes the same from the same two numbers."""
    checked = 0
    for name in ("NYX_512_sz_sweep_.data.csv", "NYX_512_zfp_sweep_.data.csv"):
        _, rows = read_cinema(shared_data / "foresight" / "cinema_examples" / name)
        for r in rows:
            m, rng, p = float(r["mse"]), float(r["minmax"]), float(r["psnr"])
            if m > 0:
                assert 20 * math.log10(rng) - 10 * math.log10(m) == pytest.approx(p, abs=2e-3)
                checked += 1
    assert checked > 50
    x = torch.tensor([1.0, 3.0, 5.0, 11.0])  # range 10, peak 11
    y = x + torch.tensor([0.1, -0.1, 0.0, 0.2])
    m = float(np.mean((x.numpy() - y.numpy()) ** 2))
    assert psnr(x, y) == pytest.approx(20 * math.log10(10.0) - 10 * math.log10(m), rel=1e-6)
    assert psnr_peak(x, y) == pytest.approx(20 * math.log10(11.0) - 10 * math.log10(m), rel=1e-6)


def test_pointwise_metrics_match_numpy():
    """max abs / max rel (nonzero x) / MSE equal their numpy formulas."""
    g = np.random.default_rng(0)
    x = g.normal(size=(6, 7, 8))
    x[0, 0, 0] = 0.0
    y = x + g.normal(scale=1e-3, size=x.shape)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    assert max_abs_error(tx, ty) == pytest.approx(np.abs(x - y).max(), rel=1e-12)
    nz = x != 0
    assert max_rel_error(tx, ty) == pytest.approx((np.abs(x - y)[nz] / np.abs(x[nz])).max(), rel=1e-12)
    assert mse(tx, ty) == pytest.approx(((x - y) ** 2).mean(), rel=1e-12)
    assert psnr(tx, tx) == math.inf
    counts, edges = error_histogram(tx, ty, bins=10)
    assert int(counts.sum()) == x.size and edges.numel() == 11


def _ssim_brute(x: np.ndarray, y: np.ndarray, w: int) -> float:
    rng = x.max() - x.min()
    c1, c2 = (0.01 * rng) ** 2, (0.03 * rng) ** 2
    vals = []
    for idx in np.ndindex(*(s - w + 1 for s in x.shape)):
        sl = tuple(slice(i, i + w) for i in idx)
        a, b = x[sl].ravel(), y[sl].ravel()
        ma, mb = a.mean(), b.mean()
        va, vb, cov = a.var(), b.var(), ((a - ma) * (b - mb)).mean()
        vals.append((2 * ma * mb + c1) * (2 * cov + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2)))
    return float(np.mean(vals))


@pytest.mark.parametrize("shape", [(12, 10), (9, 8, 10)])
def test_ssim_matches_window_by_window_formula(shape):
    """SSIM (2D and 3D) equals Wang et al.'s formula evaluated window by window in numpy; identical fields give 1."""
    g = np.random.default_rng(1)
    x = g.normal(size=shape).cumsum(0)
    y = x + g.normal(scale=0.3, size=shape)
    assert ssim(torch.from_numpy(x), torch.from_numpy(y), 5) == pytest.approx(_ssim_brute(x, y, 5), rel=1e-9)
    assert ssim(torch.from_numpy(x), torch.from_numpy(x), 5) == pytest.approx(1.0)
    assert "ssim" in field_metrics(torch.from_numpy(x), torch.from_numpy(y))


def test_shape_mismatch_is_one_error():
    """Comparing fields of different shapes raises InputError naming both shapes."""
    with pytest.raises(InputError, match=r"shape mismatch: original \(4, 4\) vs reconstructed \(4, 5\)"):
        mse(torch.zeros(4, 4), torch.zeros(4, 5))


def test_pointwise_metrics_leave_out_nan_and_inf_given_back_and_flag_them_changed():
    """The metrics read the finite elements of the original; a NaN or inf given back unchanged is no error,
    one that changed is an infinite error (max error, mse) and a PSNR of -inf."""
    x = torch.linspace(0.0, 1.0, 64, dtype=torch.float64)
    x[5], x[9] = float("nan"), float("inf")
    y = x.clone()
    y[20] += 0.01
    assert max_abs_error(x, y) == pytest.approx(0.01) and mse(x, y) == pytest.approx(1e-4 / 62)
    assert math.isfinite(psnr(x, y)) and math.isfinite(psnr_peak(x, y))
    y[9] = 1.0
    assert max_abs_error(x, y) == math.inf and mse(x, y) == math.inf and max_rel_error(x, y) == math.inf
    assert psnr(x, y) == -math.inf
