"""Power spectrum, FoF halo finder and turbulence statistics against analytic answers and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torchhpc.ext.foresight.analyses import (
    energy_spectrum,
    fof_halos,
    halo_mass_function_check,
    power_spectrum,
    spectrum_ratio_check,
    turbulence_check,
    velocity_gradient_stats,
)
from torchhpc.ext.foresight.data import clustered_particles, gaussian_random_field, kolmogorov_velocity
from torchhpc.ext.foresight.reference import fof_brute_force, power_spectrum_full_grid


def test_power_spectrum_matches_full_grid_fft():
    """The rfft shell sums (half-plane weights) equal the full complex FFT grid shell by shell, odd sizes too."""
    for shape in [(12, 12, 12), (9, 10, 11)]:
        f = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        ours = power_spectrum(f, box=2.0)
        k, p = power_spectrum_full_grid(f.numpy(), 2.0)
        np.testing.assert_allclose(ours["pk"].numpy(), p, rtol=1e-12)
        np.testing.assert_allclose(ours["k"].numpy(), k, rtol=1e-12)


def test_plane_wave_power_is_in_one_shell():
    """A cos(2 pi m x / L) wave: all power in shell m, and the shell's total V <delta_k^2> sum is V A^2 / 2."""
    n, m, amp, box = 16, 3, 2.5, 4.0
    x = torch.arange(n, dtype=torch.float64) * box / n
    f = amp * torch.cos(2 * math.pi * m * x / box)[:, None, None].expand(n, n, n)
    ps = power_spectrum(f, box=box)
    total = ps["pk"] * ps["modes"]
    assert float(total[m - 1]) == pytest.approx(box**3 * amp**2 / 2, rel=1e-12)
    assert float(total.sum() - total[m - 1]) == pytest.approx(0.0, abs=1e-12)
    assert float(ps["k"][m - 1]) == pytest.approx(2 * math.pi * m / box, rel=0.05)


def test_gaussian_random_field_has_its_prescribed_spectrum():
    """A GRF drawn with P(k) = A (k / k0)^-2 is measured within 4 sigma (sigma = P / sqrt(modes / 2)) per shell
    and within 2% on average."""
    power = lambda k: 1e-3 * (k / 10.0) ** -2.0  # noqa: E731
    g = gaussian_random_field(48, power, seed=7, dtype=torch.float64)
    ps = power_spectrum(g)
    expected = power(ps["k"])
    z = (ps["pk"] / expected - 1) * torch.sqrt(ps["modes"] / 2)
    assert float(z.abs().max()) < 4.0
    assert float((ps["pk"] / expected).mean()) == pytest.approx(1.0, abs=0.02)


def test_spectrum_ratio_rule():
    """A field scaled by 1.004 passes a 1% rule and fails a 0.1% rule, with max deviation 1.004^2 - 1."""
    g = gaussian_random_field(16, lambda k: k**-2.0, seed=1, dtype=torch.float64)
    a, b = power_spectrum(g), power_spectrum(1.004 * g)
    ok = spectrum_ratio_check(a, b, 0.01)
    assert ok["pass"] and ok["max_deviation"] == pytest.approx(1.004**2 - 1, rel=1e-9)
    assert not spectrum_ratio_check(a, b, 0.001)["pass"]


def test_fof_equals_brute_force_union_find():
    """Cell-list FoF gives exactly the components of the all-pairs periodic union-find (clusters crossing the
    box edge included)."""
    pos, _ = clustered_particles(6, 40, 150, radius=0.01, seed=2)
    pos[:20] = (pos[:20] + 0.995) % 1.0  # push part of one cluster across the periodic boundary
    for link in (0.004, 0.02):
        ours = fof_halos(pos, 1.0, link, min_members=1, absolute=True)["labels"].numpy()
        ref = fof_brute_force(pos.double().numpy(), 1.0, link)
        assert np.array_equal(ours, ref)


def test_fof_recovers_planted_halos():
    """Compact, well separated clusters of known size are found exactly, one halo each."""
    sizes = [200, 150, 100, 60, 30]
    pos, label = clustered_particles(5, sizes, 0, radius=0.003, seed=4, min_sep=0.2)
    res = fof_halos(pos, 1.0, 0.01, min_members=10, absolute=True)
    assert res["sizes"].tolist() == sizes
    lab = res["labels"]
    for h in range(5):
        assert lab[label == h].unique().numel() == 1


def test_fof_isolated_fraction_matches_poisson():
    """Uniform random points: the fraction with no friend within b is exp(-n 4/3 pi b^3) (Poisson), to 3 sigma."""
    n, b = 6000, 0.03
    pos = torch.rand(n, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    lab = fof_halos(pos, 1.0, b, min_members=1, absolute=True)["labels"]
    iso = float((torch.bincount(lab, minlength=n)[lab] == 1).double().mean())
    p = math.exp(-(n - 1) * 4 / 3 * math.pi * b**3)
    assert abs(iso - p) < 3 * math.sqrt(p * (1 - p) / n) + 0.01


def test_halo_mass_function_rule():
    """Identical halo catalogues pass with zero deviation; losing a third of the halos of each size fails."""
    sizes = torch.tensor([10] * 30 + [20] * 20 + [40] * 10 + [80] * 6)
    same = halo_mass_function_check(sizes, sizes, 0.05)
    assert same["pass"] and same["max_deviation"] == 0.0
    fewer = halo_mass_function_check(sizes, torch.cat([sizes[::3]]), 0.05, n_bins=4)
    assert not fewer["pass"] and fewer["halos_dec"] < fewer["halos_orig"]


def test_kolmogorov_field_is_divergence_free_gaussian_with_minus_five_thirds():
    """The synthetic velocity: spectral divergence ~ 0, gradients Gaussian (skewness ~ 0, flatness ~ 3), and
    E(k) ~ k^(-5/3) in the inertial range (fitted slope within 0.15)."""
    n = 48
    u = kolmogorov_velocity(n, seed=1, k0=2.0, dtype=torch.float64)
    kk = torch.fft.fftfreq(n, dtype=torch.float64) * n
    div = sum(torch.fft.fftn(u[c]) * kk.reshape([-1 if a == c else 1 for a in range(3)]) for c in range(3))
    assert float(div.abs().max()) < 1e-9 * float(torch.fft.fftn(u[0]).abs().max())
    st = velocity_gradient_stats(u)
    assert abs(st["skewness"]) < 0.05 and st["flatness"] == pytest.approx(3.0, abs=0.1)
    es = energy_spectrum(u)
    sel = (es["k"] / (2 * math.pi) >= 6) & (es["k"] / (2 * math.pi) <= 18)
    slope = np.polyfit(np.log(es["k"][sel].numpy()), np.log(es["ek"][sel].numpy()), 1)[0]
    assert slope == pytest.approx(-5 / 3, abs=0.15)
    assert turbulence_check(u, u)["pass"]


def test_fof_recovers_the_halo_model_mass_function():
    """Particles drawn from a halo model (dn/dM ~ M^-2 halos in a uniform background): FoF with link 0.2 finds
    the ten largest planted halos to within two particles each and 85-100% of the halos with >= 10 members."""
    from torchhpc.ext.foresight.data import halo_model_particles

    pos, label = halo_model_particles(24, seed=0)
    res = fof_halos(pos, 24.0, 0.2, min_members=10)
    planted = torch.sort(torch.bincount(label[label >= 0]), descending=True).values
    assert (res["sizes"][:10] - planted[:10]).abs().max() <= 2
    n_planted = int((planted >= 10).sum())
    assert 0.85 * n_planted <= res["sizes"].numel() <= n_planted


def test_analyses_take_numpy_arrays_as_compress_does():
    """A NumPy field, particle set or velocity gives what its tensor gives (the README's snippet passes the
    array it compressed)."""
    from torchhpc.ext.foresight.analyses import halo_mass_function

    field = gaussian_random_field(16, lambda k: (k / 4.0) ** -3.0, seed=1)
    a, b = power_spectrum(field.numpy()), power_spectrum(field)
    assert all(torch.equal(a[k], b[k]) for k in b)
    pos, _ = clustered_particles(8, 20, 100, seed=2)
    h1, h2 = fof_halos(pos.numpy(), 1.0, min_members=3), fof_halos(pos, 1.0, min_members=3)
    assert torch.equal(h1["sizes"], h2["sizes"]) and torch.equal(h1["labels"], h2["labels"])
    assert torch.equal(halo_mass_function(h2["sizes"].numpy())["counts"], halo_mass_function(h2["sizes"])["counts"])
    edges = np.logspace(0.4, 2.2, 6)
    assert torch.equal(halo_mass_function(h2["sizes"], bins=edges)["counts"],
                       halo_mass_function(h2["sizes"], bins=torch.from_numpy(edges))["counts"])
    u = kolmogorov_velocity(8, seed=3)
    assert torch.equal(energy_spectrum(u.numpy())["ek"], energy_spectrum(u)["ek"])
    assert velocity_gradient_stats(u.numpy())["flatness"] == velocity_gradient_stats(u)["flatness"]
