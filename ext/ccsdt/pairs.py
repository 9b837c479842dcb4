"""The (T) as large GEMMs: the pair-blocked in-core path, the torch backend on CUDA.

The blocked path of :mod:`~torchhpc.ext.ccsdt.ops` computes each occupied triple's three GEMM layouts with
six ``(v x (v+o)) @ ((v+o) x v^2)`` products (:func:`~torchhpc.ext.ccsdt.blocks.block_energy`): right for a
CPU core's cache, but on a GPU each product is a few hundred microseconds of a GPU's time wrapped in launch
overhead and a host sync per block.  Here a block is one occupied pair ``(i, j)``, ``i >= j``, with a run of
``k <= j``: every triple of the block shares ``i`` and ``j``, so four of its six products become one GEMM
each over the whole run (the left operands of consecutive ``k`` are adjacent rows of ``TT`` or of its
transpose), and the other two are one strided-batched GEMM each (the same left matrix against ``BT[k]``)::

    Lc[k] = TT[k,j] @ AT[i] + TT[k,i] @ BT[j]     ->  (nk v, K) @ (K, v^2)  twice
    Lb[k] = TT[j,k] @ AT[i] + TT[j,i] @ BT[k]     ->  (nk v, K) @ (K, v^2); batched (v, K) @ (K, v^2) x nk
    La[k] = TT[i,k] @ AT[j] + TT[i,j] @ BT[k]     ->  (nk v, K) @ (K, v^2); batched (v, K) @ (K, v^2) x nk

with ``K = v + o``, ``nk`` up to ``o`` and the layouts of :class:`~torchhpc.ext.ccsdt.blocks.InCoreOperands`
(``TTt[p, q] = TT[q, p]`` is one extra ``o^2 v (v + o)`` copy).  The epilogue (``W``, ``V``, ``r3``, the
denominators, the weighted sum) is :func:`~torchhpc.ext.ccsdt.blocks.block_epilogue` on the same buffers.

Work and traffic per block of ``nk`` triples (float64): ``12 nk v^3 (v + o)`` flops in six GEMMs of
arithmetic intensity about ``(v + o) / 4`` flop/byte (35 at ``o=20, v=120``: compute-bound on an H200, whose
FP64 peak needs ~14); the epilogue reads and writes ``4 nk v^3`` values about 12 times (memory-bound:
``~400 nk v^3`` bytes).  The block loop is driven from Python ints only: no host sync inside it, one at the
end (the energy).  Block sizes come from the device's memory (:func:`pair_block_triples`).
"""

from __future__ import annotations

import torch

from torchhpc.ext.core.device import cuda_free_bytes

from .blocks import FusedEpilogue, InCoreOperands, block_epilogue, occupied_triples

#: float64 ``(nk, v, v, v)`` buffers a block holds: the three GEMM layouts and ``Y``
BUFFERS_PER_TRIPLE = 4


def pair_blocks(nocc: int, chunk: int) -> list[tuple[int, int, int, int, int]]:
    """The blocks ``(i, j, k0, start, count)``: pair ``(i, j)``, ``i >= j``, with ``count <= chunk``
    consecutive ``k`` from ``k0``; ``start`` is the first triple's row in :func:`occupied_triples` (whose
    order, ``i`` then ``j`` then ``k``, makes each block a contiguous run of it; ``i = j = k`` is left out)."""
    out, row = [], 0
    for i in range(nocc):
        for j in range(i + 1):
            nk = j + 1 if j < i else i  # k <= j, and k < i when j = i
            for k0 in range(0, nk, chunk):
                out.append((i, j, k0, row + k0, min(chunk, nk - k0)))
            row += nk
    return out


def pair_block_triples(nocc: int, nvir: int, budget_bytes: float) -> int:
    """Triples per block: as many ``k`` as ``budget_bytes`` holds buffers for (at most ``nocc``, at least 1)."""
    per_triple = BUFFERS_PER_TRIPLE * nvir**3 * 8
    return int(max(1, min(nocc, budget_bytes // per_triple)))


def device_budget_bytes(device: torch.device, operands_bytes: int, max_memory_mb: float | None) -> float:
    """Bytes the block buffers may take on ``device``: ``max_memory_mb`` less the operands where given;
    on CUDA without it, 80 % of the memory the device has free now (after the operands were allocated)."""
    if max_memory_mb is not None:
        return max_memory_mb * 2**20 - operands_bytes
    if device.type == "cuda":
        return 0.8 * cuda_free_bytes(device)
    from .config import DEFAULT_MAX_MEMORY_MB

    return DEFAULT_MAX_MEMORY_MB * 2**20 - operands_bytes


def triples_energy_pairs(
    t1: torch.Tensor, t2: torch.Tensor, ovvv: torch.Tensor, ovoo: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, mo_energy: torch.Tensor, *, max_memory: float | None = None,
    block_triples: int | None = None, epilogue: str = "auto", tile: int = 8,
) -> torch.Tensor:
    """E(T) by pair blocks (float64 tensors already checked, on one device), as a 0-d tensor on that device.

    Args:
        max_memory: MB for the operands and the block buffers (default: on CUDA 80 % of the free device
            memory once the operands are built; on the CPU the suite's default).
        block_triples: force the number of ``k`` per block (else from the memory).
        epilogue: ``triton`` (one fused kernel reads each triple's layouts once:
            :func:`torchhpc.triton_kernels.ccsdt.epilogue_partials`), ``torch``
            (:func:`~torchhpc.ext.ccsdt.blocks.block_epilogue`, ~31 passes over the buffers) or ``auto``
            (Triton on CUDA, torch elsewhere).
        tile: the Triton epilogue's virtual tile edge (a power of two).

    Raises:
        InputError: ``block_triples < 1``; an epilogue that cannot run here.
    """
    from torchhpc.ext.core.dispatch import resolve_backend
    from torchhpc.ext.core.errors import InputError

    o, v = t1.shape
    dev = t1.device
    idx, wts = occupied_triples(o, device=dev)
    if idx.shape[0] == 0:
        return torch.zeros((), dtype=torch.float64, device=dev)
    if block_triples is not None and block_triples < 1:
        raise InputError(f"block_triples must be >= 1, got {block_triples}")
    fused = resolve_backend(epilogue, dev, choices=("torch", "triton"), what="epilogue") == "triton"
    X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov)
    TTt = X.TT.transpose(0, 1).contiguous()  # TTt[p, q] = TT[q, p]
    AT, BT, TT = X.AT, X.BT, X.TT
    K = AT.shape[1]
    chunk = block_triples or pair_block_triples(
        o, v, device_budget_bytes(dev, X.nbytes() + TTt.numel() * 8, max_memory))
    chunk = min(chunk, o)
    e_occ, e_vir = mo_energy[:o], mo_energy[o:]
    e_vvv = (e_vir[:, None, None] + e_vir[None, :, None] + e_vir[None, None, :]).contiguous()
    L3 = torch.empty((3, chunk, v, v * v), dtype=torch.float64, device=dev)
    Y = None if fused else torch.empty((chunk, v, v, v), dtype=torch.float64, device=dev)
    total = torch.zeros((), dtype=torch.float64, device=dev)
    fused = FusedEpilogue(t1, t2, ovov, fock_ov, mo_energy, tile) if fused else None
    for i, j, k0, s, n in pair_blocks(o, chunk):
        lc, lb, la = L3[0, :n], L3[1, :n], L3[2, :n]
        rows = n * v
        torch.mm(TTt[j, k0:k0 + n].reshape(rows, K), AT[i], out=lc.view(rows, v * v))
        lc.view(rows, v * v).addmm_(TTt[i, k0:k0 + n].reshape(rows, K), BT[j])
        torch.mm(TT[j, k0:k0 + n].reshape(rows, K), AT[i], out=lb.view(rows, v * v))
        lb.baddbmm_(TT[j, i].expand(n, v, K), BT[k0:k0 + n])
        torch.mm(TT[i, k0:k0 + n].reshape(rows, K), AT[j], out=la.view(rows, v * v))
        la.baddbmm_(TT[i, j].expand(n, v, K), BT[k0:k0 + n])
        if fused is not None:
            total += fused(*(x.view(n, v, v, v) for x in (lc, lb, la)), idx[s:s + n], wts[s:s + n])
            continue
        L = L3[:, :n].view(3, n, v, v, v).transpose(0, 1)
        total += block_epilogue(X, idx[s:s + n], wts[s:s + n], e_occ, e_vvv, L, Y[:n])
    return total


__all__ = ["pair_block_triples", "pair_blocks", "triples_energy_pairs"]
