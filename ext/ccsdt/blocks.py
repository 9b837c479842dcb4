"""One block of occupied triples: the (T) kernel every torch path runs (in core, out of core, distributed).

The blocked torch path of :func:`~torchhpc.ext.ccsdt.ops.triples_energy` evaluates the formula of
:mod:`torchhpc.ext.ccsdt.reference` (PySCF's closed-shell (T), eqs. (1)-(5) there) block by block.
This module holds what every variant of that path shares, so that the in-core path
(:func:`~torchhpc.ext.ccsdt.ops.triples_energy_torch`), the sliced one
(:mod:`~torchhpc.ext.ccsdt.slices`: out of core) and the distributed one
(:mod:`~torchhpc.ext.ccsdt.distributed`) build on one kernel and none of them imports another:

* :data:`INPUT_NAMES` and :func:`check_inputs`: the seven input arrays, checked and made float64;
* :func:`occupied_triples`: the triples ``i >= j >= k`` that contribute, with their weights;
* :class:`InCoreOperands`: the GEMM operands ``AT, BT, TT, TT2, H, u`` with every integral slice
  resident; :func:`fill_slice_operands` writes ``AT[x], BT[x]`` for some occupied ``x`` (what the
  sliced path's cache holds);
* :func:`block_energy`: the weighted energy of one block of triples, from operands of that layout;
  :data:`BUFFERS_PER_TRIPLE` and :data:`CACHE_BLOCK_BYTES` size its work buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

#: names of the arrays :func:`~torchhpc.ext.ccsdt.ops.triples_energy` takes, in order
INPUT_NAMES = ("t1", "t2", "ovvv", "ovoo", "ovov", "fock_ov", "mo_energy")

#: work buffers per triple in a block, each (v, v, v): the three GEMM layouts and ``Y`` (see :func:`block_energy`)
BUFFERS_PER_TRIPLE = 4

#: the blocked path keeps a block's work buffers (four (v, v, v) per triple) below this many bytes when it
#: can, so that the batched elementwise passes stay in the last-level cache (32 MB L3 on the 2-core EPYC)
CACHE_BLOCK_BYTES = 24 * 2**20


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


# ----------------------------------------------------------------------------- one block of triples


class InCoreOperands:
    """Per-system rearrangements of the inputs that make every term of ``W_ijk`` a plain GEMM, all resident
    (the in-core path; :class:`~torchhpc.ext.ccsdt.slices.PairOperands` has the same layouts, built per use).

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

    ``gemm_only=True``: ``AT``, ``BT`` and ``TT`` alone, what the fused kernel on the FP64 tensor cores reads
    (it pairs the GEMMs itself and forms ``V`` from the inputs): ``TT2``, ``H`` and ``u`` are ``None``, and
    ``2 o^2 v (v + o) + 2 o^2 v^2`` doubles fewer are held (5 GB at o=40, v=300).
    """

    def __init__(self, t1, t2, ovvv, ovoo, ovov, fock_ov, gemm_only: bool = False):
        o, v = t1.shape
        self.nocc, self.nvir = o, v
        # ovvv=None: only the replicated O(o^2 v^2) part; AT/BT are then filled per block with the
        # occupied slices the block needs (torchhpc.ext.ccsdt.slices: out-of-core and distributed)
        self.AT = self.BT = None
        if ovvv is not None:
            # one strided copy per block into preallocated storage (torch.cat of permuted views copies twice)
            self.AT = torch.empty((o, v + o, v * v), dtype=t1.dtype, device=t1.device)
            self.BT = torch.empty_like(self.AT)
            fill_slice_operands(self.AT, self.BT, ovvv, t2, slice(None))
        ovoo_pq = ovoo.permute(0, 2, 1, 3)  # [p, q, x, m] = (px|qm)
        self.TT = torch.cat([t2, -ovoo_pq], dim=3).contiguous()  # (o, o, v, v + o)
        self.TT2 = self.H = self.u = None
        if gemm_only:
            return
        self.TT2 = torch.cat([self.TT, self.TT.transpose(0, 1)], dim=2).contiguous()  # [TT[p,q]; TT[q,p]]
        G = ovov.permute(0, 2, 1, 3)  # G[p,q,x,y] = (px|qy)
        G = G + G.permute(1, 0, 3, 2)
        S = t2 + t2.permute(1, 0, 3, 2)
        self.H = torch.stack([G, S], dim=-1).reshape(o, o, v * v, 2).contiguous()
        self.u = torch.stack([t1, fock_ov], dim=1).contiguous()  # (o, 2, v)

    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in (self.AT, self.BT, self.TT, self.TT2, self.H, self.u)
                   if x is not None)


def fill_slice_operands(AT: torch.Tensor, BT: torch.Tensor, ovvv: torch.Tensor, t2: torch.Tensor, xs) -> None:
    """Write ``AT[x], BT[x]`` (layouts of :class:`InCoreOperands`) for the occupied ``x`` in ``xs``.

    ``ovvv`` holds the slices ``(xa|bc)`` for those ``x`` (``(n, v, v, v)``), ``AT``/``BT`` are
    ``(n, v + o, v^2)`` and ``t2`` the whole ``(o, o, v, v)``.
    """
    n, v = ovvv.shape[0], ovvv.shape[1]
    o = t2.shape[0]
    AT[:, :v].view(n, v, v, v).copy_(ovvv.permute(0, 2, 1, 3))  # [x, f, a, b] = (xa|fb)
    AT[:, v:].view(n, o, v, v).copy_(t2[:, xs].permute(1, 0, 3, 2))  # [x, m, a, b] = t2[m,x,b,a]
    BT[:, :v].view(n, v, v, v).copy_(ovvv.permute(0, 2, 3, 1))  # [x, f, a, b] = (xb|fa)
    BT[:, v:].view(n, o, v, v).copy_(t2[:, xs].permute(1, 0, 2, 3))  # [x, m, a, b] = t2[m,x,a,b]


class FusedEpilogue:
    """The rest of the (T) once a block's three GEMM layouts are written, as one Triton kernel
    (:func:`torchhpc.triton_kernels.ccsdt.epilogue_partials`: each layout read once, ``V``, ``r3``, the
    denominators and the weighted sum on chip) instead of :func:`block_epilogue`'s ~31 tensor passes; for
    CUDA, or the CPU under ``TRITON_INTERPRET=1``. Call it with ``(lc, lb, la, idx, wts)`` of a block."""

    def __init__(self, t1: torch.Tensor, t2: torch.Tensor, ovov: torch.Tensor, fock_ov: torch.Tensor,
                 mo_energy: torch.Tensor, tile: int = 8):
        from torchhpc.triton_kernels.ccsdt import virtual_tile_triples

        o, v = t1.shape
        self.inputs = tuple(x.contiguous() for x in (t1, t2, ovov, fock_ov, mo_energy[:o], mo_energy[o:]))
        self.tiles = virtual_tile_triples(v, tile, t1.device)
        self.tile = tile

    def __call__(self, lc: torch.Tensor, lb: torch.Tensor, la: torch.Tensor, idx: torch.Tensor,
                 wts: torch.Tensor) -> torch.Tensor:
        from torchhpc.triton_kernels.ccsdt import epilogue_partials

        return epilogue_partials(lc, lb, la, *self.inputs, idx, wts, *self.tiles, tile=self.tile).sum()


def block_energy(X: InCoreOperands, idx: torch.Tensor, wts: torch.Tensor, e_occ: torch.Tensor,
                 e_vvv: torch.Tensor, L: torch.Tensor, Y: torch.Tensor | None,
                 triples: Sequence[tuple[int, int, int]] | None = None,
                 fused: FusedEpilogue | None = None) -> torch.Tensor:
    """Weighted (T) energy of one block of occupied triples (a 0-d tensor).

    ``X`` holds the operands in the layouts of :class:`InCoreOperands` (or
    :class:`~torchhpc.ext.ccsdt.slices.PairOperands`, with ``AT, BT`` set to the block's cached slices);
    ``idx (nb, 3)`` the block's triples and ``wts (nb,)`` their weights (:func:`occupied_triples`);
    ``e_occ (o,)`` the occupied orbital energies and ``e_vvv (v, v, v)`` the sums ``e_a + e_b + e_c``.
    Work buffers: ``L (nb, 3, v, v, v)`` holds the three GEMM layouts ``[Lc, Lb, La]`` of
    :class:`InCoreOperands` (``La`` becomes ``W``), ``Y (nb, v, v, v)``; ``nb = len(idx)``. ``triples``: the
    rows of ``idx`` as host ints where the caller has them (on CUDA reading ``idx`` back is a host sync);
    ``fused``: the epilogue as one Triton kernel (``Y`` unused) instead of :func:`block_epilogue`.
    """
    v = X.nvir
    AT, BT, TT, TT2 = X.AT, X.BT, X.TT, X.TT2
    # ---- connected triples W_ijk = P6(w), eqs. (1) and (3): four GEMMs per triple into three layouts;
    # Lc and Lb share the operand AT[i], Lb and La share BT[k], so they are computed as stacked rows.
    # With two equal indices one layout repeats (i = j: Lb = La; j = k: Lb = Lc): a copy, not two GEMMs.
    for n, (i, j, k) in enumerate(idx.tolist() if triples is None else triples):
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
    if fused is not None:
        return fused(L[:, 0], L[:, 1], L[:, 2], idx, wts)
    return block_epilogue(X, idx, wts, e_occ, e_vvv, L, Y)


def block_epilogue(X: InCoreOperands, idx: torch.Tensor, wts: torch.Tensor, e_occ: torch.Tensor,
                   e_vvv: torch.Tensor, L: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """The rest of :func:`block_energy` once ``L`` holds the three GEMM layouts ``[Lc, Lb, La]`` of each
    triple: ``W``, the disconnected ``V``, ``r3``, the denominators and the weighted sum (a 0-d tensor).

    ``L`` may be any ``(nb, 3, v, v, v)`` view whose ``L[:, t]`` are contiguous (``(3, nb, ...)`` storage
    transposed, as the pair-blocked path of :mod:`~torchhpc.ext.ccsdt.pairs` writes it). Memory-bound:
    about 12 passes over ``nb v^3`` float64; no host sync.
    """
    nb = idx.shape[0]
    v = X.nvir
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


__all__ = ["BUFFERS_PER_TRIPLE", "CACHE_BLOCK_BYTES", "FusedEpilogue", "INPUT_NAMES", "InCoreOperands", "block_energy",
           "block_epilogue",
           "check_inputs", "fill_slice_operands", "occupied_triples"]
