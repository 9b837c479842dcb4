"""The (T) energy: input checks, the blocked CPU/torch path, the Triton path and one dispatch.

:func:`triples_energy` evaluates the formula of :mod:`torchhpc.ext.ccsdt.reference`
(PySCF's closed-shell (T), eqs. (1)-(5) there) without ever holding the
``o^3 v^3`` triples tensor:

* **torch path** (:func:`triples_energy_torch`, the CPU path; it also runs on CUDA
  tensors). The energy summand is invariant under the simultaneous permutations of
  ``(i,a), (j,b), (k,c)``, so only occupied triples ``i >= j >= k`` are visited
  (weight 6 when distinct, 3 when two are equal; ``i = j = k`` contributes exactly
  zero because ``r3`` then annihilates a fully symmetric ``Y``). For one triple the
  whole ``(v, v, v)`` tile ``W_ijk[a,b,c]`` is four GEMMs ``(v or 2v) x (v+o) -> v^2``
  (see :class:`_Intermediates`): each stacks a particle term (sum over a virtual ``f``,
  the ``o^3 v^4`` part) on a hole term (sum over an occupied ``m``, the ``o^4 v^3``
  part) along the contracted dimension and writes one of three layouts, which the P6
  symmetrisation adds with two transposed adds; ``r3`` needs the cyclic sum of ``Y``
  and one transposition of it. Why occupied rather than virtual triples: a triple's
  whole virtual tile is then local, so every permutation of P6 and ``r3`` acts inside
  one ``v^3`` buffer, and the GEMMs have ``v^2`` columns. Measured here (single-thread
  MKL), the GEMM rate alone does not separate the two choices (25-40 GFLOP/s for these
  shapes, 30-45 particle and 14-32 hole for virtual tiles of 8-16); the virtual-triple
  variant was not built — PySCF's C code is that variant, and this path runs about
  2x faster than it on the same inputs (``benchmarks/ccsdt.py``).
  Triples are processed in blocks: the GEMMs per triple, the rest (disconnected
  terms, ``r3``, the denominator, the energy) batched over the block, blocks shared
  out to worker threads. ``max_memory`` (MB) bounds the work buffers and so picks the
  block size.
* **Triton path** (:func:`triples_energy_triton`): the fused kernel of
  :mod:`torchhpc.triton_kernels.ccsdt`, one program per (occupied triple, virtual
  tile triple); only partial energies leave the kernel.
* **out of core** (:mod:`torchhpc.ext.ccsdt.slices`): when ``max_memory`` cannot hold the in-core
  operands (:func:`fits_in_core`), the torch path keeps the integrals in host memory and streams their
  occupied slices through a bounded cache; with ``group=`` the triples are shared out over the ranks
  of a process group (:mod:`torchhpc.ext.ccsdt.distributed`).
* :func:`triples_energy` checks the inputs and runs what :func:`triples_backend` picks
  (``resolve_backend`` of :mod:`torchhpc.ext.core.dispatch`; ``auto``: Triton on CUDA for
  ``nvir <= 64``, torch otherwise).

FLOP count (:func:`triples_flops`): ``2 o^3 v^4 + 2 o^4 v^3`` — the particle and hole
contractions for all ``o^3`` ordered triples, a multiply-add counted as two flops.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import torch

from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError

from .config import DEFAULT_MAX_MEMORY_MB

#: names of the arrays :func:`triples_energy` takes, in order
INPUT_NAMES = ("t1", "t2", "ovvv", "ovoo", "ovov", "fock_ov", "mo_energy")


#: the blocked path keeps a block's work buffers (four (v, v, v) per triple) below this many bytes when it
#: can, so that the batched elementwise passes stay in the last-level cache (32 MB L3 on the 2-core EPYC)
CACHE_BLOCK_BYTES = 24 * 2**20


def triples_flops(nocc: int, nvir: int) -> float:
    """Floating-point operations of one (T) evaluation: ``2 o^3 v^4 + 2 o^4 v^3``.

    The particle term ``sum_f (ia|fb) t2[k,j,c,f]`` costs ``o^3 v^3 * v`` multiply-adds and
    the hole term ``sum_m (ia|jm) t2[m,k,b,c]`` ``o^3 v^3 * o``, over all ``o^3`` ordered
    occupied triples (what visiting ``i >= j >= k`` with its six permutations amounts to);
    a multiply-add is two flops. Lower-order work (``O(o^3 v^3)``) is not counted.
    """
    o, v = float(nocc), float(nvir)
    return 2.0 * o**3 * v**4 + 2.0 * o**4 * v**3


# ----------------------------------------------------------------------------- input checks


def _to_tensor(x, name: str, device: torch.device | None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            arr = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise InputError(f"{name}: cannot be read as an array ({exc})") from exc
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise InputError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
        if np.iscomplexobj(arr):
            raise InputError(f"{name}: complex values are not supported (real closed-shell RHF reference only)")
        if not arr.flags.writeable:  # torch.as_tensor warns on read-only memory (np.load mmap, PySCF views)
            arr = arr.copy()
        x = torch.as_tensor(arr)
    if x.is_complex():
        raise InputError(f"{name}: complex values are not supported (real closed-shell RHF reference only)")
    return x.to(device=device if device is not None else x.device, dtype=torch.float64)


def check_inputs(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, device: str | torch.device | None = None):
    """Validate and convert the (T) inputs to float64 tensors on one device.

    Shapes (``o`` active occupied, ``v`` active virtual orbitals, both taken from ``t1``):
    ``t1 (o, v)``, ``t2 (o, o, v, v)``, ``ovvv (o, v, v, v)``, ``ovoo (o, v, o, o)``,
    ``ovov (o, v, o, v)``, ``fock_ov (o, v)``, ``mo_energy (o + v,)``.

    Returns:
        the seven tensors, float64, on ``device`` (default: where ``t1`` is).

    Raises:
        InputError: a shape that disagrees with ``t1`` (the message names the argument, the
            expected and the actual shape), NaN or Inf values (named with the first bad index),
            complex values, or occupied orbital energies that are not all below the virtual
            ones (the denominators could vanish).
    """
    dev = None if device is None else torch.device(device)
    if dev is None and isinstance(t1, torch.Tensor):
        dev = t1.device
    arrays = [_to_tensor(x, name, dev) for x, name in zip((t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy),
                                                          INPUT_NAMES, strict=True)]
    t1 = arrays[0]
    if t1.dim() != 2 or t1.shape[0] < 1 or t1.shape[1] < 1:
        raise InputError(f"t1: expected a 2-D (nocc, nvir) array with nocc, nvir >= 1, got shape {tuple(t1.shape)}")
    o, v = t1.shape
    expected = {
        "t2": (o, o, v, v), "ovvv": (o, v, v, v), "ovoo": (o, v, o, o), "ovov": (o, v, o, v),
        "fock_ov": (o, v), "mo_energy": (o + v,),
    }
    layout = {"t2": "(o, o, v, v)", "ovvv": "(o, v, v, v)", "ovoo": "(o, v, o, o)", "ovov": "(o, v, o, v)",
              "fock_ov": "(o, v)", "mo_energy": "(o + v,)"}
    for name, x in zip(INPUT_NAMES[1:], arrays[1:], strict=True):
        if tuple(x.shape) != expected[name]:
            raise InputError(
                f"{name}: expected shape {layout[name]} = {expected[name]} for nocc={o}, nvir={v} "
                f"(from t1 {tuple(t1.shape)}), got {tuple(x.shape)}"
            )
    for name, x in zip(INPUT_NAMES, arrays, strict=True):
        # one reduction first (a NaN or Inf anywhere makes the sum non-finite), the full scan only if it is
        if not bool(torch.isfinite(x.sum())) and not bool(torch.isfinite(x).all()):
            idx = tuple(int(i) for i in torch.nonzero(~torch.isfinite(x))[0])
            raise InputError(f"{name} contains NaN or Inf (first at index {idx})")
    e = arrays[-1]
    if float(e[:o].max()) >= float(e[o:].min()):
        raise InputError(
            f"mo_energy: every occupied orbital energy must lie below every virtual one "
            f"(highest occupied {float(e[:o].max()):.6f} >= lowest virtual {float(e[o:].min()):.6f} Eh); "
            "the (T) denominators would vanish"
        )
    return arrays


# ----------------------------------------------------------------------------- index triples


def occupied_triples(nocc: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The occupied triples ``i >= j >= k`` that contribute, and their weights.

    Returns:
        ``idx (n, 3)`` int64 and ``weight (n,)`` float64, where ``weight`` is the number of
        distinct orderings of the triple (6 or 3) times the 1/3 of eq. (5), so that
        ``E(T) = sum_n weight[n] * e(idx[n])`` with ``e(ijk) = sum_abc W r3(Y) / D``.
        ``i = j = k`` is left out: its contribution is exactly zero.
    """
    rows, weights = [], []
    for i in range(nocc):
        for j in range(i + 1):
            for k in range(j + 1):
                if i == j == k:
                    continue
                rows.append((i, j, k))
                weights.append(2.0 if (i != j and j != k) else 1.0)  # 6/3 or 3/3
    idx = torch.tensor(rows, dtype=torch.int64, device=device).reshape(-1, 3)
    return idx, torch.tensor(weights, dtype=torch.float64, device=device)


# ----------------------------------------------------------------------------- the blocked torch path


class _Intermediates:
    """Per-system rearrangements of the inputs that make every term of ``W_ijk`` a plain GEMM.

    Stacking a particle operand (contracted over a virtual ``f``) on top of a hole operand
    (contracted over an occupied ``m``) gives one GEMM per pair of terms, ``K = v + o``:

    * ``AT[x]  (v + o, v^2)``: rows ``f``: ``(xa|fb)`` at ``[f, (a b)]``; rows ``m``: ``t2[m,x,b,a]``
    * ``BT[x]  (v + o, v^2)``: rows ``f``: ``(xb|fa)`` at ``[f, (a b)]``; rows ``m``: ``t2[m,x,a,b]``
    * ``TT[p,q] (v, v + o)``: columns ``f``: ``t2[p,q,x,f]``; columns ``m``: ``-(px|qm)``

    so that, with ``W_ijk[a,b,c] = La[a,b,c] + Lc[c,a,b] + Lb[b,a,c]`` (eqs. 1 and 3)::

        La[a, (b c)] = TT[i,k] @ AT[j] + TT[i,j] @ BT[k]
        Lc[c, (a b)] = TT[k,j] @ AT[i] + TT[k,i] @ BT[j]
        Lb[b, (a c)] = TT[j,k] @ AT[i] + TT[j,i] @ BT[k]

    (every output has one virtual index as rows and a pair as columns — the orientation in
    which MKL's DGEMM ran fastest here). The disconnected term of eqs. (2)-(3) is
    ``V_ijk[a,b,c] = H_ij[a,b] . u_k[c] + H_ik[a,c] . u_j[b] + H_jk[b,c] . u_i[a]`` with
    ``H[p,q] = [(px|qy) + (qy|px), t2[p,q,x,y] + t2[q,p,y,x]]`` ``(v^2, 2)`` and
    ``u[r] = [t1[r], f[r]]`` ``(2, v)``.
    """

    def __init__(self, t1, t2, ovvv, ovoo, ovov, fock_ov):
        o, v = t1.shape
        self.nocc, self.nvir = o, v
        # ovvv=None: only the replicated O(o^2 v^2) part; AT/BT are then filled per block with the
        # occupied slices the block needs (torchhpc.ext.ccsdt.slices: out-of-core and distributed)
        self.AT = self.BT = None
        if ovvv is not None:
            # one strided copy per block into preallocated storage (torch.cat of permuted views copies twice)
            self.AT = torch.empty((o, v + o, v * v), dtype=t1.dtype, device=t1.device)
            self.BT = torch.empty_like(self.AT)
            _fill_slices(self.AT, self.BT, ovvv, t2, slice(None))
        ovoo_pq = ovoo.permute(0, 2, 1, 3)  # [p, q, x, m] = (px|qm)
        self.TT = torch.cat([t2, -ovoo_pq], dim=3).contiguous()  # (o, o, v, v + o)
        self.TT2 = torch.cat([self.TT, self.TT.transpose(0, 1)], dim=2).contiguous()  # [TT[p,q]; TT[q,p]]
        G = ovov.permute(0, 2, 1, 3)  # G[p,q,x,y] = (px|qy)
        G = G + G.permute(1, 0, 3, 2)
        S = t2 + t2.permute(1, 0, 3, 2)
        self.H = torch.stack([G, S], dim=-1).reshape(o, o, v * v, 2).contiguous()
        self.u = torch.stack([t1, fock_ov], dim=1).contiguous()  # (o, 2, v)

    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in (self.AT, self.BT, self.TT, self.TT2, self.H, self.u)
                   if x is not None)


def _fill_slices(AT: torch.Tensor, BT: torch.Tensor, ovvv: torch.Tensor, t2: torch.Tensor, xs) -> None:
    """Write ``AT[x], BT[x]`` (layouts of :class:`_Intermediates`) for the occupied ``x`` in ``xs``.

    ``ovvv`` holds the slices ``(xa|bc)`` for those ``x`` (``(n, v, v, v)``), ``AT``/``BT`` are
    ``(n, v + o, v^2)`` and ``t2`` the whole ``(o, o, v, v)``.
    """
    n, v = ovvv.shape[0], ovvv.shape[1]
    o = t2.shape[0]
    AT[:, :v].view(n, v, v, v).copy_(ovvv.permute(0, 2, 1, 3))  # [x, f, a, b] = (xa|fb)
    AT[:, v:].view(n, o, v, v).copy_(t2[:, xs].permute(1, 0, 3, 2))  # [x, m, a, b] = t2[m,x,b,a]
    BT[:, :v].view(n, v, v, v).copy_(ovvv.permute(0, 2, 3, 1))  # [x, f, a, b] = (xb|fa)
    BT[:, v:].view(n, o, v, v).copy_(t2[:, xs].permute(1, 0, 2, 3))  # [x, m, a, b] = t2[m,x,a,b]


#: work buffers per triple in a block, each (v, v, v)
_BUFFERS = 4


def incore_bytes(nocc: int, nvir: int) -> int:
    """Bytes of the in-core operands of :class:`_Intermediates` (``AT, BT`` dominate: ``2 o (v + o) v^2``)."""
    o, v = nocc, nvir
    return 8 * (2 * o * (v + o) * v * v + 3 * o * o * v * (v + o) + 2 * o * o * v * v + 2 * o * v)


def fits_in_core(nocc: int, nvir: int, max_memory_mb: float, workers: int | None = 1) -> bool:
    """True when ``max_memory`` holds the in-core operands and one triple's buffers per worker; else the
    torch path runs out of core (:mod:`torchhpc.ext.ccsdt.slices`)."""
    ntriples = nocc * (nocc + 1) * (nocc + 2) // 6 - nocc
    workers = max(1, min(workers or torch.get_num_threads(), ntriples))
    return incore_bytes(nocc, nvir) + workers * _BUFFERS * nvir**3 * 8 <= max_memory_mb * 2**20


def _block_size(nocc: int, nvir: int, ntriples: int, max_memory_mb: float, fixed_bytes: int,
                block_triples: int | None, workers: int = 1) -> int:
    """Occupied triples per block: what ``max_memory`` allows, at most :data:`CACHE_BLOCK_BYTES` of
    buffers, and small enough that every worker gets blocks."""
    per_triple = _BUFFERS * nvir**3 * 8
    budget = (max_memory_mb * 2**20 - fixed_bytes) / workers
    if budget < per_triple:
        need = (fixed_bytes + workers * per_triple) / 2**20
        raise InputError(
            f"max_memory={max_memory_mb:g} MB is too small for nocc={nocc}, nvir={nvir} with {workers} thread(s): "
            f"the (T) needs at least {math.ceil(need)} MB"
        )
    cap = int(budget // per_triple)
    if block_triples is not None:
        if block_triples < 1:
            raise InputError(f"block_triples must be >= 1, got {block_triples}")
        return max(1, min(block_triples, cap, ntriples))
    cache = max(1, CACHE_BLOCK_BYTES // per_triple)
    share = max(1, -(-ntriples // (4 * workers)))  # >= 4 blocks per worker for load balance
    return max(1, min(cap, cache, share))


def _block_energy(X: _Intermediates, idx: torch.Tensor, wts: torch.Tensor, e_occ: torch.Tensor,
                  e_vvv: torch.Tensor, L: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Weighted (T) energy of one block of occupied triples (a 0-d tensor).

    Work buffers: ``L (nb, 3, v, v, v)`` holds the three GEMM layouts ``[Lc, Lb, La]`` of
    :class:`_Intermediates` (``La`` becomes ``W``), ``Y (nb, v, v, v)``; ``nb = len(idx)``.
    """
    nb = idx.shape[0]
    v = X.nvir
    AT, BT, TT, TT2 = X.AT, X.BT, X.TT, X.TT2
    # ---- connected triples W_ijk = P6(w), eqs. (1) and (3): four GEMMs per triple into three layouts;
    # Lc and Lb share the operand AT[i], Lb and La share BT[k], so they are computed as stacked rows.
    # With two equal indices one layout repeats (i = j: Lb = La; j = k: Lb = Lc): a copy, not two GEMMs.
    for n, (i, j, k) in enumerate(idx.tolist()):
        rows = L[n].view(3 * v, v * v)  # [Lc; Lb; La], each [x, (y z)]
        lc, lb, la = rows[:v], rows[v: 2 * v], rows[2 * v:]
        if i == j:
            torch.mm(TT[i, k], AT[i], out=la)
            la.addmm_(TT[i, i], BT[k])
            torch.mm(TT[k, i], AT[i], out=lc)
            lc.addmm_(TT[k, i], BT[i])
            lb.copy_(la)
        elif j == k:
            torch.mm(TT[i, j], AT[j], out=la)
            la.addmm_(TT[i, j], BT[j])
            torch.mm(TT[j, j], AT[i], out=lc)
            lc.addmm_(TT[j, i], BT[j])
            lb.copy_(lc)
        else:
            torch.mm(TT2[k, j], AT[i], out=rows[: 2 * v])  # [Lc; Lb] = [TT[k,j]; TT[j,k]] @ AT[i]
            torch.mm(TT[i, k], AT[j], out=la)  # La = TT[i,k] @ AT[j]
            rows[v:].addmm_(TT2[j, i], BT[k])  # [Lb; La] += [TT[j,i]; TT[i,j]] @ BT[k]
            lc.addmm_(TT[k, i], BT[j])
    C, B, W = L[:, 0], L[:, 1], L[:, 2]
    W.add_(C.permute(0, 2, 3, 1))  # Lc[c,a,b] -> [a,b,c]
    W.add_(B.transpose(1, 2))  # Lb[b,a,c] -> [a,b,c]
    # ---- Y = W + V/2 (eq. 5) with the disconnected V = P6(v) of eq. (2) as rank-2 products
    I, J, K = idx[:, 0], idx[:, 1], idx[:, 2]
    H, u = X.H, X.u
    torch.baddbmm(W.reshape(nb, v * v, v), H[I, J], u[K], alpha=0.5, out=Y.view(nb, v * v, v))  # H_ij[ab] u_k[c]
    Y.view(nb, v, v * v).baddbmm_(u[I].transpose(1, 2), H[J, K].transpose(1, 2), alpha=0.5)  # u_i[a] H_jk[bc]
    h_ik = H[I, K].view(nb, v, v, 2).transpose(2, 3).reshape(nb * v, 2, v)  # [(n a), 2, c]
    u_j = u[J].transpose(1, 2).unsqueeze(1).expand(nb, v, v, 2).reshape(nb * v, v, 2)  # [(n a), b, 2]
    Y.view(nb * v, v, v).baddbmm_(u_j, h_ik, alpha=0.5)  # H_ik[ac] u_j[b]
    # ---- r3(Y) = 3Y + Ce(Y) - 2 Co(Y): Ce the cyclic sum Y[abc] + Y[bca] + Y[cab] and Co the sum over the
    # transpositions, Co[abc] = Ce[bac] (Ce is cyclic-invariant, so any one transposition of it gives Co;
    # swapping the two outer indices keeps the inner one contiguous, the cheapest of the three)
    cab = (0, 2, 3, 1)  # X.permute(cab)[a,b,c] = X[c,a,b]
    torch.add(Y, Y.permute(cab), out=B)  # P = Y + Y[cab]
    torch.add(Y, B.permute(cab), out=C)  # Ce = Y + P[cab] = Y + Y[cab] + Y[bca]
    torch.add(C, Y, alpha=3.0, out=Y)
    Y.add_(C.transpose(1, 2), alpha=-2.0)
    # ---- divide by D (eq. 4) and reduce: e_ijk = sum_abc W r3(Y) / D
    d = e_occ[I] + e_occ[J] + e_occ[K]
    torch.sub(d.view(nb, 1, 1, 1), e_vvv, out=B)
    W.div_(B)
    e = torch.bmm(W.reshape(nb, 1, -1), Y.view(nb, -1, 1)).view(nb)
    return (e * wts).sum()


def triples_energy_torch(
    t1: torch.Tensor, t2: torch.Tensor, ovvv: torch.Tensor, ovoo: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, mo_energy: torch.Tensor, *, max_memory: float = DEFAULT_MAX_MEMORY_MB,
    block_triples: int | None = None, num_threads: int | None = None, progress: bool = False,
) -> float:
    """The blocked torch path (float64 tensors already checked, on one device).

    On the CPU the blocks are shared out to ``num_threads`` worker threads, each running
    single-threaded torch/MKL kernels on its own buffers (torch releases the GIL inside
    ops); torch's thread count is set to 1 for the duration and restored afterwards.
    Measured on the 2-core development machine, shared with other jobs: one block per
    thread never waits at an OpenMP barrier for a descheduled thread, where two-thread
    GEMMs and elementwise ops on the same triple ran up to 5x slower under load and no
    faster without it. Per-block energies are summed in block order, so the result does
    not depend on the thread count's scheduling.

    Args:
        max_memory: MB allowed for the intermediates and all workers' buffers; picks the block size.
        block_triples: force this many occupied triples per block (else chosen from
            ``max_memory``, :data:`CACHE_BLOCK_BYTES` and the worker count).
        num_threads: CPU worker threads (default ``torch.get_num_threads()``); CUDA uses one stream.
        progress: show a tqdm bar over the blocks.

    Raises:
        InputError: ``max_memory`` cannot hold the intermediates and one triple's buffers per worker.
    """
    o, v = t1.shape
    dev = t1.device
    idx, wts = occupied_triples(o, device=dev)
    n = idx.shape[0]
    if n == 0:
        return 0.0
    if num_threads is not None and num_threads < 1:
        raise InputError(f"num_threads must be >= 1, got {num_threads}")
    workers = 1 if dev.type != "cpu" else max(1, min(num_threads or torch.get_num_threads(), n))
    cpu = dev.type == "cpu"
    previous = torch.get_num_threads()
    if cpu:  # every kernel single-threaded, also the set-up copies: the parallelism is over blocks
        torch.set_num_threads(1)
    bar = None
    try:
        X = _Intermediates(t1, t2, ovvv, ovoo, ovov, fock_ov)
        nb = _block_size(o, v, n, max_memory, X.nbytes(), block_triples, workers)
        e_occ, e_vir = mo_energy[:o], mo_energy[o:]
        e_vvv = (e_vir[:, None, None] + e_vir[None, :, None] + e_vir[None, None, :]).contiguous()
        blocks = [(s, min(s + nb, n)) for s in range(0, n, nb)]
        energies = torch.zeros(len(blocks), dtype=torch.float64, device=dev)
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(blocks), desc="(T) blocks", unit="block")
        queue = iter(range(len(blocks)))
        lock = threading.Lock()

        def work() -> None:
            L = torch.empty((nb, 3, v, v, v), dtype=torch.float64, device=dev)
            Y = torch.empty((nb, v, v, v), dtype=torch.float64, device=dev)
            while True:
                with lock:
                    b = next(queue, None)
                if b is None:
                    return
                s, e = blocks[b]
                energies[b] = _block_energy(X, idx[s:e], wts[s:e], e_occ, e_vvv, L[: e - s], Y[: e - s])
                if bar is not None:
                    bar.update(1)

        if workers == 1:
            work()
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ccsdt") as pool:
                for f in [pool.submit(work) for _ in range(workers)]:
                    f.result()
    finally:
        if cpu:
            torch.set_num_threads(previous)
        if bar is not None:
            bar.close()
    return float(energies.sum())


# ----------------------------------------------------------------------------- the Triton path and dispatch


TRITON_AUTO_MAX_NVIR = 64
"""Largest virtual space for which ``backend='auto'`` picks the fused kernel on CUDA."""

#: the implementations of the (T): blocked GEMMs, the fused kernel, the dense formula
BACKENDS = ("torch", "triton", "reference")


def triples_backend(requested: str, nvir: int, device: str | torch.device) -> str:
    """The implementation :func:`triples_energy` runs for ``nvir`` virtual orbitals on ``device``.

    ``auto`` is the fused Triton kernel on CUDA for ``nvir <= TRITON_AUTO_MAX_NVIR`` (when triton
    is installed), else the blocked torch path. Measured on an H200 (FP64, random RHF-like
    inputs): the fused kernel wins small problems (o=10, v=60: 0.050 s vs 0.093 s) and the blocked
    GEMMs on cuBLAS win large ones (o=20, v=120: 0.77 s vs 5.5 s).

    Returns:
        ``torch``, ``triton`` or ``reference`` (never ``auto``): what will run, and what CLIs print.

    Raises:
        InputError: an unknown name, or ``triton`` where it cannot run (no triton, or not CUDA and
            not ``TRITON_INTERPRET=1``).
    """

    def auto(dev, choices) -> str:
        on_cuda = torch.device(dev).type == "cuda"
        return "triton" if on_cuda and nvir <= TRITON_AUTO_MAX_NVIR else "torch"

    return resolve_backend(requested, device, choices=BACKENDS, auto=auto)


def triples_energy_triton(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *, tile: int = 8,
                          num_warps: int = 4) -> float:
    """The fused Triton kernel (CUDA, or the CPU under ``TRITON_INTERPRET=1``); tensors already checked."""
    from torchhpc.triton_kernels import ccsdt as K

    o, _ = t1.shape
    idx, wts = occupied_triples(o, device=t1.device)
    if idx.shape[0] == 0:
        return 0.0
    partial = K.triples_energy_partials(
        t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, idx, wts, tile=tile, num_warps=num_warps,
    )
    return float(partial.sum())


def triples_energy(
    t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *,
    backend: Literal["auto", "torch", "triton", "reference"] = "auto",
    device: str | torch.device | None = None,
    max_memory: float = DEFAULT_MAX_MEMORY_MB,
    block_triples: int | None = None,
    num_threads: int | None = None,
    tile: int = 8,
    progress: bool = False,
    group=None,
    details: dict | None = None,
) -> float:
    """The closed-shell CCSD(T) perturbative-triples energy E(T), in Hartree.

    Equal to ``pyscf.cc.ccsd_t.kernel(mycc, eris, t1, t2)`` for the same inputs (see
    :func:`torchhpc.ext.ccsdt.from_pyscf`). Arrays may be numpy or torch; they are
    converted to float64.

    Args:
        t1: ``(o, v)`` singles amplitudes.
        t2: ``(o, o, v, v)`` doubles amplitudes, ``t2[i,j,a,b]``.
        ovvv: ``(o, v, v, v)`` integrals ``(ia|bc)``.
        ovoo: ``(o, v, o, o)`` integrals ``(ia|jk)``.
        ovov: ``(o, v, o, v)`` integrals ``(ia|jb)``.
        fock_ov: ``(o, v)`` occupied-virtual Fock block ``f[k,c]``.
        mo_energy: ``(o + v,)`` active orbital energies (occupied first).
        backend: ``auto`` (Triton on CUDA for ``nvir <= TRITON_AUTO_MAX_NVIR``, else torch; see
            :func:`triples_backend`), ``torch`` (blocked GEMMs), ``triton`` (the fused kernel) or
            ``reference`` (dense einsum).
        device: where to compute (default: where ``t1`` is; numpy inputs go to the CPU).
        max_memory: MB for the torch path's intermediates and buffers (picks the block size).
        block_triples: force the torch path's block size (occupied triples per block).
        num_threads: the torch path's CPU worker threads (default ``torch.get_num_threads()``).
        tile: the Triton kernel's virtual tile edge (a power of two).
        progress: tqdm bar over the torch path's blocks.
        group: a ``torch.distributed`` process group: the triples are shared out over its ranks
            (:func:`torchhpc.ext.ccsdt.distributed.triples_energy_distributed`; every rank calls this
            with the same arguments) and every rank gets E(T).
        details: a dict to receive how the energy was computed: ``mode`` (``in-core``,
            ``out-of-core`` — the torch path with the integral slices streamed through a cache
            because the in-core operands exceed ``max_memory`` — or ``distributed``) and, for the
            last two, ``stats`` (:class:`~torchhpc.ext.ccsdt.slices.SliceStats`) and ``ranks``.

    Raises:
        InputError: see :func:`check_inputs`; an unknown backend, or one that cannot run on the
            device (:func:`triples_backend`); ``max_memory`` too small even out of core.
        DistributedError: with ``group``, a peer that does not answer within the group's timeout.
    """
    if group is not None:
        from .distributed import triples_energy_distributed

        run = triples_energy_distributed(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, group=group,
                                         device=device, max_memory=max_memory, block_triples=block_triples,
                                         progress=progress)
        if details is not None:
            details.update(mode="distributed", stats=run.stats, ranks=run.ranks)
        return run.energy
    shape = tuple(t1.shape) if hasattr(t1, "shape") else np.shape(t1)
    dev = torch.device(device) if device is not None else (t1.device if isinstance(t1, torch.Tensor)
                                                           else torch.device("cpu"))
    out_of_core = False
    if len(shape) == 2 and min(shape) >= 1 and not fits_in_core(*shape, max_memory,
                                                                 num_threads if dev.type == "cpu" else 1):
        try:  # only the torch path runs out of core; a bad backend is reported after the input checks
            out_of_core = triples_backend(backend, shape[1], dev) == "torch"
        except InputError:
            pass
    # out of core the integrals stay in host memory: check them there and move only the rest to the device
    arrays = check_inputs(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, device="cpu" if out_of_core else device)
    if out_of_core:
        arrays = tuple(x if name == "ovvv" else x.to(dev) for x, name in zip(arrays, INPUT_NAMES, strict=True))
    backend = triples_backend(backend, arrays[0].shape[1], arrays[0].device)
    if details is not None:
        details["mode"] = "out-of-core" if out_of_core else "in-core"
    if backend == "torch" and out_of_core:
        from .slices import triples_energy_out_of_core

        run = triples_energy_out_of_core(*arrays, max_memory=max_memory, block_triples=block_triples,
                                         progress=progress)
        if details is not None:
            details["stats"] = run.stats
        return run.energy
    if backend == "torch":
        return triples_energy_torch(*arrays, max_memory=max_memory, block_triples=block_triples,
                                    num_threads=num_threads, progress=progress)
    if backend == "triton":
        return triples_energy_triton(*arrays, tile=tile)
    if backend == "reference":
        from .reference import triples_energy_reference

        return triples_energy_reference(*arrays)
    raise AssertionError(backend)  # triples_backend returns one of BACKENDS
