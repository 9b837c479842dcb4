"""The closed-shell (T) energy written straight from the formula, dense (small systems only).

This is the slow twin of :mod:`torchhpc.ext.ccsdt.ops` and of the Triton kernel: every
intermediate of the formula is a full ``(o, o, o, v, v, v)`` tensor, built with one
``einsum`` per term, so that each line can be read against the equations below.
It is the formula PySCF's ``pyscf.cc.ccsd_t.kernel`` evaluates for a real RHF
reference (Rendell, Lee, Komornicki, J. Chem. Phys. 94, 442 (1991)), in spatial
orbitals and chemists' notation ``(pq|rs)``; ``i, j, k, m`` are active occupied
orbitals, ``a, b, c, f`` active virtual ones.

(1) connected triples, unsymmetrised::

        w[i,j,k,a,b,c] = sum_f (ia|fb) t2[k,j,c,f] - sum_m (ia|jm) t2[m,k,b,c]

(2) disconnected triples::

        v[i,j,k,a,b,c] = (ia|jb) t1[k,c] + t2[i,j,a,b] f[k,c]

(3) the six simultaneous permutations of the pairs (i,a), (j,b), (k,c)::

        P6 x = x + x(ikj,acb) + x(jik,bac) + x(jki,bca) + x(kij,cab) + x(kji,cba)
        W = P6 w,  V = P6 v

(4) denominators ``D[i,j,k,a,b,c] = e_i + e_j + e_k - e_a - e_b - e_c``

(5) with ``Y = W + V/2`` and, at fixed ``abc``,
    ``r3(Y)_ijk = 4 Y_ijk + Y_jki + Y_kij - 2 Y_kji - 2 Y_ikj - 2 Y_jik``::

        E(T) = 1/3 sum_{ijkabc} W r3(Y) / D
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

#: the six simultaneous permutations of (i,a), (j,b), (k,c), as einsum index strings, eq. (3)
P6_PERMUTATIONS = ("ijkabc", "ikjacb", "jikbac", "jkibca", "kijcab", "kjicba")

#: refuse dense o^3 v^3 tensors larger than this (elements); the blocked path has no such limit
MAX_DENSE_ELEMENTS = 60_000_000


def _as_f64(x, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray) or not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.is_complex():
        raise InputError(f"{name}: complex tensors are not supported (real RHF reference only)")
    return x.to(torch.float64)


def p6(x: torch.Tensor) -> torch.Tensor:
    """Eq. (3): the sum of ``x`` over the six simultaneous permutations of (i,a), (j,b), (k,c).

    ``x`` is ``(o, o, o, v, v, v)``; ``x(jki,bca)`` is the tensor whose ``[i,j,k,a,b,c]``
    element is ``x[j,k,i,b,c,a]``.
    """
    return sum(torch.einsum(f"{perm}->ijkabc", x) for perm in P6_PERMUTATIONS)


def r3(y: torch.Tensor) -> torch.Tensor:
    """Eq. (5): ``4 Y_ijk + Y_jki + Y_kij - 2 Y_kji - 2 Y_ikj - 2 Y_jik``, the virtual indices fixed."""

    def occ(perm: str) -> torch.Tensor:
        return torch.einsum(f"{perm}abc->ijkabc", y)

    return 4 * y + occ("jki") + occ("kij") - 2 * occ("kji") - 2 * occ("ikj") - 2 * occ("jik")


def triples_energy_reference(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy) -> float:
    """E(T) from dense einsums over the full ``(o, o, o, v, v, v)`` triples space.

    Args:
        t1: ``(o, v)`` singles amplitudes ``t1[i,a]``.
        t2: ``(o, o, v, v)`` doubles amplitudes ``t2[i,j,a,b]``.
        ovvv: ``(o, v, v, v)`` integrals ``(ia|bc)``.
        ovoo: ``(o, v, o, o)`` integrals ``(ia|jk)``.
        ovov: ``(o, v, o, v)`` integrals ``(ia|jb)``.
        fock_ov: ``(o, v)`` occupied-virtual block of the MO Fock matrix ``f[k,c]``.
        mo_energy: ``(o + v,)`` active orbital energies, occupied first.

    Returns:
        E(T) in Hartree.

    Raises:
        InputError: the dense tensors would exceed :data:`MAX_DENSE_ELEMENTS`
            (use :func:`torchhpc.ext.ccsdt.triples_energy`).
    """
    t1, t2 = _as_f64(t1, "t1"), _as_f64(t2, "t2")
    ovvv, ovoo, ovov = _as_f64(ovvv, "ovvv"), _as_f64(ovoo, "ovoo"), _as_f64(ovov, "ovov")
    fock_ov, mo_energy = _as_f64(fock_ov, "fock_ov"), _as_f64(mo_energy, "mo_energy")
    nocc, nvir = t1.shape
    if nocc**3 * nvir**3 > MAX_DENSE_ELEMENTS:
        raise InputError(
            f"the dense reference needs {nocc}^3 x {nvir}^3 elements per tensor; "
            "use triples_energy (blocked) for systems this large"
        )
    # (1) w = sum_f (ia|fb) t2[k,j,c,f] - sum_m (ia|jm) t2[m,k,b,c]
    w = torch.einsum("iafb,kjcf->ijkabc", ovvv, t2) - torch.einsum("iajm,mkbc->ijkabc", ovoo, t2)
    # (2) v = (ia|jb) t1[k,c] + t2[i,j,a,b] f[k,c]
    v = torch.einsum("iajb,kc->ijkabc", ovov, t1) + torch.einsum("ijab,kc->ijkabc", t2, fock_ov)
    # (3) W = P6 w, V = P6 v
    W, V = p6(w), p6(v)
    # (4) D = e_i + e_j + e_k - e_a - e_b - e_c
    eo, ev = mo_energy[:nocc], mo_energy[nocc:]
    d_occ = eo[:, None, None] + eo[None, :, None] + eo[None, None, :]
    d_vir = ev[:, None, None] + ev[None, :, None] + ev[None, None, :]
    D = d_occ[:, :, :, None, None, None] - d_vir[None, None, None]
    # (5) E(T) = 1/3 sum W r3(W + V/2) / D
    Y = W + 0.5 * V
    return float((W * r3(Y) / D).sum() / 3.0)


def random_inputs(nocc: int, nvir: int, seed: int = 0, symmetric: bool = True) -> tuple[torch.Tensor, ...]:
    """Synthetic (T) inputs of the right shapes, float64, for tests and benchmarks.

    With ``symmetric=True`` they have the symmetries of real RHF quantities:
    ``t2[i,j,a,b] = t2[j,i,b,a]``, ``(ia|bc) = (ia|cb)``, ``(ia|jb) = (jb|ia)``,
    ``(ia|jk) = (ia|kj)``; occupied orbital energies in [-2, -1), virtual ones in [0.5, 2.5).
    With ``symmetric=False`` the amplitudes and integrals are plain Gaussian noise (the
    formula, and every path here, is defined for those too).

    Returns:
        ``(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy)``.
    """
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    o, v = nocc, nvir
    # scales chosen so that E(T) is of the size of a small molecule's, 1e-3 to 1e-1 Eh
    t1, fock_ov = rnd(o, v, scale=0.01), rnd(o, v, scale=0.005)
    t2, ovvv = rnd(o, o, v, v, scale=0.01), rnd(o, v, v, v, scale=0.02)
    ovoo, ovov = rnd(o, v, o, o, scale=0.02), rnd(o, v, o, v, scale=0.02)
    if symmetric:
        t2 = t2 + t2.permute(1, 0, 3, 2)
        ovvv = ovvv + ovvv.permute(0, 1, 3, 2)
        ovoo = ovoo + ovoo.permute(0, 1, 3, 2)
        ovov = ovov + ovov.permute(2, 3, 0, 1)
    e_occ = torch.sort(-2.0 + torch.rand(o, generator=g, dtype=torch.float64)).values
    e_vir = torch.sort(0.5 + 2.0 * torch.rand(v, generator=g, dtype=torch.float64)).values
    return t1, t2, ovvv, ovoo, ovov, fock_ov, torch.cat([e_occ, e_vir])
