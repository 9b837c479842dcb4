"""The analyses that matter: what a scientist computes from the field, before and after compression.

* :func:`power_spectrum` — the 3D matter power spectrum ``P(k)`` in spherical shells, and
  :func:`spectrum_ratio_check` — ``P_decompressed(k) / P_original(k)`` against ``|ratio - 1| < tol``
  for ``k <= k_max`` (Foresight's acceptance rule for cosmology: 1% up to the scales that matter).
* :func:`fof_halos` — friends-of-friends halo finding on particles (periodic box) and
  :func:`halo_mass_function` / :func:`halo_mass_function_check` — the ratio of halo counts per mass bin.
* :func:`energy_spectrum` and :func:`velocity_gradient_stats` — the turbulence statistics: kinetic-energy
  spectrum ``E(k)`` and the PDF, skewness and flatness of the longitudinal velocity gradients.

Every ``*_check`` returns ``{"pass": bool, "max_deviation": float, ...}`` plus the curves for plotting.
"""

from __future__ import annotations

import functools
import math

import torch

from torchhpc.ext.core.errors import InputError


def _tensor(x) -> torch.Tensor:
    """An analysis's array argument as a tensor: a NumPy array (or anything ``torch.as_tensor`` takes) too,
    as ``compress`` takes one."""
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


# ----------------------------------------------------------------------------- power spectrum


@functools.lru_cache(maxsize=8)
def _shells_cached(shape: tuple[int, int, int], box: float, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the rfftn grid of ``shape``: |k| (rad/length), integer shell index round(|k| / k_f) and the
    mode weight (2 for the rfft half-plane modes that stand for a conjugate pair, else 1).  Cached: a
    sweep takes the spectrum of every field of every setting on the same grid."""
    n0, n1, n2 = shape
    kf = 2 * math.pi / box
    f0 = torch.fft.fftfreq(n0, d=1.0 / n0, dtype=torch.float64, device=device)
    f1 = torch.fft.fftfreq(n1, d=1.0 / n1, dtype=torch.float64, device=device)
    f2 = torch.fft.rfftfreq(n2, d=1.0 / n2, dtype=torch.float64, device=device)
    m = torch.sqrt(f0[:, None, None] ** 2 + f1[None, :, None] ** 2 + f2[None, None, :] ** 2)
    w = torch.full((n2 // 2 + 1,), 2.0, dtype=torch.float64, device=device)
    w[0] = 1.0
    if n2 % 2 == 0:
        w[-1] = 1.0
    weight = w[None, None, :].expand(n0, n1, -1)
    return m * kf, torch.round(m).to(torch.int64), weight


def _shells(shape, box, device):
    return _shells_cached(tuple(int(s) for s in shape), float(box), str(device))


def power_spectrum(field: torch.Tensor, box: float = 1.0, overdensity: bool = False
                   ) -> dict[str, torch.Tensor]:
    """Shell-averaged power spectrum of a 3D periodic field.

    ``P(k) = V <|delta_k|^2>_shell`` with ``delta_k = (1/N) sum_x delta(x) e^{-ikx}``, ``V = box^3``; shell
    ``m`` holds the modes with ``round(|k| / k_f) = m``, ``k_f = 2 pi / box``, for ``m = 1 .. min(n)/2``.

    Args:
        field: ``(n0, n1, n2)`` real tensor.
        box: side length (the same for all three axes).
        overdensity: use ``delta = field / mean - 1`` (cosmology) instead of ``field - mean``.

    Returns:
        ``{"k": (M,) mean |k| per shell, "pk": (M,), "modes": (M,) modes per shell}``.

    Raises:
        InputError: not a 3D field.
    """
    field = _tensor(field)
    if field.dim() != 3:
        raise InputError(f"power_spectrum needs a 3D field, got shape {tuple(field.shape)}")
    f = field.to(torch.float64)
    mean = f.mean()
    delta = f / mean - 1.0 if overdensity and float(mean) != 0 else f - mean
    n = delta.numel()
    dk = torch.fft.rfftn(delta) / n
    kmag, shell, weight = _shells(tuple(delta.shape), box, delta.device)
    mmax = min(delta.shape) // 2
    sel = (shell >= 1) & (shell <= mmax)
    idx = shell[sel] - 1
    w = weight[sel]
    modes = torch.zeros(mmax, dtype=torch.float64, device=delta.device).index_add_(0, idx, w)
    power = torch.zeros_like(modes).index_add_(0, idx, w * dk.abs()[sel] ** 2)
    ksum = torch.zeros_like(modes).index_add_(0, idx, w * kmag[sel])
    vol = box**3
    return {"k": ksum / modes.clamp(min=1), "pk": vol * power / modes.clamp(min=1), "modes": modes}


def spectrum_ratio_check(orig: dict[str, torch.Tensor], dec: dict[str, torch.Tensor], tolerance: float = 0.01,
                         k_max_fraction: float = 1.0, key: str = "pk") -> dict:
    """``ratio(k) = dec / orig`` and the rule ``|ratio - 1| < tolerance`` for ``k <= k_max_fraction * k_Nyquist``.

    Returns:
        ``{"pass", "max_deviation", "k", "ratio", "k_max"}``.
    """
    k = orig["k"]
    ratio = dec[key] / orig[key].clamp(min=torch.finfo(torch.float64).tiny)
    kmax = k_max_fraction * float(k.max())
    sel = (k <= kmax + 1e-12) & (orig[key] > 0)
    dev = float((ratio[sel] - 1).abs().max()) if bool(sel.any()) else 0.0
    return {"pass": bool(dev < tolerance), "max_deviation": dev, "k": k, "ratio": ratio, "k_max": kmax}


# ----------------------------------------------------------------------------- friends of friends


def _neighbour_pairs(pos: torch.Tensor, link: float, box: float) -> tuple[torch.Tensor, torch.Tensor]:
    """All pairs ``(i, j)``, ``i < j``, closer than ``link`` (periodic minimum image), from a cell list."""
    n = pos.shape[0]
    # cells no smaller than the link; no more cells than ~8 per particle (empty cells cost time too)
    ncell = max(1, min(int(box / link), math.ceil((8 * n) ** (1 / 3)), 256))
    if ncell < 3:  # the 27 neighbour cells would repeat: all pairs directly (small boxes only)
        i, j = torch.triu_indices(n, n, 1, device=pos.device)
        d = pos[i] - pos[j]
        d = d - box * torch.round(d / box)
        keep = (d * d).sum(1) <= link * link
        return i[keep], j[keep]
    cell3 = torch.clamp((pos / box * ncell).to(torch.int64), 0, ncell - 1)
    cid = (cell3[:, 0] * ncell + cell3[:, 1]) * ncell + cell3[:, 2]
    order = torch.argsort(cid)
    sorted_cid = cid[order]
    counts = torch.bincount(sorted_cid, minlength=ncell**3)
    starts = torch.cumsum(counts, 0) - counts
    ii, jj = [], []
    ar = torch.arange(n, device=pos.device)
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                nb = (cell3 + torch.tensor([dx, dy, dz], device=pos.device)) % ncell
                nid = (nb[:, 0] * ncell + nb[:, 1]) * ncell + nb[:, 2]
                cnt = counts[nid]
                total = int(cnt.sum())
                if total == 0:
                    continue
                src = torch.repeat_interleave(ar, cnt)
                first = torch.cumsum(cnt, 0) - cnt
                within = torch.arange(total, device=pos.device) - first[src]
                dst = order[starts[nid][src] + within]
                keep = src < dst
                src, dst = src[keep], dst[keep]
                d = pos[src] - pos[dst]
                d = d - box * torch.round(d / box)
                close = (d * d).sum(1) <= link * link
                ii.append(src[close])
                jj.append(dst[close])
    if not ii:
        empty = torch.empty(0, dtype=torch.int64, device=pos.device)
        return empty, empty
    return torch.cat(ii), torch.cat(jj)


def connected_labels(n: int, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Connected components of the graph on ``n`` nodes with edges ``(i, j)``: each node's label is the
    smallest node id in its component (min-label propagation with pointer jumping)."""
    labels = torch.arange(n, device=i.device)
    if i.numel() == 0:
        return labels
    while True:
        m = torch.minimum(labels[i], labels[j])
        new = labels.clone()
        new.scatter_reduce_(0, i, m, reduce="amin")
        new.scatter_reduce_(0, j, m, reduce="amin")
        while True:  # pointer jumping: follow labels to their roots
            jumped = new[new]
            if torch.equal(jumped, new):
                break
            new = jumped
        if torch.equal(new, labels):
            return labels
        labels = new


def fof_halos(pos: torch.Tensor, box: float, linking_length: float = 0.2, min_members: int = 10,
              absolute: bool = False) -> dict[str, torch.Tensor]:
    """Friends-of-friends groups of particles in a periodic box.

    Args:
        pos: ``(N, 3)`` positions in ``[0, box)``.
        box: side length.
        linking_length: as a fraction of the mean inter-particle spacing ``box / N^(1/3)`` (the usual 0.2),
            or an absolute length with ``absolute=True``.
        min_members: the fewest particles a group needs to count as a halo.

    Returns:
        ``{"labels": (N,) component label (smallest member index), "sizes": (H,) members of each halo,
        sorted descending, "link": the absolute linking length}``.

    Raises:
        InputError: positions not ``(N, 3)``.
    """
    pos = _tensor(pos)
    if pos.dim() != 2 or pos.shape[1] != 3:
        raise InputError(f"fof_halos needs (N, 3) positions, got {tuple(pos.shape)}")
    pos = pos.to(torch.float64) % box
    n = pos.shape[0]
    link = linking_length if absolute else linking_length * box / n ** (1 / 3)
    i, j = _neighbour_pairs(pos, link, box)
    labels = connected_labels(n, i, j)
    sizes = torch.bincount(labels, minlength=n)
    sizes = sizes[sizes >= min_members]
    return {"labels": labels, "sizes": torch.sort(sizes, descending=True).values, "link": link}


def halo_mass_function(sizes: torch.Tensor, particle_mass: float = 1.0, bins: torch.Tensor | None = None,
                       n_bins: int = 8) -> dict[str, torch.Tensor]:
    """Halo counts per logarithmic mass bin: ``{"edges": (B + 1,), "counts": (B,), "mass": (B,) centres}``."""
    mass = _tensor(sizes).to(torch.float64) * particle_mass
    if bins is not None:
        bins = _tensor(bins).to(torch.float64)
    if bins is None:
        lo = float(mass.min()) if mass.numel() else particle_mass
        hi = float(mass.max()) if mass.numel() else particle_mass * 10
        bins = torch.logspace(math.log10(lo), math.log10(hi * 1.0001), n_bins + 1, dtype=torch.float64)
    idx = torch.bucketize(mass, bins, right=True) - 1
    ok = (idx >= 0) & (idx < bins.numel() - 1)
    counts = torch.bincount(idx[ok], minlength=bins.numel() - 1).to(torch.float64)
    return {"edges": bins, "counts": counts, "mass": torch.sqrt(bins[:-1] * bins[1:])}


def halo_mass_function_check(orig_sizes: torch.Tensor, dec_sizes: torch.Tensor, tolerance: float = 0.05,
                             min_count: int = 5, n_bins: int = 8) -> dict:
    """The decompressed halo mass function over the original's, in the original's bins; passes when
    ``|ratio - 1| < tolerance`` in every bin holding at least ``min_count`` original halos (and there is
    at least one such bin: a catalogue without halos is reported as not judged, never as a pass)."""
    ho = halo_mass_function(orig_sizes, n_bins=n_bins)
    hd = halo_mass_function(dec_sizes, bins=ho["edges"])
    ratio = hd["counts"] / ho["counts"].clamp(min=1)
    sel = ho["counts"] >= min_count
    judged = int(sel.sum())  # no bin with min_count original halos: nothing to judge, so no pass
    dev = float((ratio[sel] - 1).abs().max()) if judged else math.inf
    return {"pass": bool(judged and dev < tolerance), "max_deviation": dev, "judged_bins": judged,
            "mass": ho["mass"], "ratio": ratio,
            "counts_orig": ho["counts"], "counts_dec": hd["counts"], "halos_orig": int(orig_sizes.numel()),
            "halos_dec": int(dec_sizes.numel())}


# ----------------------------------------------------------------------------- turbulence


def energy_spectrum(u: torch.Tensor, box: float = 1.0) -> dict[str, torch.Tensor]:
    """Kinetic-energy spectrum of a periodic velocity field ``u (3, n, n, n)``: ``E(k)`` is the shell
    *sum* of ``(1/2) |u_k|^2`` (so ``sum_k E(k) = (1/2) <|u|^2>`` up to the modes past the last shell).

    Returns:
        ``{"k": (M,), "ek": (M,), "modes": (M,)}``.
    """
    u = _tensor(u)
    if u.dim() != 4 or u.shape[0] != 3:
        raise InputError(f"energy_spectrum needs a (3, n, n, n) velocity, got {tuple(u.shape)}")
    shape = tuple(u.shape[1:])
    kmag, shell, weight = _shells(shape, box, u.device)
    mmax = min(shape) // 2
    n = math.prod(shape)
    e = sum(torch.fft.rfftn(u[c].to(torch.float64)).abs() ** 2 for c in range(3)) / n**2
    sel = (shell >= 1) & (shell <= mmax)
    idx = shell[sel] - 1
    w = weight[sel]
    modes = torch.zeros(mmax, dtype=torch.float64, device=u.device).index_add_(0, idx, w)
    ek = torch.zeros_like(modes).index_add_(0, idx, 0.5 * w * e[sel])
    ksum = torch.zeros_like(modes).index_add_(0, idx, w * kmag[sel])
    return {"k": ksum / modes.clamp(min=1), "ek": ek, "modes": modes}


def velocity_gradients(u: torch.Tensor, box: float = 1.0) -> torch.Tensor:
    """The longitudinal gradients ``(du/dx, dv/dy, dw/dz)`` by second-order central differences
    (periodic): ``(3, n, n, n)``."""
    u = _tensor(u)
    h = box / u.shape[1]
    return torch.stack([(torch.roll(u[c], -1, c) - torch.roll(u[c], 1, c)) / (2 * h) for c in range(3)])


def velocity_gradient_stats(u: torch.Tensor, box: float = 1.0, bins: int = 61, span: float = 8.0) -> dict:
    """PDF of the longitudinal velocity gradient (normalised by its r.m.s.), its skewness and flatness."""
    g = velocity_gradients(_tensor(u).to(torch.float64), box).reshape(-1)
    g = g - g.mean()
    s = g.std()
    z = g / s
    edges = torch.linspace(-span, span, bins + 1, dtype=torch.float64)
    counts = torch.histc(z, bins=bins, min=-span, max=span)
    pdf = counts / (counts.sum() * (edges[1] - edges[0]))
    return {"skewness": float((z**3).mean()), "flatness": float((z**4).mean()), "rms": float(s),
            "centres": 0.5 * (edges[1:] + edges[:-1]), "pdf": pdf}


def turbulence_check(u_orig: torch.Tensor, u_dec: torch.Tensor, tolerance: float = 0.01, k_max_fraction: float = 1.0,
                     moment_tolerance: float = 0.05, box: float = 1.0) -> dict:
    """``E_dec(k) / E_orig(k)`` within ``tolerance`` up to ``k_max``, and the velocity-gradient skewness
    and flatness within ``moment_tolerance`` (absolute for skewness, relative for flatness)."""
    eo, ed = energy_spectrum(u_orig, box), energy_spectrum(u_dec, box)
    spec = spectrum_ratio_check(eo, ed, tolerance, k_max_fraction, key="ek")
    go, gd = velocity_gradient_stats(u_orig, box), velocity_gradient_stats(u_dec, box)
    dskew = abs(gd["skewness"] - go["skewness"])
    dflat = abs(gd["flatness"] / go["flatness"] - 1)
    ok = spec["pass"] and dskew < moment_tolerance and dflat < moment_tolerance
    return {"pass": bool(ok), "max_deviation": spec["max_deviation"], "k": spec["k"], "ratio": spec["ratio"],
            "skewness": (go["skewness"], gd["skewness"]), "flatness": (go["flatness"], gd["flatness"]),
            "pdf_centres": go["centres"], "pdf_orig": go["pdf"], "pdf_dec": gd["pdf"]}


ANALYSES = ("power_spectrum", "halo_mass_function", "turbulence")

__all__ = ["ANALYSES", "connected_labels", "energy_spectrum", "fof_halos", "halo_mass_function",
           "halo_mass_function_check", "power_spectrum", "spectrum_ratio_check", "turbulence_check",
           "velocity_gradient_stats", "velocity_gradients"]
