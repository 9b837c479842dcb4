"""The (T) energy: the in-core blocked torch path, the Triton path and the one dispatch over every path.

:func:`triples_energy` evaluates the formula of :mod:`torchhpc.ext.ccsdt.reference`
(PySCF's closed-shell (T), eqs. (1)-(5) there) without ever holding the
``o^3 v^3`` triples tensor:

* **torch path** (:func:`triples_energy_torch`, the CPU path; it also runs on CUDA
  tensors). The energy summand is invariant under the simultaneous permutations of
  ``(i,a), (j,b), (k,c)``, so only occupied triples ``i >= j >= k`` are visited
  (weight 6 when distinct, 3 when two are equal; ``i = j = k`` contributes exactly
  zero because ``r3`` then annihilates a fully symmetric ``Y``). For one triple the
  whole ``(v, v, v)`` tile ``W_ijk[a,b,c]`` is four GEMMs ``(v or 2v) x (v+o) -> v^2``
  (see :class:`~torchhpc.ext.ccsdt.blocks.InCoreOperands`): each stacks a particle term (sum over a virtual ``f``,
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
  block size. The input checks and the kernel of one block, which the out-of-core and
  distributed paths share, are in :mod:`torchhpc.ext.ccsdt.blocks`.
* **Triton paths**: the fused kernels of :mod:`torchhpc.triton_kernels.ccsdt`, one program per
  (occupied triple, virtual tile triple), only partial energies leave the kernel:
  :func:`triples_energy_triton` on FP64 CUDA-core FMAs, :func:`triples_energy_mma` on the FP64
  tensor cores (``tl.dot`` over the GEMM operands of :class:`~torchhpc.ext.ccsdt.blocks.InCoreOperands`).
* **out of core** (:mod:`torchhpc.ext.ccsdt.slices`): when ``max_memory`` cannot hold the in-core
  operands (:func:`fits_in_core`), the torch path keeps the integrals in host memory and streams their
  occupied slices through a bounded cache; with ``group=`` the triples are shared out over the ranks
  of a process group (:mod:`torchhpc.ext.ccsdt.distributed`).
* :func:`triples_energy` checks the inputs (:func:`~torchhpc.ext.ccsdt.blocks.check_inputs`) and runs
  what :func:`triples_backend` picks
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

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.device import cuda_free_bytes
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError

from .blocks import (
    BUFFERS_PER_TRIPLE,
    CACHE_BLOCK_BYTES,
    INPUT_NAMES,
    InCoreOperands,
    block_energy,
    check_inputs,
    occupied_triples,
)
from .config import DEFAULT_MAX_MEMORY_MB
from .distributed import triples_energy_distributed
from .pairs import triples_energy_pairs
from .slices import triples_energy_out_of_core

#: Host work of the CUDA paths (``tests/test_gpu_budgets.py``): the torch path on CUDA is pair-blocked
#: (:mod:`~torchhpc.ext.ccsdt.pairs`: six GEMMs and one fused epilogue kernel per block of up to ``o``
#: triples, no sync inside the loop; before, 1 sync and 31 launches per triple); the fused kernel is one launch,
#: after the input checks (one ``item`` each).
GPU_BUDGETS = {
    "torch": HostBudget("block", syncs=0, launches=9, fixed_syncs=1, fixed_launches=16,
                        why="pair blocks: 6 GEMMs, the fused epilogue and its sum per block; the energy read once"),
    "triton": HostBudget("call", syncs=10, launches=40, why="the input checks' item(); one kernel launch"),
    "out_of_core": HostBudget("triple", syncs=0, launches=64, fixed_syncs=3, fixed_launches=64,
                              why="integral slices streamed through the cache: the triples and weights cross to "
                              "the device once, each block's GEMM loop reads host ints; the energy read once"),
    "triton-mma": HostBudget("call", syncs=10, launches=60,
                             why="the input checks' item(); the GEMM operands built once (~20 launches); one launch"),
}


def triples_flops(nocc: int, nvir: int) -> float:
    """Floating-point operations of one (T) evaluation: ``2 o^3 v^4 + 2 o^4 v^3``.

    The particle term ``sum_f (ia|fb) t2[k,j,c,f]`` costs ``o^3 v^3 * v`` multiply-adds and
    the hole term ``sum_m (ia|jm) t2[m,k,b,c]`` ``o^3 v^3 * o``, over all ``o^3`` ordered
    occupied triples (what visiting ``i >= j >= k`` with its six permutations amounts to);
    a multiply-add is two flops. Lower-order work (``O(o^3 v^3)``) is not counted.
    """
    o, v = float(nocc), float(nvir)
    return 2.0 * o**3 * v**4 + 2.0 * o**4 * v**3


# ----------------------------------------------------------------------------- the in-core torch path


def incore_bytes(nocc: int, nvir: int, gemm_only: bool = False) -> int:
    """Bytes of the in-core operands of :class:`InCoreOperands` (``AT, BT`` dominate: ``2 o (v + o) v^2``);
    ``gemm_only``: its ``AT``, ``BT`` and ``TT`` alone (the tensor-core kernel's)."""
    o, v = nocc, nvir
    if gemm_only:
        return 8 * (2 * o * (v + o) * v * v + o * o * v * (v + o))
    return 8 * (2 * o * (v + o) * v * v + 3 * o * o * v * (v + o) + 2 * o * o * v * v + 2 * o * v)


def memory_budget_mb(max_memory: float | None, device: str | torch.device) -> float:
    """``max_memory`` in MB, or the device's default where it is ``None``: on CUDA 80 % of the memory the
    device has free (:func:`~torchhpc.ext.core.device.cuda_free_bytes`), on the CPU
    :data:`~torchhpc.ext.ccsdt.config.DEFAULT_MAX_MEMORY_MB`."""
    if max_memory is not None:
        return float(max_memory)
    device = torch.device(device)
    if device.type == "cuda":
        return 0.8 * cuda_free_bytes(device) / 2**20
    return DEFAULT_MAX_MEMORY_MB


def fits_in_core(nocc: int, nvir: int, max_memory_mb: float, workers: int | None = 1) -> bool:
    """True when ``max_memory`` holds the in-core operands and one triple's buffers per worker; else the
    torch path runs out of core (:mod:`torchhpc.ext.ccsdt.slices`)."""
    ntriples = nocc * (nocc + 1) * (nocc + 2) // 6 - nocc
    workers = max(1, min(workers or torch.get_num_threads(), ntriples))
    return incore_bytes(nocc, nvir) + workers * BUFFERS_PER_TRIPLE * nvir**3 * 8 <= max_memory_mb * 2**20


def _block_size(nocc: int, nvir: int, ntriples: int, max_memory_mb: float, fixed_bytes: int,
                block_triples: int | None, workers: int = 1) -> int:
    """Occupied triples per block: what ``max_memory`` allows, at most :data:`CACHE_BLOCK_BYTES` of
    buffers, and small enough that every worker gets blocks."""
    per_triple = BUFFERS_PER_TRIPLE * nvir**3 * 8
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


def triples_energy_torch(
    t1: torch.Tensor, t2: torch.Tensor, ovvv: torch.Tensor, ovoo: torch.Tensor, ovov: torch.Tensor,
    fock_ov: torch.Tensor, mo_energy: torch.Tensor, *, max_memory: float = DEFAULT_MAX_MEMORY_MB,
    block_triples: int | None = None, num_threads: int | None = None, progress: bool = False,
    blocking: str = "auto", epilogue: str = "auto",
) -> float:
    """The blocked torch path (float64 tensors already checked, on one device).

    ``blocking``: ``triple`` blocks of occupied triples, six cache-sized GEMMs per triple (the CPU's
    path); ``pair`` blocks of one occupied pair and a run of ``k``, a few large GEMMs per block
    (:mod:`~torchhpc.ext.ccsdt.pairs`, the GPU's path); ``auto`` picks ``pair`` on CUDA, ``triple`` on
    the CPU (measured on the 2-core machine: o=10 v=60 1.5 s by triples against 2.5 s by pairs).
    ``epilogue`` (pair blocking): ``auto`` (the fused Triton kernel on CUDA), ``triton`` or ``torch``.

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
        progress: show a tqdm bar over the blocks (``triple`` blocking).

    Raises:
        InputError: ``max_memory`` cannot hold the intermediates and one triple's buffers per worker.
    """
    o, v = t1.shape
    dev = t1.device
    if blocking not in ("auto", "triple", "pair"):
        raise InputError(f"blocking must be auto, triple or pair; got {blocking!r}")
    if blocking == "pair" or (blocking == "auto" and dev.type == "cuda"):
        return float(triples_energy_pairs(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, max_memory=max_memory,
                                          block_triples=block_triples, epilogue=epilogue))
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
        X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov)
        nb = _block_size(o, v, n, max_memory, X.nbytes(), block_triples, workers)
        e_occ, e_vir = mo_energy[:o], mo_energy[o:]
        e_vvv = (e_vir[:, None, None] + e_vir[None, :, None] + e_vir[None, None, :]).contiguous()
        blocks = [(s, min(s + nb, n)) for s in range(0, n, nb)]
        energies = torch.zeros(len(blocks), dtype=torch.float64, device=dev)
        if progress:
            from torchhpc.ext.core.runs import progress_bar as tqdm

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
                energies[b] = block_energy(X, idx[s:e], wts[s:e], e_occ, e_vvv, L[: e - s], Y[: e - s])
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

#: the implementations of the (T): blocked GEMMs, the fused kernel (CUDA cores), the fused kernel on the FP64
#: tensor cores, the dense formula
BACKENDS = ("torch", "triton", "triton-mma", "reference")


def triples_backend(requested: str, nvir: int, device: str | torch.device) -> str:
    """The implementation :func:`triples_energy` runs for ``nvir`` virtual orbitals on ``device``.

    ``auto`` is the fused Triton kernel on CUDA for ``nvir <= TRITON_AUTO_MAX_NVIR`` (when triton
    is installed), else the blocked torch path. Measured on an H200 (FP64, random RHF-like
    inputs): the fused kernel wins small problems (o=10, v=60: 0.050 s vs 0.093 s) and the blocked
    GEMMs on cuBLAS win large ones (o=20, v=120: 0.77 s vs 5.5 s).

    Returns:
        ``torch``, ``triton``, ``triton-mma`` or ``reference`` (never ``auto``): what will run, and what CLIs
        print.

    Raises:
        InputError: an unknown name, or ``triton`` where it cannot run (no triton, or not CUDA and
            not ``TRITON_INTERPRET=1``).
    """

    def auto(dev, choices) -> str:
        on_cuda = torch.device(dev).type == "cuda"
        return "triton" if on_cuda and nvir <= TRITON_AUTO_MAX_NVIR else "torch"

    return resolve_backend(requested, device, choices=BACKENDS, auto=auto)


def triples_energy_triton(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *, tile: int = 8,
                          num_warps: int | None = None) -> float:
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


def triples_energy_mma(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *, max_memory: float,
                       tile: int = 8) -> float:
    """The fused kernel on the FP64 tensor cores (CUDA, or the CPU under ``TRITON_INTERPRET=1``): the GEMM
    operands of :class:`~torchhpc.ext.ccsdt.blocks.InCoreOperands` built once on the device, then one launch;
    tensors already checked.

    Raises:
        InputError: ``max_memory`` (MB) cannot hold the operands (:func:`incore_bytes`); the torch backend
            runs such systems out of core.
    """
    from torchhpc.triton_kernels import ccsdt as K

    o, v = t1.shape
    need = incore_bytes(o, v, gemm_only=True)
    if need > max_memory * 2**20:
        raise InputError(f"backend triton-mma keeps its GEMM operands on the device: {math.ceil(need / 2**20)} MB "
                         f"for nocc={o}, nvir={v}, over max_memory={max_memory:g} MB; the torch backend runs "
                         "out of core")
    idx, wts = occupied_triples(o, device=t1.device)
    if idx.shape[0] == 0:
        return 0.0
    X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov, gemm_only=True)
    partial = K.triples_energy_mma_partials(X.TT, X.AT, X.BT, t1, t2, ovov, fock_ov, mo_energy, idx, wts,
                                            tile=tile)
    return float(partial.sum())


def triples_energy(
    t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *,
    backend: Literal["auto", "torch", "triton", "triton-mma", "reference"] = "auto",
    device: str | torch.device | None = None,
    max_memory: float | None = None,
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
            :func:`triples_backend`), ``torch`` (blocked GEMMs), ``triton`` (the fused kernel on FP64
            CUDA cores), ``triton-mma`` (the fused kernel on the FP64 tensor cores) or ``reference``
            (dense einsum).
        device: where to compute (default: where ``t1`` is; numpy inputs go to the CPU).
        max_memory: MB for the torch path's operands and buffers on the device (picks the block size;
            default :func:`memory_budget_mb`: 80 % of the free memory on CUDA, 4000 MB on the CPU).
        block_triples: force the torch path's block size (occupied triples per block).
        num_threads: the torch path's CPU worker threads (default ``torch.get_num_threads()``).
        tile: the Triton kernels' virtual tile edge (a power of two; 8 by default).
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
        run = triples_energy_distributed(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, group=group,
                                         device=device, max_memory=max_memory, block_triples=block_triples,
                                         progress=progress)
        if details is not None:
            details.update(mode="distributed", stats=run.stats, ranks=run.ranks)
        return run.energy
    shape = tuple(t1.shape) if hasattr(t1, "shape") else np.shape(t1)
    dev = torch.device(device) if device is not None else (t1.device if isinstance(t1, torch.Tensor)
                                                           else torch.device("cpu"))
    max_memory = memory_budget_mb(max_memory, dev)
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
    if backend == "triton-mma":
        return triples_energy_mma(*arrays, max_memory=max_memory, tile=tile)
    if backend == "reference":
        from .reference import triples_energy_reference

        return triples_energy_reference(*arrays)
    raise AssertionError(backend)  # triples_backend returns one of BACKENDS


#: ``INPUT_NAMES``, ``check_inputs`` and ``occupied_triples`` live in :mod:`~torchhpc.ext.ccsdt.blocks` and are
#: importable from here too, beside the dispatch that uses them
__all__ = ["BACKENDS", "INPUT_NAMES", "TRITON_AUTO_MAX_NVIR", "check_inputs", "fits_in_core", "incore_bytes",
           "occupied_triples", "triples_backend", "triples_energy", "triples_energy_mma", "triples_energy_torch",
           "triples_energy_triton",
           "triples_flops"]
